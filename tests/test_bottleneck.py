"""The bottleneck is measured, not guessed: the class whose doubling, re-emulated, gains most
(the what-if winner), the same in ``run --json``, ``report --json`` and ``compare``; the
largest occupancy share is reported beside it as ``busiest_resource``."""

import json

import pytest
from typer.testing import CliRunner

from pyaccel.cli import app

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
    """On the LPU chain the SRAM streams are busiest, yet halving fixed latencies gains most:
    the headline follows the measurement and still shows the occupancy."""
    args = ("--system", "groq-tsp", "--model", "llama-2-70b", "--weights", "int8", "--units",
            "576", "--tokens", "4")  # fmt: skip
    run = _json("run", *args)
    assert run["busiest_resource"] == "lpu_mem" and run["bottleneck"] != "lpu_mem"
    text = " ".join(CliRunner().invoke(app, ["report", *args]).stdout.split())
    assert f"bottleneck {run['bottleneck']} (what-if winner); busiest lpu_mem (" in text


def test_compare_records_carry_the_same_bottleneck():
    rows = _json("compare", "--model", "llama-3.1-8b", "--systems", "h100,wse3", "--tokens", "4")
    for row in rows:
        run = _json("run", "--system", row["system"], "--model", "llama-3.1-8b", "--tokens", "4")
        pair = (run["bottleneck"], run["busiest_resource"])
        assert (row["bottleneck"], row["busiest_resource"]) == pair
