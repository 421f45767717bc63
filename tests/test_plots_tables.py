"""``pyaccel plot KIND TABLE``: each kind drawn from a small table and checked for what it shows
(axis labels with units, one series per system, the failed-point marker, the version footer),
not only for a file existing; and the fixes to the older plots."""

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import pyaccel as pa
from pyaccel import plots, plots_tables
from pyaccel.cli import app
from pyaccel.errors import ConfigError
from pyaccel.prices import dollars_per_mtok, load_prices
from pyaccel.report import Report
from pyaccel.roofline_points import roofline_points


@pytest.fixture
def figures(monkeypatch):
    """The figures the plots draw (kept open instead of written)."""
    kept = []

    def keep(fig, path):
        kept.append(fig)
        return path

    monkeypatch.setattr(plots, "_save", keep)
    monkeypatch.setattr(plots_tables, "_save", keep)
    return kept


def _table() -> pd.DataFrame:
    rows = []
    for system, base in (("h100", 100.0), ("wse3", 2000.0)):
        for batch in (1, 4, 16):
            speed = {"tokens_per_s_per_user": base / batch**0.2, "tokens_per_s": base * batch**0.8}
            used = 1 if batch < 16 else 2
            rows.append({"system": system, "model": "m", "batch": batch, "units": 1,
                         "context": 1024, **speed, "joules_per_token": 1.0 / batch,
                         "run.units": used, "weights": "bf16", "error": None})  # fmt: skip
    rows.append({"system": "groq-tsp", "model": "m", "batch": 1, "units": 9, "context": 1024,
                 "error": "does not fit"})  # fmt: skip
    return pd.DataFrame(rows)


def _legend(fig, i=0) -> list[str]:
    return [t.get_text() for t in fig.axes[i].get_legend().get_texts()]


def _footer(fig) -> str:
    return " ".join(t.get_text() for t in fig.texts)


def test_frontier_one_curve_per_system_and_failed_points_counted(figures):
    plots_tables.frontier_plot(_table(), "f.png")
    fig = figures[0]
    ax = fig.axes[0]
    assert "aggregate tokens/s" in ax.get_xlabel() and "tokens/s per user" in ax.get_ylabel()
    assert _legend(fig) == ["h100", "wse3", "failed (could not run): 1"]
    assert [len(line.get_xdata()) for line in ax.get_lines() if line.get_label() == "wse3"] == [3]
    assert "pyaccel" in _footer(fig) and "assumptions" in _footer(fig)


def test_frontier_splits_a_systems_curve_where_its_points_differ_in_context(figures):
    # two contexts of one system were joined into one zig-zag line; a CSV gives them as floats
    table = _table()
    longer = table[table["system"] == "wse3"].assign(context=4096.0)
    plots_tables.frontier_plot(pd.concat([table, longer]), "f.png")
    fig = figures[0]
    assert _legend(fig) == ["h100 / ctx 1024", "wse3 / ctx 1024", "wse3 / ctx 4096",
                            "failed (could not run): 1"]  # fmt: skip
    lines = {ln.get_label(): len(ln.get_xdata()) for ln in fig.axes[0].get_lines()}
    assert lines["wse3 / ctx 1024"] == lines["wse3 / ctx 4096"] == 3


def test_frontier_reads_what_a_point_that_left_an_axis_out_ran_at(figures):
    # a [[point]] without batch: its sweep column is empty, run.batch holds the batch it ran
    table = _table().assign(**{"run.batch": lambda d: d["batch"]})
    table["batch"] = pd.array([*table["batch"][:-2], None, None], dtype="Int64")
    plots_tables.frontier_plot(table, "f.png")
    texts = [t.get_text() for t in figures[0].axes[0].texts]
    assert texts.count("b16") == 2 and texts.count("b1") == 2


