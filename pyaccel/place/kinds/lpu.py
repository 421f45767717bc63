"""What an LPU placement records (Groq TSP chains): each layer's pipeline stage, its chips and
the MEM slices its shard occupies on each of them, the layout's TP x PP, and the checks below one
chip.

Capacity is one level, ``sram`` per chip, holding weights, KV cache and activation buffers; no
runtime reservation (no caches, no OS: the compiler owns every byte). Finer check: each layer's
MEM slice range on each chip holds its bytes there, packed in slice order after the layers
before it, as the placer lays them out; a recorded stage is a stage index in range.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import PlacementError
from . import Record, check_stages, ints, is_int, jfield


@dataclass(frozen=True)
class LpuRegion(Record):
    """One layer's place on an LPU chain: pipeline ``stage``, its ``node``, the ``tp`` chips of
    the stage (``chips``: first and last), and the MEM slices ``(first, last)`` its shard takes
    on each of them."""

    stage: int | None = jfield(is_int, "a pipeline stage (integer)")
    node: int | None = jfield(is_int, "a node index (integer)")
    tp: int | None = jfield(is_int, "a chip count (integer)")
    chips: tuple[int, int] | None = jfield(ints(2), "[first, last] chip")
    mem_slices: tuple[int, int] | None = jfield(ints(2), "[first, last] MEM slice")


TIME_SPLIT = "time"
"""``LpuLayout.split`` of stages balanced by each layer key's cycles, not its bytes."""


@dataclass(frozen=True)
class LpuLayout(Record):
    """An LPU placement's ``tp`` chips per stage (inside one node) x ``pp`` stages, and the
    ``idle_chips`` left over; ``ep``: the routed experts are whole on the stage's ``tp`` chips
    (expert parallel) instead of split over them; ``split``: ``"time"`` where the stages
    balance each layer's cycles on a stage of its own (absent: its resident bytes)."""

    tp: int | None = jfield(is_int, "a chip count (integer)")
    pp: int | None = jfield(is_int, "a stage count (integer)")
    idle_chips: int | None = jfield(is_int, "a chip count (integer)")
    ep: int | None = jfield(is_int, "a chip count (integer)")
    split: str | None = jfield(lambda v: v == TIME_SPLIT, f"{TIME_SPLIT!r} or absent")


REGION, LAYOUT = LpuRegion, LpuLayout


def capacity(system, graph=None) -> tuple[dict, dict, dict]:
    """(capacity, level of each category, runtime reserve) of one chip: all in ``sram``, no
    reserve."""
    return unit_capacity(system.spec)


def unit_capacity(spec) -> tuple[dict, dict, dict]:
    """:func:`capacity` of a chip of ``spec``."""
    return (
        {"sram": int(spec.params.sram_bytes)},
        dict.fromkeys(("weights", "kv", "buffers"), "sram"),
        {"sram": 0},
    )


def stage_of(slot) -> int:
    """A slot's pipeline stage (0 when not recorded)."""
    stage = slot.region.stage if slot.region is not None else None
    return 0 if stage is None else stage


def check(plc, graph, system) -> None:
    """Stages in range, then each layer's MEM slices on each chip (see module)."""
    check_stages(plc, required=False)
    p = system.spec.params
    n_slices = int(p.mem_slices)
    per = int(p.sram_bytes) // n_slices
    chips: dict[int, list] = {}
    for s in plc.layers:
        rng = _slices(s, n_slices)
        if rng is None:
            continue
        for i, chip in enumerate(s.units):
            n = s.weight_bytes[i] + s.kv_bytes[i] + s.buffer_bytes[i]
            chips.setdefault(chip, []).append((rng, n, s.layer))
    for chip, items in sorted(chips.items()):
        end = 0
        for (first, last), n, key in sorted(items, key=lambda t: t[0][0]):
            start = max(end, first * per)
            end = start + n
            if end > (last + 1) * per:
                after = " after the layers before it" if start > first * per else ""
                raise PlacementError(
                    f"{plc.system} chip {chip} MEM slices {first}..{last} ({last - first + 1} x "
                    f"{per:,} B) cannot hold layer {key!r}: its {n:,} B (weights, KV cache, "
                    f"buffers){after} run from byte {start:,} into slice {(end - 1) // per}, "
                    f"{end - (last + 1) * per:,} B past the end of slice {last}"
                )


def _slices(slot, n_slices: int) -> tuple[int, int] | None:
    rng = slot.region.mem_slices if slot.region is not None else None
    if rng is None:
        return None
    first, last = rng
    if 0 <= first <= last < n_slices:
        return first, last
    raise PlacementError(
        f"layer {slot.layer!r}: mem_slices {list(rng)!r} must be [first, last] with "
        f"0 <= first <= last <= {n_slices - 1}"
    )
