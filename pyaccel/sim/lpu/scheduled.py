"""A list-scheduled TSP program (:meth:`pyaccel.sim.lpu.program.Program.schedule`): each
instruction's start cycle, the program's length, the C2C link windows its collectives hold, and
its spans per op and resource class (cycles from the program's start; bytes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .kinds import _EVENT_KINDS, CLASS_OF_KIND, TRANSITS_PER_C2C, kind_codes
from .transfers import merged_arrays


@dataclass
class Scheduled:
    """A scheduled program: start cycle of each instruction and the program's length."""

    program: Any  # the pyaccel.sim.lpu.program.Program scheduled (not imported: it imports this)
    start: np.ndarray
    dur: np.ndarray
    lat: np.ndarray
    cycles: int
    _events: list | None = None
    _event_cols: tuple | None = None

    def link_windows(self) -> tuple[tuple[int, int], ...]:
        """The (start, end) cycles, from the program's start, in which its collectives hold
        some of the stage's C2C links (merged): each collective's ``link_busy`` after the
        stream transit from the producing slice to the chip's ports."""
        idx, a, b = self.program.link_busy()
        at = self.start[idx] + self.program.chip.transit
        return merged_arrays(at + a, at + b)

    def op_events(self):
        """Per (op, resource class): (op index, class, start, duration, bytes) spans, plus
        ``fixed_latency`` spans over every cycle from the op's first instruction to its result
        being usable that no span covers: the pipeline latency and stream transit between its
        steps and after its last (computed once per schedule)."""
        if self._events is None:
            self._events = self._op_events()
        return self._events

    def op_event_columns(self) -> tuple[np.ndarray, ...]:
        """:meth:`op_events` as columns (op index, class as an object array, start, duration,
        bytes), made once per schedule with array operations (:meth:`op_events`, one span at
        a time, is their reference)."""
        if self._event_cols is None:
            self._event_cols = _event_columns(self)
        return self._event_cols

    def _c2c_latency(self, instructions) -> int:
        """Cycles the C2C links' hop latency adds to these collective instructions."""
        colls = self.program.collectives
        return sum(colls[int(i)].latency_cycles for i in instructions if int(i) in colls)

    def _c2c_apart(self, out: list, o: int, s: int, e: int, instructions) -> tuple[int, int]:
        """Book the parts of an op's collectives that are not link serialisation: the links' hop
        latency first (``c2c_latency``), the stream transit to and from the chip's C2C ports
        last (``fixed_latency``, as every other op's transit); returns the link span's ends."""
        lat = min(e - s, self._c2c_latency(instructions))
        if lat:
            out.append((o, "c2c_latency", s, lat, 0))
        colls = self.program.collectives
        moving = sum(1 for i in instructions if int(i) in colls and colls[int(i)].cycles)
        transit = min(e - s - lat, moving * TRANSITS_PER_C2C * self.program.chip.transit)
        if transit:
            out.append((o, "fixed_latency", e - transit, transit, 0))
        return s + lat, e - transit

    def _op_events(self):
        """Per op (ascending), a span per class of its instructions (in ``_EVENT_KINDS``
        order: first start to last end), then ``fixed_latency`` over its uncovered cycles;
        instructions grouped once by (op, kind), not scanned once per op."""
        prog = self.program
        op = np.asarray(prog.op, dtype=np.int64)
        if not len(op):
            return []
        code = prog.kind_code if prog.kind is None else kind_codes(prog.kind)
        order = np.lexsort((code, op))  # stable: each group's instructions stay in order
        o_s, c_s = op[order], code[order]
        cut = np.flatnonzero(np.r_[True, (o_s[1:] != o_s[:-1]) | (c_s[1:] != c_s[:-1])])
        start, end = self.start[order], (self.start + self.dur)[order]
        ready = end + self.lat[order]
        nbytes = np.asarray(prog.nbytes, dtype=np.int64)[order]
        g = (
            np.minimum.reduceat(start, cut).tolist(),
            np.maximum.reduceat(end, cut).tolist(),
            np.maximum.reduceat(ready, cut).tolist(),
            np.add.reduceat(nbytes, cut).tolist(),
        )
        ops = np.flatnonzero(np.r_[True, o_s[1:] != o_s[:-1]])
        op_start = np.minimum.reduceat(start, ops).tolist()
        op_ready = np.maximum.reduceat(ready, ops).tolist()
        bounds = np.r_[cut, len(order)].tolist()
        out, gi = [], 0
        for j, o in enumerate(o_s[ops].tolist()):
            first = len(out)
            while gi < len(cut) and o_s[cut[gi]] == o:
                c = int(c_s[cut[gi]])
                if c < len(_EVENT_KINDS):
                    kind = _EVENT_KINDS[c]
                    s, e = g[0][gi], (g[2] if kind == "c2c" else g[1])[gi]
                    if kind == "c2c":  # the links' hop latency and the on-chip transit apart
                        s, e = self._c2c_apart(out, o, s, e, order[bounds[gi] : bounds[gi + 1]])
                    out.append((o, CLASS_OF_KIND[kind], s, e - s, g[3][gi]))
                gi += 1
            covered = sorted((ev[2], ev[2] + ev[3]) for ev in out[first:])
            out += _uncovered(o, covered, op_start[j], op_ready[j])
        return out


