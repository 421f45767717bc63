"""Pipeline arithmetic shared by engines whose layers run as stages on different units."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .. import kernels


def pipeline_cycles(stage_cycles_of: Mapping[int, Sequence[int]], sizes: Sequence[int]) -> int:
    """Time between two tokens of one sequence when micro-batches of ``sizes`` share a pipeline.

    ``stage_cycles_of[size]`` is the cycles each stage spends on one micro-batch of ``size``
    sequences. A sequence waits for its micro-batch's whole pass, and every stage must serve all
    micro-batches before the first comes round again: the interval is the larger of the longest
    pass and the busiest stage's total. With ``n`` equal micro-batches this is the larger of one
    pass and ``n`` times the slowest stage.
    """
    if not sizes:
        return 0
    distinct = set(sizes)
    longest_pass = max(int(sum(stage_cycles_of[s])) for s in distinct)
    n_stages = len(stage_cycles_of[sizes[0]])
    busiest = max(
        (sum(int(stage_cycles_of[s][i]) for s in sizes) for i in range(n_stages)), default=0
    )
    return max(longest_pass, busiest)


def pipeline_cycles_over(stage_cycles_of: Mapping[int, np.ndarray], sizes: Sequence[int]):
    """:func:`pipeline_cycles` of several steps at once: ``stage_cycles_of[size]`` holds one row
    of stage cycles a step (int64); one interval a step."""
    steps = len(next(iter(stage_cycles_of.values())))
    if not sizes:
        return np.zeros(steps, dtype=np.int64)
    longest_pass = np.max([stage_cycles_of[s].sum(axis=1) for s in set(sizes)], axis=0)
    load = sum(stage_cycles_of[s] for s in sizes)  # every stage serves every micro-batch
    busiest = load.max(axis=1) if load.shape[1] else np.zeros(steps, dtype=np.int64)
    return np.maximum(longest_pass, busiest)


# Rounds the simulated schedule runs (per micro-batch, and on top) before its interval is read
# as the mean over its last round per micro-batch: uneven micro-batches can drift for a dozen
# rounds before a first-come-first-served pipeline settles (tests/test_pipeline_schedule.py
# checks four times as many rounds change nothing).
SCHEDULE_ROUNDS_PER_MICRO_BATCH = 16
SCHEDULE_EXTRA_ROUNDS = 16


def pipeline_schedule(
    stage_cycles_of: Mapping[int, Sequence[int]],
    links_of: Mapping[int, Sequence[tuple]],
    sizes: Sequence[int],
    rounds: int | None = None,
    windows_of: Mapping[int, Sequence[Sequence[tuple[int, int]]]] | None = None,
) -> int:
    """Time between two tokens of one sequence, from a simulated schedule of micro-batches of
    ``sizes`` through the stages and the links between them (cycles; the
    ``micro_batch_rounds`` kernel).

    ``links_of[size][s]`` is ``(busy, latency)`` of the crossing *into* stage ``s``: the link
    carries one micro-batch at a time for ``busy`` cycles, which then arrives ``latency``
    cycles later; the crossing into stage 0 is the loop back from the last stage (the sampled
    token), taken from the second round on. A stage serves micro-batches first come first
    served in (round, micro-batch) order and works on the next while a link carries the last.
    Each micro-batch's next token enters as soon as its token has come back. The schedule runs
    ``rounds`` rounds (by default enough to settle) and the interval is the mean time between
    a micro-batch's tokens over the last ``len(sizes)`` rounds. With no links and equal sizes
    it equals :func:`pipeline_cycles`.

    A crossing that ends on the receiving stage's own links is ``(busy, latency,
    relay_offset, relay_busy)``: ``relay_busy`` cycles on them, from ``relay_offset`` after it
    took its link at the earliest, in the first gap the windows ``windows_of[size][s]`` of
    the stage's earlier work leave there (cycles from that work's start), then ``latency``.
    """
    if not sizes:
        return 0
    n = len(sizes)
    if rounds is None:
        rounds = SCHEDULE_ROUNDS_PER_MICRO_BATCH * n + SCHEDULE_EXTRA_ROUNDS
    occ = np.array([list(stage_cycles_of[s]) for s in sizes], dtype=np.int64)
    link = np.array([[_four(c) for c in links_of[s]] for s in sizes], dtype=np.int64)
    link = link.reshape(n, -1, 4)
    relay = None
    if windows_of is not None or link[:, :, 3].any():
        relay = (link[:, :, 2], link[:, :, 3], *_windows(windows_of, sizes, occ.shape[1]))
        relay = coalesced_windows(occ, relay)
    finish = kernels.get("micro_batch_rounds")(
        occ, link[:, :, 0], link[:, :, 1], int(rounds), relay
    )
    span = min(n, int(rounds) - 1)
    if span < 1:
        return int(finish[-1].max()) if len(finish) else 0
    gaps = int((finish[-1] - finish[-1 - span]).sum())
    return -(-gaps // (span * n))


def one_micro_batch_over(occ: np.ndarray, links: Sequence, which) -> tuple:
    """:func:`pipeline_schedule` of one micro-batch (``sizes`` of one entry, the default
    rounds) at many steps at once: ``occ[u, s]`` the cycles of stage ``s`` at step ``u``, the
    crossings into the stages ``links[which[u]]`` (one ``(busy, latency[, relay_offset,
    relay_busy])`` a stage, as :func:`pipeline_schedule` takes them). Returns ``(interval,
    valid)``: one interval a step, right where ``valid`` (int64, bool).

    One micro-batch comes round to a stage only after the stage's last work ended, so every
    window the stage booked (its work's, its last relay's) has ended: a relay takes its links
    at once, ``relay_offset`` after its link, and ends ``relay_busy`` later. A round is then
    the stages' cycles plus their crossings, ``L``, as long as no link is still carrying the
    last round's micro-batch when the next comes (``busy <= L`` on every link; ``valid``)."""
    occ = np.asarray(occ, dtype=np.int64)
    fields = np.array([[_four(c) for c in row] for row in links], dtype=np.int64)
    fields = fields.reshape(len(links), occ.shape[1], -1)[np.asarray(which, dtype=np.int64)]
    busy, lat, off, relay = np.moveaxis(fields, -1, 0)
    crossing = np.where(relay > 0, off + relay, busy) + lat
    loop = occ.sum(axis=1) + crossing.sum(axis=1)
    return loop, (busy <= loop[:, None]).all(axis=1)


