"""Unit constants and conversions (SPEC §6: GB = 1e9 B, GiB = 2**30 B; times in integer cycles)."""

import math
import numbers

from .errors import ConfigError, option

KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12
KiB = 2**10
MiB = 2**20
GiB = 2**30
BITS_PER_BYTE = 8
FLOPS_PER_MAC = 2  # a multiply-accumulate counts as two floating-point operations
UM2_PER_MM2 = 10**6  # square micrometres in a square millimetre

# Cycle counts must stay far inside int64 (timelines add many of them).
MAX_CYCLES = 2**62


class CycleRangeError(ConfigError):
    """A time beyond :data:`MAX_CYCLES` cycles (parameters set far outside physical ranges)."""


def as_int(x) -> int | None:
    """``x`` as a Python int when it is an integer (a Python or NumPy one; a bool is not one),
    else None: what the API's counts (units, batch, context, ...) accept."""
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        return None
    return int(x)


def ceil_div(a, b) -> int:
    """``ceil(a / b)`` in integers; 0 when ``b`` is 0."""
    return -(-int(a) // int(b)) if b else 0


def largest_share(total: int, parts: int, split: bool = True) -> int:
    """The largest part of ``total`` split over ``parts`` as evenly as whole units allow (parts
    differ by at most one); ``total`` itself when not ``split`` (every part holds it all)."""
    return ceil_div(total, parts) if split and parts > 1 else total


def cycles(seconds: float, clock_hz: float) -> int:
    """Whole cycles of a ``clock_hz`` clock covering ``seconds`` (rounded up, never negative)."""
    if seconds <= 0:
        return 0
    n = seconds * clock_hz
    if not n < MAX_CYCLES:  # also inf and NaN
        raise CycleRangeError(
            f"a time of {seconds:.4g} s is {n:.4g} cycles at clock_hz={clock_hz:.4g}, beyond the "
            "limit of 2**62 cycles (int64 timelines); check the "
            f"{option('overrides', 'KEY=VALUE')} values"
        )
    # Round away float noise first so that an exact cycle count is not bumped by one.
    return int(math.ceil(round(n, 6)))


# Below this fraction of a cycle above a whole number, ``round(n, 6)`` may pull ``n`` down to it
# (NOT_TIMING: where the array version hands an element to the scalar rule).
_NEAR_WHOLE = 2e-6


def cycles_over(seconds, clock_hz: float):
    """:func:`cycles` of every element of a float array (an int64 array, bit for bit the same):
    ``ceil(n)`` wherever ``round(n, 6)`` cannot change it, the scalar rule elsewhere."""
    import numpy as np

    s = np.asarray(seconds, dtype=np.float64)
    n, busy = s * clock_hz, s > 0
    out = np.where(busy, np.ceil(np.where(busy & (n < MAX_CYCLES), n, 0)), 0).astype(np.int64)
    odd = busy & ~(n < MAX_CYCLES) | busy & (n - np.floor(n) < _NEAR_WHOLE)
    for i in np.flatnonzero(odd):  # the scalar rule: its rounding, or its range error
        out.flat[i] = cycles(float(s.flat[i]), clock_hz)
    return out


def transfer_cycles(n_bytes: float, bytes_per_s: float, clock_hz: float) -> int:
    """Cycles to move ``n_bytes`` at ``bytes_per_s`` measured on a ``clock_hz`` clock."""
    if n_bytes <= 0:
        return 0
    return cycles(n_bytes / bytes_per_s, clock_hz)


def fmt_bytes(n_bytes: float) -> str:
    """Human-readable decimal byte count, e.g. ``15.14 GB``."""
    for unit, size in (("TB", TB), ("GB", GB), ("MB", MB), ("KB", KB)):
        if abs(n_bytes) >= size:
            return f"{n_bytes / size:.2f} {unit}"
    return f"{int(n_bytes)} B"


def fmt_seconds(seconds: float) -> str:
    """Human-readable duration, e.g. ``4.52 ms``."""
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"
