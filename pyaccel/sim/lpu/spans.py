"""A LPU pass's events: spans of every op on every chip of its stage, the hops between stages,
and the bytes each chip sends over its C2C links (the engine's heatmap arrays)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...trace import SpanColumns, layer_key
from ..contract import Span
from .kinds import TRANSITS_PER_C2C


def pass_spans(sim, scheds, stage_c) -> tuple[SpanColumns, np.ndarray, np.ndarray]:
    """Spans of one pass (cycles from its start): per op per chip per resource class, plus
    stage hops; and the bytes each chip sent over C2C links, in all and per link slot (0..6
    node peers, then the global ports)."""
    n_chips = max(c for chips, _ in sim.stages for c in chips) + 1
    sent = np.zeros(n_chips, dtype=np.int64)
    links = np.zeros((n_chips, sim.n_link_slots), dtype=np.int64)
    out, t = [], 0
    for i, ((sch, ops), (chips, _)) in enumerate(zip(scheds, sim.stages, strict=True)):
        out.append(_op_spans(sch, ops, chips, t))
        by_rank, by_slot = _c2c_bytes(sim, sch, len(chips))
        sent[list(chips)] += by_rank
        links[list(chips)] += by_slot
        if sim.hops[i] is not None:
            spans, chip_sent, slot_sent = _hop_template(sim, i, ops[-1].layer, chips)
            out.append(replace(spans, start=spans.start + (t + sch.cycles)))
            np.add.at(sent, chip_sent[0], chip_sent[1])
            np.add.at(links, (slot_sent[0], slot_sent[1]), slot_sent[2])
        t += stage_c[i]
    return SpanColumns.concat(out), sent, links


def _c2c_bytes(sim, sch, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(bytes each rank sends, bytes each rank sends per link slot) over a scheduled program's
    collectives on a ``k``-chip stage, counted once per program (stages alike share it)."""
    hit = sim.c2c_bytes_of.get(id(sch))
    if hit is None or hit[0] is not sch:
        by_rank = np.zeros(k, dtype=np.int64)
        by_slot = np.zeros((k, sim.n_link_slots), dtype=np.int64)
        colls: dict = {}  # the network hands out one object per collective: count repeats
        for coll in sch.program.collectives.values():
            colls[id(coll)] = (coll, colls.get(id(coll), (None, 0))[1] + 1)
        for coll, times in colls.values():
            sends, slots = _coll_arrays(sim, coll, k)
            by_rank[: len(sends)] += times * sends
            if slots is not None:
                rank, slot, nb = slots
                np.add.at(by_slot, (rank, slot), times * nb)
        hit = sim.c2c_bytes_of[id(sch)] = (sch, by_rank, by_slot)
    return hit[1], hit[2]


def _coll_arrays(sim, coll, k: int) -> tuple:
    """A collective's bytes sent by each of ``k`` ranks, and its (rank, slot, bytes) columns
    (None when it uses no link slot), made once per collective object: the network hands
    out one object per collective, which every step's programs share."""
    hit = sim.coll_bytes_of.get((id(coll), k))
    if hit is None or hit[0] is not coll:
        sends = np.asarray(coll.send_bytes[:k], dtype=np.int64)
        slots = np.array(coll.slot_bytes, dtype=np.int64).T if coll.slot_bytes else None
        hit = sim.coll_bytes_of[id(coll), k] = (coll, sends, slots)
    return hit[1], hit[2]


def _op_spans(sch, ops, chips, t: int) -> SpanColumns:
    """Each op's spans (:meth:`Scheduled.op_events`) on every chip of its stage, the chips
    innermost, starting ``t`` cycles into the pass."""
    o, res, start, dur, nb = sch.op_event_columns()
    k = len(chips)
    layer = np.array([layer_key(op.layer) for op in ops], dtype=object)
    name = np.array([op.name for op in ops], dtype=object)
    kind = np.array([op.kind for op in ops], dtype=object)
    at = np.repeat(o, k)
    return SpanColumns(
        layer[at], name[at], kind[at], np.tile(np.asarray(chips, dtype=np.int64), len(o)),
        np.repeat(res, k), np.repeat(start + t, k), np.repeat(dur, k), np.repeat(nb, k),
        np.zeros(len(at), dtype=np.int64),
    )  # fmt: skip


def _hop_template(sim, i: int, layer, chips) -> tuple[SpanColumns, tuple, tuple]:
    """The hop after stage ``i``, with starts from the cycle it leaves: each sending chip's
    link span, the hop's fixed latency and the stream transits; and the bytes it adds to each
    chip's sent total ((chips, bytes)) and link slots ((chips, slots, bytes)). A hop is the
    same on every pass of a run, so it is built once (``sim.hop_spans_of``)."""
    hit = sim.hop_spans_of.get(i)
    if hit is not None:
        return hit
    hop = sim.hops[i]
    nxt = sim.stages[(i + 1) % len(sim.stages)][0]
    both = list(chips) + list(nxt)
    senders = [r for r, c in enumerate(both) if r < len(hop.send_bytes) and hop.send_bytes[r]]
    rows = [Span(layer, f"stage{i}.hop", "stage_hop", both[r], "c2c_link", hop.send_start[r],
                 max(1, hop.send_end[r] - hop.send_start[r]), hop.send_bytes[r])
            for r in senders]  # fmt: skip
    lat_s = max(hop.send_end)
    rows.append(Span(layer, f"stage{i}.hop", "stage_hop", chips[0], "c2c_latency", lat_s,
                     max(0, hop.cycles - lat_s)))  # fmt: skip
    # the stream transit to the C2C ports and, on the next stage, back to its VXM
    rows.append(Span(layer, f"stage{i}.hop", "stage_hop", chips[0], "fixed_latency",
                     hop.cycles, TRANSITS_PER_C2C * sim.chip.transit))  # fmt: skip
    by_slot = [(both[r], slot, nb) for r, slot, nb in hop.slot_bytes]
    hit = sim.hop_spans_of[i] = (
        SpanColumns.of_rows(rows),
        _ints([both[r] for r in senders], [hop.send_bytes[r] for r in senders]),
        _ints(*zip(*by_slot, strict=True)) if by_slot else _ints([], [], []),
    )
    return hit


def _ints(*cols) -> tuple[np.ndarray, ...]:
    """Each of ``cols`` as an int64 array."""
    return tuple(np.array(c, dtype=np.int64) for c in cols)
