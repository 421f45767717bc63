"""Unit constants and conversions (SPEC §6: GB = 1e9 B, GiB = 2**30 B; times in integer cycles)."""

import math

KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12
KiB = 2**10
MiB = 2**20
GiB = 2**30


def cycles(seconds: float, clock_hz: float) -> int:
    """Whole cycles of a ``clock_hz`` clock covering ``seconds`` (rounded up, never negative)."""
    if seconds <= 0:
        return 0
    # Round away float noise first so that an exact cycle count is not bumped by one.
    return int(math.ceil(round(seconds * clock_hz, 6)))


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
