"""``--trace-steps`` / ``emulate(trace_steps=...)``: which steps' events a trace records, and
report shares labelled as (overlapping) occupancy."""

import json

import pytest
from typer.testing import CliRunner

import pyaccel as pa
from pyaccel.cli import app
from pyaccel.emulation import parse_trace_steps
from pyaccel.errors import ConfigError
from pyaccel.report import Report


@pytest.mark.parametrize(
    "text,expected",
    [
        ("ends", {0, 9}),
        ("ALL", set(range(10))),
        ("0:10:3", {0, 3, 6, 9}),
        ("2:5", {2, 3, 4}),
        ("::4", {0, 4, 8}),
        ("7:", {7, 8, 9}),
        ("5:100:50", {5}),
    ],
)
def test_trace_steps_syntax(text, expected):
    assert parse_trace_steps(text, 10) == frozenset(expected)


def test_ends_of_a_one_step_run_is_that_step():
    assert parse_trace_steps("ends", 1) == frozenset({0})


@pytest.mark.parametrize("text", ["", "first", "1", "1:2:3:4", "a:b", "-1:", ":-3", "0:5:0",
                                  "::-1", "1.5:3", "20:30"])  # fmt: skip
def test_bad_trace_steps_are_refused_naming_the_value(text):
    with pytest.raises(ConfigError, match="--trace-steps"):
        parse_trace_steps(text, 10)


def test_too_many_recorded_steps_are_refused_with_the_limit():
    from pyaccel.emulation import MAX_TRACE_STEPS

    n = MAX_TRACE_STEPS + 1
    for text in ("all", f"0:{n}", f"0:{10 * n}:1"):
        with pytest.raises(ConfigError, match=r"records [\d,]+ steps, more than the 1,024"):
            parse_trace_steps(text, 10 * n)
    assert len(parse_trace_steps("all", MAX_TRACE_STEPS)) == MAX_TRACE_STEPS
    assert len(parse_trace_steps("::11", 10 * n)) == -(-10 * n // 11)  # a sample of the run


def test_emulate_records_the_chosen_steps():
    model, sysm = pa.load_model("tiny-llama"), pa.load_system("h100", units=1)
    work = pa.Workload(context=16, tokens=6)
    plc = pa.place(model, sysm, work)
    ends = pa.emulate(model, sysm, plc, work)
    some = pa.emulate(model, sysm, plc, work, trace_steps="1:6:2")
    every = pa.emulate(model, sysm, plc, work, trace_steps="all")
    assert set(ends.events["step"].tolist()) == {0, 5}
    assert set(some.events["step"].tolist()) == {1, 3, 5}
    assert set(every.events["step"].tolist()) == set(range(6))
    assert every.step_cycles.tolist() == ends.step_cycles.tolist()  # only events differ
    with pytest.raises(ConfigError):
        pa.emulate(model, sysm, plc, work, trace_steps="all", event_steps={0})


def test_cli_trace_steps_writes_those_steps(tmp_path):
    out = tmp_path / "t.json"
    args = ["run", "--system", "h100", "--model", "tiny-llama", "--units", "1", "--context", "16",
            "--tokens", "5", "--trace", str(out), "--trace-steps", "all", "--json"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    steps = {e["args"]["step"] for e in json.loads(out.read_text())["traceEvents"]
             if e["ph"] == "X"}  # fmt: skip
    assert steps == set(range(5))


@pytest.mark.parametrize("cmd", ["run", "report"])
def test_cli_bad_trace_steps_is_one_error_line(cmd):
    args = [cmd, "--system", "h100", "--model", "tiny-llama", "--tokens", "4",
            "--trace-steps", "3:1:0"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --trace-steps '3:1:0'")
    assert "Traceback" not in res.output


@pytest.mark.parametrize("cmd", ["run", "report"])
def test_help_says_trace_steps_and_its_default(cmd):
    res = CliRunner().invoke(app, [cmd, "--help"], env={"COLUMNS": "200"})
    assert "--trace-steps" in res.output and "ends" in res.output and "all" in res.output


def test_report_labels_shares_as_overlapping_occupancy():
    from pyaccel.results import run

    r = run("llama-3.1-8b", "groq-tsp", workload=pa.Workload(context=64, tokens=2))
    rep = Report.from_trace(r.trace)
    data = json.loads(rep.to_json())
    assert data["share_is_occupancy"] is True
    assert any("overlap" in n for n in data["notes"])
    md = rep.to_markdown()
    assert "| resource | time | occupancy |" in md and "overlap" in md
    step = data["summary"]["step_time_s"]
    # the case the note exists for: groq-tsp's classes are busy at once, shares add past 100 %
    assert sum(data["by_resource_s"].values()) / step > 1.0
