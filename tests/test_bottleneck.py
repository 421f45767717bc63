"""The bottleneck is measured, not guessed: the class whose doubling, re-emulated, gains most
(the what-if winner), the same in ``run --json``, ``report --json`` and ``compare``; the
largest occupancy share is reported beside it as ``busiest_resource``."""

import json

import pytest
from typer.testing import CliRunner

import pyaccel as pa
from pyaccel.cli import app
from pyaccel.records import WhatIfRow

CASES = [
    ("wse3", "llama-3.1-8b", ()),
    ("groq-tsp", "llama-2-70b", ("--weights", "int8", "--units", "576")),
    ("taalas-hc1", "llama-3.1-8b", ()),
    ("h100", "llama-3.1-8b", ()),
]


def _json(*args) -> dict:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("system, model, more", CASES, ids=[c[0] for c in CASES])
def test_run_and_report_name_the_what_if_winner(system, model, more):
    args = ("--system", system, "--model", model, "--tokens", "4", *more)
    run, report = _json("run", *args), _json("report", *args)
    winner = max(report["what_if"], key=lambda r: r["gain"])["resource"]
    assert report["what_if"][0]["resource"] == winner
    assert run["bottleneck"] == report["bottleneck"] == winner
    shares = report["by_resource_s"]
    assert run["busiest_resource"] == report["busiest_resource"] == max(shares, key=shares.get)
    # a share of the first recorded step; the summary's step time is the run's mean
    step = report["summary"]["step_time_s"]
    assert report["busiest_share"] == pytest.approx(shares[run["busiest_resource"]] / step,
                                                    rel=1e-3)  # fmt: skip


def test_busiest_and_bottleneck_can_differ_and_both_are_shown():
    """The headline follows the measurement, not the occupancy: given a what-if ranking whose
    winner is not the busiest class, the report names the winner and still shows the busiest
    class with its occupancy."""
    model, system = pa.load_model("llama-3.1-8b"), pa.load_system("h100", 1)
    work = pa.Workload(tokens=2)
    trace = pa.emulate(model, system, pa.place(model, system, work), work)
    rows = [WhatIfRow("launch", 0.5 * trace.step_time_s, 2.0),
            WhatIfRow("hbm", 0.9 * trace.step_time_s, 1.1)]  # fmt: skip
    rep = pa.Report.from_trace(trace, rows)
    assert (rep.bottleneck, rep.busiest_resource) == ("launch", "hbm")
    assert rep.busiest_share > rep.bottleneck_share
    args = ("--system", "h100", "--model", "llama-3.1-8b", "--tokens", "4")
    text = " ".join(CliRunner().invoke(app, ["report", *args]).stdout.split())
    assert "bottleneck hbm (what-if winner); busiest hbm (" in text


def test_compare_records_carry_the_same_bottleneck():
    rows = _json("compare", "--model", "llama-3.1-8b", "--systems", "h100,wse3", "--tokens", "4")
    for row in rows:
        run = _json("run", "--system", row["system"], "--model", "llama-3.1-8b", "--tokens", "4")
        pair = (run["bottleneck"], run["busiest_resource"])
        assert (row["bottleneck"], row["busiest_resource"]) == pair


SKIP_CASES = [  # runs that book no time on some classes: one device, one wafer
    ("h100", "llama-3.1-8b", 1),
    ("wse3", "llama-3.1-8b", "auto"),
    ("taalas-hc1", "llama-3.1-8b", "auto"),
]


@pytest.mark.parametrize("system, model, units", SKIP_CASES, ids=[c[0] for c in SKIP_CASES])
def test_what_if_skips_only_classes_that_cannot_move_the_step(system, model, units):
    """The fast what-if (no re-emulation of a class no op touches; the driver alone for the
    rest) gives exactly the rows of re-emulating every class with ``emulate``."""
    from pyaccel.emulation import engine_module, what_if_system
    from pyaccel.what_if import touched_classes, trace_what_if

    m, s = pa.load_model(model), pa.load_system(system, units)
    work = pa.Workload(tokens=3, context=100)
    placement = pa.place(m, s, work)
    trace = pa.emulate(m, s, placement, work)
    untouched = set(engine_module(s.kind).WHAT_IF) - touched_classes(trace)
    assert untouched, "the case must have a class no op touches"
    fast = {r.resource: (r.step_time_s, r.gain) for r in trace_what_if(trace)}
    for resource in engine_module(s.kind).WHAT_IF:
        full = pa.emulate(m, what_if_system(s, resource), placement, work, event_steps=())
        assert fast[resource] == (full.step_time_s, trace.step_time_s / full.step_time_s)


def test_touched_classes_need_recorded_events():
    """A trace that recorded no events cannot tell which classes are idle: nothing is skipped."""
    from pyaccel.what_if import touched_classes

    m, s = pa.load_model("tiny-llama"), pa.load_system("h100", 1)
    work = pa.Workload(tokens=2)
    trace = pa.emulate(m, s, pa.place(m, s, work), work, event_steps=())
    assert touched_classes(trace) is None


def test_a_speculative_report_heads_with_the_runs_numbers_over_its_rounds():
    """The report's headline (text and JSON) is the run's: tok/s, step time and bound over the
    rounds, every unit (the drafter's die too); its tables stay one verification step, and it
    says so. It used to head with the verification step's own rate (11,812 tok/s on this
    case, against the run's 8,621)."""
    args = ("--system", "taalas-hc1", "--model", "llama-3.1-8b", "--tokens", "8",
            "--spec-decode", "draft:llama-3.2-1b")  # fmt: skip
    run, report = _json("run", *args), _json("report", *args)
    head = report["summary"]
    for key in ("units", "tokens_per_s_per_user", "step_time_s", "lower_bound_step_time_s"):
        assert head[key] == run[key], key
    assert report["emulated_over_lower_bound"] == pytest.approx(run["emulated_over_lower_bound"])
    assert any(n.startswith("speculative: the summary is over the rounds") for n in report["notes"])
    text = " ".join(CliRunner().invoke(app, ["report", *args]).stdout.split())
    per_user = f"{run['tokens_per_s_per_user']:,.1f} tok/s per user"
    assert text.startswith(f"llama-3.1-8b on {run['units']} x taalas-hc1: {per_user}"), text[:200]
    assert "are one verification step on the target's units" in text
    assert f"(target: {run['spec_decode']['target_units']} unit(s); verification step" in text