def _uncovered(o: int, covered: list, start: int, done: int) -> list:
    """``fixed_latency`` spans of op ``o`` over the cycles of [start, done) outside every
    (sorted) ``covered`` interval."""
    out, t = [], start
    for s, e in covered:
        if s > t:
            out.append((o, "fixed_latency", t, s - t, 0))
        t = max(t, e)
    if done > t:
        out.append((o, "fixed_latency", t, done - t, 0))
    return out


# A class span's place among its op's spans (sort key ``sub``): a collective's link latency
# and on-chip transit come before its link span, as :meth:`Scheduled._c2c_apart` books them.
_LATENCY, _TRANSIT, _SPAN = range(len(("c2c_latency", "transit", "span")))
_COLUMNS = ("op", "class", "start", "duration", "bytes", "position", "sub")  # sort: op, pos, sub
# Span classes by index: each event kind's, then the two a kind does not name.
_CLASSES = np.array([CLASS_OF_KIND[k] for k in _EVENT_KINDS] + ["fixed_latency", "c2c_latency"],
                    dtype=object)  # fmt: skip
_FIXED, _LINK_LATENCY = len(_EVENT_KINDS), len(_EVENT_KINDS) + 1


def _event_columns(sch: Scheduled) -> tuple[np.ndarray, ...]:
    """:meth:`Scheduled.op_events` as columns, without a Python step per op: every (op, kind)
    group's span at once, the few collectives' latency and transit apart, then each op's
    uncovered cycles from a running maximum of its spans' ends."""
    prog = sch.program
    op = np.asarray(prog.op, dtype=np.int64)
    if not len(op):
        empty = np.zeros(0, dtype=np.int64)
        return empty, np.zeros(0, dtype=object), empty, empty, empty
    code = prog.kind_code if prog.kind is None else kind_codes(prog.kind)
    order = np.lexsort((code, op))
    o_s, c_s = op[order], code[order]
    cut = _firsts((o_s[1:] != o_s[:-1]) | (c_s[1:] != c_s[:-1]))
    start, end = sch.start[order], (sch.start + sch.dur)[order]
    ready = end + sch.lat[order]
    g_op, g_code, g_s = o_s[cut], c_s[cut], np.minimum.reduceat(start, cut)
    c2c = g_code == _EVENT_KINDS.index("c2c")
    g_e = np.where(c2c, np.maximum.reduceat(ready, cut), np.maximum.reduceat(end, cut))
    # first the collectives' latency and transit, which move their link spans' ends
    apart = _c2c_parts(sch, order, cut, c2c, g_op, g_s, g_e)
    spans = np.flatnonzero(g_code < len(_EVENT_KINDS))
    nbytes = np.add.reduceat(np.asarray(prog.nbytes, dtype=np.int64)[order], cut)
    parts = [(g_op[spans], g_code[spans], g_s[spans], (g_e - g_s)[spans], nbytes[spans], spans,
              np.full(len(spans), _SPAN)), apart]  # fmt: skip
    o, _, s, d = (np.concatenate(c) for c in list(zip(*parts, strict=True))[:4])
    ops = _firsts(o_s[1:] != o_s[:-1])
    parts.append(_uncovered_columns(o, s, s + d, o_s[ops], np.minimum.reduceat(start, ops),
                                    np.maximum.reduceat(ready, ops), len(cut)))  # fmt: skip
    cols = [np.concatenate(c) for c in zip(*parts, strict=True)]
    o, k, s, d, nb, _, _ = (c[np.lexsort((cols[6], cols[5], cols[0]))] for c in cols)
    return o, _CLASSES[k], s, d, nb


