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
        bytes), made once per schedule."""
        if self._event_cols is None:
            ev = self.op_events()
            o, res, start, dur, nb = zip(*ev, strict=True) if ev else ((), (), (), (), ())
            o, start, dur, nb = (np.array(c, dtype=np.int64) for c in (o, start, dur, nb))
            self._event_cols = (o, np.array(res, dtype=object), start, dur, nb)
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
