"""Report: which resource bounds each op, layer and step, how far from its limit, and what would
make it faster (SPEC §5). Built from a :class:`~pyaccel.trace.Trace`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from . import kernels
from .errors import ConfigError
from .prefill_text import prefill_lines
from .records import SCHEMA_VERSION, RunSummary, WhatIfRow
from .trace import Trace
from .units import cycles, fmt_seconds

OCCUPANCY_NOTE = (
    "resource shares are occupancy: the part of the step each resource class is busy on some "
    "unit; classes work at the same time, so shares overlap and may add up to more than 100 %"
)
NO_EVENTS_NOTE = (
    "the trace recorded no events (emulate(..., event_steps=())), so there is no split by "
    "resource, op kind or layer and no busiest resource; emulate with trace_steps='ends' for them"
)


def fmt_ratio(ratio: float | None) -> str:
    """A ratio for tables: two decimals, or ``-`` where there is no bound to divide by."""
    return "-" if ratio is None else f"{ratio:.2f}"


def union_cycles(starts: np.ndarray, durations: np.ndarray) -> int:
    """Cycles covered by the union of events (overlapping events count once)."""
    if len(starts) == 0:
        return 0
    order = np.argsort(starts, kind="stable")
    s = np.ascontiguousarray(starts[order], dtype=np.int64)
    e = np.ascontiguousarray(s + durations[order], dtype=np.int64)
    return int(kernels.get("interval_union")(s, e))


def union_by(trace, column: str, step: int) -> dict[str, float]:
    """Seconds of one step covered by events of each value of ``column`` (values in the order
    they first appear)."""
    covered = _union_cycles_by(trace, column, step)
    return {name: c / trace.clock_hz for name, c in covered.items()}


def _union_cycles_by(trace, column: str, step: int) -> dict[str, int]:
    """:func:`union_by` in cycles."""
    ev = trace.events
    mask = ev["step"] == step
    codes, names = _codes(ev[column][mask].tolist())
    covered = grouped_union_cycles(codes, ev["start"][mask], ev["duration"][mask]).tolist()
    return {str(name): covered[g] for g, name in enumerate(names)}


def pass_sequences(trace, step: int) -> int:
    """How many sequences pass through ``step`` one after another, each with its own events
    (tagged ``[uN]``: an ASIC's batch), or 1 where one pass carries them all."""
    ev = trace.events
    names = set(ev["op"][ev["step"] == step].tolist())
    return len({n[n.rindex("[u") :] for n in names if _USER_TAG.search(n)}) or 1


_USER_TAG = re.compile(r"\[u\d+\]$")


def _op_cycles_by_kind(trace, step: int) -> dict[str, int]:
    """Per event kind, the cycles of each graph op (its events and its parts' of every
    sequence, tag ``[uN]`` set aside, over every unit) summed over the kind's ops: the batch's
    work on the kind, as its ops' bounds add up. A union over the kind would merge different
    sequences' work, as sequences are at different layers at once (order: as
    :func:`_union_cycles_by`)."""
    ev = trace.events
    mask = ev["step"] == step
    ob = trace.op_bounds
    names = set(ob["op"][ob["step"] == step].tolist()) if ob else set()
    labels = ev["op"][mask].tolist()
    op_of = {n: _graph_op(_USER_TAG.sub("", n), names) for n in set(labels)}  # each name once
    ops = [op_of[n] for n in labels]
    kinds = ev["kind"][mask].tolist()
    codes, pairs = _codes(list(zip(ops, kinds, strict=True)))
    covered = grouped_union_cycles(codes, ev["start"][mask], ev["duration"][mask]).tolist()
    out = dict.fromkeys(dict.fromkeys(kinds), 0)
    for (_, kind), c in zip(pairs, covered, strict=True):
        out[kind] += c
    return {str(k): c for k, c in out.items()}


def _graph_op(name: str, names: set[str]) -> str:
    """The graph op of ``names`` an event of ``name`` (tag set aside) is part of: the name,
    or the name less its last ``.PART`` (``L0.qkv_proj.latency``); else the name itself (a
    span of no graph op: a chip-link hop)."""
    head = name.rsplit(".", 1)[0]
    return head if name not in names and head in names else name


def _codes(values: list, as_str: bool = False) -> tuple[np.ndarray, list]:
    """Each value's code (0, 1, ... in order of first appearance) and the values by code;
    ``as_str``: values that read the same as text share a code, and names are text."""
    names = list(dict.fromkeys(values))
    index = {v: i for i, v in enumerate(names)}
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))
    if as_str:
        text, by_text = [str(v) for v in names], {}
        merged = np.array([by_text.setdefault(t, len(by_text)) for t in text], dtype=np.int64)
        codes, names = merged[codes] if len(codes) else codes, list(by_text)
    return codes, names


