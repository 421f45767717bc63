"""A speculative run's time to first token counts the drafter's own prefill of the prompt:
after the target's on shared units (GPUs, wafers), beside it on units of its own (ASIC, LPU),
a draft head's chunks waiting for the target's."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import pyaccel as pa
from pyaccel.cli import app
from pyaccel.prefill import prefill
from pyaccel.results import prefill_assumptions, run
from pyaccel.sim.pipeline import stream_ends
from pyaccel.spec_prefill import BESIDE, SERIAL

DRAFT = "draft:tiny-llama,k=2,accept=0.6"  # a separate draft model (the prompt's tokens)
HEAD = "eagle3,k=2,accept=0.6"  # a draft head (the target's hidden states)
KINDS = [("h100", False), ("wse3", False), ("groq-tsp", False), ("taalas-hc1", True)]


def _run(system: str, etch: bool, spec: str | None):
    work = pa.Workload(context=96, tokens=2, spec_decode=spec)
    return run("tiny-llama", system, "auto", work, ["prefill_chunk_tokens=32"], etch)


def test_stream_ends_with_release_by_hand():
    # 3 stages busy 2, 3, 1 a chunk: chunk 0 leaves at 6; chunk 1, ready at 10, enters stage 0
    # at 10: [10,12), [12,15), [15,16) -> 16 (without the release: 9)
    assert stream_ends([[2, 3, 1], [2, 3, 1]], None) == [6, 9]
    assert stream_ends([[2, 3, 1], [2, 3, 1]], None, [0, 10]) == [6, 16]


@pytest.mark.parametrize("spec", [DRAFT, HEAD])
@pytest.mark.parametrize("system,etch", KINDS)
def test_the_drafter_prefills_the_prompt_where_it_is_placed(system, etch, spec):
    plain, spec_run = _run(system, etch, None), _run(system, etch, spec)
    target, pf = plain.prefill, spec_run.prefill
    assert pf.ends_s == target.ends_s  # the target's own chunks are as without a drafter
    d_system, d_plc, d_work, _ = spec_run.spec.drafter_run
    own = system in ("groq-tsp", "taalas-hc1")  # its own chips / etched dies
    assert pf.drafter_own_units == own and len(pf.drafter.chunks) == 3
    alone = prefill(spec_run.spec.drafter.config, d_system, d_plc, d_work)
    if not own:  # on the target's units: after it, the two add
        assert pf.drafter.ttft_s == alone.ttft_s
        assert pf.ttft_s == pf.drafter_done_s == target.ttft_s + alone.ttft_s > target.ttft_s
    elif spec == DRAFT:  # its own units, the prompt's tokens: from the start, beside the target
        assert pf.drafter.ends_s == alone.ends_s
        assert pf.ttft_s == max(target.ttft_s, alone.ttft_s)
    else:  # a head: each chunk once the target has left it and the head its last chunk
        if not pf.drafter.streamed:  # (the ASIC's chunks one after another), by hand
            t, ends = 0.0, []
            for ready, c in zip(target.ends_s, pf.drafter.chunks, strict=True):
                t = max(t, ready) + c.seconds
                ends.append(t)
            assert pf.drafter.ends_s == tuple(ends)
        assert all(d > t for d, t in zip(pf.drafter.ends_s, target.ends_s, strict=True))
        assert pf.ttft_s == pf.drafter_done_s == pf.drafter.ends_s[-1] > target.ttft_s
    notes = prefill_assumptions(spec_run)
    assert (BESIDE in notes, SERIAL in notes) == (own, not own)


def test_h100_llama_8b_ttft_counts_the_1b_drafters_prefill():
    # the 1B drafter runs its own 1,024-token prefill after the 8B's on the same GPU: at least
    # 2 FLOPs a token for each parameter its layers multiply (not the embedding table, looked
    # up; its tied LM head runs on one row) at the dense BF16 peak more
    work = pa.Workload(context=1024, tokens=2)
    plain = run("llama-3.1-8b", "h100", 1, work)
    spec = run("llama-3.1-8b", "h100", 1, pa.Workload(context=1024, tokens=2,
                                                    spec_decode="draft:llama-3.2-1b"))  # fmt: skip
    graph = pa.build_graph(pa.load_model("llama-3.2-1b"), work)
    params = sum(op.params for op in graph.ops if op.layer != "embed")
    floor = 2 * params * 1024 / spec.system.spec.params.bf16_flops_per_s
    assert spec.prefill.ttft_s - plain.prefill.ttft_s >= floor
    assert spec.prefill.ttft_s == plain.prefill.ttft_s + spec.prefill.drafter.ttft_s


def test_run_json_says_how_the_drafter_prefilled():
    args = ["run", "--system", "groq-tsp", "--model", "tiny-llama", "--context", "96",
            "--tokens", "2", "--spec-decode", HEAD, "--set", "prefill_chunk_tokens=32",
            "--json"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    rec = json.loads(res.output)
    pf = rec["prefill"]
    assert rec["ttft_s"] == pf["ttft_s"] == pf["drafter"]["done_s"] > pf["target_ttft_s"]
    assert pf["drafter"] == {"model": "tiny-llama/eagle3", "done_s": pf["ttft_s"], "chunks": 3,
                             "streamed": True, "own_units": True}  # fmt: skip
    assert BESIDE in rec["assumptions"]
    plain = json.loads(CliRunner().invoke(app, args[:9] + args[11:]).output)
    assert "drafter" not in plain["prefill"] and "target_ttft_s" not in plain["prefill"]