def test_cost_per_token_and_price_where_a_system_has_one(figures):
    plots_tables.cost_plot(_table(), "c.png", prices={"h100": {"usd_per_unit_hour": 3.6}})
    fig = figures[0]
    left, right = fig.axes
    assert "J per token" in left.get_ylabel() and "$ per million tokens" in right.get_ylabel()
    assert _legend(fig, 0)[:2] == ["h100", "wse3"] and "failed" in _legend(fig, 0)[-1]
    assert _legend(fig, 1)[0] == "h100"  # wse3 has no price in this table of prices
    assert "no price for: wse3" in _footer(fig)
    # $3.6 an hour for 100 tokens/s: 360,000 tokens an hour, $10 a million
    row = {"system": "h100", "model": "m", "units": 1, "tokens_per_s": 100.0}
    assert dollars_per_mtok({"h100": {"usd_per_unit_hour": 3.6}}, row) == pytest.approx(10.0)


def test_capacity_lines_per_system_model_and_format(figures):
    plots_tables.capacity_plot(_table().assign(context=[1024, 4096, 16384] * 2 + [1024]), "k.png")
    fig = figures[0]
    assert "units needed" in fig.axes[0].get_ylabel() and "context" in fig.axes[0].get_xlabel()
    assert _legend(fig) == ["h100 / m / bf16", "wse3 / m / bf16", "failed (could not run): 1"]


def test_roofline_from_a_report_json(figures, tmp_path):
    model, sysm = pa.load_model("tiny-llama"), pa.load_system("h100", units=1)
    work = pa.Workload(context=32, tokens=2)
    trace = pa.emulate(model, sysm, pa.place(model, sysm, work), work)
    rep = Report.from_trace(trace, what_if=False)
    rep.roofline = roofline_points(trace)
    ops = rep.roofline["ops"]
    assert ops and all(o["flops"] > 0 and o["bytes"] > 0 and o["emulated_s"] > 0 for o in ops)
    path = tmp_path / "r.json"
    path.write_text(rep.to_json())
    plots.roofline_plot(json.loads(path.read_text()), "roof.png")
    ax = figures[0].axes[0]
    assert "operational intensity" in ax.get_xlabel() and "FLOP/s" in ax.get_ylabel()
    assert sum(len(c.get_offsets()) for c in ax.collections) == len(ops)  # every op a point
    assert any("B/s" in t for t in _legend(figures[0]))  # the memory slope


@pytest.mark.parametrize("edit, says", [
    (lambda r: r["ops"][0].update(bytes=0), "roofline.ops[0].bytes is 0: must be a number > 0"),
    (lambda r: r["ops"][1].update(emulated_s=0.0), "roofline.ops[1].emulated_s is 0.0"),
    (lambda r: r["ops"][0].update(flops="x"), "roofline.ops[0].flops is 'x'"),
    (lambda r: r.pop("memory_bytes_per_s"), "roofline.memory_bytes_per_s is None"),
    (lambda r: r["ops"].__setitem__(2, 7), "roofline.ops[2] is 7: must be an object"),
    (lambda r: r.update(ops={"a": 1}), "without 'roofline' ops"),
])  # fmt: skip
def test_cli_plot_roofline_names_a_malformed_field(tmp_path, edit, says):
    """A report file edited by hand (or cut short) is one error line naming the field (a
    zero, a string or a missing key gave a ZeroDivisionError, TypeError or KeyError)."""
    model, sysm = pa.load_model("tiny-llama"), pa.load_system("h100", units=1)
    work = pa.Workload(context=32, tokens=2)
    trace = pa.emulate(model, sysm, pa.place(model, sysm, work), work)
    rep = Report.from_trace(trace, what_if=False)
    rep.roofline = roofline_points(trace)
    data = json.loads(rep.to_json())
    edit(data["roofline"])
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    res = CliRunner().invoke(app, ["plot", "roofline", str(path), "--out", str(tmp_path / "r.png")])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and "Traceback" not in res.output
    assert lines[0].startswith(f"error: plot roofline: TABLE {path}") and says in lines[0]


