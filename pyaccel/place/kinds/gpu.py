"""What a GPU placement records: each layer's pipeline stage and tensor-parallel ranks, the
layout's TP x PP, and the one check below a GPU (a stage index in range; capacity is HBM per GPU
with the runtime's reservation, which the placement's unit totals check)."""

from __future__ import annotations

from dataclasses import dataclass

from . import Record, check_stages, ints, is_int, jfield


@dataclass(frozen=True)
class GpuRegion(Record):
    """One layer's place on GPUs: its pipeline ``stage`` and its ``tp_ranks`` inside it."""

    stage: int | None = jfield(is_int, "a pipeline stage (integer)")
    tp_ranks: tuple[int, ...] | None = jfield(ints(), "a list of ranks")


@dataclass(frozen=True)
class GpuLayout(Record):
    """A GPU placement's ``tp`` ranks (inside one node) x ``pp`` stages, and the ``stages``
    holding layers; with expert parallelism, ``ep`` GPUs a stage run attention data-parallel
    (``tp`` 1) and hold the routed experts whole (:mod:`pyaccel.place.gpu_ep`)."""

    tp: int | None = jfield(is_int, "a GPU count (integer)")
    pp: int | None = jfield(is_int, "a stage count (integer)")
    stages: int | None = jfield(is_int, "a stage count (integer)")
    ep: int | None = jfield(is_int, "a GPU count (integer)")

    @property
    def width(self) -> int:
        """GPUs a stage: its EP ranks, else its TP ranks."""
        return self.ep or self.tp or 1


REGION, LAYOUT = GpuRegion, GpuLayout


def capacity(system, graph=None) -> tuple[dict, dict, dict]:
    """(capacity, level of each category, runtime reserve) of one GPU: all in ``hbm``, with the
    runtime's reservation."""
    return unit_capacity(system.spec)


def unit_capacity(spec) -> tuple[dict, dict, dict]:
    """:func:`capacity` of a GPU of ``spec``."""
    p = spec.params
    return (
        {"hbm": int(p.hbm_capacity_bytes)},
        dict.fromkeys(("weights", "kv", "buffers"), "hbm"),
        {"hbm": int(p.runtime_reserved_bytes)},
    )


def check(plc, graph, system) -> None:
    """Every layer's pipeline stage is recorded and in range."""
    check_stages(plc, required=True)
