"""A speculative round's verification writes its k drafted tokens' K/V before acceptance is
known: every placer's KV capacity counts them (``Workload.kv_len``), and the capacity messages,
which count tokens kept (context + generated), stay exact."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from typer.testing import CliRunner

import pyaccel as pa
from pyaccel.cli import app
from pyaccel.errors import CapacityError
from pyaccel.place.files import per_unit

SPEC = "eagle3,k=8"


def test_kv_len_counts_the_positions_a_verification_writes():
    work = pa.Workload(context=2611, tokens=4, spec_decode=SPEC)
    assert (work.max_len, work.ahead_positions, work.kv_len) == (2615, 8, 2623)
    # the verification's own workload (k + 1 tokens a step) needs the same cache
    assert replace(work, step_tokens=9).kv_len == 2623
    assert replace(work, spec_decode=None).kv_len == 2615
    # a plain step of several tokens (a prefill chunk's prompt tokens) keeps them all
    assert replace(work, spec_decode=None, step_tokens=3).kv_len == 2615


@pytest.mark.parametrize(
    ("system", "units", "model"),
    [("taalas-hc1", 1, "llama-3.1-8b"), ("h100", 2, "llama-3.1-8b"), ("groq-tsp", 2, "tiny-llama"),
     ("wse3", 1, "tiny-llama")],
)  # fmt: skip
def test_every_kind_places_the_k_drafted_positions(system, units, model):
    """Each unit's KV bytes under --spec-decode k=8 are those of a plain run 8 tokens longer."""
    cfg, sysm = pa.load_model(model), pa.load_system(system, units=units)
    spec = pa.Workload(batch=2, context=100, tokens=4, spec_decode=SPEC)
    longer = pa.Workload(batch=2, context=100, tokens=12)

    def kv(work):
        return [row["kv_bytes"] for row in per_unit(pa.place(cfg, sysm, work))]

    assert kv(spec) == kv(longer)
    assert sum(kv(spec)) > sum(kv(replace(spec, spec_decode=None)))


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


HC1 = ("--system", "taalas-hc1", "--model", "llama-3.1-8b", "--tokens", "4", "--spec-decode", SPEC)


def test_hc1_refuses_a_verification_its_kv_sram_cannot_hold():
    """2,615 positions fit HC1's KV SRAM; context 2611 + 4 tokens ran though the last
    verification writes 2,623. The message counts tokens kept, so its context is the largest
    that runs."""
    got = _cli("run", *HC1, "--context", "2611", "--json")
    assert got.exit_code == 2, got.stdout
    assert "each verification also writes its 8 drafted tokens' K/V: 2,623 positions" in got.stderr
    assert "each user fits 2607 tokens (context <= 2603 with --tokens 4)" in got.stderr
    assert _cli("run", *HC1, "--context", "2603", "--json").exit_code == 0
    assert _cli("run", *HC1, "--context", "2604", "--json").exit_code == 2
    placed = _cli("place", *HC1, "--context", "2611", "--json")
    assert placed.exit_code == 2 and "2,623 positions" in placed.stderr
    compared = _cli("compare", "--systems", "taalas-hc1", "--model", "llama-3.1-8b", "--context",
                    "2611", "--tokens", "4", "--spec-decode", SPEC, "--json")  # fmt: skip
    assert "2,623 positions" in json.loads(compared.stdout)[0]["error"]
    with pytest.raises(CapacityError, match="each user fits 2607 tokens"):
        pa.place(pa.load_model("llama-3.1-8b"), pa.load_system("taalas-hc1", units=1),
                 pa.Workload(context=2611, tokens=4, spec_decode=SPEC))  # fmt: skip


def test_gpu_message_s_tokens_per_user_is_the_longest_that_fits():
    cfg, sysm = pa.load_model("llama-3.1-8b"), pa.load_system("h100", units=1)
    work = pa.Workload(batch=64, context=8000, tokens=4, spec_decode=SPEC)
    with pytest.raises(CapacityError, match="8,012 positions") as exc:
        pa.place(cfg, sysm, work)
    fits = int(re.search(r"at batch 64 each user fits (\d+) tokens", str(exc.value))[1])
    pa.place(cfg, sysm, replace(work, context=fits - 4))  # the target's cache fits
    with pytest.raises(CapacityError):
        pa.place(cfg, sysm, replace(work, context=fits - 3))


def test_a_speculative_placement_file_checks_against_its_own_workload(tmp_path):
    args = ("--system", "h100", "--model", "llama-3.1-8b", "--context", "1000", "--tokens", "4",
            "--spec-decode", SPEC)  # fmt: skip
    placed = _cli("place", *args, "--json")
    assert json.loads(placed.stdout)["workload"]["spec_decode"] == SPEC
    path = tmp_path / "plc.json"
    path.write_text(placed.stdout)
    got = _cli("place", "--check", str(path))
    assert got.exit_code == 0, got.stderr
