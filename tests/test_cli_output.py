"""Output files and the interface around them (issue 12, items 6 and 9, strict JSON).

Output paths (``run --trace``, ``report --plot DIR``, ``compare --plot FILE``) are checked before
anything is emulated; files are replaced atomically only when they are regular files, symlinks
are written through, modes follow the umask, and plot files take their format from the suffix.
Also: ``--version``, ``python -m pyaccel``, ``--help``, ``systems SYS``, progress bars, the text of
``run --functional``, 80-column tables, ``report --json``'s ``schema_version`` and strict JSON.
"""

from __future__ import annotations

import math
import os
import re
import select
import stat
import subprocess
import sys
import tomllib
from dataclasses import fields, replace
from importlib import metadata, resources
from pathlib import Path

import numpy as np
import pytest

import pyaccel.results
from pyaccel.cli_show import layout_text
from pyaccel.errors import ConfigError
from pyaccel.formats import FORMATS
from pyaccel.hw.spec import PARAMS_BY_KIND
from pyaccel.io_util import dumps_strict, write_atomic

from test_cli import error_line, invoke, ok, strict_json  # the CLI suite's helpers

MODEL = "llama-3.1-8b"
RUN = ("run", "--system", "h100", "--model", MODEL, "--tokens", "2")
REPORT = ("report", "--system", "h100", "--model", MODEL, "--tokens", "2")
COMPARE = ("compare", "--model", MODEL, "--systems", "h100", "--tokens", "2")


@pytest.fixture
def no_emulation(monkeypatch):
    """Any emulation fails the test: the output path must be refused before the work."""

    def emulate(*args, **kwargs):
        raise AssertionError("emulated although the output path is bad")

    monkeypatch.setattr(pyaccel.results, "emulate", emulate)


