"""``pyaccel sweep`` / ``pa.sweep``: grids, one row a point in grid order on Dask, errors as rows,
the per-point cache, Parquet/CSV output, and a separately started Dask scheduler."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from pyaccel.cli import app
from pyaccel.errors import ConfigError
from pyaccel.sweep import cache as sweep_cache
from pyaccel.sweep import points, runner, sweep
from pyaccel.sweep.grid import inputs_of
from pyaccel.sweep.point import flatten

GRID = {
    "axes": {"system": ["h100", "wse3"], "model": ["tiny-llama"], "batch": [1, 3],
             "tokens": [2], "context": [64]},
    "point": [{"system": "groq-tsp", "model": "tiny-llama", "units": 99999, "tokens": 2},
              {"system": "wse3", "model": "tiny-llama", "tokens": 2, "set.clock_hz": 0.55e9}],
}  # fmt: skip


def test_grid_points_are_the_product_in_order_then_the_tables():
    got = points(GRID)
    assert [(p["system"], p["batch"]) for p in got[:4]] == [("h100", 1), ("h100", 3),
                                                           ("wse3", 1), ("wse3", 3)]  # fmt: skip
    assert got[4]["units"] == 99999 and got[5]["set.clock_hz"] == 0.55e9 and len(got) == 6


def test_a_toml_grid_as_the_issue_writes_it(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('[axes]\nsystem = ["h100", "wse3"]\nmodel = ["llama-3.1-8b"]\n'
                    'batch = [1, 8]\ncontext = [1024, 4096]\n'
                    '"set.clock_hz" = [0.85e9, 1.1e9]\n')  # fmt: skip
    got = points(path)
    assert len(got) == 16 and got[1] == {"system": "h100", "model": "llama-3.1-8b", "batch": 1,
                                         "context": 1024, "set.clock_hz": 1.1e9}  # fmt: skip


@pytest.mark.parametrize("grid,message", [
    ({"axes": {"system": ["h100"], "model": ["m"], "batchh": [1]}}, "unknown name 'batchh'"),
    ({"axes": {"system": ["h100"]}}, "has no model"),
    ({"axes": {"system": ["h100"], "model": [["a"]]}}, "not a string, number or boolean"),
    ({"axes": {"system": [], "model": ["m"]}}, "system: no values"),
    ({"axis": {}}, "unknown table"),
    ({}, "no points"),
    # a value of the wrong type or beyond run's limits is the grid's error, not a failed row
    ({"axes": {"system": ["taalas-hc1"], "model": ["m"], "etch": ["false"]}},
     r"\[axes\] etch: 'false' is not true or false"),
    ({"axes": {"system": ["h100"], "model": ["m"], "batch": ["four"]}},
     r"\[axes\] batch: workload field 'batch' must be an integer >= 1, got 'four'"),
    ({"axes": {"system": ["h100"], "model": ["m"], "batch": [1.5]}}, "got 1.5"),
    ({"axes": {"system": ["h100"], "model": ["m"], "context": [-1]}}, "'context' must be"),
    ({"axes": {"system": ["h100"], "model": ["m"], "tokens": [2_000_000]}},
     "above the limit of 1,000,000"),
    ({"axes": {"system": ["h100"], "model": ["m"], "weights": ["int3"]}},
     "unknown --weights format 'int3'"),
    ({"axes": {"system": ["h100"], "model": ["m"], "kv": [8]}}, "kv: 8 is not text"),
    ({"axes": {"system": ["h100"], "model": ["m"], "units": [0]}},
     "units: 0 is not a positive integer or 'auto'"),
    ({"axes": {"system": ["h100"], "model": ["m"], "units": [True]}}, "units: True is not"),
    ({"axes": {"system": [3], "model": ["m"]}}, "system: 3 is not a preset name"),
    ({"point": [{"system": "h100", "model": "m", "spec_decode": "drafty"}]},
     r"\[\[point\]\] 1 spec_decode: spec_decode='drafty': kind 'drafty'"),
    # the same run twice: as two axis values, or once with a default spelled out
    ({"axes": {"system": ["h100", "h100"], "model": ["m"]}}, "point 2 .* repeats point 1"),
    ({"axes": {"system": ["h100"], "model": ["m"]},
      "point": [{"system": "h100", "model": "m", "batch": 1, "units": "auto"}]},
     "point 2 .* repeats point 1"),
])  # fmt: skip
def test_bad_grids_name_what_is_wrong(grid, message):
    with pytest.raises(ConfigError, match=message):
        points(grid)


def test_a_grid_files_errors_name_the_file(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('[axes]\nsystem = ["h100"]\nmodel = ["m"]\nbatchh = [1]\n')
    with pytest.raises(ConfigError, match=f"^grid {path} \\[axes\\]: unknown name 'batchh'"):
        points(path)


def test_a_grid_saved_with_a_byte_order_mark_loads(tmp_path):
    # an editor's UTF-8 BOM made it 'not valid TOML (Invalid statement (at line 1, column 1))'
    path = tmp_path / "g.toml"
    path.write_bytes('\ufeff[axes]\nsystem = ["h100"]\nmodel = ["m"]\n'.encode())
    assert points(path) == [{"system": "h100", "model": "m"}]


def test_inputs_name_files_by_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sys.toml").write_text("a = 1\n")
    (tmp_path / "tiny-llama").mkdir()  # a folder named like a preset: the loader decides
    (tmp_path / "draft").mkdir()
    got = inputs_of({"system": "sys.toml", "model": "tiny-llama", "spec_decode": "draft:draft"})
    assert got["system"] == str(tmp_path / "sys.toml") and got["model"] == "tiny-llama"
    assert got["spec_decode"] == f"draft:{tmp_path / 'draft'},k=4"
    assert inputs_of({"system": "h100", "model": "m"})["system"] == "h100"


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    seen = []
    table = sweep(GRID, out=folder / "t.parquet", workers=1, cache=folder / "cache",
                  progress=lambda *a: seen.append(a))  # fmt: skip
    return table, folder, seen


def test_one_row_a_point_with_inputs_run_keys_and_errors(one_worker):
    table, folder, seen = one_worker
    assert list(table["system"]) == ["h100", "h100", "wse3", "wse3", "groq-tsp", "wse3"]
    assert list(table.columns[:6]) == ["system", "model", "batch", "tokens", "context", "units"]
    assert table.columns[-1] == "error"
    errors = table["error"].tolist()
    assert all(pd.isna(e) for i, e in enumerate(errors) if i != 4)
    assert "99999" in errors[4] or "groq-tsp" in errors[4]  # a point that cannot run: its row
    assert pd.isna(table.loc[4, "tokens_per_s"])
    assert (table.loc[:3, "tokens_per_s"] > 0).all()
    assert table.loc[5, "tokens_per_s"] < table.loc[2, "tokens_per_s"]  # a slower clock
    assert seen[0] == (0, 0, 6) and seen[-1] == (6, 1, 0)
    assert pd.read_parquet(folder / "t.parquet").equals(table)
    # the last two points leave batch and context out: whole numbers with gaps stay whole
    assert str(table["batch"].dtype) == "Int64" and table["batch"].tolist()[:4] == [1, 3, 1, 3]
    assert pd.isna(table.loc[4, "batch"]) and table["context"].tolist()[0] == 64
    table[["batch", "context"]].to_csv(folder / "b.csv", index=False)
    assert (folder / "b.csv").read_text().splitlines()[1:3] == ["1,64", "3,64"]


def test_a_row_is_the_run_json_record_flattened(one_worker):
    table = one_worker[0]
    args = "--system wse3 --model tiny-llama --batch 3 --tokens 2 --context 64 --json"
    res = CliRunner().invoke(app, ["run", *args.split()])
    assert res.exit_code == 0, res.output
    record = flatten(json.loads(res.stdout))
    row = table.iloc[3]
    for key, value in record.items():
        axes = ("system", "model", "batch", "tokens", "context", "units")
        name = f"run.{key}" if key in axes else key
        assert row[name] == value or (value is None and pd.isna(row[name])), key


def test_two_workers_give_the_same_table_and_a_rerun_runs_only_what_is_missing(one_worker):
    table, folder, _ = one_worker
    assert sweep(GRID, workers=2, cache=False).equals(table)
    # the same table, column order included, when every row comes from the cache
    assert sweep(GRID, workers=1, cache=folder / "cache").equals(table)
    seen = []
    extended = {**GRID, "axes": {**GRID["axes"], "batch": [1, 3, 5]}}
    bigger = sweep(extended, workers=1, cache=folder / "cache",
                   progress=lambda *a: seen.append(a))  # fmt: skip
    assert seen[0] == (6, 1, 2)  # the six finished points come from the cache
    same = bigger.iloc[[0, 1, 3, 4]][table.columns].reset_index(drop=True)
    assert len(bigger) == 8 and same.equals(table.iloc[:4].reset_index(drop=True))


def test_the_cache_key_covers_inputs_files_and_code(tmp_path, monkeypatch):
    spec = tmp_path / "sys.toml"
    spec.write_text("a = 1\n")
    inputs = {"system": str(spec), "model": "tiny-llama", "batch": 1}
    key = sweep_cache.point_key(inputs)
    assert sweep_cache.point_key({**inputs, "batch": 2}) != key
    spec.write_text("a = 2\n")
    assert sweep_cache.point_key(inputs) != key
    changed = sweep_cache.point_key(inputs)
    monkeypatch.setattr(sweep_cache, "code_hash", lambda: "another build")
    assert sweep_cache.point_key(inputs) != changed


def test_the_cache_key_covers_a_routing_trace_and_a_draft_model(tmp_path):
    trace, draft = tmp_path / "r.npy", tmp_path / "draft"
    trace.write_bytes(b"one trace")
    draft.mkdir()
    (draft / "config.json").write_text("{}")
    inputs = {"system": "h100", "model": "tiny-llama", "router": str(trace),
              "spec_decode": f"draft:{draft},k=2"}  # fmt: skip
    key = sweep_cache.point_key(inputs)
    trace.write_bytes(b"another trace")  # edited in place: its rows are not the old ones
    assert sweep_cache.point_key(inputs) != key
    key = sweep_cache.point_key(inputs)
    (draft / "config.json").write_text('{"num_hidden_layers": 2}')
    assert sweep_cache.point_key(inputs) != key


@pytest.mark.parametrize("cache", ["file", "file/sub", ""])
def test_a_cache_that_cannot_hold_points_is_refused_before_any_runs(tmp_path, cache):
    (tmp_path / "file").write_text("not a folder")
    grid = {"axes": {"system": ["h100"], "model": ["tiny-llama"], "tokens": [2]}}
    folder = str(tmp_path / cache) if cache else cache
    with pytest.raises(ConfigError, match=f"^--cache {folder!r}: empty path|^--cache {folder}: "
                                          "cannot keep points there"):  # fmt: skip
        sweep(grid, workers=1, cache=folder, progress=lambda *a: pytest.fail("it ran"))


def test_an_axis_of_booleans_and_numbers_is_written_as_text(tmp_path):
    given = [{"system": "h100", "set.host_overlap": True},
             {"system": "h100", "set.host_overlap": 0.5}]  # fmt: skip
    table = runner._table(given, [{"error": None}, {"error": "no"}])
    runner.write_table(table, tmp_path / "t.parquet")  # one Parquet column holds one kind
    assert pd.read_parquet(tmp_path / "t.parquet")["set.host_overlap"].tolist() == ["True", "0.5"]


def test_cli_sweep_writes_the_table_and_refuses_a_bad_suffix(tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text('[axes]\nsystem = ["h100"]\nmodel = ["tiny-llama"]\ntokens = [2]\n')
    out = tmp_path / "t.csv"
    res = CliRunner().invoke(app, ["sweep", str(grid), "--out", str(out), "--workers", "1",
                                   "--no-cache"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "1 points, 1 ran, 0 failed (0 from the cache)" in res.stdout
    assert pd.read_csv(out)["system"].tolist() == ["h100"]
    # run again with a cache: the second run says its point came from there
    args = ["sweep", str(grid), "--workers", "1", "--cache", str(tmp_path / "cache")]
    assert "(0 from the cache)" in CliRunner().invoke(app, args).stdout
    again = CliRunner().invoke(app, args).stdout
    assert "1 points, 1 ran, 0 failed (1 from the cache)" in again
    # without --out the table goes nowhere: the line says so (it said nothing)
    assert again.endswith("; no --out: the table was not written (its points are in the cache)\n")
    res = CliRunner().invoke(app, ["sweep", str(grid), "--out", str(tmp_path / "t.txt")])
    assert res.exit_code == 2 and "not '.txt'" in res.output


@pytest.mark.parametrize("signum,status,word", [(signal.SIGINT, 130, "interrupted"),
                                                (signal.SIGTERM, 143, "terminated")])  # fmt: skip
def test_ctrl_c_or_sigterm_stops_a_sweep_process_whose_rerun_runs_only_the_rest(
    tmp_path, signum, status, word
):
    grid = tmp_path / "g.toml"
    grid.write_text('[axes]\nsystem = ["wse3"]\nmodel = ["llama-3.1-8b"]\ntokens = [64]\n'
                    f"batch = {list(range(1, 25))}\n")  # fmt: skip
    cache = tmp_path / "cache"
    cmd = [sys.executable, "-m", "pyaccel.cli", "sweep", str(grid), "--cache", str(cache),
           "--workers", "2", "--out", str(tmp_path / "t.parquet")]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while not any(cache.rglob("*.json")) and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signum)
    try:  # it stops (a hang here was an interrupt landing inside Dask's client)
        _, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    kept = sum(1 for _ in cache.rglob("*.json"))
    assert proc.returncode != 0 and 1 <= kept < 24, (proc.returncode, kept, err[-2000:])
    # it said nothing (SIGTERM: killed, the local cluster's semaphores reported as leaked):
    # now the cluster is closed and one line says what was done and what a rerun does
    assert proc.returncode == status and err.strip().splitlines() == [
        f"{word}: {kept} of 24 points done; they are in the cache: the same command runs "
        "only the rest"], err[-2000:]  # fmt: skip
    assert not (tmp_path / "t.parquet").exists()
    seen = []
    table = sweep(grid, workers=1, cache=cache, progress=lambda *a: seen.append(a))
    assert seen[0] == (kept, 0, 24 - kept) and table["error"].isna().all()


def test_the_stop_flag_takes_one_sigterm_and_gives_the_handler_back():
    before = signal.getsignal(signal.SIGTERM)
    assert before == signal.SIG_DFL
    with runner._stop_flag() as stop:
        os.kill(os.getpid(), signal.SIGTERM)  # handled in the main thread: the flag, not death
        time.sleep(0.01)
        assert stop.signum == signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # a second one acts at once
    assert signal.getsignal(signal.SIGTERM) == before
    exc = runner.Terminated()  # uncaught: a quiet exit with the status a shell gives SIGTERM
    assert isinstance(exc, SystemExit) and exc.code == 143


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_separately_started_scheduler_and_worker(tmp_path):
    dask = Path(sys.executable).with_name("dask")
    if not dask.exists():
        pytest.skip("the dask command is not installed beside this Python")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    procs = [subprocess.Popen([str(dask), "scheduler", "--host", "127.0.0.1", "--port",
                               str(port), "--no-dashboard"], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]  # fmt: skip
    try:
        time.sleep(2)
        procs.append(subprocess.Popen([str(dask), "worker", address, "--nworkers", "1",
                                       "--nthreads", "1", "--no-dashboard"], env=env,
                                      cwd=tmp_path, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))  # fmt: skip
        grid = {"axes": {"system": ["h100", "wse3"], "model": ["tiny-llama"], "tokens": [2]}}
        remote = sweep(grid, scheduler=address, cache=False)
        assert remote.equals(sweep(grid, workers=1, cache=False))
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)


def test_a_script_without_a_main_guard_is_told_to_add_one(tmp_path):
    # each worker process imports the script and runs its top-level pa.sweep again: the user
    # saw pages of Dask tracebacks ending in 'RuntimeError: Nanny failed to start.'
    script = tmp_path / "script.py"
    script.write_text("import pyaccel as pa\n"
                      "pa.sweep({'axes': {'system': ['h100'], 'model': ['tiny-llama'], "
                      "'tokens': [2]}}, workers=1, cache=False)\n")  # fmt: skip
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=180)  # fmt: skip
    last = res.stderr.strip().splitlines()[-1]
    assert res.returncode != 0 and last.startswith("pyaccel.errors.ConfigError: "), last
    assert 'call pa.sweep under `if __name__ == "__main__":`' in last


def test_a_point_whose_worker_died_is_an_error_row_not_kept(tmp_path, monkeypatch):
    # a point that kills its worker process (out of memory) made Dask raise KilledWorker out
    # of the client: the whole sweep ended in a traceback with no table
    from contextlib import contextmanager
    from types import SimpleNamespace

    from distributed import Client, KilledWorker

    @contextmanager
    def threads(scheduler, workers, points):  # the same client, workers threads of this process
        with Client(processes=False, n_workers=1, threads_per_worker=1,
                    dashboard_address=":0") as session:  # fmt: skip
            yield session

    def dies_at_batch_3(inputs):
        if inputs["batch"] == 3:
            raise KilledWorker("run_point-a1b2c3", SimpleNamespace(address="tcp://1.2.3.4:5"), 3)
        return {"tokens_per_s": 1.0, "error": None}

    monkeypatch.setattr(runner, "client", threads)
    monkeypatch.setattr(runner, "run_point", dies_at_batch_3)
    grid = {"axes": {"system": ["h100"], "model": ["tiny-llama"], "batch": [1, 3]}}
    table = sweep(grid, cache=tmp_path, out=tmp_path / "t.csv")
    assert pd.isna(table["error"][0]) and table["tokens_per_s"].tolist()[0] == 1.0
    assert table["error"].tolist()[1] == (
        "the point did not finish: every worker process that ran it died (KilledWorker: out of "
        "memory, or a crash; the workers' logs say which)")  # fmt: skip
    assert len(list(tmp_path.rglob("*.json"))) == 1  # only the point that ran is kept


def test_a_local_cluster_never_starts_more_workers_than_points(monkeypatch):
    # one point on a many-core machine started a worker process per core (8 workers: 21 s
    # for a point that takes 6 s with one)
    from pyaccel.sweep import cluster

    started = []

    def record(n):
        started.append(n)
        raise ConfigError("stop here")

    monkeypatch.setattr(cluster, "_local_cluster", record)
    monkeypatch.setattr(cluster.os, "cpu_count", lambda: 64)
    grid = {"axes": {"system": ["h100"], "model": ["tiny-llama"], "batch": [1, 2, 3]}}
    for workers in (None, 8, 2):
        with pytest.raises(ConfigError, match="stop here"):
            sweep(grid, workers=workers, cache=False)
    assert started == [3, 3, 2]
