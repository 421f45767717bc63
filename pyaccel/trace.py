"""Trace: the columnar events of an emulated decode run plus per-step times (SPEC §2).

Events are per op per unit and resource class (never per PE or wavelet). Times are integer cycles
of ``clock_hz``; reports convert to seconds. Full events are kept for the steps in
``event_steps`` (by default the first and the last); every step's time is kept in ``step_cycles``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from .io_util import dumps_strict, write_atomic

EVENT_FIELDS = (
    "step",
    "layer",
    "op",
    "kind",
    "unit",
    "resource",
    "start",
    "duration",
    "bytes",
    "flops",
)
_TEXT_FIELDS = ("layer", "op", "kind", "resource")
OP_BOUND_FIELDS = ("step", "op", "resource", "seconds")
"""Columns of :attr:`Trace.op_bounds`."""


class LazyArrays(Mapping):
    """Heatmap arrays made on first use: ``make()`` returns a dict with exactly ``names``.
    A wafer's per-PE maps are tens of MB that only plots read, so a run that never draws
    them never builds them. Pickles (and compares) as the plain dict it stands for."""

    def __init__(self, names: tuple[str, ...], make: Callable[[], dict]):
        self._names, self._make, self._made = tuple(names), make, None

    def _arrays(self) -> dict:
        if self._made is None:
            self._made = self._make()
            self._make = None  # what it rests on can go
            if tuple(self._made) != self._names:
                raise RuntimeError(f"heatmaps {tuple(self._made)} made, {self._names} promised")
        return self._made

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        return self._arrays()[name]

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name) -> bool:
        return name in self._names

    def __reduce__(self):
        return dict, (dict(self._arrays()),)

    def __repr__(self) -> str:
        return f"LazyArrays({', '.join(self._names)}{'' if self._made else ', not made yet'})"


def layer_key(layer: Any) -> int | str:
    """A layer key as the placement and graph have it: an int for a decoder layer, a string
    (``"embed"``, ``"head"``) otherwise."""
    if isinstance(layer, str):
        return layer
    return int(layer)


@dataclass(frozen=True)
class SpanColumns:
    """Many spans of one pass as columns: the fields of a span (layer, op, kind, unit,
    resource, start, duration, n_bytes, flops; see :class:`~pyaccel.sim.contract.Span`), each
    an array of one length: names as object arrays (layer keys as :func:`layer_key` gives
    them), numbers int64, starts in cycles from the pass's start. What a pass with tens of
    thousands of spans hands the event log without a Python object per span; iterating yields
    each span as a tuple."""

    layer: np.ndarray
    op: np.ndarray
    kind: np.ndarray
    unit: np.ndarray
    resource: np.ndarray
    start: np.ndarray
    duration: np.ndarray
    n_bytes: np.ndarray
    flops: np.ndarray

    def __len__(self) -> int:
        return len(self.start)

    def __iter__(self):
        return zip(*(getattr(self, f.name).tolist() for f in fields(self)), strict=True)

    @classmethod
    def of_rows(cls, rows) -> SpanColumns:
        """The columns of span tuples (a few, e.g. a stage hop's)."""
        rows = list(rows)
        cols = list(zip(*rows, strict=True)) if rows else [()] * len(fields(cls))
        return cls(*(
            np.array([layer_key(x) for x in c] if f.name == "layer" else c,
                     dtype=object if f.name in _TEXT_FIELDS else np.int64)
            for f, c in zip(fields(cls), cols, strict=True)
        ))  # fmt: skip

    @classmethod
    def concat(cls, parts) -> SpanColumns:
        """The spans of ``parts`` one after another."""
        parts = list(parts) or [cls.of_rows([])]
        return cls(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)))


