"""A LPU pass's events: spans of every op on every chip of its stage, the hops between stages,
and the bytes each chip sends over its C2C links (the engine's heatmap arrays)."""

from __future__ import annotations

import numpy as np

from ..contract import Span
from .program import TRANSITS_PER_C2C


def pass_spans(sim, scheds, stage_c) -> tuple[list[Span], np.ndarray, np.ndarray]:
    """Spans of one pass (cycles from its start): per op per chip per resource class, plus
    stage hops; and the bytes each chip sent over C2C links, in all and per link slot (0..6
    node peers, then the global ports)."""
    n_chips = max(c for chips, _ in sim.stages for c in chips) + 1
    sent = np.zeros(n_chips, dtype=np.int64)
    links = np.zeros((n_chips, sim.n_link_slots), dtype=np.int64)
    out, t = [], 0
    for i, ((sch, ops), (chips, _)) in enumerate(zip(scheds, sim.stages, strict=True)):
        for o, res, s, d, nb in sch.op_events():
            op = ops[o]
            out += [Span(op.layer, op.name, op.kind, c, res, t + s, d, nb) for c in chips]
        for coll in sch.program.collectives.values():
            for rank, c in enumerate(chips):
                if rank < len(coll.send_bytes):
                    sent[c] += coll.send_bytes[rank]
            for rank, slot, nb in coll.slot_bytes:
                links[chips[rank], slot] += nb
        if sim.hops[i] is not None:
            out += _hop_spans(sim, i, ops[-1].layer, chips, t + sch.cycles, sent, links)
        t += stage_c[i]
    return out, sent, links


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
