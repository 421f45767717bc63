"""An ASIC step's events: every user's spans on the stages' units, as columns."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np

from ...trace import SpanColumns, layer_key


def step_spans(stages, starts) -> SpanColumns:
    """Every user's spans of a step (``starts[u, s]``: stage ``s``'s start for user ``u``,
    -1 where the row skips the stage): each stage busy on each of its units from its start,
    then its latency. One user's spans are laid out once, stage fields gathered per stage and
    spread over its units as columns, then moved to each user's starts."""
    one, stage_of, offset = _user_spans(stages)
    parts, n_users = [], len(starts)
    for u in range(n_users):
        names = one.op
        if n_users > 1:  # each user's ops are told apart by a tag
            names = np.array([f"{n}[u{u}]" for n in one.op.tolist()], dtype=object)
        at = np.asarray(starts[u], dtype=np.int64)[stage_of]
        part = replace(one, op=names, start=at + offset)
        if (at < 0).any():  # a prompt row that is not sampled leaves before the LM head
            part = _taken(part, at >= 0)
        parts.append(part)
    return SpanColumns.concat(parts)


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