@pytest.fixture
def umask():
    """Set the process umask for one test (put back afterwards)."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


# ---------------------------------------------------------------- bad output paths, before work


def test_trace_folder_is_refused(tmp_path, no_emulation):
    line = error_line(invoke(*RUN, "--trace", tmp_path))
    assert str(tmp_path) in line and "is a folder" in line


def test_trace_empty_path_is_refused(no_emulation):
    line = error_line(invoke(*RUN, "--trace", ""))
    assert "--trace ''" in line and "empty path" in line


def test_trace_path_ending_in_a_slash_is_refused(tmp_path, no_emulation):
    line = error_line(invoke(*RUN, "--trace", f"{tmp_path}/new/"))
    assert "names a folder" in line
    assert not (tmp_path / "new").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("path", ["/proc/pyaccel-trace.json", "/proc/self/pyaccel.json"])
def test_trace_under_proc_is_refused(path, no_emulation):
    line = error_line(invoke(*RUN, "--trace", path))
    assert path in line and "cannot create files in /proc" in line


def test_trace_missing_folder_is_named_and_not_created(tmp_path, no_emulation):
    path = tmp_path / "a" / "b" / "t.json"
    line = error_line(invoke(*RUN, "--trace", path))
    assert f"folder {tmp_path / 'a' / 'b'} does not exist" in line
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("name", ["a" * 300 + ".json", "file/t.json"])
def test_trace_unusable_path_is_one_error_line(tmp_path, name, no_emulation):
    """A name longer than the file system takes, or a path through a file."""
    (tmp_path / "file").write_text("")
    assert "cannot use this path" in error_line(invoke(*RUN, "--trace", tmp_path / name))


def test_report_plot_unusable_path_is_one_error_line(tmp_path, no_emulation):
    assert "cannot use this path" in error_line(invoke(*REPORT, "--plot", tmp_path / ("d" * 300)))


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
def test_trace_device_node_is_refused_and_kept(device, no_emulation):
    if not os.path.exists(device):
        pytest.skip(f"{device} missing")
    before = os.stat(device)
    line = error_line(invoke(*RUN, "--trace", device))
    assert device in line and "character device, not a regular file" in line
    after = os.stat(device)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


def test_trace_symlink_loop_is_refused(tmp_path, no_emulation):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert "symbolic link loop" in error_line(invoke(*RUN, "--trace", tmp_path / "a"))


def test_report_plot_existing_file_is_refused(tmp_path, no_emulation):
    path = tmp_path / "plots"
    path.write_text("keep me")
    line = error_line(invoke(*REPORT, "--plot", path))
    assert "is a file, not a folder" in line
    assert path.read_text() == "keep me"


def test_report_plot_folder_parent_must_exist(tmp_path, no_emulation):
    line = error_line(invoke(*REPORT, "--plot", tmp_path / "a" / "plots"))
    assert f"folder {tmp_path / 'a'} does not exist" in line
    assert not (tmp_path / "a").exists()


def test_report_plot_file_name_taken_by_a_folder_is_refused(tmp_path, no_emulation):
    (tmp_path / "layers.png").mkdir()
    line = error_line(invoke(*REPORT, "--plot", tmp_path))
    assert "layers.png: is a folder" in line


def test_report_plot_empty_path_is_refused(no_emulation):
    assert "empty path" in error_line(invoke(*REPORT, "--plot", ""))


@pytest.mark.parametrize("name", ["cmp.gif", "cmp", "cmp.png.bak"])
def test_compare_plot_unknown_suffix_names_the_allowed_ones(tmp_path, name, no_emulation):
    line = error_line(invoke(*COMPARE, "--plot", tmp_path / name))
    assert ".png, .svg, .pdf" in line
    assert not (tmp_path / name).exists()


def test_compare_plot_missing_folder_is_refused(tmp_path, no_emulation):
    line = error_line(invoke(*COMPARE, "--plot", tmp_path / "nope" / "cmp.png"))
    assert "does not exist" in line


# ---------------------------------------------------------------- writing


def test_trace_through_a_symlink_updates_the_target(tmp_path):
    target = tmp_path / "target.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to("target.json")
    ok(*RUN, "--trace", link)
    assert link.is_symlink() and os.readlink(link) == "target.json"
    assert "traceEvents" in strict_json(target.read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "target.json"]


def test_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to("made.json")
    ok(*RUN, "--trace", link)
    assert link.is_symlink() and (tmp_path / "made.json").is_file()


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_file_mode_follows_the_umask(tmp_path, umask, mask, mode):
    umask(mask)
    path = tmp_path / "t.json"
    ok(*RUN, "--trace", path)
    assert stat.S_IMODE(path.stat().st_mode) == mode


def test_replaced_file_keeps_its_mode(tmp_path, umask):
    umask(0o022)
    path = tmp_path / "t.json"
    path.write_text("old")
    path.chmod(0o640)
    write_atomic(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o640


def test_report_plot_creates_its_folder_with_the_umask(tmp_path, umask):
    umask(0o022)
    folder = tmp_path / "plots"
    ok("report", "--system", "h100", "--model", "tiny-llama", "--tokens", "2", "--plot", folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    for name in ("layers.png", "roofline.png"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o644


def test_report_plot_folder_holds_one_runs_plots(tmp_path):
    # a GPU run into a folder of a wafer run's plots left wafer.png beside its own two
    folder = tmp_path / "plots"
    tiny = ("--model", "tiny-llama", "--tokens", "2", "--context", "64", "--plot", folder)
    ok("report", "--system", "wse3", *tiny)
    assert sorted(p.name for p in folder.iterdir()) == ["layers.png", "roofline.png", "wafer.png"]
    (folder / "notes.txt").write_text("mine")  # not a plot of report's: never touched
    text = ok("report", "--system", "h100", *tiny)
    assert sorted(p.name for p in folder.iterdir()) == ["layers.png", "notes.txt", "roofline.png"]
    assert f"removed {folder / 'wafer.png'} (an earlier run's: this run draws no wafer.png)" in text
    again = ok("report", "--system", "h100", *tiny)  # nothing stale: nothing said
    assert "removed" not in again and f"wrote {folder / 'layers.png'}" in again


def test_report_plot_leaves_a_link_at_a_plots_name(tmp_path):
    folder, kept = tmp_path / "plots", tmp_path / "kept.png"
    folder.mkdir()
    kept.write_bytes(b"old")
    (folder / "wafer.png").symlink_to(kept)
    ok("report", "--system", "h100", "--model", "tiny-llama", "--tokens", "2", "--plot", folder)
    assert (folder / "wafer.png").is_symlink() and kept.read_bytes() == b"old"


@pytest.mark.parametrize(
    ("suffix", "magic"), [(".svg", b"<?xml"), (".pdf", b"%PDF-"), (".PNG", b"\x89PNG\r\n\x1a\n")]
)
def test_compare_plot_format_follows_the_suffix(tmp_path, suffix, magic):
    path = tmp_path / f"cmp{suffix}"
    ok(*COMPARE, "--plot", path)
    data = path.read_bytes()
    assert data.startswith(magic)
    if suffix == ".svg":
        assert b"<svg" in data[:2000]


def test_svg_plot_is_the_same_bytes_twice(tmp_path):
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    ok(*COMPARE, "--plot", a)
    ok(*COMPARE, "--plot", b)
    assert a.read_bytes() == b.read_bytes()


def test_write_atomic_refuses_a_fifo(tmp_path):
    """A named pipe (like a device node) is not a regular file: refused, left as it was."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="named pipe, not a regular file"):
        write_atomic(fifo, "x")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_write_atomic_leaves_no_temporary_files(tmp_path):
    write_atomic(tmp_path / "a.txt", "one")
    write_atomic(tmp_path / "a.txt", b"two")
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]
    assert (tmp_path / "a.txt").read_text() == "two"


