"""Bad command lines found by a QA pass: each is one ``error:`` line (exit 2, no traceback) that
names the option or argument, the value and what was wrong or the limit."""

from __future__ import annotations

import json
import socket

import pytest
from typer.testing import CliRunner

from pyaccel.cli import app

runner = CliRunner()


def error_line(*args) -> str:
    """Run ``pyaccel ARGS``: exit 2 with exactly one ``error:`` line on stderr; return it."""
    result = runner.invoke(app, [str(a) for a in args])
    exc = result.exception
    assert exc is None or isinstance(exc, SystemExit), f"uncaught {type(exc).__name__}: {exc}"
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    return lines[0]


# ---------------------------------------------------------------- sweep --scheduler / --workers


@pytest.fixture
def grid(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('[axes]\nsystem = ["h100"]\nmodel = ["tiny-llama"]\ntokens = [2]\n')
    return path


@pytest.mark.parametrize("address,why", [
    ("notaurl", "no port number"),
    ("http://host:8786", "unknown scheme 'http://'"),
    ("tcp://host:99999", "port '99999' is not a number from 1 to 65535"),
    ("tcp://host:1:2", "not HOST:PORT"),
])  # fmt: skip
def test_a_malformed_scheduler_address_is_refused_before_connecting(grid, address, why):
    line = error_line("sweep", grid, "--no-cache", "--scheduler", address)
    assert f"--scheduler '{address}': {why}" in line and "tcp://127.0.0.1:8786" in line


def test_a_scheduler_that_does_not_answer_says_how_long_it_waited(grid, monkeypatch):
    from pyaccel.sweep import cluster

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1.0)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    line = error_line("sweep", grid, "--no-cache", "--scheduler", address)
    assert f"--scheduler '{address}': no Dask scheduler answered within 1 s" in line


def test_workers_beside_a_scheduler_is_refused_not_ignored(grid):
    # --workers only sizes the local cluster: beside --scheduler it was silently ignored
    line = error_line("sweep", grid, "--no-cache", "--scheduler", "tcp://127.0.0.1:8786",
                      "--workers", "2")  # fmt: skip
    assert line.startswith("error: --workers 2: sets the local cluster's worker processes; "
                           "with --scheduler 'tcp://127.0.0.1:8786'")  # fmt: skip


def test_too_many_workers_is_refused_with_the_limit(grid):
    line = error_line("sweep", grid, "--no-cache", "--workers", "99999999999999999999")
    assert "--workers 99,999,999,999,999,999,999 is above the limit of 256" in line
    # below the range: the house's one error line, not click's "Invalid value for" prefix
    assert error_line("sweep", grid, "--no-cache", "--workers", "0") == (
        "error: --workers 0: expected a positive integer")  # fmt: skip


def test_a_negative_seed_is_the_workload_s_error():
    line = error_line("run", "--system", "h100", "--model", "tiny-llama", "--seed", "-1")
    assert line == "error: workload field 'seed' must be an integer >= 0, got -1"