def grouped_union_cycles(group: np.ndarray, starts: np.ndarray, durations: np.ndarray):
    """:func:`union_cycles` of every group's events at once: ``group`` holds each event's group
    id (0 ... n-1); returns the cycles each group covers, indexed by id (int64).

    Events sorted by (group, start), each covers what it adds beyond the running end of
    the events before it. Groups are kept apart by moving group ``g`` up by ``g`` times the
    span of all events, so one running maximum serves them all."""
    group = np.asarray(group, dtype=np.int64)
    n_groups = int(group.max()) + 1 if len(group) else 0
    out = np.zeros(n_groups, dtype=np.int64)
    if not len(group):
        return out
    s = np.asarray(starts, dtype=np.int64)
    e = s + np.asarray(durations, dtype=np.int64)
    lo = int(min(s.min(), e.min()))
    span = int(max(s.max(), e.max())) - lo + 1
    if n_groups * span >= _INT64_SAFE:  # too far apart to shift: one group at a time
        for g in range(n_groups):
            sel = group == g
            out[g] = union_cycles(s[sel], e[sel] - s[sel])
        return out
    order = np.lexsort((s, group))
    shift = group[order] * span - lo
    s, e = s[order] + shift, e[order] + shift
    ran = np.maximum.accumulate(e)  # the running end (earlier groups end below this one)
    before = np.concatenate((s[:1], ran[:-1]))
    np.add.at(out, group[order], np.maximum(0, e - np.maximum(s, before)))
    return out


_INT64_SAFE = 2**62  # shifted cycles stay below this (int64 with room to spare)


