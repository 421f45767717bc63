"""The presets of issue 20: Huawei Ascend 950DT (a GPU-kind HBM accelerator), Taalas HC2 (an
MXFP4 hardwired die design, an --etch target) and Cerebras WSE-3T (the WSE-3 die at an assumed
2x clock): listed, runnable on llama-3.1-70b, and built the way their headers derive them."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import pyaccel as pa
from pyaccel.cli import app
from pyaccel.place.kinds import asic_die

NEW = ("ascend-950", "taalas-hc2", "wse3t")


def _cli(*args):
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.output


def test_systems_lists_them():
    text = _cli("systems")
    for name in NEW:
        assert name in text


@pytest.mark.parametrize("system,etch", [("ascend-950", False), ("taalas-hc2", True),
                                         ("wse3t", False)])  # fmt: skip
def test_each_runs_llama_3_1_70b(system, etch):
    args = ["run", "--system", system, "--model", "llama-3.1-70b", "--tokens", "2", "--json"]
    rec = json.loads(_cli(*args, *(["--etch"] if etch else [])))
    assert rec["tokens_per_s_per_user"] > 0 and rec["ttft_s"] > 0
    assert rec["step_time_s"] >= rec["lower_bound_step_time_s"]


def test_wse3t_is_wse3_at_twice_the_clock_on_the_same_die():
    a, b = pa.load_spec("wse3"), pa.load_spec("wse3t")
    assert b.params.clock_hz == 2 * a.params.clock_hz
    changed = {"clock_hz", "power_w", "system_io_bytes_per_s", "system_io_latency_s"}
    for name in type(a.params).__dataclass_fields__:
        if name not in changed:
            assert getattr(a.params, name) == getattr(b.params, name), name
    assert all(name in b.assumptions for name in changed)  # every change a named assumption


def test_wse3t_decodes_up_to_twice_as_fast_as_wse3():
    # the vendor's 'up to 2x' over CS-3 is a check: clock-bound cycles halve, the system I/O's
    # latency does not (it is in seconds), so at most 2x
    work = pa.Workload(context=1024, tokens=2)
    cfg = pa.load_model("llama-3.1-8b")
    speed = {}
    for name in ("wse3", "wse3t"):
        system = pa.load_system(name, units=1)
        speed[name] = pa.emulate(cfg, system, pa.place(cfg, system, work), work).tokens_per_s
    assert 1.5 < speed["wse3t"] / speed["wse3"] <= 2.0


def test_hc2_mxfp4_die_budget_by_hand():
    # an MXFP4 weight: 1 ROM cell + 1/16 cell of scale + 1,333 lane transistors per 512 weights
    # = 3.67 transistors; (53e9 - 17.1e9 SRAM) / 3.67 ~ 9.8e9 weights a die (the header's figure)
    p = pa.load_spec("taalas-hc2").params
    assert p.transistors == 53e9 and asic_die.kv_sram_bytes(p) == 356_514_577
    per_weight = 1 + 1 / 16 + (p.lane_transistors / p.lane_logic_share) / p.rom_rows_per_bitline
    budget = asic_die.die_logic_budget(p) / per_weight
    assert 9.5e9 < budget < 10.1e9
    plc = pa.place(pa.load_model("llama-3.1-70b"),
                   pa.load_system("taalas-hc2", units="auto", etch=True),
                   pa.Workload(context=1024, tokens=2))  # fmt: skip
    # 70.6e9 weights over ~9.8e9 a die: at least 8 dies
    assert plc.n_units >= 70.6e9 / budget
