"""``pyaccel validate --ranges``: each named unknown of a row's system over its sourced range,
and whether one alone spans the published speed."""

import json

import pytest
from typer.testing import CliRunner

import pyaccel as pa
from pyaccel.cli import app
from pyaccel.results import run
from pyaccel.validate import COLUMNS
from pyaccel.validate_ranges import Reach, validate_ranges

HEADER = ",".join(COLUMNS) + ",notes\n"


def _speed(sets=()) -> float:
    work = pa.Workload(context=64, tokens=16, weights="bf16")
    return run("tiny-llama", "wse3", 1, work, list(sets), prefill=None).trace.tokens_per_s_per_user


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    # published speeds set from the model's own ends, so the test holds whatever the preset:
    # one between the speeds at the two ends of host_transfers_per_step's range, one far above
    # every range's reach
    at = {n: _speed([f"host_transfers_per_step={n}"]) for n in (0, 2)}
    between = (at[0] * at[2]) ** 0.5
    path = tmp_path_factory.mktemp("ranges") / "mine.csv"
    path.write_text(HEADER + f"wse3,tiny-llama,bf16,1,1,64,{between:.1f},between\n"
                    "wse3,tiny-llama,bf16,1,1,64,1e12,out of reach\n")  # fmt: skip
    return path, at


def test_reach_spans_the_base_and_the_ends_that_ran():
    r = Reach("x", 1.0, 0.0, 2.0, base=100.0, low=50.0, high=None)
    assert r.span == (50.0, 100.0)
    assert r.reaches(60, 60) and r.reaches(40, 55) and r.reaches(90, 200)
    assert not r.reaches(120, 130) and not r.reaches(10, 20)


def test_each_end_is_the_case_re_emulated_there(table):
    path, at = table
    between, far = validate_ranges(path)
    by = {r.param: r for r in between.reach}
    host = by["host_transfers_per_step"]
    assert (host.low_value, host.high_value) == (0, 2)
    assert (host.low, host.high) == (at[0], at[2]) and host.base == between.emulated_tok_s
    p = pa.load_system("wse3").spec
    lo, hi = p.ranges["clock_hz"]
    assert by["clock_hz"].high == _speed([f"clock_hz={hi}"])
    assert by["clock_hz"].low == _speed([f"clock_hz={lo}"])
    # every ranged assumption and each choice assumption is there, and nothing else
    ranged = {n for n in p.assumptions if n in p.ranges} - {"power_w", "prefill_chunk_tokens"}
    assert set(by) == ranged | {"placement_strategy"}
    assert "host_transfers_per_step" in between.reached_by
    assert far.reached_by == [] and far.reach  # ran, but no range reaches 1e12 tok/s


def test_choices_report_their_slowest_and_fastest(table):
    path, _ = table
    between, _ = validate_ranges(path)
    (strategy,) = [r for r in between.reach if r.param == "placement_strategy"]
    assert strategy.value == "interleave"
    others = [_speed([f"placement_strategy={c}"]) for c in ("layer_regions", "layer_groups")]
    fastest = _speed(["placement_strategy=auto"])
    assert strategy.high == max([*others, fastest]) and strategy.low == min([*others, fastest])


def test_cli_prints_a_table_per_row_and_json_carries_the_ranges(table):
    path, _ = table
    text = CliRunner().invoke(app, ["validate", "--published", str(path), "--ranges"])
    assert text.exit_code == 0, text.output
    words = " ".join(text.stdout.split())  # lines wrap at 80 columns
    assert "wse3 tiny-llama (line 2): the published speed lies within the range of" in words
    assert "the range of no single named unknown" in words  # the far row
    done = CliRunner().invoke(app, ["validate", "--published", str(path), "--ranges", "--json"])
    rows = json.loads(done.stdout)
    assert "host_transfers_per_step" in rows[0]["published_within_range_of"]
    assert rows[1]["published_within_range_of"] == []
    assert {e["param"] for e in rows[0]["ranges"]} >= {"clock_hz", "host_transfers_per_step"}
    plain = json.loads(CliRunner().invoke(app, ["validate", "--published", str(path),
                                               "--json"]).stdout)  # fmt: skip
    assert "ranges" not in plain[0]


def test_what_a_row_sets_is_not_varied(table, tmp_path):
    _, at = table
    path = tmp_path / "pinned.csv"
    path.write_text(",".join(COLUMNS) + ",sets\n"
                    "wse3,tiny-llama,bf16,1,1,64,1000,host_transfers_per_step=2\n")  # fmt: skip
    (row,) = validate_ranges(path)
    assert row.emulated_tok_s == at[2]
    assert "host_transfers_per_step" not in {r.param for r in row.reach}
    assert "clock_hz" in {r.param for r in row.reach}


def test_a_row_that_cannot_run_has_no_ranges(tmp_path):
    path = tmp_path / "big.csv"
    path.write_text(HEADER + "h100,llama-3.1-405b,bf16,1,1,64,10,too big for one GPU\n")
    (row,) = validate_ranges(path)
    assert row.error and row.reach == () and row.reached_by == []
