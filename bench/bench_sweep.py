"""Sweep throughput on Dask (issue 22): a 1,008-point grid (7 systems x 4 models x 6 batches x 6
contexts, failures included) with 1 and with 2 local worker processes in the same run, points
per second of each (goal: 2 workers >= 1.6x on this 2-core machine), the two tables identical;
then a ``pyaccel sweep`` process interrupted (Ctrl-C) half-way and rerun on the whole grid,
which runs only the rest.

Run: ``pytest bench/bench_sweep.py -s -p no:cacheprovider``. ``PYACCEL_BENCH_SWEEP_POINTS=N``
keeps the first N points of the grid (a quicker look); the goal is asserted on the full grid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pyaccel.sweep import points, sweep

GRID = {
    "axes": {
        "system": ["h100", "h200", "b200", "wse2", "wse3", "groq-tsp", "taalas-hc1"],
        "model": ["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "qwen3-32b"],
        "batch": [1, 2, 4, 8, 16, 32],
        "context": [512, 1024, 2048, 4096, 8192, 16384],
        "tokens": [8],
    }
}
GOAL = 1.6


def _grid() -> dict:
    keep = int(os.environ.get("PYACCEL_BENCH_SWEEP_POINTS", "0"))
    if not keep:
        return GRID
    return {"point": points(GRID)[:keep]}


def _timed(grid, **kw) -> tuple[float, object]:
    t0 = time.perf_counter()
    table = sweep(grid, **kw)
    return time.perf_counter() - t0, table


def test_points_per_second_with_one_and_two_workers(tmp_path):
    grid = _grid()
    n = len(points(grid))
    one_s, one = _timed(grid, workers=1, cache=False)
    two_s, two = _timed(grid, workers=2, cache=False)
    speedup = one_s / two_s
    failed = int(one["error"].notna().sum())
    print(f"\nsweep of {n} points ({failed} fail): 1 worker {n / one_s:.2f} points/s, "
          f"2 workers {n / two_s:.2f} points/s, x{speedup:.2f} (goal >= x{GOAL})")  # fmt: skip
    assert two.equals(one), "the table depends on the number of workers"
    if grid is GRID:
        assert speedup >= GOAL


def _as_toml(every: list[dict]) -> str:
    """The points as a grid file of ``[[point]]`` tables (strings and numbers only: a JSON
    scalar is a TOML one)."""
    return "".join(
        "[[point]]\n" + "".join(f'"{k}" = {json.dumps(v)}\n' for k, v in p.items()) for p in every
    )


def _cached_points(cache) -> int:
    return sum(1 for _ in cache.rglob("*.json"))


def test_a_stopped_sweep_reruns_only_the_rest(tmp_path):
    """A ``pyaccel sweep`` process is interrupted (Ctrl-C) once half the points are cached;
    the rerun of the whole grid runs only the points that were not, and gives the table of a
    sweep that never stopped."""
    grid = _grid()
    every = points(grid)
    path = tmp_path / "grid.toml"
    path.write_text(_as_toml(every), encoding="utf-8")
    cache = tmp_path / "cache"
    cmd = [sys.executable, "-m", "pyaccel.cli", "sweep", str(path), "--cache", str(cache),
           "--workers", "2", "--out", str(tmp_path / "stopped.parquet")]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while _cached_points(cache) < len(every) // 2 and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    kept = _cached_points(cache)
    seen = []
    rest_s, table = _timed(grid, workers=2, cache=cache, progress=lambda *a: seen.append(a))
    print(
        f"\nstopped at {kept} of {len(every)} points cached (exit code {proc.returncode}); "
        f"the rerun took {seen[0][0]} from the cache and ran {seen[0][2]} in {rest_s:.1f} s"
    )
    assert not (tmp_path / "stopped.parquet").exists(), "a stopped sweep wrote its table"
    assert len(every) // 2 <= kept < len(every)
    assert seen[0][0] == kept and seen[0][2] == len(every) - kept
    fresh = sweep(grid, workers=2, cache=False)
    assert table.equals(fresh)


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-s", "-p", "no:cacheprovider"])
