"""The ops of a step on their machine's roofline (``report --json``'s ``roofline``): per unit, the
peak memory bandwidth and arithmetic rates the lower bound uses, and each op's operational
intensity (FLOPs per byte it moves) and achieved rate (its FLOPs per unit over the time its
busiest unit spends on it in the first recorded step)."""

from __future__ import annotations

import numpy as np


def roofline_points(trace) -> dict:
    """``{"memory_bytes_per_s", "memory_resource", "compute_resource", "ops": [...]}`` of a trace
    that carries its inputs (empty otherwise); each op: ``op``, ``kind``, ``class``, ``flops`` and
    ``bytes`` (the whole op), ``units`` it runs on, ``emulated_s`` (its busiest unit's time,
    union of its spans), ``peak_flops_per_s`` (per unit, 0 for an op without arithmetic
    units)."""
    if trace.inputs is None or not trace.n_events:
        return {}
    from .sim.inputs import engine_module, run_graph

    model, system, placement, work = trace.inputs
    graph = run_graph(model, system, work)
    rates = engine_module(system.kind).rates(system.spec, graph.workload)
    units = {s.layer: len(s.units) for s in placement.layers}
    busy = _busiest_unit_seconds(trace, {op.name for op in graph.ops})
    ops = []
    for op in graph.ops:
        if op.name not in busy or not op.flops or not op.mem_bytes:
            continue
        ops.append({"op": op.name, "kind": op.kind, "class": op.op_class, "flops": int(op.flops),
                    "bytes": int(op.mem_bytes), "units": units.get(op.layer, 1),
                    "emulated_s": busy[op.name],
                    "peak_flops_per_s": float(rates.compute(op))})  # fmt: skip
    return {"memory_bytes_per_s": float(rates.mem_bytes_per_s),
            "memory_resource": rates.mem_resource,
            "compute_resource": rates.compute_resource, "ops": ops}  # fmt: skip


def _busiest_unit_seconds(trace, names: set[str]) -> dict[str, float]:
    """Per graph op of the first recorded step: the largest, over units, of the time covered
    by its spans on that unit (a span named ``op`` or ``op.PART``)."""
    from .report import union_cycles

    ev = trace.events
    step = ev["step"][0]
    mask = ev["step"] == step
    labels = ev["op"][mask]
    base = np.array([lab if lab in names else lab.rsplit(".", 1)[0] for lab in labels.tolist()])
    units, starts, durs = ev["unit"][mask], ev["start"][mask], ev["duration"][mask]
    out: dict[str, float] = {}
    for name in names & set(base.tolist()):
        sel = base == name
        per_unit = [union_cycles(starts[sel & (units == u)], durs[sel & (units == u)])
                    for u in np.unique(units[sel])]  # fmt: skip
        out[name] = max(per_unit) / trace.clock_hz
    return out
