"""GPU/HBM engine: each op is a kernel on every tensor-parallel rank of its pipeline stage.

A kernel costs one launch (a kernel boundary inside a CUDA graph) plus the larger of its HBM time
(bytes at the bandwidth a copy microbenchmark reaches) and its tensor-core time (FLOPs at the
format's dense rate). Activations between kernels stay in L2 when they fit; weights and the KV
cache stream from HBM every step. Tensor parallelism adds an all-reduce over NVLink before each
residual add (one-shot or ring, whichever is faster for the message, as NCCL and vLLM's custom
all-reduce choose); pipeline stages pass activations over NVLink or the inter-node network.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.graph import ACT_BYTES
from ..units import cycles
from .pipeline import micro_batch_sizes, pipeline_cycles

RESOURCES = ("hbm", "tensor_core", "nvlink", "node_link", "fixed_latency")
# What-if knobs: for each resource class the parameters whose rate doubles (or latency halves).
WHAT_IF = {
    "hbm": (("hbm_peak_bytes_per_s", "hbm_achievable_bytes_per_s"), 2.0),
    "tensor_core": (
        ("bf16_flops_per_s", "fp8_flops_per_s", "fp4_flops_per_s", "int8_ops_per_s"),
        2.0,
    ),
    "nvlink": (("nvlink_bytes_per_s",), 2.0),
    "node_link": (("internode_bytes_per_s",), 2.0),
    "fixed_latency": (("kernel_launch_s", "nvlink_latency_s", "internode_latency_s"), 0.5),
}
ASSUMPTIONS = (
    "gpu.fusion: residual adds are fused into the next RMSNorm (vLLM fused_add_rms_norm); every "
    "other graph op is one kernel",
    "gpu.weights_from_hbm: weights and KV cache stream from HBM every step; activations stay in "
    "L2 when an op's activations fit in it",
    "gpu.vector_ops_memory_bound: norms, RoPE, activations and sampling are timed by their bytes "
    "(their FLOPs are negligible)",
    "gpu.low_bit_dequant: formats without a native tensor-core rate on this GPU (e.g. int4, "
    "hc1, fp4 on Hopper) compute at the BF16 rate after dequantisation (W4A16-style)",
    "gpu.tp_allreduce: one all-reduce of the activations before each residual add when TP > 1; "
    "the LM head's logits are all-gathered",
)


@dataclass(frozen=True)
class Kernel:
    """One kernel on the busiest rank of its stage: cycles of each part, bytes and FLOPs."""

    op: str
    kind: str
    layer: object
    stage: int
    resource: str  # the resource its body is bound by
    launch: int
    latency: int
    body: int
    n_bytes: int
    flops: int

    @property
    def cycles(self) -> int:
        """Total cycles of the kernel (launch + fixed latency + body)."""
        return self.launch + self.latency + self.body


def _share(total: int, tp: int, sharded: bool) -> int:
    """The largest rank's share of ``total`` (ranks differ by at most one unit)."""
    return -(-total // tp) if sharded and tp > 1 else total


def _tc_rate(p, compute: str) -> float:
    """Dense tensor-core rate for a format's arithmetic, falling back to BF16."""
    rate = {"fp8": p.fp8_flops_per_s, "int8": p.int8_ops_per_s, "fp4": p.fp4_flops_per_s}.get(
        compute, 0.0
    )
    return rate if rate > 0 else p.bf16_flops_per_s


class GpuCost:
    """Cost of every graph op on one spec and TP width (cycles of the spec's clock)."""

    def __init__(
        self, spec, tp: int, weights_compute: str, expert_compute: str, kv_compute: str, mla: bool
    ):
        self.p, self.clock, self.tp, self.mla = spec.params, spec.clock_hz, tp, mla
        self.rates = {
            "weights": _tc_rate(self.p, weights_compute),
            "experts": _tc_rate(self.p, expert_compute),
            "kv": _tc_rate(self.p, kv_compute),
        }

    def kernel(self, op, stage: int) -> Kernel:
        """The kernel that runs ``op`` on the stage's busiest rank."""
        p, tp = self.p, self.tp
        sharded = op.split != "replicate" and not (op.kind == "sampling")
        weight = _share(op.weight_bytes, tp, sharded)
        kv_sharded = sharded and not (self.mla and op.kind == "attention")
        kv = _share(op.kv_read_bytes + op.kv_write_bytes, tp, kv_sharded)
        act = _share(op.act_bytes, tp, sharded)
        hbm_bytes = weight + kv + (act if act > p.l2_bytes else 0)
        flops = _share(op.flops, tp, sharded)
        rate = self._rate(op)
        mem_s = hbm_bytes / p.hbm_achievable_bytes_per_s
        tc_s = flops / rate if rate else 0.0
        resource = "tensor_core" if tc_s > mem_s else "hbm"
        return Kernel(
            op.name,
            op.kind,
            op.layer,
            stage,
            resource,
            cycles(p.kernel_launch_s, self.clock),
            0,
            cycles(max(mem_s, tc_s), self.clock),
            hbm_bytes,
            flops,
        )

    def _rate(self, op) -> float:
        if op.op_class == "matmul":
            return self.rates["experts" if op.kind.startswith("experts_") else "weights"]
        if op.op_class == "attention":
            return self.rates["kv"]
        return 0.0  # vector ops: memory-bound (gpu.vector_ops_memory_bound)

    def collective(self, kind: str, layer, stage: int, n_bytes: int, name: str) -> Kernel:
        """A collective over the stage's TP ranks via NVLink: a launch, the fixed small-message
        latency, then the data each rank receives. ``allreduce``: one-shot ((t-1) peer buffers)
        or ring (2(t-1)/t of the message), whichever is less, as NCCL and vLLM pick by size;
        ``allgather``: the (t-1)/t of a sharded tensor a rank lacks."""
        p, tp = self.p, self.tp
        share = min(tp - 1, 2 * (tp - 1) / tp) if kind == "allreduce" else (tp - 1) / tp
        move = share * n_bytes / p.nvlink_bytes_per_s
        launch = cycles(p.kernel_launch_s, self.clock)
        latency = cycles(p.nvlink_latency_s, self.clock)
        return Kernel(name, kind, layer, stage, "nvlink", launch, latency,
                      cycles(move, self.clock), n_bytes, 0)  # fmt: skip

    def transfer(self, layer, stage: int, n_bytes: int, internode: bool) -> Kernel:
        """Activations from one pipeline stage to the next (NVLink or the node network)."""
        p = self.p
        bw, lat = (
            (p.internode_bytes_per_s, p.internode_latency_s)
            if internode
            else (p.nvlink_bytes_per_s, p.nvlink_latency_s)
        )
        return Kernel(
            f"send_stage{stage}",
            "send",
            layer,
            stage,
            "node_link" if internode else "nvlink",
            0,
            cycles(lat, self.clock),
            cycles(n_bytes / bw, self.clock),
            n_bytes,
            0,
        )


def _kernels_for(graph, cost: GpuCost, stage_of: dict, gpus_per_node: int) -> list[Kernel]:
    """Kernels of one micro-batch pass, in order, with collectives and stage transfers."""
    out: list[Kernel] = []
    tp, pending_reduce = cost.tp, False
    act = ACT_BYTES * graph.workload.batch * graph.model.hidden
    for i, op in enumerate(graph.ops):
        stage = stage_of[op.layer]
        if op.kind.endswith("residual"):  # fused into the next norm (gpu.fusion)
            if pending_reduce and tp > 1:
                out.append(
                    cost.collective("allreduce", op.layer, stage, act, f"{op.name}.allreduce")
                )
            pending_reduce = False
        else:
            out.append(cost.kernel(op, stage))
            pending_reduce |= op.split in ("row", "experts")
        if op.kind == "lm_head" and tp > 1:
            logits = ACT_BYTES * op.m * op.n
            out.append(cost.collective("allgather", op.layer, stage, logits, "lm_head.allgather"))
        nxt = graph.ops[i + 1] if i + 1 < len(graph.ops) else None
        if nxt is not None and stage_of[nxt.layer] != stage:
            internode = (stage * tp) // gpus_per_node != ((stage + 1) * tp) // gpus_per_node
            out.append(cost.transfer(op.layer, stage, act, internode))
    return out


def _stage_cycles(kernels: list[Kernel], n_stages: int) -> list[int]:
    out = [0] * n_stages
    for k in kernels:
        out[k.stage] += k.cycles
    return out


def roofline_rates(spec, work) -> dict:
    """Peak rates the lower bound uses: HBM at its datasheet rate, each op's arithmetic at its
    format's dense tensor-core peak (vector ops: memory only), NVLink per direction."""
    p = spec.params
    weights = _tc_rate(p, work.weights_format.compute)
    experts = _tc_rate(p, work.expert_weights_format.compute)
    kv = _tc_rate(p, work.kv_format.compute)

    def compute(op) -> float:
        if op.op_class == "matmul":
            return experts if op.kind.startswith("experts_") else weights
        return kv if op.op_class == "attention" else 0.0

    return {
        "mem": p.hbm_peak_bytes_per_s,
        "mem_resource": "hbm",
        "compute": compute,
        "compute_resource": "tensor_core",
        "link": p.nvlink_bytes_per_s,
        "link_resource": "nvlink",
    }


def _emit(log, step: int, t0: int, kernels: list[Kernel], tp: int) -> None:
    """Lay one pass's kernels on the timeline of every rank of their stage."""
    t = t0
    for k in kernels:
        ranks = (
            [k.stage * tp + r for r in range(tp)] if k.resource != "node_link" else [k.stage * tp]
        )
        for unit in ranks:
            s = t
            if k.launch:
                s = log.add(
                    step, k.layer, f"{k.op}.launch", k.kind, unit, "fixed_latency", s, k.launch
                )
            if k.latency:
                s = log.add(
                    step, k.layer, f"{k.op}.latency", k.kind, unit, "fixed_latency", s, k.latency
                )
            log.add(step, k.layer, k.op, k.kind, unit, k.resource, s, k.body, k.n_bytes, k.flops)
        t += k.cycles


def _attention_classes(graph, kernels: list[Kernel]) -> dict:
    """Attention kernels grouped by (stage, sliding?): their indices in the pass and a layer of
    each group, so a step re-costs one attention op per group instead of one per layer."""
    groups: dict = {}
    for i, k in enumerate(kernels):
        if k.op.endswith(".attention"):
            key = (k.stage, graph.model.is_sliding(k.layer))
            groups.setdefault(key, []).append(i)
    return groups


class _GpuPass:
    """The kernels of one micro-batch's pass of ``size`` sequences, and its stage cycles at any
    context (only attention depends on it: one kernel per (stage, window) group is re-costed)."""

    def __init__(self, graph, size: int, system, cost: GpuCost, stage_of: dict, pp: int):
        from dataclasses import replace

        from ..model.graph import build_graph

        work = graph.workload
        if size != work.batch:
            work = replace(work, batch=size)
            graph = build_graph(graph.model, work, graph.context, system.spec.native_format)
        self.graph, self.cost = graph, cost
        self.kernels = _kernels_for(graph, cost, stage_of, int(system.spec.params.gpus_per_node))
        self.groups = _attention_classes(graph, self.kernels)
        attn = {i for idx in self.groups.values() for i in idx}
        self.base_c = _stage_cycles([k for i, k in enumerate(self.kernels) if i not in attn], pp)

    def stage_cycles(self, ctx: int, keep: bool) -> list[int]:
        """Cycles of each stage at ``ctx``; with ``keep`` the pass's kernels are updated too."""
        from dataclasses import replace

        from ..model.graph import attention_op

        graph, kernels = self.graph, self.kernels
        stage_c = list(self.base_c)
        for (stage, _), idx in self.groups.items():
            op = attention_op(graph.model, graph.workload, kernels[idx[0]].layer, ctx)
            k = self.cost.kernel(op, stage)
            stage_c[stage] += k.cycles * len(idx)
            if keep:
                for i in idx:
                    kernels[i] = replace(k, op=kernels[i].op, layer=kernels[i].layer)
        return stage_c


def emulate(graph, system, placement, event_steps, progress=None):
    """Emulate ``graph.workload.tokens`` decode steps on GPUs.

    Returns (event log, step cycles, layout notes). The batch is split into micro-batches over
    the pipeline stages (:func:`micro_batch_sizes`); events lay out the pass of the first
    (largest) micro-batch for ``event_steps``. Only attention depends on the context, so each
    step re-costs one attention kernel per (stage, window) group and micro-batch size.
    """
    from ..trace import EventLog

    spec, work = system.spec, graph.workload
    tp, pp = placement.layout.tp, placement.layout.pp
    sizes = micro_batch_sizes(work.batch, pp)
    stage_of = {s.layer: s.region.stage for s in placement.layers}
    cost = GpuCost(
        spec,
        tp,
        work.weights_format.compute,
        work.expert_weights_format.compute,
        work.kv_format.compute,
        graph.model.attention == "mla",
    )
    passes = {size: _GpuPass(graph, size, system, cost, stage_of, pp) for size in set(sizes)}
    first = passes[sizes[0]]
    log, steps, t0 = EventLog(), [], 0
    for step in range(work.tokens):
        ctx = work.context + step
        keep = step in event_steps
        stage_c = {size: p.stage_cycles(ctx, keep and p is first) for size, p in passes.items()}
        step_c = pipeline_cycles(stage_c, sizes)
        if keep:
            _emit(log, step, t0, first.kernels, tp)
        steps.append(step_c)
        t0 += step_c
        if progress:
            progress(step)
    meta = {"tp": tp, "pp": pp, "micro_batches": len(sizes), "micro_batch_size": sizes[0],
            "micro_batch_sizes": sizes}  # fmt: skip
    return log, steps, meta