def test_trace_to_perfetto_refuses_a_folder(tmp_path):
    """The Python API raises pyaccel's own error with the same text."""
    import pyaccel as pa

    trace = pyaccel.results.run("tiny-llama", "h100", 1, pa.Workload(tokens=1)).trace
    with pytest.raises(ConfigError, match="is a folder"):
        trace.to_perfetto(tmp_path)


# ---------------------------------------------------------------- strict JSON


def test_dumps_strict_maps_non_finite_numbers_to_null():
    data = {
        "nan": math.nan,
        "inf": [math.inf, -math.inf, np.float32("nan"), np.float64(1.5)],
        "int": np.int64(3),
        "arr": np.array([1.0, np.inf]),
    }
    assert strict_json(dumps_strict(data)) == {
        "nan": None,
        "inf": [None, None, None, 1.5],
        "int": 3,
        "arr": [1.0, None],
    }


def test_run_json_is_strict_when_a_number_is_not_finite(monkeypatch):
    real = pyaccel.results.run_record

    def record(*args, **kwargs):
        rec = real(*args, **kwargs)
        return replace(rec, joules_per_token=math.inf, functional={"perplexity_ratio": math.nan})

    monkeypatch.setattr(pyaccel.results, "run_record", record)
    rec = strict_json(ok(*RUN, "--json"))
    assert rec["joules_per_token"] is None and rec["perplexity_ratio"] is None


def test_report_json_is_strict_and_versioned(monkeypatch):
    from pyaccel.report import Report

    real = Report.from_trace

    def from_trace(*args, **kwargs):
        rep = real(*args, **kwargs)
        rep.bound_ratio = math.nan
        return rep

    monkeypatch.setattr(Report, "from_trace", from_trace)
    data = strict_json(ok(*REPORT, "--json"))
    assert data["emulated_over_lower_bound"] is None
    run = strict_json(ok(*RUN, "--json"))
    assert isinstance(data["schema_version"], int)
    assert data["schema_version"] == run["schema_version"]


def test_perfetto_file_is_strict_json(tmp_path, monkeypatch):
    from pyaccel.trace import Trace

    real = Trace.perfetto_events

    def events(self):
        data = real(self)
        data["traceEvents"][-1]["args"] = {"odd": math.nan}
        return data

    monkeypatch.setattr(Trace, "perfetto_events", events)
    path = tmp_path / "t.json"
    ok(*RUN, "--trace", path)
    assert strict_json(path.read_text())["traceEvents"][-1]["args"] == {"odd": None}


# ---------------------------------------------------------------- version, python -m, --help


def test_version_prints_the_package_version():
    assert ok("--version").strip() == f"pyaccel {metadata.version('pyaccel')}"


