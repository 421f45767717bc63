"""Emulated vs published decode speeds (bench/published.csv), side by side with the ratio.

Published speeds are checks, never inputs (SPEC §9). Run: ``pytest bench/bench_validation.py
--benchmark-only -s`` (the table prints at the end), or ``python bench/bench_validation.py``.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import pyaccel as pa
from pyaccel.results import run

ROWS = list(csv.DictReader((Path(__file__).parent / "published.csv").open()))
RESULTS: list[tuple] = []


def _int_or(text: str, default: int) -> int:
    try:
        return int(str(text).split()[0])
    except (ValueError, IndexError):
        return default


def emulate_row(row: dict) -> float:
    """tokens/s per user that pyaccel emulates for one published row (batch 1; the row's
    context where stated, else 1,024)."""
    work = pa.Workload(batch=1, context=_int_or(row["context"], 1024), tokens=16,
                       weights=row["weights"])  # fmt: skip
    return run(row["model"], row["system"], int(row["units"]), work).trace.tokens_per_s_per_user


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['system']}-{r['model']}" for r in ROWS])
def test_published_row(benchmark, row):
    try:
        emulated = benchmark.pedantic(emulate_row, args=(row,), rounds=1, iterations=1)
    except pa.PyaccelError as exc:
        RESULTS.append((row["system"], row["model"], float(row["tokens_per_s_per_user"]), None,
                        str(exc)))  # fmt: skip
        pytest.skip(str(exc))
    published = float(row["tokens_per_s_per_user"])
    benchmark.extra_info.update(published=published, emulated=emulated,
                                ratio=emulated / published)  # fmt: skip
    RESULTS.append((row["system"], row["model"], published, emulated, ""))


def teardown_module() -> None:
    print("\nsystem      model                published  emulated  ratio")
    for system, model, published, emulated, note in RESULTS:
        if emulated is None:
            print(f"{system:11s} {model:20s} {published:9.0f}  -         -      {note[:60]}")
        else:
            print(f"{system:11s} {model:20s} {published:9.0f}  {emulated:8.0f}  "
                  f"{emulated / published:5.2f}")  # fmt: skip


if __name__ == "__main__":
    for r in ROWS:
        try:
            e = emulate_row(r)
            print(
                f"{r['system']:11s} {r['model']:20s} published {r['tokens_per_s_per_user']:>6s}"
                f"  emulated {e:8.0f}  ratio {e / float(r['tokens_per_s_per_user']):.2f}"
            )
        except pa.PyaccelError as exc:
            print(f"{r['system']:11s} {r['model']:20s} not run: {exc}")