def _four(crossing) -> tuple:
    """A crossing as ``(busy, latency, relay_offset, relay_busy)`` (no relay when given as a
    pair)."""
    return tuple(crossing) + (0, 0) if len(crossing) == 2 else tuple(crossing)


def _windows(windows_of, sizes, n_stages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``windows_of`` as the kernel's CSR over (micro-batch, stage), in ``sizes`` order."""
    starts, ends = [], []
    for size in sizes:
        per_stage = windows_of[size] if windows_of is not None else [()] * n_stages
        for wins in per_stage:
            if not isinstance(wins, Windows):
                wins = Windows.of_pairs(wins)
            starts.append(wins.starts)
            ends.append(wins.ends)
    ptr = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum([len(a) for a in starts], out=ptr[1:])
    empty = np.zeros(0, dtype=np.int64)
    return (ptr, np.concatenate([empty, *starts]).astype(np.int64),
            np.concatenate([empty, *ends]).astype(np.int64))  # fmt: skip


def coalesced_windows(occ: np.ndarray, relay: tuple) -> tuple:
    """``relay`` (as the ``micro_batch_rounds`` kernel takes it) with each stage work's windows
    joined across every gap shorter than the shortest relay into that stage: the same
    schedule, with fewer windows to book around (a 20-stage expert-parallel LPU pass books
    ~150 windows a stage and micro-batch, most of them a few cycles apart).

    Why it is the same: a relay books a gap at least its own length, so it never takes one of
    those gaps, and a search that lands inside one moves past the next window either way. A
    stage's windows lie within its own cycles, after every relay into it (which ends before
    the stage starts), so the booked windows stay sorted and disjoint, as this needs; a set of
    windows that does not lie so is left as it is."""
    roff, rbusy, ptr, starts, ends = relay
    if not len(starts):
        return relay
    n_micro, n_stages = occ.shape
    group = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))  # (micro-batch, stage) a window
    first = np.r_[True, group[1:] != group[:-1]]
    gap = np.r_[0, starts[1:] - ends[:-1]]
    own = occ.reshape(-1)[group]
    if (gap < 0)[~first].any() or (starts < 0).any() or (ends < starts).any() or (ends > own).any():
        return relay
    none = np.iinfo(np.int64).max  # a stage no relay enters: every gap joins
    shortest = np.where(rbusy > 0, rbusy, none).min(axis=0)
    at = np.flatnonzero(first | (gap >= shortest[group % n_stages]))
    counts = np.bincount(group[at], minlength=len(ptr) - 1)
    new_ptr = np.zeros_like(ptr)
    np.cumsum(counts, out=new_ptr[1:])
    return roff, rbusy, new_ptr, starts[at], np.maximum.reduceat(ends, at)


