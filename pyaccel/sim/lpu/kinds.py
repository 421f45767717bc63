"""The instruction kinds of a compiled TSP program (:mod:`pyaccel.sim.lpu.program`), the resource
class a span of each is drawn in, and how many stream transits a chip-to-chip transfer crosses."""

from __future__ import annotations

import numpy as np

TRANSITS_PER_C2C = 2  # to the C2C ports at the chip edge, and from them on the receiving side

CLASS_OF_KIND = {"install": "lpu_mem", "mxm": "lpu_mxm", "vxm": "lpu_vxm", "sxm": "lpu_sxm",
                 "memio": "lpu_mem", "c2c": "c2c_link", "delay": "fixed_latency"}  # fmt: skip


# The instruction kinds a span is drawn for, in the order an op's spans list them.
_EVENT_KINDS = ("install", "mxm", "vxm", "sxm", "memio", "c2c")
_KIND_CODE = {k: i for i, k in enumerate(_EVENT_KINDS)}
_GEMV_BLOCK = ("install", "mxm")  # the instructions of one weight block of a GEMV


def kind_codes(kinds) -> np.ndarray:
    """Instruction kinds as their index in ``_EVENT_KINDS`` (any other kind: its length)."""
    return np.array([_KIND_CODE.get(k, len(_EVENT_KINDS)) for k in kinds], dtype=np.int64)
