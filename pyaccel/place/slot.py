"""One layer's place in a placement (:class:`LayerSlot`) and the limits of a placement's shape,
shared by the placement type and its file format."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .kinds import Record


@dataclass(frozen=True)
class LayerSlot:
    """Where one layer lives: its units, its kind's ``region`` (a frozen record of
    :mod:`pyaccel.place.kinds`, e.g. a wafer's PE rectangle; None when not recorded) and
    per-unit resident bytes.

    ``need_weight_bytes``/``need_kv_bytes`` are the layer's own resident bytes as the graph counts
    them (once); per-unit bytes may add up to more where a part is replicated on every unit.
    ``expert_units``: with expert parallelism, the unit holding each routed expert of the layer
    (expert ``e`` on ``expert_units[e]``, one of ``units``); empty where the layer's experts
    are split like its other weights.
    """

    layer: int | str
    units: tuple[int, ...]
    weight_bytes: tuple[int, ...]
    kv_bytes: tuple[int, ...]
    buffer_bytes: tuple[int, ...]
    need_weight_bytes: int
    need_kv_bytes: int
    region: Record | None = None
    expert_units: tuple[int, ...] = ()


# far above any placer's largest layout (4,096 GPUs, 256 wafers, 8 chips per layer key)
MAX_UNITS = 65_536


def is_count(x: Any) -> bool:
    """A non-negative integer (a bool is not one)."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0
