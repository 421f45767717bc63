"""±x % sensitivity of the step time to a preset's named assumptions (``report --sensitivity``)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import pyaccel as pa
from pyaccel.cli import app
from pyaccel.sensitivity import assumption_sensitivity, choice_alternatives
from pyaccel.workload import Workload

WORK = Workload(batch=1, context=64, tokens=2)


def test_clock_moves_a_wafer_step_exactly_inversely():
    # one wafer, no system I/O: every cost is in cycles, so the step time is cycles / clock;
    # the preset gives the clock's sourced range, so the two runs are at its ends
    (row,) = assumption_sensitivity("tiny-llama", "wse3", 1, WORK, params=["clock_hz"])
    low, high = pa.load_system("wse3").spec.ranges["clock_hz"]
    assert row.ranged and (row.low_value, row.high_value) == (low, high)
    assert row.low_change == pytest.approx(row.value / low - 1.0, abs=1e-12)
    assert row.high_change == pytest.approx(row.value / high - 1.0, rel=1e-12)
    assert row.to_dict(50)["percent"] is None


def test_a_parameter_without_a_range_moves_by_the_percentage():
    (row,) = assumption_sensitivity(
        "tiny-llama", "wse3", 1, WORK, frac=0.5, params=["message_overhead_cycles"]
    )
    value = pa.load_system("wse3").spec.params.message_overhead_cycles
    assert not row.ranged and (row.low_value, row.high_value) == (value * 0.5, value * 1.5)
    assert row.to_dict(50)["percent"] == 50


@pytest.mark.parametrize(
    "entry, needle",
    [
        ("{ value = 0.85e9, low = 0.9e9, high = 1.1e9, assumption = 'x: y' }", "hold its value"),
        ("{ value = 0.85e9, low = 1.1e9, high = 0.8e9, assumption = 'x: y' }", "be ordered"),
        ("{ value = 0.85e9, low = 0.8e9, assumption = 'x: y' }", "needs both 'low' and 'high'"),
        ("{ value = 0.85e9, low = 0, high = 1.1e9, assumption = 'x: y' }", "must be > 0"),
    ],
)
def test_a_preset_range_must_hold_its_value(entry, needle):
    from importlib import resources

    from pyaccel.errors import ConfigError
    from pyaccel.hw.io import spec_from_toml

    text = (resources.files("pyaccel.hw") / "presets" / "wse3.toml").read_text()
    line = next(x for x in text.splitlines() if x.startswith("clock_hz ="))
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        spec_from_toml(text.replace(line, f"clock_hz = {entry}"), "wse3.toml")


def test_rows_cover_numeric_assumptions_and_are_ranked():
    rows = assumption_sensitivity("tiny-llama", "wse3", 1, WORK, frac=0.5)
    names = {r.param for r in rows}
    assert {"clock_hz", "message_overhead_cycles", "dsd_issue_cycles"} <= names
    spreads = [r.spread for r in rows]
    assert spreads == sorted(spreads, reverse=True)
    # a per-message start cost can only slow a step when it grows
    (msg,) = [r for r in rows if r.param == "message_overhead_cycles"]
    assert msg.high_change >= 0.0 >= msg.low_change


def test_small_integers_that_cannot_move_report_no_change():
    (row,) = assumption_sensitivity(
        "tiny-llama", "wse3", 1, WORK, frac=0.4, params=["elementwise_task_messages"]
    )
    # 1 message x 0.6 rounds back to 1: the same run, change 0; x 1.4 rounds to 1 as well
    assert row.low_value == row.high_value == 1
    assert row.low_change == 0.0 and row.high_change == 0.0


def test_a_mesh_latency_moves_by_quarter_cycle_ticks():
    (row,) = assumption_sensitivity(
        "tiny-llama", "wse3", 1, WORK, frac=0.4, params=["hop_latency_cycles"]
    )
    # 1 cycle x 0.6 and x 1.4 land on the nearest quarter-cycle ticks: 0.5 and 1.5 cycles
    assert (row.low_value, row.high_value) == (0.5, 1.5) and not row.error
    assert row.low_change < 0.0 < row.high_change


def test_bad_fraction_is_refused():
    with pytest.raises(ValueError, match="frac"):
        assumption_sensitivity("tiny-llama", "wse3", 1, WORK, frac=1.5)


def test_report_cli_sensitivity_json_and_bad_percent():
    runner = CliRunner()
    args = ["report", "--system", "wse3", "--model", "tiny-llama", "--units", "1",
            "--context", "64", "--tokens", "2", "--sensitivity", "50"]  # fmt: skip
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    rows = data["sensitivity"]
    assert {a["choice"] for a in data["alternatives"]} == {"auto", "layer_regions",
                                                           "layer_groups"}  # fmt: skip
    by = {r["param"]: r for r in rows}
    clock, msg = by["clock_hz"], by["message_overhead_cycles"]
    assert clock["ranged"] and clock["percent"] is None and clock["high_value"] == 1.1e9
    assert not msg["ranged"] and msg["percent"] == 50 and msg["high_change"] > 0
    bad = runner.invoke(app, [*args[:-1], "150"])
    assert bad.exit_code == 2 and "--sensitivity 150" in bad.output
    # an end that cannot run is marked [n] in the table and said whole below it (a column
    # squeezed to the table's width broke the sentence into a few letters a line)
    text = runner.invoke(app, args).stdout
    row = next(ln for ln in text.splitlines() if ln.startswith("host_sampling "))
    assert "cannot run at 1" in row and row.rstrip().endswith("[1]")
    assert "[1] host_sampling: --set host_sampling=1: host_sampling (1) must be <=" in text
    # an integer that -/+50 % rounds back to itself was not re-run: said so, not "+0.0%"
    row = next(ln for ln in text.splitlines() if ln.startswith("elementwise_task_messages "))
    assert "+0.0%" not in row and "not moved" in row
    assert "not moved: a whole-number assumption that -/+50 % rounds back" in text


def test_auto_units_are_pinned_to_the_unchanged_placement(monkeypatch):
    import pyaccel.sensitivity as sens

    seen = []
    real = sens.run

    def spy(model, system, units, *args, **kw):
        seen.append(units)
        return real(model, system, units, *args, **kw)

    monkeypatch.setattr(sens, "run", spy)
    assumption_sensitivity("tiny-llama", "wse3", "auto", WORK, params=["dsd_issue_cycles"])
    assert seen[0] == "auto" and seen[1:] == [1, 1]


def test_each_other_placement_strategy_is_re_emulated_and_auto_is_never_slower():
    # one step (no context growth): auto keeps the fastest of every strategy's layouts, so it
    # cannot be slower than the default interleave or than any strategy pinned alone
    one = Workload(batch=1, context=64, tokens=1)
    alts = choice_alternatives("llama-3.1-8b", "wse3", 1, one)
    by = {a.choice: a for a in alts}
    assert set(by) == {"auto", "layer_regions", "layer_groups"}
    assert all(a.param == "placement_strategy" and a.value == "interleave" for a in alts)
    assert all(a.step_s is not None and not a.error for a in alts)
    assert by["auto"].step_s <= min(a.step_s for a in alts)
    assert by["auto"].step_s <= by["auto"].base_step_s
    # assumptions without choices (numbers, or free text such as an ASIC's etched model) have
    # no alternatives; a GPU's launch mode has one, eager, which launches from the host, and
    # its host overlap one, serial, which waits for the host's step after each step
    assert choice_alternatives("tiny-llama", "groq-tsp", 1, one) == []
    eager, serial = choice_alternatives("tiny-llama", "h100", 1, one)
    assert (eager.param, eager.value, eager.choice) == ("launch_mode", "graph", "eager")
    assert eager.step_s > eager.base_step_s and not eager.error
    assert (serial.param, serial.value, serial.choice) == ("host_overlap", "overlap", "serial")
    assert serial.step_s > serial.base_step_s and not serial.error


def test_a_choice_that_needs_more_units_is_placed_again_on_auto():
    # llama-3.1-70b: interleave fits on 4 wafers, layer regions only on 6; with --units auto
    # the alternative is re-placed on the fewest wafers it needs and says so
    one = Workload(batch=1, context=1024, tokens=1)
    by = {a.choice: a for a in choice_alternatives("llama-3.1-70b", "wse3", "auto", one)}
    regions = by["layer_regions"]
    assert (regions.base_units, regions.units) == (4, 6) and not regions.error
    assert regions.note == "needs 6 units" and regions.step_s is not None
    assert by["auto"].units == 4 and by["auto"].note == ""
    # pinned units: no second try, the error is kept
    pinned = {a.choice: a for a in choice_alternatives("llama-3.1-70b", "wse3", 4, one)}
    assert pinned["layer_regions"].step_s is None
    assert "no layer_regions layout fits on 4 wse3 wafer(s)" in pinned["layer_regions"].note


def test_a_speculative_run_s_sensitivity_is_over_its_rounds():
    """Under --spec-decode the step time that moves is the summary's, per generated token over
    the rounds (drafting and verifying), not the verification step alone."""
    from pyaccel.results import run, speculative_summary

    work = Workload(context=64, tokens=8, spec_decode="draft:tiny-llama,k=2,accept=0.5")
    base = run("tiny-llama", "wse3", 1, work, prefill=None)
    per_token = speculative_summary(base.trace.summary(), base.spec)[0]["step_time_s"]
    (row,) = assumption_sensitivity("tiny-llama", "wse3", 1, work, params=["clock_hz"], base=base)
    assert row.base_step_s == per_token != base.trace.step_time_s
    low, _ = pa.load_system("wse3").spec.ranges["clock_hz"]
    slow = run("tiny-llama", "wse3", 1, work, [f"clock_hz={low}"], prefill=None)
    assert row.low_step_s == speculative_summary(slow.trace.summary(), slow.spec)[0]["step_time_s"]
    for alt in choice_alternatives("tiny-llama", "wse3", 1, work, base=base):
        assert alt.base_step_s == per_token