@dataclass(frozen=True)
class KindRow:
    """One op kind in one step: its emulated time (union over units, s; summed over its ops
    where sequences pass one after another), its lower bound in
    whole cycles (s), their ratio (``None`` where there is no bound: a fixed latency or a free
    op) and the resource that sets most of the bound (``fixed_latency`` when none does)."""

    kind: str
    emulated_s: float
    bound_s: float
    ratio: float | None
    bound_resource: str

    def to_dict(self) -> dict:
        """The row as an object of ``report --json``'s ``by_kind``."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class Report:
    """Bottleneck report of one emulated run (times in seconds): ``by_resource`` maps each
    resource class to the seconds of the step it is busy (union over units), ``by_layer`` each
    layer key to the same per resource class; ``by_kind`` and ``what_if`` are typed rows.
    ``bottleneck`` is the what-if winner (the class whose doubling, re-emulated, gains most; the
    busiest class when no what-if ran), ``busiest_resource`` the largest occupancy share; the
    ``_share`` fields are occupancy shares of the step. The tables are of one step, the first
    the trace recorded events for: ``step`` its index, ``step_context`` its context and
    ``step_s`` its time (s), which the shares divide by (the summary's step time is the mean
    over the run)."""

    summary: RunSummary
    by_resource: dict[str, float]
    by_kind: list[KindRow]
    by_layer: dict[str, dict[str, float]]
    bottleneck: str
    bottleneck_share: float
    bound_ratio: float | None
    busiest_resource: str = ""
    busiest_share: float = 0.0
    what_if: list[WhatIfRow] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    prefill: dict = field(default_factory=dict)
    roofline: dict = field(default_factory=dict)  # the ops on the roofline (report command)
    step: int = 0
    step_context: int = 0
    step_s: float = 0.0
    span_s: float = 0.0  # from the step's first event's start to its last event's end
    pass_sequences: int = 1  # sequences passing one after another (by_kind: summed op times)

    @classmethod
    def from_trace(cls, trace, what_if: Sequence[WhatIfRow] | bool = True) -> Report:
        """Analyse a trace from its plain data (events, step times, per-op bounds, meta).

        ``what_if`` (SPEC §5, §8): ``True`` re-emulates the trace's own inputs with each resource
        class twice as fast (:func:`pyaccel.what_if.what_if_gains`; nothing when the trace
        carries no inputs); ``False`` leaves the ranking out; a sequence of rows uses them as
        given (a caller that already re-emulated)."""
        if not isinstance(trace, Trace):
            raise ConfigError(
                "Report.from_trace(): trace must be a Trace: pa.emulate(model, system, "
                f"placement, workload); got {type(trace).__name__}"
            )
        if what_if is True:
            what_if = _what_if_of(trace)
        elif what_if is False:
            what_if = ()
        step = int(trace.events["step"][0]) if trace.n_events else 0
        by_res = union_by(trace, "resource", step)
        busiest = max(by_res, key=by_res.get) if by_res else ""
        # the what-if winner (rows come largest gain first); without a what-if, the busiest
        bottleneck = what_if[0].resource if what_if else busiest
        step_s = float(trace.step_cycles[step]) / trace.clock_hz
        return cls(
            summary=RunSummary.from_trace(trace),
            by_resource=by_res,
            by_kind=_by_kind(trace, step),
            by_layer=_by_layer(trace, step),
            bottleneck=bottleneck,
            bottleneck_share=by_res.get(bottleneck, 0.0) / step_s if step_s else 0.0,
            busiest_resource=busiest,
            busiest_share=by_res.get(busiest, 0.0) / step_s if step_s else 0.0,
            bound_ratio=trace.step_time_s / trace.lower_bound_step_time_s
            if trace.lower_bound_step_time_s
            else None,
            assumptions=list(trace.assumptions),
            left_out=list(trace.left_out),
            meta=dict(trace.meta),
            what_if=list(what_if),
            step=step,
            step_context=int(trace.step_context[step]) if len(trace.step_context) else 0,
            step_s=step_s,
            span_s=_span_cycles(trace, step) / trace.clock_hz,
            pass_sequences=pass_sequences(trace, step),
        )

    def to_json(self) -> str:
        """The report as strict JSON text (non-finite numbers as ``null``), with the
        ``schema_version`` of the ``run --json`` record."""
        from .io_util import finite_or_none

        data = finite_or_none({"schema_version": SCHEMA_VERSION, **self.as_dict()})
        return json.dumps(data, indent=1, default=_jsonable, allow_nan=False)

    def as_dict(self) -> dict:
        """The report as plain data."""
        return {
            "summary": self.summary.to_dict(),
            "recorded_step": {
                "step": self.step,
                "context": self.step_context,
                "step_time_s": self.step_s,
            },  # fmt: skip
            "by_resource_s": self.by_resource,
            "by_kind": [row.to_dict() for row in self.by_kind],
            "by_layer_s": self.by_layer,
            "bottleneck": self.bottleneck,
            "bottleneck_share": self.bottleneck_share,
            "busiest_resource": self.busiest_resource,
            "busiest_share": self.busiest_share,
            "share_is_occupancy": True,
            "notes": self.notes(),
            "emulated_over_lower_bound": self.bound_ratio,
            "what_if": [row.to_dict() for row in self.what_if],
            "assumptions": self.assumptions,
            "left_out": self.left_out,
            "meta": self.meta,
            "prefill": self.prefill,
            "roofline": self.roofline,
        }

    def to_markdown(self) -> str:
        """The report as a Markdown document."""
        s = self.summary
        lines = [
            f"# {s.model} on {s.units} x {s.system}",
            "",
            f"- tokens/s per user: {s.tokens_per_s_per_user:.1f}; total: "
            f"{s.tokens_per_s:.1f}; step {fmt_seconds(s.step_time_s)} "
            f"(lower bound {fmt_seconds(s.lower_bound_step_time_s)}, ratio "
            f"{fmt_ratio(self.bound_ratio)})",
            f"- bottleneck (what-if winner): **{self.bottleneck or '-'}**; busiest resource: "
            + (
                f"{self.busiest_resource} ({self.busiest_share:.0%} occupancy)"
                if self.by_resource
                else f"- ({NO_EVENTS_NOTE})"
            ),
            "",
            f"Tables: {self.step_title()}.",
            "",
            "| resource | time | occupancy |",
            "|---|---|---|",
        ]
        for res, t in sorted(self.by_resource.items(), key=lambda kv: -kv[1]):
            lines.append(f"| {res} | {fmt_seconds(t)} | {self.share(t):.0%} |")
        lines += ["", *[f"Note: {n}." for n in self.notes() if n != NO_EVENTS_NOTE]]
        lines += [
            "",
            "| op kind | emulated | lower bound | ratio | bound by |",
            "|---|---|---|---|---|",
        ]
        for row in self.by_kind:
            lines.append(
                f"| {row.kind} | {fmt_seconds(row.emulated_s)} | "
                f"{fmt_seconds(row.bound_s)} | {fmt_ratio(row.ratio)} | "
                f"{row.bound_resource} |"
            )
        if self.what_if:
            lines += ["", "| what if ... x2 | step | gain |", "|---|---|---|"]
            for row in self.what_if:
                lines.append(
                    f"| {row.resource} | {fmt_seconds(row.step_time_s)} | {row.gain:.3f}x |"
                )
        lines += prefill_lines(self.prefill)
        lines += ["", "Assumptions:", *[f"- {a}" for a in self.assumptions]]
        if self.left_out:
            lines += ["", "Left out:", *[f"- {a}" for a in self.left_out]]
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.to_markdown()

    def step_title(self) -> str:
        """Which step the tables are of, e.g. ``step 0 (context 1,024): 341 us``."""
        return (f"step {self.step} (context {self.step_context:,}): "
                f"{fmt_seconds(self.step_s)}")  # fmt: skip

    def notes(self) -> list[str]:
        """What the shares mean: :data:`OCCUPANCY_NOTE`, where the step's events span more
        than the step, why one class's share can pass 100 %, and where sequences pass one after
        another, what the op-kind table's time is (without events,
        :data:`NO_EVENTS_NOTE`)."""
        if not self.by_resource:
            return [OCCUPANCY_NOTE, NO_EVENTS_NOTE]
        notes = [OCCUPANCY_NOTE]
        if self.span_s > self.step_s:
            notes.append(f"the step's events span {fmt_seconds(self.span_s)}, more than the "
                         f"step's {fmt_seconds(self.step_s)}: its sequences' tokens pass through "
                         "one after another and the last ones overlap the next step, so one "
                         "class's share can pass 100 %")  # fmt: skip
        if self.pass_sequences > 1:
            notes.append(f"the op-kind table's emulated time is each op's over all "
                         f"{self.pass_sequences} sequences, summed over the kind's ops, as "
                         "their lower bounds add up")  # fmt: skip
        return notes

    def share(self, seconds: float) -> float:
        """``seconds`` as a share of the tables' step (0 for a step of no time)."""
        return seconds / self.step_s if self.step_s else 0.0


