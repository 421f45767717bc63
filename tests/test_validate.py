"""``pyaccel validate``: every row of a published-speed table emulated and judged."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import pyaccel as pa
from pyaccel.cli import app
from pyaccel.results import run
from pyaccel.validate import (
    COLUMNS,
    VALIDATE_TOKENS,
    load_table,
    read_table,
    shipped_table,
    validate,
)

BENCH = Path(__file__).resolve().parents[1] / "bench" / "published.csv"
KEYS = ["system", "model", "published_tok_s", "emulated_tok_s", "ratio", "bottleneck", "error"]
# each row's line in the table and the case it was emulated as, then how
CASE = ["line", "weights", "units", "batch", "context", "tokens", "sets", "notes"]
HEADER = ",".join(COLUMNS) + ",notes\n"


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _table(tmp_path, *rows) -> Path:
    path = tmp_path / "mine.csv"
    path.write_text(HEADER + "".join(r + "\n" for r in rows))
    return path


def test_the_shipped_table_is_the_bench_table():
    assert shipped_table() == BENCH.read_text(encoding="utf-8")


def test_json_runs_every_row_of_the_shipped_table():
    result = invoke("validate", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["system"], r["model"]) for r in rows] == [
        (r.system, r.model) for r in read_table(shipped_table(), "shipped")
    ]
    for r, row in zip(rows, read_table(shipped_table(), "shipped"), strict=True):
        assert list(r) == KEYS + CASE
        assert (r["line"], r["units"], r["batch"], r["context"]) == (
            row.line, row.units, row.batch, row.context)  # fmt: skip
        if r["error"] is None:  # ran: the ratio is emulated over published, with a bottleneck
            assert r["ratio"] == pytest.approx(r["emulated_tok_s"] / r["published_tok_s"])
            assert r["bottleneck"]
        else:
            assert r["emulated_tok_s"] is None and r["ratio"] is None
    assert sum(r["error"] is None for r in rows) >= 4


def test_a_users_table_runs_its_own_rows_and_judges_a_range_by_its_nearer_end(tmp_path):
    path = _table(
        tmp_path,
        "h100,tiny-llama,bf16,1,1,64,1-2,tiny on one GPU",
        "groq-tsp,tiny-llama,int8,auto,unknown,unknown,1e9-2e9,far above anything",
    )
    rows = validate(path)
    assert [r.system for r in rows] == ["h100", "groq-tsp"]
    fast, slow = rows
    assert fast.error is None and fast.emulated_tok_s > 2 and fast.published_tok_s == 2
    assert slow.published_tok_s == 1e9 and slow.ratio == slow.emulated_tok_s / 1e9
    alone = run("tiny-llama", "h100", 1, pa.Workload(context=64, tokens=16, weights="bf16"))
    assert fast.emulated_tok_s == alone.trace.tokens_per_s_per_user
    assert slow.notes and not fast.notes


def test_a_published_workload_is_emulated_whole_and_judged_by_its_mean(tmp_path):
    path = _table(tmp_path, "wse3,tiny-llama,bf16,1,1,64 in / 40 out,100,x",
                  "wse3,tiny-llama,bf16,1,1,64,100,x")  # fmt: skip
    workload, plain = read_table(path.read_text(), "mine")
    assert (workload.context, workload.tokens) == (64, 40) and plain.tokens == VALIDATE_TOKENS
    got, short = validate(path)
    whole = run("tiny-llama", "wse3", 1, pa.Workload(context=64, tokens=40, weights="bf16"))
    assert got.emulated_tok_s == whole.trace.tokens_per_s_per_user
    assert short.emulated_tok_s > got.emulated_tok_s  # 16 steps: the context grows less
    assert got.notes == ("context 64 for 40 generated tokens, their mean speed "
                         "(published: '64 in / 40 out')",)  # fmt: skip
    result = invoke("validate", "--published", path)
    assert "wse3 tiny-llama (line 2): emulated at context 64 for 40 generated" in result.stdout


def test_a_rows_sets_are_the_configuration_it_was_measured_in(tmp_path):
    path = tmp_path / "sets.csv"
    path.write_text(",".join(COLUMNS) + ",sets\n"
                    "h100,tiny-llama,bf16,1,1,64,100,host_overlap=serial; step_host_s=5e-5\n"
                    "h100,tiny-llama,bf16,1,1,64,100,\n"
                    "h100,tiny-llama,bf16,1,1,64,100,no_such_knob=1\n")  # fmt: skip
    serial, plain, unknown = validate(path)
    sets = ["host_overlap=serial", "step_host_s=5e-5"]
    alone = run("tiny-llama", "h100", 1, pa.Workload(context=64, tokens=16, weights="bf16"), sets)
    assert serial.emulated_tok_s == alone.trace.tokens_per_s_per_user != plain.emulated_tok_s
    assert serial.notes == ("--set host_overlap=serial --set step_host_s=5e-5 (the table's sets)",)
    assert not plain.notes
    assert unknown.emulated_tok_s is None and "no_such_knob" in unknown.error
    # a row not run says why, not how it would have been emulated; rows are told apart by line
    text = " ".join(invoke("validate", "--published", path).stdout.split())
    assert "(line 4): not run:" in text and "(line 4): emulated at" not in text
    assert "(line 2): emulated at --set host_overlap=serial" in text


def test_text_output_says_which_rows_used_cli_defaults(tmp_path):
    path = _table(tmp_path, "h100,tiny-llama,bf16,1,unknown (served),64,100,x")
    result = invoke("validate", "--published", path)
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "h100 tiny-llama (line 2): emulated at batch 1 (published: 'unknown (served)')" in out


def test_a_row_that_cannot_run_reports_its_error(tmp_path):
    path = _table(tmp_path, "h100,llama-3.1-405b,bf16,1,1,64,10,too big for one GPU")
    (row,) = validate(path)
    assert row.emulated_tok_s is None and "does not fit" in row.error


@pytest.mark.parametrize(
    "text, expected",
    [
        ("system,model\nh100,tiny-llama\n", "missing column(s) weights, units, batch"),
        (HEADER + "h100,tiny-llama,bf16,1,1,64,fast,x\n",
         "line 2: column 'tokens_per_s_per_user' must be a positive number or a range"),
        (HEADER + "h100,tiny-llama,bf16,0,1,64,10,x\n",
         "line 2: column 'units' must be a positive integer or 'auto', got '0'"),
        (HEADER + "h100,tiny-llama,bf16,automatic,1,64,10,x\n",
         "line 2: column 'units' must be a positive integer or 'auto', got 'automatic'"),
        (HEADER + "h100,tiny-llama,bf16,1,-3,64,10,x\n",
         "line 2: column 'batch' must be a positive integer, or text saying it is not "
         "published, got '-3'"),
        (HEADER + "h100,tiny-llama,bf16,1,1,0,10,x\n",
         "line 2: column 'context' must be a positive integer"),
        (HEADER + "h100,tiny-llama,bf16,1,1,64 in / 0 out,10,x\n",
         "line 2: column 'context' must be 'N in / M out' with M >= 1 generated tokens"),
        (",".join(COLUMNS) + ",sets\nh100,tiny-llama,bf16,1,1,64,10,launch_mode\n",
         "line 2: column 'sets' must be KEY=VALUE overrides separated by ';'"),
        (HEADER, "no rows below the header"),
        # an infinite speed was judged at ratio 0 with published_tok_s null
        (HEADER + "h100,tiny-llama,bf16,1,1,64,inf,x\n",
         "line 2: column 'tokens_per_s_per_user' must be a positive number"),
        (HEADER + "h100,tiny-llama,bf16,1,1,64,1e400,x\n",
         "line 2: column 'tokens_per_s_per_user' must be a positive number"),
        # a leading integer that is not the whole number was emulated as that integer
        (HEADER + "h100,tiny-llama,bf16,1,1.5,64,10,x\n",
         "line 2: column 'batch' must be a whole number alone or before words"),
        (HEADER + "h100,tiny-llama,bf16,1,1e3,64,10,x\n", "column 'batch' must be a whole"),
        (HEADER + "h100,tiny-llama,bf16,1,1,8k,10,x\n", "got '8k'"),
        (HEADER + 'h100,tiny-llama,bf16,1,1,"1,024",10,x\n', "got '1,024'"),
        (HEADER + "h100,tiny-llama,bf16,1,1,4k in / 1k out,10,x\n", "got '4k in / 1k out'"),
        # a row's line counts blank lines and the lines of a quoted multi-line note
        (HEADER + '\nh100,tiny-llama,bf16,1,1,64,10,"two\nlines"\n'
         "h100,tiny-llama,bf16,1,0,64,10,x\n", "line 5: column 'batch' must be a positive"),
    ],
)  # fmt: skip
def test_a_malformed_table_is_one_error_line(tmp_path, text, expected):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    result = invoke("validate", "--published", path)
    assert result.exit_code == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}") and expected in lines[0]


def test_units_auto_is_read_in_any_case_as_run_reads_it(tmp_path):
    # 'AUTO' was refused ("column 'units' must be a positive integer or 'auto'") while
    # run --units AUTO ran
    path = _table(
        tmp_path,
        "h100,tiny-llama,bf16,AUTO,1,64,10,x",
        "h100,tiny-llama,bf16, Auto ,1,64,10,x",
        "h100,tiny-llama,bf16,3,1,64,10,x",
    )
    assert [r.units for r in load_table(path)] == ["auto", "auto", 3]
    result = invoke("validate", "--published", path, "--json")
    assert result.exit_code == 0, result.output
    assert [r["units"] for r in json.loads(result.stdout)] == ["auto", "auto", 3]


def test_a_spreadsheets_bom_and_spaces_after_commas_are_read(tmp_path):
    # a CSV saved by a spreadsheet starts with a byte-order mark: 'missing column(s) system'
    path = tmp_path / "excel.csv"
    header = ", ".join(COLUMNS)
    path.write_bytes(f"\ufeff{header}\nh100,tiny-llama,bf16,1,1,64,10\n".encode())
    (row,) = load_table(path)
    assert (row.line, row.system, row.batch, row.context) == (2, "h100", 1, 64)


def test_plot_is_written_and_a_bad_path_is_refused_first(tmp_path):
    table = _table(tmp_path, "h100,tiny-llama,bf16,1,1,64,1000,x")
    out = tmp_path / "v.png"
    assert invoke("validate", "--published", table, "--plot", out).exit_code == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = invoke("validate", "--published", table, "--plot", tmp_path / "v.bmp")
    assert bad.exit_code == 2 and "--plot" in bad.stderr
