"""Leaving a wafer over the system I/O: what a hand-off between wafers and a cross-wafer expert
combine both pay. Units: cycles of the wafer clock; bytes."""

from __future__ import annotations

from ...units import cycles
from .tasks import OpCost, multicast


def system_io_parts(c, p, out_hops: int, elems: int, n_bytes: int) -> list[tuple[str, int]]:
    """Cost parts of sending ``n_bytes`` off a wafer: each PE's ``elems`` wavelets hop
    ``out_hops`` PEs to the wafer edge (a line multicast), then the crossing's latency and the
    bytes' serialisation at the system I/O rate, each its own class (``wafer_io_latency``,
    ``wafer_io``)."""
    out = OpCost()
    multicast(out, c, 1, 0, elems, 0, 0, lead=max(1, out_hops))
    io_lat = cycles(p.system_io_latency_s, p.clock_hz)
    io = cycles(p.system_io_latency_s + n_bytes / p.system_io_bytes_per_s, p.clock_hz)
    return [*out.parts, ("wafer_io_latency", io_lat), ("wafer_io", io - io_lat)]