def _span_cycles(trace, step: int) -> int:
    """Cycles from the first start to the last end of the events of ``step`` (0 without)."""
    ev = trace.events
    mask = ev["step"] == step
    if not mask.any():
        return 0
    starts = ev["start"][mask]
    return int((starts + ev["duration"][mask]).max() - starts.min())


def _jsonable(x: Any):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    return str(x)


def op_bound_seconds(seconds: float, clock_hz: float) -> float:
    """An op's lower bound in whole cycles of the clock of the unit that runs it (s): an op
    takes at least one cycle, and its events are whole cycles, so the bound is rounded up (as
    the engines round a time to cycles, float noise first: a bound of exactly the cycles an op
    took is not bumped by one)."""
    return max(1, cycles(seconds, clock_hz)) / clock_hz if seconds > 0 else 0.0


def _by_kind(trace, step: int) -> list[KindRow]:
    """Per op kind: emulated time in the step (union over units; where the step's sequences
    pass one after another, an ASIC's batch, each op's time over them all summed over the
    kind's ops, :func:`_op_cycles_by_kind`), its lower bound and the resource that sets it.

    The bounds are the trace's ``op_bounds`` for the same step: each op bounded for the
    sequences one pass carries (a micro-batch when the batch is split over pipeline stages),
    in whole cycles (:func:`op_bound_seconds`), summed as cycles so that a kind's ratio is
    exact (never under 1 by float noise). An op's bound counts under the kind of the events
    it books (:func:`_event_kinds`; a GPU residual's all-reduce books ``allreduce``), else
    under its name's last part."""
    clock = trace.clock_hz
    if pass_sequences(trace, step) > 1:
        emulated = _op_cycles_by_kind(trace, step)
    else:
        emulated = _union_cycles_by(trace, "kind", step)
    bounds: dict[str, list] = {}
    ob = trace.op_bounds
    if ob:
        sel = ob["step"] == step
        ops = ob["op"][sel].tolist()
        kinds = _event_kinds(trace, step, set(ops))
        for op, resource, seconds in zip(ops, ob["resource"][sel].tolist(),
                                         ob["seconds"][sel].tolist(), strict=True):  # fmt: skip
            n = max(1, cycles(seconds, clock)) if seconds > 0 else 0  # as op_bound_seconds
            acc = bounds.setdefault(kinds.get(op, op.split(".")[-1]), [0, {}])
            acc[0] += n
            acc[1][resource] = acc[1].get(resource, 0) + n
    rows = []
    for kind, t in sorted(emulated.items(), key=lambda kv: -kv[1]):
        bound, res = bounds.get(kind, [0, {}])
        ratio = t / bound if bound else None  # no bound: a fixed latency or free op
        resource = max(res, key=res.get) if res else "fixed_latency"
        rows.append(KindRow(kind, t / clock, bound / clock, ratio, resource))
    return rows