def test_python_dash_m_runs_the_cli():
    proc = subprocess.run(
        [sys.executable, "-m", "pyaccel", "--version"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"pyaccel \S+\n", proc.stdout), proc.stdout


@pytest.mark.parametrize("command", ["run", "report", "place", "compare", "systems", "models"])
def test_help_shows_flags_as_flags(command):
    text = ok(command, "--help")
    assert "<bool>" not in text
    assert re.search(r"^\s+--json\s+print JSON", text, flags=re.MULTILINE), text


def test_help_lists_choices_and_defaults():
    text = " ".join(ok("run", "--help").split())  # help text wraps anywhere
    for name in FORMATS:
        assert name in text, name
    assert "fp8-e4m3 = fp8" in text
    assert "[default: bf16]" in text and "[default: auto]" in text and "[default: 1024]" in text
    assert "interleave" in text and "layer_regions" in text and "layer_groups" in text
    assert "native format" in text  # where an unset --weights comes from
    assert ".svg" in " ".join(ok("compare", "--help").split())


# ---------------------------------------------------------------- systems SYS


def _preset(name: str) -> dict:
    text = (resources.files("pyaccel.hw") / "presets" / f"{name}.toml").read_text()
    return tomllib.loads(text)


@pytest.mark.parametrize("name", ["h100", "wse3", "groq-tsp", "taalas-hc1", "ascend-950", "wse3t",
                                  "taalas-hc2"])  # fmt: skip
def test_systems_sys_json_lists_every_key_with_its_source(name):
    toml = _preset(name)
    rec = strict_json(ok("systems", name, "--json"))
    keys = [f.name for f in fields(PARAMS_BY_KIND[toml["preset"]["kind"]])]
    assert [p["key"] for p in rec["params"]] == keys
    for p in rec["params"]:
        entry = toml["params"][p["key"]]
        assert p["value"] == entry["value"], p["key"]
        assert p["unit"], p["key"]
        if "source" in entry:
            assert p["source"] == entry["source"] and "assumption" not in p
        else:
            assert p["assumption"] == entry["assumption"] and "source" not in p


def test_systems_sys_units():
    units = {p["key"]: p["unit"] for p in strict_json(ok("systems", "wse3", "--json"))["params"]}
    assert units["clock_hz"] == "Hz"
    assert units["pe_sram_bytes"] == "bytes"
    assert units["hop_latency_cycles"] == "cycles"
    assert units["placement_strategy"] == "text"


def test_systems_sys_text_lists_keys_values_and_sources(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = ok("systems", "h100")
    toml = _preset("h100")["params"]
    for key in toml:
        assert re.search(rf"^{key} = ", text, flags=re.MULTILINE), key
    assert "hbm_capacity_bytes = 85045477376 bytes" in text
    flat = " ".join(text.split())
    assert "source: NVIDIA H100 SXM datasheet: TDP 700 W" in flat
    assert "assumption: ndr_small_message_one_way" in flat


def test_systems_sys_unknown_is_one_error_line():
    line = error_line(invoke("systems", "h900"))
    assert "unknown system 'h900'" in line and "h100" in line


# ---------------------------------------------------------------- text output


def test_run_functional_prints_its_metrics():
    args = ("run", "--system", "h100", "--model", "tiny-llama", "--tokens", "2", "--functional")
    rec = strict_json(ok(*args, "--json"))
    text = ok(*args)
    assert f"{rec['perplexity_ratio']:.4f} vs fp32" in text
    assert f"{rec['max_abs_logit_error']:.4g} vs fp32" in text
    assert f"{rec['top1_agreement']:.1%} of tokens" in text


def test_report_takes_runs_functional_and_trace(tmp_path):
    # SPEC 7: report takes run's options; its numerics metrics are run's, its trace the same
    args = ("--system", "h100", "--model", "tiny-llama", "--tokens", "2", "--functional")
    rec = strict_json(ok("run", *args, "--json"))
    data = strict_json(ok("report", *args, "--trace", str(tmp_path / "t.json"), "--json"))
    assert data["functional"]["perplexity_ratio"] == rec["perplexity_ratio"]
    assert strict_json((tmp_path / "t.json").read_text())["traceEvents"]
    assert f"perplexity ratio: {rec['perplexity_ratio']:.4f} vs fp32" in ok("report", *args)


def _assert_fits_80(text: str) -> None:
    assert "…" not in text, text
    assert max(len(line) for line in text.splitlines()) <= 80, text


def test_compare_table_at_80_columns_is_whole(monkeypatch):
    """Long system names, unit counts in the hundreds and tokens/s above 100,000 (groq-tsp at
    batch 64) fit in 80 columns: no header, number or unit is cut."""
    monkeypatch.setenv("COLUMNS", "80")
    systems = "groq-tsp,taalas-hc1,wse3,h100"
    args = ("compare", "--model", MODEL, "--systems", systems, "--batches", "1,64", "--tokens", "2")
    text = ok(*args)
    _assert_fits_80(text)
    for header in ("system", "units", "layout", "batch", "tok/s", "per user", "total", "TTFT",
                   "bottleneck"):  # fmt: skip
        assert header in text
    records = strict_json(ok(*args, "--json"))
    for r in records:
        rows = [line.split() for line in text.splitlines() if line.startswith(r["system"])]
        if "error" in r:  # a row too: the units asked, no numbers
            want = [r["system"], "auto", "-", str(r["batch"]), "-", "-", "-", "see", "below"]
            assert want in rows, (rows, want)
        else:
            assert f"{r['tokens_per_s']:,.0f}" in text or f"{r['tokens_per_s']:,.1f}" in text
            want = [str(r["units"]), *layout_text(r["layout"]).split(), str(r["batch"])]
            assert any(row[1 : 2 + len(want) - 1] == want for row in rows), (rows, want)
    # one batch size: the title says it and no batch column is spent on it
    one = ok("compare", "--model", MODEL, "--systems", "h100", "--tokens", "2")
    _assert_fits_80(one)
    assert f"{MODEL}, batch 1" in one and "batch  " not in one.split("\n", 3)[2]


def test_layout_text_names_every_kind():
    assert layout_text({"tp": 8, "pp": 2, "stages": 2}) == "8x2"
    assert layout_text({"tp": 16, "pp": 21, "idle_chips": 240}) == "16x21"
    assert layout_text({"strategy": "interleave", "wafers": 3, "grids": []}) == "interleave"
    assert layout_text({"dies": 4, "etched": True}) == "etched"
    assert layout_text({"dies": 1, "etched": False}) == "as built"


@pytest.mark.parametrize("command", [("models",), ("systems",), ("systems", "wse3")])
def test_listings_at_80_columns_are_whole(monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "80")
    _assert_fits_80(ok(*command))


def test_sensitivity_tables_at_80_columns_are_whole(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    args = ("--system", "wse3", "--model", "tiny-llama", "--tokens", "2", "--sensitivity", "20")
    text = ok("report", *args)
    _assert_fits_80(text[text.index("step time with each named assumption") :])


# ---------------------------------------------------------------- progress on a terminal


def _stderr_on_a_terminal(*args: str) -> tuple[bytes, bytes]:
    """Run ``python -m pyaccel ARGS`` with stderr on a pseudo-terminal; (stdout, terminal)."""
    import pty

    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "80", "TERM": "xterm"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyaccel", *args], stdout=subprocess.PIPE, stderr=slave, env=env
    )
    os.close(slave)
    seen = []
    while True:  # drain the terminal until the child closes it (EIO on Linux)
        ready, _, _ = select.select([master], [], [], 1.0)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen.append(chunk)
    out = proc.stdout.read()
    proc.wait(timeout=120)
    os.close(master)
    assert proc.returncode == 0, b"".join(seen)
    return out, b"".join(seen)


# two fast systems, a context inside tiny-llama's window (no context warning on stderr)
COMPARE_TINY = ("compare", "--model", "tiny-llama", "--systems", "h100,h200", "--tokens", "2",
                "--context", "64")  # fmt: skip


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
def test_compare_shows_progress_on_a_terminal_but_not_with_json():
    out, term = _stderr_on_a_terminal(*COMPARE_TINY)
    assert b"compare" in term and b"100%" in term
    assert b"100%" not in out  # the bar is not mixed into the table on stdout
    out, term = _stderr_on_a_terminal(*COMPARE_TINY, "--json")
    assert term == b""
    assert len(strict_json(out.decode())) == 2


def test_no_progress_when_stderr_is_not_a_terminal():
    result = invoke(*COMPARE_TINY)
    assert result.exit_code == 0 and result.stderr == ""


@pytest.mark.parametrize("name", ["h100", "wse3"])
def test_systems_sys_marks_exactly_the_keys_that_set_refuses(name):
    """A key listed as settable is taken by --set; an informational one is refused by it."""
    from pyaccel.errors import ConfigError
    from pyaccel.hw.io import load_system

    params = strict_json(ok("systems", name, "--json"))["params"]
    assert any(not p["settable"] for p in params)  # fabric_width_pes, sm_count: documentation
    for p in params:
        if p["unit"] == "text" or isinstance(p["value"], bool):
            continue
        item = [f"{p['key']}={p['value']!r}"]
        if p["settable"]:
            load_system(name, units=1, overrides=item)
        else:
            with pytest.raises(ConfigError, match="has no effect"):
                load_system(name, units=1, overrides=item)
    text = ok("systems", name)
    informational = [p["key"] for p in params if not p["settable"]]
    for key in informational:
        block = text.split(f"{key} = ", 1)[1].split("\n\n", 1)[0]
        assert "not a --set key" in " ".join(block.split())
