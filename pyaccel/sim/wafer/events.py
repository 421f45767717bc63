"""A wafer pass's events: the spans of its entries (ops, hand-offs, host I/O) on the wafers they
run on, and its per-PE heatmaps (reserved link cycles, resident SRAM bytes)."""

from __future__ import annotations

import numpy as np

from ..contract import Span


def pass_spans(entries: list, copies: dict) -> list[Span]:
    """A pass's entries one after another, each part of an entry's cost a span on its wafer
    and, without its bytes and FLOPs, on the other wafers of its layer's group (``copies``)."""
    out, t = [], 0
    for e in entries:
        first = True
        others = copies.get(e.layer, ()) if e.kind != "host_io" else ()
        for resource, n in e.cost.parts:
            if n <= 0:
                continue
            label = e.name if first else f"{e.name}.{resource}"
            out.append(Span(e.layer, label, e.kind, e.unit, resource, t, n,
                            e.n_bytes if first else 0, e.flops if first else 0))  # fmt: skip
            out += [Span(e.layer, label, e.kind, w, resource, t, n, 0, 0) for w in others]
            t += n
            first = False
    return out


HEATMAPS = ("link_busy_cycles", "sram_bytes")  # the names :func:`heatmaps` gives, in order


def heatmaps(wp, entries: list, n_units: int, p) -> dict:
    """Per-PE heatmaps (units x height x width): reserved link cycles in one pass and resident
    SRAM bytes (code and buffers on every usable PE, plus each region's tiles and KV share), on
    every wafer of a layer's group."""
    hgt, wid = int(p.usable_height_pes), int(p.usable_width_pes)
    busy = np.zeros((n_units, hgt, wid), dtype=np.int32)
    sram = np.full((n_units, hgt, wid), int(p.pe_code_bytes) + int(p.pe_buffer_bytes),
                   dtype=np.int32)  # fmt: skip
    lines: dict = {}  # region -> (busy per x position, busy per y position)
    for e in entries:
        r = e.region
        if r is None:
            continue
        acc = lines.setdefault(r, (np.zeros(r.w, dtype=np.int64), np.zeros(r.h, dtype=np.int64)))
        for axis, n in ((0, r.w), (1, r.h)):
            vec = e.cost.busy.get((axis, n))
            if vec is not None:  # lines of a whole region (expert bands are left out)
                acc[axis][:] += vec
    keys_of: dict = {}
    for key, reg in wp.regions.items():
        keys_of.setdefault(reg, []).append(key)
    for r, (a, b) in lines.items():
        for w in (r.wafer, *wp.copies.get(keys_of[r][0], ())):
            busy[w, r.y0 : r.y0 + r.h, r.x0 : r.x0 + r.w] += a[None, :] + b[:, None]
    for r, keys in keys_of.items():
        ops = [op for k in keys for op in wp.graph.ops_of(k)]
        w_b, kv_b = wp.coster_of(keys[0]).pe_bytes(ops, r.w, r.h)
        for w in (r.wafer, *wp.copies.get(keys[0], ())):
            sram[w, r.y0 : r.y0 + r.h, r.x0 : r.x0 + r.w] += w_b + kv_b
    return {"link_busy_cycles": busy, "sram_bytes": sram}