def _event_kinds(trace, step: int, ops: set[str]) -> dict[str, str]:
    """The kind of the events each op of ``ops`` books in ``step`` where that is not the op
    name's last part: its events are named as the op or as a part of it (``op.PART``,
    ``op[u0]``), e.g. a GPU's ``L0.attn_residual.allreduce.launch`` of kind ``allreduce``
    for the op ``L0.attn_residual``. An op with events of its own kind keeps it."""
    ev = trace.events
    mask = ev["step"] == step
    seen: dict[str, set] = {}
    names = zip(ev["op"][mask].tolist(), ev["kind"][mask].tolist(), strict=True)
    for name, kind in dict(names).items():  # each event name once
        head = str(name)
        while head and head not in ops:
            head = head[: max(head.rfind("."), head.rfind("["), 0)]
        if head:
            seen.setdefault(head, set()).add(str(kind))
    return {op: min(kinds) for op, kinds in seen.items() if op.split(".")[-1] not in kinds}


def _by_layer(trace, step: int) -> dict[str, dict[str, float]]:
    """Seconds per layer key and resource class in one step (union over units). The step's
    events are grouped once by (layer, resource), not filtered once per layer; layers and
    their resources keep the order they first appear in."""
    ev = trace.events
    mask = ev["step"] == step
    layers, layer_names = _codes(ev["layer"][mask].tolist(), as_str=True)
    res, res_names = _codes(ev["resource"][mask].tolist(), as_str=True)
    if not len(layers):
        return {}
    group = layers * len(res_names) + res
    covered = grouped_union_cycles(group, ev["start"][mask], ev["duration"][mask]).tolist()
    first = np.full(len(covered), len(group), dtype=np.int64)
    np.minimum.at(first, group, np.arange(len(group), dtype=np.int64))
    present = int((first < len(group)).sum())  # (layer, resource) pairs with events
    out: dict[str, dict[str, float]] = {}
    for g in np.argsort(first, kind="stable")[:present].tolist():
        layer, r = divmod(g, len(res_names))
        out.setdefault(layer_names[layer], {})[res_names[r]] = covered[g] / trace.clock_hz
    return out


def _what_if_of(trace) -> list[WhatIfRow]:
    """The what-if rows of a trace that carries its inputs (model, system, placement,
    workload); none for a trace without them (e.g. one built by hand)."""
    if trace.inputs is None:
        return []
    from .what_if import trace_what_if  # re-emulation is orchestration, imported on use

    return trace_what_if(trace)
