"""The ops of a step on their machine's roofline (``report --json``'s ``roofline``): per unit, the
peak memory bandwidth and arithmetic rates the lower bound uses, and each op's operational
intensity (FLOPs per byte it moves) and achieved rate (its FLOPs per unit over the time its
busiest unit spends on it in the first recorded step)."""

from __future__ import annotations

import math

import numpy as np

# each op's numbers a roofline plot divides by or draws on log axes: (key, may it be 0)
_OP_NUMBERS = (("flops", False), ("bytes", False), ("units", False), ("emulated_s", False),
               ("peak_flops_per_s", True))  # fmt: skip


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
        if not busy.get(op.name) or not op.flops or not op.mem_bytes:  # drawn on log axes
            continue
        ops.append({"op": op.name, "kind": op.kind, "class": op.op_class, "flops": int(op.flops),
                    "bytes": int(op.mem_bytes), "units": units.get(op.layer, 1),
                    "emulated_s": busy[op.name],
                    "peak_flops_per_s": float(rates.compute(op))})  # fmt: skip
    return {"memory_bytes_per_s": float(rates.mem_bytes_per_s),
            "memory_resource": rates.mem_resource,
            "compute_resource": rates.compute_resource, "ops": ops}  # fmt: skip


def malformed(roof: dict) -> str | None:
    """The first field of a report's ``roofline`` (:func:`roofline_points`, read back from a
    file) that a plot cannot draw, e.g. ``roofline.ops[3].bytes is 0: must be a number > 0``;
    ``None`` when every field is fine."""
    bw = roof.get("memory_bytes_per_s")
    if not _number(bw, zero_ok=False):
        return f"roofline.memory_bytes_per_s is {bw!r}: must be a number > 0"
    for key in ("memory_resource", "compute_resource"):
        if not isinstance(roof.get(key), str):
            return f"roofline.{key} is {roof.get(key)!r}: must be a resource class name"
    for i, op in enumerate(roof["ops"]):
        if not isinstance(op, dict):
            return f"roofline.ops[{i}] is {op!r}: must be an object"
        for key, zero_ok in _OP_NUMBERS:
            if not _number(op.get(key), zero_ok):
                return (f"roofline.ops[{i}].{key} is {op.get(key)!r}: must be a number "
                        f"{'>=' if zero_ok else '>'} 0")  # fmt: skip
        if not isinstance(op.get("class"), str):
            return f"roofline.ops[{i}].class is {op.get('class')!r}: must be an op class name"
    return None


def _number(value, zero_ok: bool) -> bool:
    """A finite JSON number (not a bool), > 0 or, ``zero_ok``, >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and (value >= 0 if zero_ok else value > 0)


def _busiest_unit_seconds(trace, names: set[str]) -> dict[str, float]:
    """Per graph op of the first recorded step: the largest, over units, of the time covered
    by its spans on that unit (a span named ``op`` or ``op.PART``, either with a user's tag
    ``[uN]``, as an ASIC's batch has them). Spans are grouped once by (op, unit)."""
    from .report import grouped_union_cycles

    ev = trace.events
    mask = ev["step"] == ev["step"][0]
    of_label: dict = {}
    for label in set(ev["op"][mask].tolist()):
        op = _graph_op(str(label), names)
        if op is not None:
            of_label[label] = op
    pairs: dict = {}  # (op, unit) -> group id
    group = np.array([pairs.setdefault((of_label[lab], unit), len(pairs)) if lab in of_label
                      else -1 for lab, unit in zip(ev["op"][mask].tolist(),
                                                   ev["unit"][mask].tolist(), strict=True)],
                     dtype=np.int64)  # fmt: skip
    keep = group >= 0
    covered = grouped_union_cycles(group[keep], ev["start"][mask][keep],
                                   ev["duration"][mask][keep]).tolist()  # fmt: skip
    out: dict[str, float] = {}
    for (op, _), g in pairs.items():
        out[op] = max(out.get(op, 0.0), covered[g] / trace.clock_hz)
    return out


def _graph_op(label: str, names: set[str]) -> str | None:
    """The graph op a span label belongs to: the label itself, or the label less its last
    ``.PART``, once a user's tag (``L0.qkv_proj[u3]``) is set aside; ``None`` for a span of
    no graph op (a collective between ops, a stage hop)."""
    name = label.split("[", 1)[0] if label.endswith("]") else label
    if name in names:
        return name
    head = name.rsplit(".", 1)[0]
    return head if head in names else None
