"""The command-line contract of SPEC §7: JSON records, traces, listings, placement and overrides."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import defaultdict
from importlib import resources
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pyaccel.cli import app

MODEL = "llama-3.1-8b"
FAST = ("--tokens", "4")

RUN_KEYS = {
    "schema_version",
    "pyaccel_version",
    "system",
    "model",
    "units",
    "batch",
    "context",
    "tokens",
    "weights",
    "kv",
    "tokens_per_s_per_user",
    "tokens_per_s",
    "step_time_s",
    "lower_bound_step_time_s",
    "bottleneck",
    "joules_per_token",
    "assumptions",
}
PER_UNIT_KEYS = {"unit", "layers", "weight_bytes", "kv_bytes", "buffer_bytes", "capacity_bytes"}
NUMBERS = (
    "tokens_per_s_per_user",
    "tokens_per_s",
    "step_time_s",
    "lower_bound_step_time_s",
    "joules_per_token",
)

runner = CliRunner()


# ---------------------------------------------------------------- helpers


def invoke(*args):
    """Run ``pyaccel ARGS`` in-process; an uncaught exception fails the test with its traceback."""
    result = runner.invoke(app, [str(a) for a in args])
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        pytest.fail(f"uncaught {type(exc).__name__}: {exc}\n{tb}")
    return result


def ok(*args) -> str:
    """Run a command that must succeed; return its stdout."""
    result = invoke(*args)
    assert result.exit_code == 0, f"exit {result.exit_code}\n{result.output}"
    return result.stdout


def ok_json(*args):
    """Run a ``--json`` command that must succeed; return the parsed stdout."""
    return json.loads(ok(*args, "--json"))


def _reject_constant(name: str):
    raise ValueError(f"non-standard JSON constant {name}")


def strict_json(text: str):
    """Parse JSON as RFC 8259 has it (no NaN/Infinity)."""
    return json.loads(text, parse_constant=_reject_constant)


def error_line(result) -> str:
    """Exit 2 with exactly one ``error:`` line on stderr; return it."""
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:"), lines[0]
    return lines[0]


def preset_systems() -> list[str]:
    folder = resources.files("pyaccel.hw") / "presets"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def preset_models() -> list[str]:
    folder = resources.files("pyaccel.model") / "presets"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def system_kind(name: str) -> str:
    text = (resources.files("pyaccel.hw") / "presets" / f"{name}.toml").read_text()
    return re.search(r'^kind = "(\w+)"', text, flags=re.MULTILINE).group(1)


def run_json(*extra, system="h100", model=MODEL) -> dict:
    return ok_json("run", "--system", system, "--model", model, *FAST, *extra)


def assert_run_numbers(rec: dict) -> None:
    for key in NUMBERS:
        value = rec[key]
        assert isinstance(value, (int, float)) and math.isfinite(value) and value > 0, (key, value)
    assert rec["step_time_s"] >= rec["lower_bound_step_time_s"] * (1 - 1e-9)
    assert rec["tokens_per_s"] == pytest.approx(rec["tokens_per_s_per_user"] * rec["batch"])


# ---------------------------------------------------------------- run


def test_run_json_has_spec_keys():
    rec = run_json()
    assert RUN_KEYS <= set(rec), RUN_KEYS - set(rec)
    assert rec["system"] == "h100" and rec["model"] == MODEL
    assert (rec["units"], rec["batch"], rec["context"], rec["tokens"]) == (1, 1, 1024, 4)
    assert (rec["weights"], rec["kv"]) == ("bf16", "bf16")
    assert isinstance(rec["schema_version"], int)
    assert isinstance(rec["pyaccel_version"], str) and rec["pyaccel_version"]
    assert isinstance(rec["bottleneck"], str) and rec["bottleneck"]
    assert isinstance(rec["assumptions"], list) and rec["assumptions"]
    assert all(isinstance(a, str) and a for a in rec["assumptions"])
    assert_run_numbers(rec)


def test_a_bound_under_one_cycle_rounds_up_to_one():
    # a bound is never reported below the byte/FLOP time it stands for: a fraction of a cycle
    # is one whole cycle (flooring once made tiny models' bounds 0 and their ratio "-")
    from pyaccel.sim.roofline import bound_cycles

    assert bound_cycles([1e-13, 0.0, 2e-9, 2.5e-9], 1e9).tolist() == [1, 0, 2, 3]
    rec = ok_json("run", "--system", "wse3", "--model", "tiny-llama", *FAST)
    assert rec["emulated_over_lower_bound"] >= 1


def test_run_json_echoes_workload_options():
    rec = run_json("--batch", 4, "--context", 512, "--weights", "fp8", "--kv", "fp8-e4m3")
    assert (rec["batch"], rec["context"], rec["weights"], rec["kv"]) == (4, 512, "fp8", "fp8")
    assert_run_numbers(rec)


def test_run_json_stdout_is_one_strict_json_object():
    text = ok("run", "--system", "h100", "--model", MODEL, *FAST, "--json")
    assert isinstance(strict_json(text), dict)


def test_run_table_output():
    text = ok("run", "--system", "h100", "--model", MODEL, *FAST)
    assert "tokens/s" in text and "bottleneck" in text


def test_run_with_explicit_units():
    rec = run_json("--units", 2, model="llama-3.1-70b")
    assert rec["units"] == 2
    assert_run_numbers(rec)


# ---------------------------------------------------------------- trace


def read_trace(path: Path) -> dict:
    data = json.loads(path.read_text())
    assert isinstance(data, dict) and isinstance(data["traceEvents"], list)
    return data


def track_names(events: list[dict]) -> dict[tuple[int, int], str]:
    """(pid, tid) -> resource, from ``thread_name`` metadata; each track named once."""
    names: dict[tuple[int, int], str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            key = (e["pid"], e["tid"])
            assert key not in names, f"track {key} named twice"
            names[key] = e["args"]["name"]
    return names


def assert_one_track_per_resource(names: dict[tuple[int, int], str]) -> None:
    per_pid = defaultdict(list)
    for (pid, _tid), res in names.items():
        per_pid[pid].append(res)
    for pid, resources_ in per_pid.items():
        assert len(resources_) == len(set(resources_)), f"pid {pid} repeats a resource track"


def assert_no_overlap(events: list[dict]) -> None:
    tracks = defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["dur"]))
    assert tracks
    for key, spans in tracks.items():
        spans.sort()
        end = -math.inf
        for ts, dur in spans:
            assert dur >= 0
            assert ts >= end - 1e-9 * max(abs(end), 1.0), f"overlap on track {key} at ts {ts}"
            end = ts + dur


def check_trace(path: Path) -> set[str]:
    """Validate a Chrome trace file; return the resources it has tracks for."""
    events = read_trace(path)["traceEvents"]
    names = track_names(events)
    assert_one_track_per_resource(names)
    for e in events:
        if e.get("ph") == "X":
            key = (e["pid"], e["tid"])
            assert key in names, f"X event on unnamed track {key}"
            assert e["cat"] == names[key]
            assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float))
    assert_no_overlap(events)
    return set(names.values())


def test_run_trace_is_a_chrome_trace(tmp_path):
    path = tmp_path / "t.json"
    text = ok("run", "--system", "h100", "--model", MODEL, *FAST, "--trace", path, "--json")
    assert {"hbm", "launch"} <= check_trace(path)
    assert "wrote" not in text  # --json: stdout is the JSON alone


def test_files_written_beside_the_output_are_named(tmp_path):
    """run --trace and report --trace/--plot say what they wrote, as plot does."""
    trace, folder = tmp_path / "t.json", tmp_path / "plots"
    text = ok("run", "--system", "h100", "--model", MODEL, *FAST, "--trace", trace)
    assert text.rstrip().endswith(f"wrote {trace}")
    text = ok("report", "--system", "h100", "--model", MODEL, *FAST, "--trace", trace,
              "--plot", folder)  # fmt: skip
    wrote = [line for line in text.splitlines() if line.startswith("wrote ")]
    assert wrote == [f"wrote {p}" for p in (trace, folder / "layers.png", folder / "roofline.png")]


def test_run_trace_with_tensor_parallel_units(tmp_path):
    path = tmp_path / "tp.json"
    ok(
        "run",
        "--system",
        "h100",
        "--model",
        "llama-3.1-70b",
        "--units",
        4,
        "--tokens",
        2,
        "--trace",
        path,
    )
    res = check_trace(path)
    assert {"hbm", "sync", "nvlink"} <= res
    pids = {e["pid"] for e in read_trace(path)["traceEvents"] if e.get("ph") == "X"}
    assert pids == {0, 1, 2, 3}


def test_run_trace_into_missing_folder_is_an_error(tmp_path):
    """Missing folders are not created silently (tests/test_cli_output.py has the rest)."""
    path = tmp_path / "new" / "deeper" / "t.json"
    line = error_line(invoke("run", "--system", "h100", "--model", MODEL, *FAST, "--trace", path))
    assert str(tmp_path / "new" / "deeper") in line and "does not exist" in line
    assert not (tmp_path / "new").exists()


# ---------------------------------------------------------------- place


def place_json(*args) -> dict:
    return ok_json("place", *args)


def test_place_json_has_spec_keys():
    rec = place_json("--system", "h100", "--model", MODEL)
    assert {"system", "model", "units", "per_unit", "layers"} <= set(rec)
    assert (rec["system"], rec["model"], rec["units"]) == ("h100", MODEL, 1)
    assert len(rec["per_unit"]) == rec["units"]
    for row in rec["per_unit"]:
        assert PER_UNIT_KEYS <= set(row), PER_UNIT_KEYS - set(row)
        assert row["weight_bytes"] > 0 and row["capacity_bytes"] > 0
        assert row["weight_bytes"] + row["kv_bytes"] + row["buffer_bytes"] <= row["capacity_bytes"]
    keys = [row["layer"] for row in rec["layers"]]
    assert len(keys) == len(set(keys)) and set(range(32)) <= set(keys)
    for row in rec["layers"]:
        assert {"layer", "units"} <= set(row)
        assert row["units"] and all(0 <= u < rec["units"] for u in row["units"])


def test_place_json_per_unit_layers_match_layer_units():
    rec = place_json("--system", "h100", "--model", "llama-3.1-70b", "--units", 4)
    assert rec["units"] == 4
    for row in rec["per_unit"]:
        expected = [x["layer"] for x in rec["layers"] if row["unit"] in x["units"]]
        assert row["layers"] == expected


def test_place_too_small_says_bytes_short_and_units():
    result = invoke("place", "--system", "h100", "--model", "llama-3.1-70b", "--units", 1)
    line = error_line(result)
    assert "unit 0" in line and "short" in line
    needs = re.search(r"needs ([\d,]+) B", line)
    has = re.search(r"has ([\d,]+) B", line)
    assert needs and has, line
    assert int(needs.group(1).replace(",", "")) > int(has.group(1).replace(",", ""))
    suggested = re.search(r"--units (\d+)", line)
    assert suggested, line
    n = int(suggested.group(1))
    assert n > 1
    # the suggestion is right: that many units fit
    assert place_json("--system", "h100", "--model", "llama-3.1-70b", "--units", n)["units"] == n


def test_place_auto_picks_tp_by_pp_layout():
    rec = place_json("--system", "h100", "--model", "llama-3.1-405b", "--units", "auto")
    tp, pp = rec["layout"]["tp"], rec["layout"]["pp"]
    assert 8 % tp == 0
    assert rec["units"] == tp * pp > 1
    assert len(rec["per_unit"]) == rec["units"]
    assert isinstance(rec["reason"], str) and rec["reason"].strip()
    for row in rec["per_unit"]:
        assert row["layers"], f"unit {row['unit']} holds nothing"


def test_place_table_output():
    text = ok("place", "--system", "h100", "--model", "llama-3.1-405b", "--units", "auto")
    assert "llama-3.1-405b" in text


def test_place_check_accepts_a_written_placement(tmp_path):
    import pyaccel as pa

    plc = pa.place(pa.load_model(MODEL), pa.load_system("h100", units=1), pa.Workload())
    path = tmp_path / "plc.json"
    plc.to_json(path)
    rec = ok_json("place", "--check", path)
    assert (rec["system"], rec["model"], rec["units"]) == ("h100", MODEL, 1)


# ---------------------------------------------------------------- compare


def test_compare_covers_every_preset_system():
    records = ok_json("compare", "--model", MODEL, *FAST)
    assert isinstance(records, list)
    assert sorted(r["system"] for r in records) == preset_systems()
    for rec in records:
        assert rec["model"] == MODEL
        if system_kind(rec["system"]) == "gpu":
            assert "error" not in rec, rec.get("error")
        if "error" in rec:  # an engine not built yet, or a model this machine cannot run
            assert isinstance(rec["error"], str) and rec["error"], rec
            assert "tokens_per_s" not in rec
        else:
            assert RUN_KEYS <= set(rec)
            assert_run_numbers(rec)


def test_compare_systems_by_batches():
    records = ok_json(
        "compare", "--model", MODEL, "--systems", "h100,b200", "--batches", "1,4", *FAST
    )
    assert len(records) == 4
    assert sorted((r["system"], r["batch"]) for r in records) == [
        ("b200", 1),
        ("b200", 4),
        ("h100", 1),
        ("h100", 4),
    ]
    for rec in records:
        assert_run_numbers(rec)


def test_compare_b200_faster_than_h100():
    records = ok_json("compare", "--model", MODEL, "--systems", "h100,b200", *FAST)
    speed = {r["system"]: r["tokens_per_s_per_user"] for r in records}
    assert speed["b200"] > speed["h100"]


def test_compare_table_output():
    text = ok("compare", "--model", MODEL, "--systems", "h100,wse3", *FAST)
    assert "h100" in text and "wse3" in text


def test_compare_table_has_a_row_for_a_system_that_cannot_run():
    # it was left out of the table, named only in a line below it
    text = ok("compare", "--model", "tiny-llama", "--systems", "h100,taalas-hc1", *FAST)
    rows = [line.split() for line in text.splitlines() if line.startswith("taalas-hc1  ")]
    assert rows == [["taalas-hc1", "auto", "-", "-", "-", "-", "see", "below"]]
    assert "taalas-hc1 (batch 1): taalas-hc1 is etched with llama-3.1-8b" in text


def test_compare_plot_writes_png(tmp_path):
    path = tmp_path / "cmp.png"
    ok("compare", "--model", MODEL, "--systems", "h100,h200", *FAST, "--plot", path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_plot_when_no_system_can_run_the_model(tmp_path):
    # every row an error (an etched chip of another model): log axes with nothing on them
    # raised a matplotlib ValueError traceback; the picture says so instead
    path = tmp_path / "cmp.png"
    records = ok_json("compare", "--model", "tiny-llama", "--systems", "taalas-hc1", *FAST,
                      "--context", "64", "--plot", path)  # fmt: skip
    assert [r["error"] is not None for r in records] == [True]
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- systems / models


@pytest.fixture
def narrow_terminal(monkeypatch):
    """An 80-column terminal, the common default width."""
    monkeypatch.setenv("COLUMNS", "80")


def test_systems_lists_every_preset(narrow_terminal):
    text = ok("systems")
    for name in preset_systems():
        assert name in text, name


def test_systems_json_lists_every_preset():
    rows = ok_json("systems")
    assert sorted(r["name"] for r in rows) == preset_systems()
    assert {r["name"]: r["kind"] for r in rows}["h100"] == "gpu"


def test_models_lists_every_preset(narrow_terminal):
    text = ok("models")
    for name in preset_models():
        assert name in text, name


def test_models_json_lists_every_preset():
    rows = ok_json("models")
    assert sorted(r["name"] for r in rows) == preset_models()
    by_name = {r["name"]: r for r in rows}
    assert by_name[MODEL]["layers"] == 32


# ---------------------------------------------------------------- report


def report_json(*extra) -> dict:
    return ok_json("report", "--system", "h100", "--model", MODEL, *FAST, *extra)


def test_report_json_what_if_ranked_by_gain():
    rep = report_json()
    rows = rep["what_if"]
    assert rows and {"resource", "gain"} <= set(rows[0])
    gains = [row["gain"] for row in rows]
    assert all(a >= b for a, b in itertools.pairwise(gains)), gains
    assert rows[0]["resource"] == "hbm" and gains[0] > 1.0
    assert all(g >= 1.0 - 1e-9 for g in gains)


def test_report_json_is_strict_json():
    text = ok("report", "--system", "h100", "--model", MODEL, *FAST, "--json")
    strict_json(text)


def test_report_plot_writes_pngs(tmp_path):
    folder = tmp_path / "plots"
    ok("report", "--system", "h100", "--model", MODEL, *FAST, "--plot", folder)
    pngs = sorted(folder.glob("*.png"))
    assert pngs and not (folder / "wafer.png").exists()
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


def test_wafer_report_plot_adds_the_wafer_heatmap(tmp_path):
    folder = tmp_path / "plots"
    ok("report", "--system", "wse3", "--model", "tiny-llama", *FAST, "--plot", folder)
    png = folder / "wafer.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_table_output():
    text = ok("report", "--system", "h100", "--model", MODEL, *FAST)
    assert "what if" in text and "assumptions" in text
    assert "layout " not in text  # GPUs have no named layout assumption


def test_wafer_report_says_which_layout_ran_and_set_pins_another():
    text = ok("report", "--system", "wse3", "--model", "tiny-llama", *FAST)
    assert "layout interleave, 1 pipeline stage(s)" in text
    pinned = ok("report", "--system", "wse3", "--model", "tiny-llama", *FAST,
                "--set", "placement_strategy=layer_regions")  # fmt: skip
    assert "layout layer_regions" in pinned
    bad = invoke("run", "--system", "wse3", "--model", "tiny-llama", *FAST,
                 "--set", "placement_strategy=spiral")  # fmt: skip
    assert bad.exit_code == 2 and "is not one of auto, layer_regions" in bad.output


# ---------------------------------------------------------------- --set


def test_set_changes_result_and_is_listed():
    base = run_json()
    # the achievable rate may not pass the peak (cross-field check): raise both
    faster = run_json("--set", "hbm_peak_bytes_per_s=6.7e12", "--set",
                      "hbm_achievable_bytes_per_s=5.94e12")  # fmt: skip
    assert faster["tokens_per_s_per_user"] > base["tokens_per_s_per_user"] * 1.2
    assert faster["step_time_s"] < base["step_time_s"]
    assert not any(
        "hbm_achievable_bytes_per_s" in a for a in base["assumptions"] if "override" in a
    )
    assert any("hbm_achievable_bytes_per_s" in a for a in faster["assumptions"])


def test_set_several_overrides():
    rec = run_json("--set", "kernel_launch_s=0", "--set", "hbm_achievable_bytes_per_s=3.35e12")
    text = " ".join(rec["assumptions"])
    assert "kernel_launch_s" in text and "hbm_achievable_bytes_per_s" in text
    assert rec["tokens_per_s_per_user"] > run_json()["tokens_per_s_per_user"]


def test_set_capacity_changes_placement():
    rec = place_json(
        "--system", "h100", "--model", MODEL, "--set", "hbm_capacity_bytes=20000000000"
    )
    assert rec["units"] > 1