def _firsts(changed: np.ndarray) -> np.ndarray:
    """Where runs of equal keys begin, given where each key differs from the one before."""
    return np.flatnonzero(np.concatenate(([True], changed)))


def _c2c_parts(sch, order, cut, c2c, g_op, g_s, g_e) -> tuple[np.ndarray, ...]:
    """The link latency and on-chip transit of each collective group (``c2c``), as
    :meth:`Scheduled._c2c_apart` books them, in :func:`_event_columns`' columns; moves the
    groups' ``g_s`` and ``g_e`` to their link span's ends."""
    bounds = np.concatenate((cut, [len(order)]))
    rows = []  # (op, class, start, duration, bytes, group, sub)
    for gi in np.flatnonzero(c2c).tolist():
        parts: list = []
        g_s[gi], g_e[gi] = sch._c2c_apart(parts, int(g_op[gi]), int(g_s[gi]), int(g_e[gi]),
                                          order[bounds[gi] : bounds[gi + 1]])  # fmt: skip
        for o, res, s, d, _ in parts:
            latency = res == "c2c_latency"
            rows.append((o, _LINK_LATENCY if latency else _FIXED, s, d, 0, gi,
                         _LATENCY if latency else _TRANSIT))  # fmt: skip
    return tuple(np.array(rows, dtype=np.int64).reshape(len(rows), len(_COLUMNS)).T)


def _uncovered_columns(o, s, e, op_ids, op_start, op_done, first_pos) -> tuple[np.ndarray, ...]:
    """``fixed_latency`` spans (as :func:`_event_columns`' columns) over each op's cycles from
    its first start (``op_start``) to its result being usable (``op_done``) that none of its
    spans (``o``, ``s``, ``e``) covers: gaps before each span past the running maximum of the
    ends before it, then the tail; sort positions from ``first_pos`` on, after every span."""
    idx = np.searchsorted(op_ids, o)
    by = np.lexsort((e, s, idx))
    s, e, idx = s[by], e[by], idx[by]
    big = int(max(e.max(initial=0), op_done.max(initial=0))) + 1
    run = np.maximum.accumulate(idx * big + e) - idx * big  # within an op: ids ascend
    first = _firsts(idx[1:] != idx[:-1])
    prev = np.concatenate(([-1], run[:-1]))
    prev[first] = -1
    t = np.maximum(op_start[idx], prev)  # the covered time's end before each span
    gap = np.flatnonzero(s > t)
    last = np.full(len(op_ids), -1, dtype=np.int64)  # each op's covered end (-1: no span)
    ends = np.concatenate((first[1:], [len(idx)])) - 1 if len(idx) else idx
    last[idx[ends]] = run[ends]
    tail = np.maximum(op_start, last)
    has_tail = np.flatnonzero(op_done > tail)
    zeros = np.zeros(len(gap) + len(has_tail), dtype=np.int64)
    return (
        np.concatenate((op_ids[idx[gap]], op_ids[has_tail])), zeros + _FIXED,
        np.concatenate((t[gap], tail[has_tail])),
        np.concatenate(((s - t)[gap], (op_done - tail)[has_tail])), zeros,
        np.concatenate((first_pos + gap, np.full(len(has_tail), first_pos + len(s)))), zeros,
    )  # fmt: skip
