"""An ASIC step's events: every user's spans on the stages' units, as columns."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, NamedTuple

import numpy as np

from ...trace import SpanColumns, layer_key


class RowStages(NamedTuple):
    """Stages whose work differs from row to row of a step (attention: each row reads the K/V
    of its own context): stage ``stages[a]`` is busy ``occ[u, a]`` cycles for row ``u``,
    moving ``n_bytes[u, a]`` bytes and ``flops[u, a]`` FLOPs, bound by ``resource[u, a]``."""

    stages: Any
    occ: Any
    n_bytes: Any
    flops: Any
    resource: Any

    @classmethod
    def of(cls, stages: list, costs: list) -> RowStages:
        """From each stage's ``(occ, n_bytes, flops, kv_bound)`` arrays over the rows
        (:meth:`~pyaccel.sim.asic.engine.AsicCost.attention_over`)."""
        if not stages:
            return cls(
                np.zeros(0, np.int64), *(np.zeros((0, 0), np.int64) for _ in cls._fields[1:])
            )
        occ, n_bytes, flops, kv = (np.column_stack(part) for part in zip(*costs, strict=True))
        resource = np.where(kv, "kv_sram", "mac_lanes").astype(object)
        return cls(np.asarray(stages, dtype=np.int64), occ, n_bytes, flops, resource)


def step_spans(stages, starts, per_row: RowStages | None = None) -> SpanColumns:
    """Every user's spans of a step (``starts[u, s]``: stage ``s``'s start for user ``u``,
    -1 where the row skips the stage): each stage busy on each of its units from its start,
    then its latency; the stages of ``per_row`` with each row's own cycles, bytes, FLOPs and
    resource. One user's spans are laid out once, stage fields gathered per stage and spread
    over its units as columns, then moved to each user's starts."""
    one, stage_of, offset = _user_spans(stages)
    col = np.full(len(stages), -1, dtype=np.int64)
    if per_row is not None:
        col[per_row.stages] = np.arange(len(per_row.stages))
    col = col[stage_of]  # each span's per-row column, -1: the same for every row
    parts, n_users = [], len(starts)
    for u in range(n_users):
        names = one.op
        if n_users > 1:  # each user's ops are told apart by a tag
            names = np.array([f"{n}[u{u}]" for n in one.op.tolist()], dtype=object)
        at = np.asarray(starts[u], dtype=np.int64)[stage_of]
        part = replace(one, op=names, start=at + offset)
        if per_row is not None and len(per_row.stages):
            part = _own_row(part, at, col, per_row, u)
        if (at < 0).any():  # a prompt row that is not sampled leaves before the LM head
            part = _taken(part, at >= 0)
        parts.append(part)
    return SpanColumns.concat(parts)


def _own_row(part: SpanColumns, at, col, per_row: RowStages, u: int) -> SpanColumns:
    """``part`` (row ``u``'s spans) with the stages of ``per_row`` at row ``u``'s values: their
    busy spans' duration, bytes, FLOPs and resource, their latency spans' start after it."""
    is_lat = part.resource == "fixed_latency"
    busy, lat = (col >= 0) & ~is_lat, (col >= 0) & is_lat
    occ = per_row.occ[u]
    duration, start = part.duration.copy(), part.start.copy()
    n_bytes, flops, resource = part.n_bytes.copy(), part.flops.copy(), part.resource.copy()
    duration[busy] = occ[col[busy]]
    start[lat] = at[lat] + occ[col[lat]]
    n_bytes[busy] = per_row.n_bytes[u][col[busy]]
    flops[busy] = per_row.flops[u][col[busy]]
    resource[busy] = per_row.resource[u][col[busy]]
    return replace(part, duration=duration, start=start, n_bytes=n_bytes, flops=flops,
                   resource=resource)  # fmt: skip


def _taken(cols: SpanColumns, keep: np.ndarray) -> SpanColumns:
    """The spans of ``cols`` where ``keep`` is true."""
    return SpanColumns(*(getattr(cols, f.name)[keep] for f in fields(cols)))


def _user_spans(stages) -> tuple[SpanColumns, np.ndarray, np.ndarray]:
    """One user's spans with starts left at 0, each span's stage and its offset from the
    stage's start: per stage and unit in order, the busy span, then the latency span (if
    any) from the end of the busy cycles."""
    occ, lat = (np.array([getattr(st, f) for st in stages], dtype=np.int64) for f in ("occ", "lat"))
    n_units = np.array([len(st.units) for st in stages], dtype=np.int64)
    two = 1 + (lat > 0)  # spans a unit: busy, and latency when there is one
    per = n_units * two
    stage_of = np.repeat(np.arange(len(stages)), per)
    within = np.arange(int(per.sum())) - np.repeat(np.cumsum(per) - per, per)
    is_lat = within % two[stage_of] == 1
    units = np.fromiter((u for st in stages for u in st.units), dtype=np.int64,
                        count=int(n_units.sum()))  # fmt: skip
    unit = units[np.repeat(np.cumsum(n_units) - n_units, per) + within // two[stage_of]]

    def per_stage(values) -> np.ndarray:
        return np.array(values, dtype=object)[stage_of]

    name = per_stage([st.name for st in stages])
    lat_name = per_stage([f"{st.name}.latency" if st.lat else "" for st in stages])
    n_bytes, flops = (np.array([getattr(st, f) for st in stages], dtype=np.int64)[stage_of]
                      for f in ("n_bytes", "flops"))  # fmt: skip
    cols = SpanColumns(
        layer=per_stage([layer_key(st.layer) for st in stages]),
        op=np.where(is_lat, lat_name, name),
        kind=per_stage([st.kind for st in stages]),
        unit=unit,
        resource=np.where(is_lat, "fixed_latency", per_stage([st.resource for st in stages])),
        start=np.zeros(len(stage_of), dtype=np.int64),
        duration=np.where(is_lat, lat[stage_of], occ[stage_of]),
        n_bytes=np.where(is_lat, 0, n_bytes),
        flops=np.where(is_lat, 0, flops),
    )
    return cols, stage_of, np.where(is_lat, occ[stage_of], 0)
