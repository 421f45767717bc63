"""Speed of functional emulation (pytest-benchmark; run ``pytest bench/bench_gemv.py -s``).

1. Packed low-bit GEMV kernels: bytes read / time, against the machine's copy bandwidth
   measured in the same run (bytes read / time of a NumPy copy of a 64 MiB buffer). Bytes read
   are the tensor's packed values plus its block / row scales (``Packed.nbytes``). Two weight
   shapes: 4096 x 4096 (8-16 MiB packed: may sit in a large L3) and 65536 x 4096 (48-256 MiB,
   the 4096 x 4096 encoding repeated 16 times down the rows: streamed from memory). The C
   kernel may split rows over 2 threads (csrc/gemv.c); the copy is NumPy's, one thread.
   Targets (issue 6): int8/int4 >= 50 %, 4-bit float and hc1 >= 25 %, asserted on the
   streamed shape (issue 21; the cache-sized one is only reported). Each result's
   ``extra_info`` holds ``GB_per_s``, ``copy_GB_per_s`` and ``fraction_of_copy``; with ``-s``
   a table of every format's ratio is printed at the end.
2. Functional decode of tiny-llama through a wafer placement (wse3, the wafer placer's layout)
   and a 2-GPU placement (h100 TP 2) against the plain NumPy fp32 reference forward pass.
   Target (SPEC §10): >= 1/3 of the reference's speed; ``extra_info["speed_vs_reference"]``.

Nothing here asserts a time (the machine is shared); the numbers are reported."""

import dataclasses
import time

import numpy as np
import pytest

import pyaccel as pa
from pyaccel import kernels
from pyaccel.hw.io import load_system
from pyaccel.model.graph import build_graph
from pyaccel.numerics import execute
from pyaccel.numerics.codecs import encode
from pyaccel.numerics.gemv import operands
from pyaccel.numerics.reference import DecodeModel, Numerics
from pyaccel.numerics.weights import random_weights

ROWS, COLS = 4096, 4096
STREAMED = 16  # the streamed shape repeats the encoded ROWS x COLS tensor this many times
SHAPES = {"4096x4096": 1, f"{STREAMED * ROWS}x{COLS}": STREAMED}
CASES = [
    ("int8", None, 0.5),
    ("int4", None, 0.5),
    ("int4-g32", None, 0.5),
    ("mxfp4", None, 0.25),
    ("nvfp4", None, 0.25),
    ("hc1", 3, 0.25),
    ("hc1", 6, 0.25),
]


def _best_seconds(fn, repeats=7) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


@pytest.fixture(scope="module")
def copy_bytes_per_s() -> float:
    """Bytes read per second by a NumPy copy of 64 MiB (best of 11)."""
    src = np.ones(64 * 2**20, np.uint8)
    dst = np.empty_like(src)
    return src.nbytes / _best_seconds(lambda: np.copyto(dst, src), repeats=11)


@pytest.fixture(scope="module")
def matrix():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    return w, rng.standard_normal(COLS).astype(np.float32)


def _repeat_rows(p, times: int):
    """``p`` with its rows (values and scales) repeated ``times`` times: a larger tensor with
    the same statistics, without encoding it again."""
    if times == 1:
        return p
    tile = lambda a: None if a is None else np.tile(a, (times,) + (1,) * (a.ndim - 1))  # noqa: E731
    return dataclasses.replace(p, rows=p.rows * times, values=tile(p.values),
                               block_scales=tile(p.block_scales),
                               row_scales=tile(p.row_scales))  # fmt: skip


