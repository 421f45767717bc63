"""Speed of the bf16 / E4M3 / E2M1 conversions: the ml_dtypes paths against their NumPy
reference twins (pytest-benchmark; run ``pytest bench/bench_codecs.py -s``).

The two are bit-identical (tests/test_codecs_ml_dtypes.py); this reports how much faster the
ml_dtypes path is on 4M fp32 values (``extra_info["speedup_vs_reference"]``). Nothing here
asserts a time (the machine is shared); the numbers are reported."""

import time

import numpy as np
import pytest

from pyaccel.numerics import codecs as C

N = 1 << 22
CASES = {
    "bf16_bits": (C.bf16_bits, C.bf16_bits_reference, 1.0),
    "e4m3_encode": (C.e4m3_encode, C.e4m3_encode_reference, 100.0),
    "e2m1_encode": (C.e2m1_encode, C.e2m1_encode_reference, 3.0),
}


def _seconds(fn, x, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(x)
        best = min(best, time.perf_counter() - t0)
    return best


@pytest.mark.parametrize("name", list(CASES))
def test_codec_speed(benchmark, name):
    fast, reference, scale = CASES[name]
    x = (np.random.default_rng(0).standard_normal(N) * scale).astype(np.float32)
    benchmark.pedantic(fast, args=(x,), rounds=3, iterations=1)
    ref_s, fast_s = _seconds(reference, x), _seconds(fast, x)
    benchmark.extra_info["speedup_vs_reference"] = ref_s / fast_s
    print(f"\n{name}: ml_dtypes {fast_s * 1e3:.1f} ms, NumPy reference {ref_s * 1e3:.1f} ms "
          f"({ref_s / fast_s:.1f}x)")  # fmt: skip