def test_roofline_points_of_an_asic_batch_stay_under_their_ceiling():
    """An ASIC's batch tags each user's spans (``L0.qkv_proj[u1]``): every user's busy span counts
    toward its op's time (only the tagged latency spans did, ``L0.qkv_proj.latency[u1]``
    read as ``L0.qkv_proj``, so a GEMV took 2 x 9 ns and was drawn 3.6x above its peak)."""
    model, sysm = pa.load_model("llama-3.1-8b"), pa.load_system("taalas-hc1", units=1)
    work = pa.Workload(batch=2, context=64, tokens=2)
    trace = pa.emulate(model, sysm, pa.place(model, sysm, work), work)
    ops = {o["op"]: o for o in roofline_points(trace)["ops"]}
    ev = trace.events
    mine = (ev["step"] == 0) & np.isin(ev["op"], ["L0.qkv_proj[u0]", "L0.qkv_proj[u1]"])
    busy = ev["duration"][mine]
    assert len(busy) == 2  # the block serves one user after the other
    assert ops["L0.qkv_proj"]["emulated_s"] * trace.clock_hz >= busy.sum()
    peaked = [o for o in ops.values() if o["peak_flops_per_s"]]
    assert peaked and all(o["flops"] / o["units"] / o["emulated_s"] <= o["peak_flops_per_s"]
                          for o in peaked)  # fmt: skip


def test_layer_plot_names_the_system_size_and_step(figures):
    """The per-layer bars say how many units and which step they show, and that overlapping
    classes stack (the title read 'llama-3.1-70b on wse3' for four wafers)."""
    model, sysm = pa.load_model("tiny-llama"), pa.load_system("h100", units=2)
    work = pa.Workload(context=32, tokens=3)
    trace = pa.emulate(model, sysm, pa.place(model, sysm, work), work, trace_steps="1:2")
    plots.layer_plot(Report.from_trace(trace, what_if=False), "layers.png")
    fig = figures[0]
    assert fig.axes[0].get_title() == "tiny-llama on 2 x h100: time per layer, step 1"
    assert "time (us)" in fig.axes[0].get_ylabel()
    footer = " ".join(t.get_text() for t in fig.texts)
    assert "step 1 (context 33)" in footer and "taller" in footer


def test_validation_band_and_failed_rows(figures):
    rows = [{"system": "a", "model": "m", "published_tok_s": 100.0, "emulated_tok_s": 120.0},
            {"system": "b", "model": "m", "published_tok_s": 50.0, "emulated_tok_s": None,
             "error": "does not fit"}]  # fmt: skip
    plots.validate_plot(rows, "v.png")
    assert _legend(figures[0]) == ["ran (1)", "failed (could not run): 1", "within x1.5"]


def test_every_price_names_its_source_and_assumption():
    for system, entry in load_prices().items():
        assert entry.get("source") and entry.get("assumption", "").startswith(f"price.{system}")
        assert ("usd_per_unit_hour" in entry) != ("usd_per_mtok" in entry), system


def test_cli_plot_draws_and_refuses_unknown_kinds(tmp_path):
    table = tmp_path / "t.csv"
    _table().to_csv(table, index=False)
    out = tmp_path / "f.png"
    res = CliRunner().invoke(app, ["plot", "frontier", str(table), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:4] == b"\x89PNG"
    res = CliRunner().invoke(app, ["plot", "pie", str(table), "--out", str(out)])
    assert res.exit_code == 2 and "unknown kind" in res.output
    with pytest.raises(ConfigError, match="no column"):
        plots_tables.frontier_plot(pd.DataFrame({"system": ["h100"]}), out)


@pytest.mark.parametrize("kind", ["frontier", "cost", "capacity"])
def test_cli_plot_names_a_cell_that_is_not_a_number_and_refuses_an_empty_table(tmp_path, kind):
    """A hand-edited table's text in a number column was a ValueError traceback, and a table of
    no rows drew an empty picture; both are now one error line."""
    table = _table().assign(context=1024)
    column = {"frontier": "tokens_per_s", "cost": "joules_per_token", "capacity": "run.units"}[kind]
    table[column] = table[column].astype(object)
    table.loc[2, column] = "abc"
    path, out = tmp_path / "t.csv", tmp_path / "p.png"
    for rows, says in ((table, f"column {column} of row 2 is 'abc', not a number"),
                       (table.iloc[:0], "the table has no rows")):  # fmt: skip
        rows.to_csv(path, index=False)
        res = CliRunner().invoke(app, ["plot", kind, str(path), "--out", str(out)])
        assert res.exit_code == 2 and f"error: plot {kind}: {says}" in res.output, res.output
        assert not out.exists()