@pytest.fixture(scope="module")
def gemv_table(request, copy_bytes_per_s):
    """Collects (format, shape, GB/s) rows; prints the ratio table when the module ends."""
    rows = []
    yield rows
    if not rows:
        return
    copy = copy_bytes_per_s / 1e9
    lines = [f"packed GEMV vs NumPy copy ({copy:.2f} GB/s bytes read, same run)",
             f"{'format':<10}{'shape':>12}{'MiB read':>10}{'GB/s':>8}{'of copy':>9}"
             f"{'target':>8}  met"]  # fmt: skip
    for name, shape, mib, rate, target in rows:
        frac = rate / copy
        lines.append(f"{name:<10}{shape:>12}{mib:>10.1f}{rate:>8.2f}{100 * frac:>8.0f}%"
                     f"{100 * target:>7.0f}%  {'yes' if frac >= target else 'NO'}")  # fmt: skip
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print("\n" + "\n".join(lines))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fmt,bits,target", CASES)
def test_packed_gemv_bandwidth(
    benchmark, matrix, copy_bytes_per_s, gemv_table, fmt, bits, target, shape
):
    benchmark.group = f"gemv-packed {shape}"
    w, x = matrix
    p = _repeat_rows(encode(w, fmt, bits), SHAPES[shape])
    ops = operands(p)
    fn = kernels.get("gemv_packed")  # the fastest backend available (C, then Numba)
    fn(*ops, x)
    benchmark(fn, *ops, x)
    rate = p.nbytes / benchmark.stats.stats.min  # packed values + scales
    benchmark.extra_info.update(
        shape=shape,
        bytes_read=p.nbytes,
        GB_per_s=rate / 1e9,
        copy_GB_per_s=copy_bytes_per_s / 1e9,
        fraction_of_copy=rate / copy_bytes_per_s,
        target=target,
        target_met=rate / copy_bytes_per_s >= target,
    )
    gemv_table.append(
        (f"{fmt}-{bits}" if bits else fmt, shape, p.nbytes / 2**20, rate / 1e9, target)
    )
    print(f"\n{fmt}{bits or ''} {shape}: {rate / 1e9:.2f} GB/s = "
          f"{100 * rate / copy_bytes_per_s:.0f} % of copy {copy_bytes_per_s / 1e9:.2f} GB/s "
          f"(target {100 * target:.0f} %)")  # fmt: skip
    if SHAPES[shape] == STREAMED:  # the DRAM-sized shape: the targets hold (issue 21)
        assert rate / copy_bytes_per_s >= target, f"{fmt}{bits or ''} below its target"


STEPS = 16


def _decode(numerics, cfg):
    model = DecodeModel(cfg, numerics, max_len=STEPS + 1)
    for t in range(STEPS):
        model.step([t + 1])


@pytest.fixture(scope="module")
def tiny():
    cfg = pa.load_model("tiny-llama")
    weights = random_weights(cfg, 0)
    ref_s = _best_seconds(lambda: _decode(Numerics(weights), cfg))
    return cfg, weights, ref_s


def test_reference_decode(benchmark, tiny):
    benchmark.group = "functional-decode"
    cfg, weights, _ = tiny
    benchmark(_decode, Numerics(weights), cfg)


@pytest.mark.parametrize("system,units", [("wse3", "auto"), ("h100", 2)])
def test_functional_decode_through_placement(benchmark, tiny, system, units):
    benchmark.group = "functional-decode"
    cfg, weights, ref_s = tiny
    sysm = load_system(system, units)
    work = pa.Workload(context=8, tokens=STEPS, weights="bf16")
    graph = build_graph(cfg, work, native_format=sysm.spec.native_format)
    plc = pa.place(cfg, sysm, work, graph=graph)
    nx = execute.MachineNumerics(weights, graph, sysm, plc)
    _decode(nx, cfg)  # plans (quantised, partitioned weights) are built once per run
    benchmark(_decode, nx, cfg)
    ratio = ref_s / benchmark.stats.stats.min
    benchmark.extra_info.update(partition=nx.label, speed_vs_reference=ratio, target=1 / 3)
    print(f"\n{system} ({nx.label}): {ratio:.2f} x the reference's speed (target >= 0.33)")