# ---------------------------------------------------------------- plot inputs


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A report --json, a run --json and a validate --json file (its rows written by hand)."""
    folder = tmp_path_factory.mktemp("plot-inputs")
    base = ["--system", "h100", "--model", "tiny-llama", "--tokens", "2", "--json"]
    for command in ("report", "run"):
        result = runner.invoke(app, [command, *base])
        assert result.exit_code == 0, result.output
        (folder / f"{command}.json").write_text(result.stdout)
    row = {"system": "h100", "model": "tiny-llama", "published_tok_s": 100.0,
           "emulated_tok_s": 120.0, "ratio": 1.2, "bottleneck": "hbm", "error": None}  # fmt: skip
    (folder / "validate.json").write_text(json.dumps([row]))
    (folder / "empty_object.json").write_text("{}")
    (folder / "empty_list.json").write_text("[]")
    return folder


@pytest.mark.parametrize("kind,given,is_,maker", [
    ("validation", "report", "a report --json file", "pyaccel validate --json"),
    ("validation", "run", "a run --json file", "pyaccel validate --json"),
    ("validation", "empty_object", "an empty JSON object", "pyaccel validate --json"),
    ("validation", "empty_list", "an empty list", "pyaccel validate --json"),
    ("roofline", "validate", "a validate --json file", "pyaccel report --system SYS"),
    ("roofline", "run", "a run --json file", "pyaccel report --system SYS"),
    ("roofline", "empty_list", "an empty list", "pyaccel report --system SYS"),
])  # fmt: skip
def test_each_plot_kind_refuses_json_of_another_kind(files, tmp_path, kind, given, is_, maker):
    out = tmp_path / "x.png"
    line = error_line("plot", kind, files / f"{given}.json", "--out", out)
    assert f"plot {kind}: TABLE {files / f'{given}.json'} is {is_}" in line and maker in line
    assert not out.exists()


def test_plots_draw_from_their_own_kind_of_json(files, tmp_path):
    for kind, given in (("roofline", "report"), ("validation", "validate")):
        result = runner.invoke(app, ["plot", kind, str(files / f"{given}.json"), "--out",
                                     str(tmp_path / f"{kind}.png")])  # fmt: skip
        assert result.exit_code == 0, result.output
        assert (tmp_path / f"{kind}.png").stat().st_size > 0


def test_a_table_plot_given_json_names_the_table_argument(files, tmp_path):
    path = files / "report.json"
    line = error_line("plot", "frontier", path, "--out", tmp_path / "x.png")
    assert f"plot frontier: TABLE {path} is not a sweep table (.parquet or .csv" in line
    assert "--out" not in line.replace("--out FILE.parquet", "")


# ---------------------------------------------------------------- integer limits


@pytest.mark.parametrize("flag,field,limit", [
    ("--batch", "batch", "1,000,000 sequences per step"),
    ("--context", "context", "10,000,000 cached tokens per sequence"),
])  # fmt: skip
def test_huge_batch_and_context_are_refused_with_the_limit(flag, field, limit):
    line = error_line("run", "--system", "h100", "--model", "llama-3.1-8b", flag,
                      "99999999999999999999")  # fmt: skip
    assert f"'{field}' = 99,999,999,999,999,999,999 is above the limit of {limit}" in line


def test_huge_compare_batches_and_units_are_refused_with_the_limit():
    line = error_line("compare", "--model", "tiny-llama", "--systems", "h100", "--batches",
                      "1,99999999999999999999")  # fmt: skip
    assert "--batches '1,99999999999999999999'" in line and "limit of 1,000,000" in line
    line = error_line("run", "--system", "taalas-hc1", "--model", "llama-3.1-70b", "--etch",
                      "--units", "99999999999999999999")  # fmt: skip
    assert "--units 99999999999999999999 is above the limit of 65,536" in line


def test_a_compare_batch_size_listed_twice_is_refused_as_a_system_listed_twice_is():
    # it ran each system twice at that batch and printed the same row twice
    line = error_line("compare", "--model", "tiny-llama", "--systems", "h100", "--batches",
                      "1,4,1")  # fmt: skip
    assert line == "error: --batches '1,4,1': batch size 1 is listed twice"


# ---------------------------------------------------------------- --set, compare, --help


@pytest.mark.parametrize("item,why", [
    ("hbm_achievable_bytes_per_s", "no '=' in it"),
    ("=5", "no key before '='"),
])  # fmt: skip
def test_a_set_without_key_or_value_says_the_form_once(item, why):
    line = error_line("run", "--system", "h100", "--model", "tiny-llama", "--set", item)
    assert line == f"error: --set '{item}': {why}; expected --set KEY=VALUE"


def test_a_repeated_set_key_is_one_plain_error():
    line = error_line("run", "--system", "h100", "--model", "tiny-llama", "--set", "a=1",
                      "--set", "a=2")  # fmt: skip
    assert line == "error: --set a: given twice (a=1 and a=2); give each key once"


def test_compare_gives_the_run_line_that_etches_dies_not_a_flag_it_lacks():
    result = runner.invoke(app, ["compare", "--model", "llama-3.1-70b", "--systems",
                                 "taalas-hc1", "--tokens", "2", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    (rec,) = json.loads(result.stdout)
    assert "pass --etch" not in rec["error"].lower()
    assert (
        "`pyaccel run --system taalas-hc1 --model llama-3.1-70b --etch` would design"
        in (rec["error"])
    )
    line = error_line("run", "--system", "taalas-hc1", "--model", "llama-3.1-70b")
    assert "pass --etch to design dies of this kind for llama-3.1-70b" in line


@pytest.mark.parametrize("command", ["run", "report", "place", "compare", "sweep", "plot"])
def test_help_names_integer_options_by_a_metavar(command):
    text = runner.invoke(app, [command, "--help"]).stdout
    assert "range>" not in text and "<int" not in text and "<path>" not in text
    if command != "plot":
        assert ("--workers N" if command == "sweep" else "--seed N") in text


# ---------------------------------------------------------------- GPU layouts


@pytest.mark.parametrize("units,near", [(35, "--units 34 or --units 36"),
                                        (37, "--units 36 or --units 38"),
                                        (1000, "--units 272")])  # fmt: skip
def test_a_gpu_count_without_a_layout_says_the_constraint_and_the_nearest_counts(units, near):
    line = error_line("place", "--system", "h100", "--model", "llama-3.1-8b", "--units", units)
    assert f"{units} h100 GPUs allow no TP x PP layout" in line and "PP at most 34" in line
    assert f"PP would be {units // (8 if units % 8 == 0 else 1):,} > 34" in line
    assert line.endswith(f"the nearest counts that do: {near}")


def test_a_layer_too_big_for_any_gpu_names_its_rank_and_stage():
    line = error_line("place", "--system", "h100", "--model", "llama-3.1-8b", "--batch",
                      "1000000")  # fmt: skip
    assert "on one GPU at TP 8" in line and "TP 8 x PP 34: TP rank 0 of stage 1" in line
    assert "on GPU 8" not in line
