"""NumPy/Python twin of the micro-batch pipeline schedule over stages and links (the executable
specification of ``jit_pipeline.micro_batch_rounds``). Units: integer cycles."""

from __future__ import annotations

import numpy as np

from . import checks


def micro_batch_rounds(occ: np.ndarray, busy: np.ndarray, lat: np.ndarray, rounds: int,
                       relay=None):  # fmt: skip
    """Micro-batches flowing round after round through stages and the links into them.

    ``occ[m, s]``: cycles stage ``s`` works on micro-batch ``m``; ``busy[m, s]`` and
    ``lat[m, s]``: cycles the link *into* stage ``s`` carries it and its latency after that
    (into stage 0: the loop back from the last stage, crossed from the second round on). Stages
    and links serve micro-batches first come first served in (round, micro-batch) order, a
    stage taking the next micro-batch while a link carries the last; a micro-batch's next round
    starts when its last one has come back. Returns ``finish[r, m]``: when micro-batch ``m``
    left the last stage in round ``r`` (int64).

    ``relay``: ``(roff, rbusy, win_ptr, win_start, win_end)`` when a crossing ends on the
    receiving stage's own links, which that stage's work also uses. The crossing into ``s``
    then needs those links for ``rbusy[m, s]`` cycles, no earlier than ``roff[m, s]`` after it
    took its link, in the first gap long enough among the windows already booked on them
    (first fit; a crossing with ``rbusy`` 0 books nothing), and ``lat`` counts from the relay's
    end. Stage ``s`` working on micro-batch ``m`` books windows ``[start + a, start + b)`` for
    its windows ``(a, b)``: entries ``win_ptr[m * n_stages + s]`` to the next of ``win_start``
    and ``win_end`` (sorted, disjoint, within the stage's own cycles).
    """
    checks.micro_batch_rounds(occ, busy, lat, rounds, relay)
    n_micro, n_stages = np.shape(occ)
    stage_free, link_free = [0] * n_stages, [0] * n_stages
    booked: list[list[tuple[int, int]]] = [[] for _ in range(n_stages)]
    ready = [0] * n_micro
    finish = np.zeros((int(rounds), n_micro), dtype=np.int64)
    for r in range(int(rounds)):
        for m in range(n_micro):
            t = ready[m]
            for s in range(n_stages):
                if s or r:  # into stage 0 only when looping back (from the second round on)
                    start = max(t, link_free[s])
                    link_free[s] = start + int(busy[m, s])
                    t = link_free[s]
                    if relay is not None and int(relay[1][m, s]):
                        t = _book_first_fit(booked[s], start + int(relay[0][m, s]),
                                            int(relay[1][m, s]), start)  # fmt: skip
                    t += int(lat[m, s])
                start = max(t, stage_free[s])
                stage_free[s] = start + int(occ[m, s])
                t = stage_free[s]
                if relay is not None:
                    k = m * n_stages + s
                    ptr, ws, we = relay[2], relay[3], relay[4]
                    if ptr[k + 1] > ptr[k]:
                        _forget(booked[s], link_free[s])
                    for j in range(int(ptr[k]), int(ptr[k + 1])):
                        booked[s].append((start + int(ws[j]), start + int(we[j])))
            finish[r, m] = ready[m] = t
    return finish


def _book_first_fit(booked: list, earliest: int, length: int, forget_before: int) -> int:
    """Book ``length`` cycles at the first gap from ``earliest`` among ``booked`` (sorted,
    disjoint intervals) and return the booking's end; intervals ending by ``forget_before`` are
    dropped first (no later request starts before it)."""
    _forget(booked, forget_before)
    x, at = earliest, 0
    for a, b in booked:
        if b <= x:
            at += 1
            continue
        if a >= x + length:
            break
        x, at = b, at + 1
    booked.insert(at, (x, x + length))
    return x + length


def _forget(booked: list, before: int) -> None:
    """Drop the booked intervals that end by ``before``: every later crossing into the stage
    takes its link no earlier than the stage's link is free now, so none can reach back."""
    while booked and booked[0][1] <= before:
        booked.pop(0)


def relay_arrays(n_micro: int, n_stages: int, relay) -> tuple:
    """``relay`` as its five arrays, or crossings that relay nothing with no windows (the
    compiled twins' form of ``relay=None``)."""
    if relay is not None:
        return tuple(relay)
    zeros = np.zeros((n_micro, n_stages), dtype=np.int64)
    none = np.zeros(0, dtype=np.int64)
    return zeros, zeros, np.zeros(n_micro * n_stages + 1, dtype=np.int64), none, none


def booking_capacity(n_micro: int, n_stages: int, win_ptr) -> int:
    """A first guess of the windows one stage holds at once: every micro-batch's largest set
    and a relay each (the compiled twins grow it and run again if a schedule needs more)."""
    per = np.diff(np.asarray(win_ptr)).reshape(n_micro, n_stages) if n_stages else None
    widest = int(per.max()) if per is not None and per.size else 0
    return max(8, 2 * n_micro * (widest + 1))