class Windows:
    """Sorted, disjoint ``(start, end)`` cycle windows held as two int64 arrays, as an engine
    makes many at once (a stage's link windows): to every reader the tuple of its
    ``(start, end)`` pairs, which it iterates as, equals and hashes as."""

    __slots__ = ("starts", "ends")

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        self.starts, self.ends = starts, ends

    @classmethod
    def of_pairs(cls, pairs) -> Windows:
        """Windows from ``(start, end)`` pairs."""
        pairs = list(pairs)
        return cls(np.array([a for a, _ in pairs], dtype=np.int64),
                   np.array([b for _, b in pairs], dtype=np.int64))  # fmt: skip

    def __iter__(self):
        return zip(self.starts.tolist(), self.ends.tolist(), strict=True)

    def __len__(self) -> int:
        return len(self.starts)

    def __eq__(self, other) -> bool:
        if self is other:  # a stage program's memoised windows, met step after step
            return True
        if isinstance(other, Windows):
            return len(self.starts) == len(other.starts) and bool(
                (self.starts == other.starts).all() and (self.ends == other.ends).all()
            )
        if isinstance(other, tuple):
            return tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Windows({tuple(self)!r})"


def stream_makespan(stage_cycles: Sequence[Sequence[int]], links: Sequence[Sequence] | None) -> int:
    """Cycles until the last of a sequence's chunks leaves the last stage when its chunks stream
    through the stages once, in order (a prompt's prefill filling the pipeline): the last of
    :func:`stream_ends`, 0 without chunks."""
    ends = stream_ends(stage_cycles, links)
    return ends[-1] if ends else 0


def stream_ends(
    stage_cycles: Sequence[Sequence[int]],
    links: Sequence[Sequence] | None,
    release: Sequence[int] | None = None,
) -> list[int]:
    """The cycle each of a sequence's chunks leaves the last stage when its chunks stream
    through the stages once, in order.

    ``stage_cycles[k][s]``: cycles stage ``s`` spends on chunk ``k``; ``links[k][s]``: ``(busy,
    latency, ...)`` of the crossing into stage ``s`` (index 0, the loop back, is not taken;
    ``None``: no crossings); ``release[k]``: the cycle chunk ``k``'s input is ready (default
    0, all of them). Chunk ``k`` enters stage ``s`` when it has crossed into it and chunk
    ``k - 1`` has left it; a link carries one chunk at a time. Extra fields of a crossing that
    relays on the receiving stage's links are not modelled here.
    """
    n_stages = len(stage_cycles[0]) if stage_cycles else 0
    stage_free, link_free = [0] * n_stages, [0] * n_stages
    ends = []
    for k, cycles in enumerate(stage_cycles):
        t = int(release[k]) if release is not None else 0
        for s in range(n_stages):
            if s > 0 and links is not None:
                busy, latency = int(links[k][s][0]), int(links[k][s][1])
                start = max(t, link_free[s])
                link_free[s] = start + busy
                t = start + busy + latency
            start = max(t, stage_free[s])
            stage_free[s] = start + int(cycles[s])
            t = stage_free[s]
        ends.append(t)
    return ends


def one_row_pipeline(occ, lat, record) -> tuple[np.ndarray, np.ndarray]:
    """The ``asic_pipeline`` kernel's ``(finish, starts)`` for one row (one sequence, one token
    a step), from sums. With one row nothing ever waits: its token of step ``t`` enters when
    that of ``t - 1`` has left, and every unit a stage takes was last held by an earlier stage
    of the same token or of an earlier one, which had let it go before the token moved on
    (``start + occ <= start + occ + lat``), so every stage starts when the stage before it
    ends, expert units and shared units alike. ``occ``: the stages' occupancy
    (:class:`~pyaccel.sim.contract.StageOccupancy`); ``lat`` per stage; ``record`` per step."""
    base, cols, col_stage = occ
    fixed = int(base.sum()) - int(base[col_stage].sum()) + int(np.asarray(lat).sum())
    per_step = cols.sum(axis=1, dtype=np.int64) + fixed
    finish = np.cumsum(per_step).reshape(-1, 1)
    recorded = np.flatnonzero(record)
    starts = np.zeros((len(recorded), 1, len(base)), dtype=np.int64)
    for r, t in enumerate(recorded.tolist()):
        step = occ.row(t) + lat
        begin = int(finish[t - 1, 0]) if t else 0
        starts[r, 0] = begin + np.cumsum(step) - step
    return finish, starts
