"""A wafer pass's entries: the ops and hand-offs of one micro-batch's pass, where each runs (a
PE region) and its cost, and their sums per pipeline stage (cycles)."""

from __future__ import annotations

from dataclasses import dataclass

from ...place.kinds.wafer import wafer_of
from .tasks import OpCost

COMBINE = "expert_combine"  # the entry kind of a cross-wafer expert combine


@dataclass(frozen=True)
class Region:
    """A PE rectangle on one wafer."""

    wafer: int
    x0: int
    y0: int
    w: int
    h: int

    @classmethod
    def of(cls, slot) -> Region:
        """The region recorded in a placement slot (its region's ``rect`` and ``wafer``)."""
        x0, y0, w, h = slot.region.rect
        return cls(wafer_of(slot), x0, y0, w, h)


@dataclass
class Entry:
    """One op (or hand-off) of a pass: where it runs and its cost."""

    layer: object
    name: str
    kind: str
    unit: int
    stage: int
    cost: OpCost
    n_bytes: int = 0
    flops: int = 0
    region: Region | None = None


def add_entries(sums: tuple, entries) -> None:
    """Add entries' cycles to ``sums`` = (own, system I/O busy, its latency) per stage (see
    :meth:`~pyaccel.sim.wafer.engine.WaferPass.stage_cycles`)."""
    out, busy, lat = sums
    for e in entries:
        for resource, n in e.cost.parts:
            if e.kind == COMBINE:  # the layer waits for it: no other micro-batch's work
                out[e.stage] += n
            elif resource == "wafer_io":
                busy[e.stage] += n
            elif resource == "wafer_io_latency":
                lat[e.stage] += n
            else:
                out[e.stage] += n


def local_cycles(cost: OpCost) -> int:
    """An op's cycles on its own wafer (all but the system I/O crossing's)."""
    return sum(n for res, n in cost.parts if res not in ("wafer_io", "wafer_io_latency"))
