"""A wafer pass's events: the spans of its entries (ops, hand-offs, host I/O) on the wafers they
run on, and its per-PE heatmaps (reserved link cycles, resident SRAM bytes)."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from ...trace import SpanColumns


def pass_spans(entries: list, copies: dict) -> SpanColumns:
    """A pass's entries one after another, each part of an entry's cost a span on its wafer
    and, without its bytes and FLOPs, on the other wafers of its layer's group (``copies``)."""
    rows, units, at = [], [], 0
    for e in entries:
        first = True
        others = copies.get(e.layer, ()) if e.kind != "host_io" else ()
        for resource, n in e.cost.parts:
            if n <= 0:
                continue
            label = e.name if first else f"{e.name}.{resource}"
            rows.append((e.layer, label, e.kind, e.unit, resource, at, n,
                         e.n_bytes if first else 0, e.flops if first else 0))  # fmt: skip
            units.append((e.unit, *others))
            at += n
            first = False
    spans = SpanColumns.of_rows(rows)
    n_on = np.array([len(u) for u in units], dtype=np.int64)
    if not len(rows) or (n_on == 1).all():
        return spans
    src = np.repeat(np.arange(len(rows)), n_on)  # each part on its wafer, then on the others
    copy = np.arange(len(src)) - np.repeat(np.cumsum(n_on) - n_on, n_on) > 0
    cols = {f.name: getattr(spans, f.name)[src] for f in fields(SpanColumns)}
    cols["unit"] = np.fromiter((w for u in units for w in u), dtype=np.int64, count=len(src))
    cols["n_bytes"][copy] = 0
    cols["flops"][copy] = 0
    return SpanColumns(**cols)


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
