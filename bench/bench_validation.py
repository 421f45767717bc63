"""Emulated vs published decode speeds (bench/published.csv), side by side with the ratio, by
``pyaccel validate`` (:mod:`pyaccel.validate`). Published speeds are checks, never inputs
(SPEC §9). Run: ``pytest bench/bench_validation.py --benchmark-only -s`` (the table prints at
the end), or ``pyaccel validate --published bench/published.csv``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pyaccel.validate import read_table, validate_row

TABLE = Path(__file__).parent / "published.csv"
ROWS = read_table(TABLE.read_text(encoding="utf-8"), str(TABLE))
RESULTS: list = []


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.system}-{r.model}" for r in ROWS])
def test_published_row(benchmark, row):
    out = benchmark.pedantic(validate_row, args=(row,), rounds=1, iterations=1)
    RESULTS.append(out)
    if out.error is not None:
        pytest.skip(out.error)
    benchmark.extra_info.update(published=out.published_tok_s, emulated=out.emulated_tok_s,
                                ratio=out.ratio, bottleneck=out.bottleneck)  # fmt: skip


def teardown_module() -> None:
    print("\nsystem      model                published  emulated  ratio  bottleneck")
    for r in RESULTS:
        if r.error is not None:
            print(f"{r.system:11s} {r.model:20s} {r.published_tok_s:9.0f}  -  {r.error[:60]}")
        else:
            print(f"{r.system:11s} {r.model:20s} {r.published_tok_s:9.0f}  "
                  f"{r.emulated_tok_s:8.0f}  {r.ratio:5.2f}  {r.bottleneck}")  # fmt: skip