class EventLog:
    """Appends events during emulation; :meth:`columns` freezes them into arrays."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self._blocks: list[tuple[int, dict]] = []  # (rows before it, its columns), in order

    def add(
        self,
        step: int,
        layer: Any,
        op: str,
        kind: str,
        unit: int,
        resource: str,
        start: int,
        duration: int,
        n_bytes: int = 0,
        flops: int = 0,
    ) -> int:
        """Record one event: ``op`` its name, ``kind`` the graph op kind (or the collective's),
        times in cycles. Returns its end cycle."""
        self.rows.append(
            (
                step,
                layer_key(layer),
                op,
                kind,
                unit,
                resource,
                int(start),
                int(duration),
                int(n_bytes),
                int(flops),
            )
        )
        return int(start) + int(duration)

    def add_spans(self, step: int, t0: int, spans) -> None:
        """Record many events of one step at once: ``spans`` are (layer, op, kind, unit,
        resource, start, duration, bytes, flops) tuples, or :class:`SpanColumns`, whose starts
        count from ``t0``."""
        if isinstance(spans, SpanColumns):
            n = len(spans)
            block = {
                "step": np.full(n, step, dtype=np.int64), "layer": spans.layer, "op": spans.op,
                "kind": spans.kind, "unit": spans.unit, "resource": spans.resource,
                "start": spans.start + int(t0), "duration": spans.duration,
                "bytes": spans.n_bytes, "flops": spans.flops,
            }  # fmt: skip
            self._blocks.append((len(self.rows), block))
            return
        self.rows.extend(
            (step, layer_key(layer), op, kind, unit, resource, int(t0 + start), int(duration),
             int(n_bytes), int(flops))
            for layer, op, kind, unit, resource, start, duration, n_bytes, flops in spans
        )  # fmt: skip

    def columns(self) -> dict[str, np.ndarray]:
        """Events as named arrays (int64 for numbers, object for names), in the order they
        were added."""
        parts, done = [], 0
        for at, block in self._blocks:
            parts += [_row_columns(self.rows[done:at]), block]
            done = at
        parts.append(_row_columns(self.rows[done:]))
        if len(parts) == 1:
            return parts[0]
        return {name: np.concatenate([p[name] for p in parts]) for name in EVENT_FIELDS}


def _row_columns(rows: list[tuple]) -> dict[str, np.ndarray]:
    """Event tuples as named arrays (int64 for numbers, object for names)."""
    cols = list(zip(*rows, strict=True)) if rows else [()] * len(EVENT_FIELDS)
    out = {}
    for name, values in zip(EVENT_FIELDS, cols, strict=True):
        dtype = object if name in _TEXT_FIELDS else np.int64
        out[name] = np.array(values, dtype=dtype)
    return out


@dataclass
class Trace:
    """Result of :func:`pyaccel.emulate`: events, per-step cycles and what the run rests on.

    ``step_cycles[i]`` is the time between two consecutive tokens of one sequence at step ``i``
    (context ``context + i``); ``lower_bound_cycles[i]`` its lower bound. ``tokens_per_step`` is
    how many tokens one step yields across the batch. ``arrays`` holds per-PE / per-link detail
    (heatmaps) that would be too large as events; ``functional`` the numerics metrics of a
    ``functional=True`` run. ``op_bounds`` holds each op's lower bound (s, at peak rates, columns
    :data:`OP_BOUND_FIELDS`) in the first recorded step for the sequences one pass carries (a
    micro-batch when the batch is split over pipeline stages), which reports set beside the
    events. All of these are plain data; ``inputs`` (model, system, placement, workload) is
    kept only to re-emulate the run (what-if, plots) and no report reads it.
    """

    system: str
    kind: str
    model: str
    units: int
    clock_hz: float
    power_w: float
    workload: Any
    events: dict[str, np.ndarray]
    step_cycles: np.ndarray
    lower_bound_cycles: np.ndarray
    step_context: np.ndarray
    tokens_per_step: int
    assumptions: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    resource_classes: tuple[str, ...] = ()
    meta: dict = field(default_factory=dict)
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False)
    functional: dict = field(default_factory=dict)
    op_bounds: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    inputs: Any = field(default=None, repr=False)

    @property
    def n_events(self) -> int:
        """Number of recorded events."""
        return len(self.events["start"])

    @property
    def step_time_s(self) -> float:
        """Mean time between consecutive tokens of one sequence over the run (s)."""
        return float(self.step_cycles.mean()) / self.clock_hz

    @property
    def lower_bound_step_time_s(self) -> float:
        """Mean lower bound of the step time over the run (s)."""
        return float(self.lower_bound_cycles.mean()) / self.clock_hz

    @property
    def tokens_per_s_per_user(self) -> float:
        """Tokens one sequence receives per second (tokens/s), averaged over the run."""
        return 1.0 / self.step_time_s

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second summed over the batch (tokens/s)."""
        return self.tokens_per_step / self.step_time_s

    @property
    def joules_per_token(self) -> float:
        """units x power x step time / tokens produced in that step (J)."""
        return self.units * self.power_w * self.step_time_s / self.tokens_per_step

    def to_dataframe(self):
        """Events as a pandas DataFrame, one row per event: ``start`` and ``duration`` in
        cycles of ``clock_hz`` (``start`` from the run's first step), ``bytes`` (B) and
        ``flops`` the event moves or computes, ``unit`` the unit's index; ``start_s`` and
        ``duration_s`` the same times in seconds. ``layer`` holds the placement's keys (ints,
        and ``"embed"``/``"head"``), so ``df[df.layer == 5]`` works; Parquet wants one type
        per column: ``df.astype({"layer": str}).to_parquet(...)``."""
        import pandas as pd

        df = pd.DataFrame(self.events)
        df["start_s"] = df["start"] / self.clock_hz
        df["duration_s"] = df["duration"] / self.clock_hz
        return df

    def summary(self) -> dict:
        """Headline numbers of the run (SPEC §6 names, seconds)."""
        w = self.workload
        return {
            "system": self.system,
            "model": self.model,
            "units": self.units,
            "batch": w.batch,
            "context": w.context,
            "tokens": w.tokens,
            "weights": w.weights,
            "expert_weights": w.expert_weights,
            "kv": w.kv,
            "tokens_per_s_per_user": self.tokens_per_s_per_user,
            "tokens_per_s": self.tokens_per_s,
            "step_time_s": self.step_time_s,
            "lower_bound_step_time_s": self.lower_bound_step_time_s,
            "joules_per_token": self.joules_per_token,
        }

    def to_perfetto(self, path: str | Path) -> Path:
        """Write a Chrome trace-event JSON (opens in ui.perfetto.dev): one process per unit, one
        thread (track) per resource class, split into lanes where its events overlap; times in
        microseconds. Written atomically."""
        events = self.perfetto_events()
        try:  # plain ints, strings and finite floats already: no pass to clean them
            text = json.dumps(events, allow_nan=False)
        except (TypeError, ValueError):  # a non-finite time (a --set far outside physics)
            text = dumps_strict(events)
        return write_atomic(path, text, "trace file")

    def perfetto_events(self) -> dict:
        """The Chrome trace-event object :meth:`to_perfetto` writes.

        Perfetto drops slices that partly overlap another on the same track, and a unit's
        resource class can run several ops at once (an LPU's memory slices serve several
        streams), so each (unit, resource) is laid on as many lanes as its busiest moment
        needs: a slice goes on the first lane free at its start, and lanes after the first are
        named ``resource #2``, ``#3``... Slices on one track are thus disjoint."""
        ev = self.events
        lane_of = _lanes(ev["unit"], ev["resource"], ev["start"], ev["duration"])
        units_resources_lanes = zip(ev["unit"], ev["resource"], lane_of, strict=True)
        tracks = sorted({(int(u), str(r), ln) for u, r, ln in units_resources_lanes})
        tid = {t: i + 1 for i, t in enumerate(tracks)}
        us = 1e6 / self.clock_hz
        out: list[dict] = []
        for unit in sorted({u for u, _, _ in tracks}):
            out.append(
                {
                    "ph": "M",
                    "name": "process_name",
                    "pid": unit,
                    "tid": 0,
                    "args": {"name": f"{self.system} unit {unit}"},
                }
            )
        for (unit, res, lane), t in tid.items():
            name = res if lane == 0 else f"{res} #{lane + 1}"
            out.append(
                {"ph": "M", "name": "thread_name", "pid": unit, "tid": t, "args": {"name": name}}
            )
        # columns as Python lists once: indexing NumPy arrays per event costs seconds at 10^5
        cols = {name: ev[name].tolist() for name in EVENT_FIELDS}
        rows = zip(*(cols[n] for n in EVENT_FIELDS), lane_of.tolist(), strict=True)
        for step, layer, op, _, unit, res, start, duration, n_bytes, flops, lane in rows:
            out.append(
                {
                    "ph": "X",
                    "name": str(op),
                    "cat": str(res),
                    "pid": unit,
                    "tid": tid[(unit, str(res), lane)],
                    "ts": start * us,
                    "dur": (start + duration) * us - start * us,
                    "args": {
                        "step": step,
                        "layer": layer_key(layer),
                        "bytes": n_bytes,
                        "flops": flops,
                    },
                }
            )
        return {
            "traceEvents": out,
            "displayTimeUnit": "ns",
            "metadata": self._perfetto_metadata(),
        }

    def _perfetto_metadata(self) -> dict:
        """The Perfetto file's ``metadata``: system, model, clock (Hz) and, for a speculative
        run, what its timeline holds (the trace meta's ``timeline``)."""
        timeline = {"timeline": self.meta["timeline"]} if "timeline" in self.meta else {}
        return {"system": self.system, "model": self.model, "clock_hz": self.clock_hz, **timeline}


def _lanes(units, resources, starts, durations) -> np.ndarray:
    """Lane of each event within its (unit, resource) so that events on one lane never
    overlap: events taken in order of start go on the lowest-numbered lane free by then."""
    import heapq

    lane = np.zeros(len(starts), dtype=np.int64)
    free: dict = {}  # (unit, resource) -> heap of (end, lane) of each lane's last event
    spare: dict = {}  # (unit, resource) -> heap of lanes free at the current start
    order = np.argsort(np.asarray(starts, dtype=np.int64), kind="stable")
    for i in order.tolist():
        key = (int(units[i]), str(resources[i]))
        start, end = int(starts[i]), int(starts[i]) + int(durations[i])
        busy, idle = free.setdefault(key, []), spare.setdefault(key, [])
        while busy and busy[0][0] <= start:
            heapq.heappush(idle, heapq.heappop(busy)[1])
        n = heapq.heappop(idle) if idle else len(busy) + len(idle)
        lane[i] = n
        heapq.heappush(busy, (end, n))
    return lane
