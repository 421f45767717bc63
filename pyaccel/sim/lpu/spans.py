"""A LPU pass's events: spans of every op on every chip of its stage, the hops between stages,
and the bytes each chip sends over its C2C links (the engine's heatmap arrays)."""

from __future__ import annotations

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
            hop = _hop_spans(sim, i, ops[-1].layer, chips, t + sch.cycles, sent, links)
            out.append(SpanColumns.of_rows(hop))
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
            sends = np.asarray(coll.send_bytes[:k], dtype=np.int64)
            by_rank[: len(sends)] += times * sends
            if coll.slot_bytes:
                rank, slot, nb = np.array(coll.slot_bytes, dtype=np.int64).T
                np.add.at(by_slot, (rank, slot), times * nb)
        hit = sim.c2c_bytes_of[id(sch)] = (sch, by_rank, by_slot)
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


def _hop_spans(sim, i: int, layer, chips, end: int, sent, links) -> list[Span]:
    """The hop after stage ``i`` (leaving at ``end``): each sending chip's link span and the
    hop's fixed latency; adds its bytes to ``sent`` and ``links``."""
    hop = sim.hops[i]
    nxt = sim.stages[(i + 1) % len(sim.stages)][0]
    both = list(chips) + list(nxt)
    out = []
    for rank, slot, nb in hop.slot_bytes:
        links[both[rank], slot] += nb
    for rank, c in enumerate(both):
        if rank < len(hop.send_bytes) and hop.send_bytes[rank]:
            sent[c] += hop.send_bytes[rank]
            out.append(Span(layer, f"stage{i}.hop", "stage_hop", c, "c2c_link",
                            end + hop.send_start[rank],
                            max(1, hop.send_end[rank] - hop.send_start[rank]),
                            hop.send_bytes[rank]))  # fmt: skip
    lat_s = end + max(hop.send_end)
    out.append(Span(layer, f"stage{i}.hop", "stage_hop", chips[0], "c2c_latency", lat_s,
                    max(0, end + hop.cycles - lat_s)))  # fmt: skip
    # the stream transit to the C2C ports and, on the next stage, back to its VXM
    out.append(Span(layer, f"stage{i}.hop", "stage_hop", chips[0], "fixed_latency",
                    end + hop.cycles, TRANSITS_PER_C2C * sim.chip.transit))  # fmt: skip
    return out
