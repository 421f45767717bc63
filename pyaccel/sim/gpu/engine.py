"""GPU/HBM engine: each op is a kernel on every tensor-parallel rank of its pipeline stage.

A kernel costs one launch (a kernel boundary inside a CUDA graph), then, when it reads HBM, the
HBM latency before its first bytes arrive, then the larger of its HBM time (bytes at the
bandwidth a copy microbenchmark reaches) and its tensor-core time (FLOPs at the format's dense
rate): a kernel's achieved bandwidth grows with the bytes it moves (gpu.hbm_first_access).
Activations between kernels stay in L2 when they fit; weights and the KV cache stream from HBM
every step. Tensor parallelism adds an all-reduce over NVLink before each residual add (one-shot
or ring, whichever is faster for the message, as NCCL and vLLM's custom all-reduce choose);
pipeline stages pass activations over NVLink or the inter-node network. The sampler's kernels
run outside the CUDA graph, and the host's own per-step work (scheduling, inputs, outputs)
overlaps the step or follows it (:func:`host_step`).
"""

from __future__ import annotations

from dataclasses import fields
from functools import partial
from itertools import pairwise

import numpy as np

from ...model.ops import ACT_BYTES
from ...trace import SpanColumns
from ...units import cycles
from ..contract import (
    MICRO_BATCHES,
    BoundRates,
    HostStep,
    PassTiming,
    RoutedSteps,
    StepShape,
    StepsTiming,
)
from . import expert_parallel as ep
from .cost import GpuCost, Kernel, launch_s, sampler_launch_s, tensor_core_rate

# ``sync``: the fixed start-up of each transfer between GPUs (a collective's or a stage send's
# small-message latency: the ranks' flag handshake and the wire), apart from its bytes.
# ``host``: the GPU idle, waiting for the host to launch its next kernel (launch_mode = eager).
RESOURCES = ("hbm", "tensor_core", "nvlink", "node_link", "launch", "sync", "host")
# What-if knobs: for each resource class the parameters whose rate doubles (or latency halves).
WHAT_IF = {
    "hbm": (
        ("hbm_peak_bytes_per_s", "hbm_achievable_bytes_per_s", "hbm_latency_s"),
        (2.0, 2.0, 0.5),
    ),  # fmt: skip
    "tensor_core": (
        ("bf16_flops_per_s", "fp8_flops_per_s", "fp4_flops_per_s", "int8_ops_per_s"),
        2.0,
    ),
    "nvlink": (("nvlink_bytes_per_s", "nvlink_effective_bytes_per_s"), 2.0),
    "node_link": (("internode_bytes_per_s",), 2.0),
    "launch": (("kernel_launch_s", "kernel_launch_eager_s"), 0.5),
    "sync": (("nvlink_latency_s", "internode_latency_s"), 0.5),
    "host": (("host_launch_s", "step_host_s"), 0.5),
}
ASSUMPTIONS = (
    "gpu.expert_parallel: experts laid out expert-parallel (expert_layout=ep): each GPU of a "
    "stage runs attention for its own "
    "sequences and its own experts for the (token, expert) pairs routed to them; a MoE layer "
    "takes the slowest GPU's expert kernels plus a dispatch and a combine all-to-all, each a "
    "launch, NVLink's small-message latency and the bytes of the GPU that sends or receives "
    "the most at NCCL's effective rate (one copy of a token per destination GPU, as DeepEP)",
    "gpu.fusion: residual adds are fused into the next RMSNorm (vLLM fused_add_rms_norm); every "
    "other graph op is one kernel",
    "gpu.weights_from_hbm: weights and KV cache stream from HBM every step; activations stay in "
    "L2 when an op's activations fit in it",
    "gpu.hbm_first_access: a kernel that reads HBM waits hbm_latency_s (a pointer-chase "
    "load latency) for its first bytes, once; the rest stream at the achievable bandwidth, "
    "overlapping its arithmetic",
    "gpu.vector_ops_memory_bound: norms, RoPE, activations and sampling are timed by their bytes "
    "(their FLOPs are negligible)",
    "gpu.low_bit_dequant: formats without a native tensor-core rate on this GPU (e.g. int4, "
    "hc1, fp4 on Hopper) compute at the BF16 rate after dequantisation (W4A16-style)",
    "gpu.eager_host: with launch_mode = eager each stage's host launches its kernels one after "
    "another, host_launch_s each, from the stage's start; a kernel starts when the host has "
    "launched it and the one before has finished (the GPU waits, class host, when the host is "
    "behind)",
    "gpu.sampler_eager: the sampler runs outside the CUDA graph, after it (vLLM V1 and SGLang "
    "both replay the model forward only): its sampler_kernels kernels each cost an eager "
    "launch gap",
    "gpu.step_host: the host's own work each step (schedule, prepare inputs, process outputs) "
    "takes step_host_s; with host_overlap = overlap it prepares the next step during this one "
    "and the GPUs wait only for what is left, with serial they wait for all of it",
    "gpu.tp_allreduce: one all-reduce of the activations before each residual add when TP > 1, "
    "one-shot ((t-1) peer buffers) or ring (RING_ALLREDUCE_PHASES = 2: reduce-scatter then "
    "all-gather, each (t-1)/t of the message), whichever moves less; the LM head's logits are "
    "all-gathered",
)


def host_step(system, placement) -> HostStep | None:
    """The host's own work between decode steps on every GPU (gpu.step_host), shown under the
    sampler whose token it waits for; None when the preset gives it no time."""
    p, clock = system.spec.params, system.spec.clock_hz
    n = cycles(p.step_host_s, clock)
    if not n:
        return None
    last = placement.layers[-1].layer
    return HostStep(n, p.host_overlap == "overlap", tuple(range(placement.n_units)), last,
                    "sampling.step_host", "sampling")  # fmt: skip


def host_cycles(p, clock_hz: float) -> int:
    """Cycles the host takes to launch one kernel: 0 when a CUDA graph replays the step."""
    return cycles(p.host_launch_s, clock_hz) if p.launch_mode == "eager" else 0


def stage_end(kernel_cycles: np.ndarray, host: int) -> int:
    """Cycles from a stage's start to its last kernel's end when its host launches kernel i
    (from 1) by ``i * host`` and each starts once launched and its predecessor has finished:
    the largest over j of ``j * host`` plus the cycles of kernels j to n (gpu.eager_host); the
    plain sum when ``host`` is 0."""
    if not host or not len(kernel_cycles):
        return int(kernel_cycles.sum())
    tail = np.cumsum(kernel_cycles[::-1])[::-1]  # cycles of kernels j..n
    return int((np.arange(1, len(kernel_cycles) + 1, dtype=np.int64) * host + tail).max())


def leaves_node(stage: int, tp: int, gpus_per_node: int) -> bool:
    """Whether the send from pipeline stage ``stage`` (GPUs ``stage * tp`` on) to the next
    crosses from one node to another (the node network) rather than staying on NVLink."""
    return (stage * tp) // gpus_per_node != ((stage + 1) * tp) // gpus_per_node


def _kernels_for(graph, cost: GpuCost, stage_of: dict, gpus_per_node: int) -> list[Kernel]:
    """Kernels of one micro-batch pass, in order, with collectives and stage transfers."""
    out: list[Kernel] = []
    tp, pending_reduce = cost.tp, False
    act = ACT_BYTES * graph.workload.rows * graph.hidden
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
            pending_reduce |= op.reduces
        if op.kind == "lm_head" and tp > 1:
            logits = ACT_BYTES * op.m * op.n
            # the LM head's own (its bound's floor counts it): its row in the report has it
            out.append(cost.collective("allgather", op.layer, stage, logits, "lm_head.allgather",
                                       op.kind))  # fmt: skip
        nxt = graph.ops[i + 1] if i + 1 < len(graph.ops) else None
        if nxt is not None and stage_of[nxt.layer] != stage:
            internode = leaves_node(stage, tp, gpus_per_node)
            out.append(cost.transfer(op.layer, stage, act, internode))
    return out


def _stage_cycles(kernels: list[Kernel], n_stages: int) -> list[int]:
    out = [0] * n_stages
    for k in kernels:
        out[k.stage] += k.cycles
    return out


PIPELINE = MICRO_BATCHES


def n_stages(placement) -> int:
    """Pipeline stages a batch is split over: the placement's PP width."""
    return placement.layout.pp


def data_parallel(placement) -> int:
    """GPUs of a stage that split a micro-batch's sequences: its EP width (attention
    data-parallel), else 1."""
    return placement.layout.ep or 1


def rates(spec, work) -> BoundRates:
    """Peak rates the lower bound uses: HBM at its datasheet rate, each op's arithmetic at its
    format's dense tensor-core peak (vector ops: memory only), NVLink per direction; the host's
    per-step work (gpu.step_host); partial sums reduced over a layer's tensor-parallel ranks
    only, each GPU's own weight shard (:func:`_shard_reads`), and the expert-parallel
    all-to-alls (:func:`.expert_parallel.exchanges`)."""
    p = spec.params
    weights = tensor_core_rate(p, work.weights_format.compute)
    experts = tensor_core_rate(p, work.expert_weights_format.compute)
    kv = tensor_core_rate(p, work.kv_format.compute)

    def compute(op) -> float:
        if op.op_class == "matmul":
            return experts if op.expert else weights
        return kv if op.op_class == "attention" else 0.0

    return BoundRates(p.hbm_peak_bytes_per_s, "hbm", compute, "tensor_core",
                      p.nvlink_bytes_per_s, "nvlink", _launch_floor(p), latency_serial=True,
                      host_step_s=p.step_host_s, host_serial=p.host_overlap == "serial",
                      pass_floor_s=partial(_stage_sends, p), pass_kind="send",
                      pass_resource="sync", reduce_units=_tp_width,
                      exchanges=partial(ep.exchanges, p),
                      own_work_s=partial(_shard_reads, p))  # fmt: skip


def _shard_reads(p, op, slot) -> float:
    """``own_work_s``: the weights each GPU of ``op``'s stage reads for it, at HBM's peak (s):
    its tensor-parallel shard, so under expert parallelism, where a stage's GPUs run attention
    and the dense ops data-parallel (each on its own sequences), every GPU reads them whole;
    the pooled term spreads them over all the stage's GPUs. Routed experts under expert
    parallelism are spread over the GPUs, and an embedding's bytes are its sequences' rows
    (the pooled term holds both)."""
    if (op.expert and slot.expert_units) or op.op_class == "embedding":
        return 0.0
    return op.weight_bytes / _tp_width(slot) / p.hbm_peak_bytes_per_s


def _tp_width(slot) -> int:
    """``reduce_units``: the tensor-parallel ranks of a layer's stage, which sum a row-split
    op's partial outputs (an expert-parallel stage's ranks each run their own sequences' ops
    whole, and their experts' outputs return in the combine, an exchange of its own)."""
    ranks = slot.region.tp_ranks if slot.region is not None else None
    return len(ranks) if ranks else len(slot.units)


def _stage_sends(p, graph, placement) -> float:
    """``pass_floor_s``: one token's activations (``hidden`` x 2 B) from each pipeline stage to
    the next, over NVLink inside a node or the node network between nodes as the engine's
    transfers go: the link's latency and the bytes at its peak rate (s)."""
    stage = {s.layer: s.region.stage for s in placement.layers}
    tp, per_node = placement.layout.tp, int(p.gpus_per_node)
    n_bytes, total = ACT_BYTES * graph.hidden, 0.0
    for a, b in pairwise(graph.layer_keys):
        if stage[a] == stage[b]:
            continue
        if leaves_node(stage[a], tp, per_node):
            total += p.internode_latency_s + n_bytes / p.internode_bytes_per_s
        else:
            total += p.nvlink_latency_s + n_bytes / p.nvlink_bytes_per_s
    return total


def _launch_floor(p):
    """``latency_s(op, slot)`` for the bound: the launches and start-ups an op's kernels wait
    on before their bodies run (s, by class). Every graph op is one kernel (one launch) but the
    residual add, fused into the next norm (gpu.fusion); with TP > 1 the residual brings the
    all-reduce of the block's row-split output (a launch and the NVLink start-up, ``sync``) and
    the LM head the all-gather of its logits. A kernel's launch precedes its body on the rank,
    so the floor is serial with the op's work (stage transfers are not graph ops: the pass
    floor, :func:`_stage_sends`, counts them)."""

    def latency_s(op, slot) -> dict:
        tp = len(slot.region.tp_ranks) if slot.region is not None else 1
        residual = op.kind.endswith("residual")
        collectives = int(tp > 1 and (residual or op.kind == "lm_head"))
        own = 0.0 if residual else sampler_launch_s(p) if op.kind == "sampling" else launch_s(p)
        hbm = p.hbm_latency_s if reads_hbm(op) else 0.0
        return {"launch": own + collectives * launch_s(p),
                "sync": collectives * p.nvlink_latency_s, "hbm": hbm}  # fmt: skip

    return latency_s


def reads_hbm(op) -> bool:
    """Whether ``op``'s kernel surely reads HBM on every rank: weights or a KV cache (an
    activation-only kernel may find its inputs in L2)."""
    return not op.kind.endswith("residual") and bool(op.weight_bytes or op.kv_read_bytes)


# the parts of a kernel before its body, in order: (op name suffix, resource class)
_LEAD_PARTS = (("host", "host"), ("launch", "launch"), ("latency", "sync"), ("hbm_latency", "hbm"))


def _spans(kernels: list[Kernel], tp: int, host: int = 0) -> SpanColumns:
    """One pass's kernels laid out on every rank of their stage (cycles from the pass start),
    with the GPU's waits for an eager host (``host`` cycles a launch) before the kernels it
    has not launched yet (class ``host``). Each kernel's parts are laid out once and repeated
    over its ranks as columns (a pass on 8 ranks makes tens of thousands of spans)."""
    rows, first_row, t, stage, t0, i = [], [], 0, None, 0, 0
    for k in kernels:
        if k.stage != stage:  # each stage's host starts launching when the stage starts
            stage, t0, i = k.stage, t, 0
        i += 1
        wait = max(0, t0 + i * host - t)
        first_row.append(len(rows))
        s = t
        for (suffix, res), n in zip(_LEAD_PARTS, (wait, k.launch, k.latency, k.hbm_latency),
                                    strict=True):  # fmt: skip
            if n:
                rows.append((k.layer, f"{k.op}.{suffix}", k.kind, 0, res, s, n, 0, 0))
                s += n
        # a body of no time (a vector op whose activations sit in L2, gpu.weights_from_hbm and
        # gpu.vector_ops_memory_bound: RoPE, the activation, the sampler at small batch) is
        # left out: its kernel is its launch; a zero-length span on a resource it never used
        # drew a sliver in Perfetto and counted the op under that resource
        if k.body:
            rows.append((k.layer, k.op, k.kind, 0, k.resource, s, k.body, k.n_bytes, k.flops))
        t += wait + k.cycles
    return _on_ranks(SpanColumns.of_rows(rows), kernels, np.array(first_row, dtype=np.int64), tp)


def _on_ranks(parts: SpanColumns, kernels: list[Kernel], first_row, tp: int) -> SpanColumns:
    """Each kernel's parts (rows ``first_row[k]`` up to the next kernel's) on each rank of its
    stage in turn (the first rank only for a node link's), kernel after kernel."""
    n_parts = np.diff(np.r_[first_row, len(parts)])
    n_ranks = np.array([1 if k.resource == "node_link" else tp for k in kernels], dtype=np.int64)
    base = np.array([k.stage * tp for k in kernels], dtype=np.int64)
    per = n_parts * n_ranks  # spans of each kernel
    kern = np.repeat(np.arange(len(kernels)), per)
    local = np.arange(int(per.sum())) - np.repeat(np.cumsum(per) - per, per)
    rank, part = np.divmod(local, n_parts[kern])
    src = first_row[kern] + part
    cols = {f.name: getattr(parts, f.name)[src] for f in fields(SpanColumns)}
    cols["unit"] = base[kern] + rank
    return SpanColumns(**cols)


class GpuPass:
    """The kernels of one micro-batch's pass (its graph's batch) on the placement's TP x PP
    layout; a step re-costs one attention kernel per attention group the driver gives."""

    # a prompt chunk's MLA attention runs expanded, as vLLM's MLA backend prefills (the
    # chunk's GEMMs and its workspace in HBM; pyaccel.prefill)
    PREFILL_EXPANDS_MLA = True

    def __init__(self, graph, system, placement):
        lay = placement.layout
        self.tp, self.pp, self.width = lay.tp, lay.pp, lay.width
        self.ep_plan = None
        if lay.ep:  # attention data-parallel: graph is the busiest GPU's share (data_parallel)
            self.ep_plan = ep.EpPlan(graph, placement, lay.ep)
        self.routes_by_rows = self.ep_plan is not None  # stage_cycles_over reads the rows' ids
        work = graph.workload
        self.graph = graph
        self.stage_of = {s.layer: s.region.stage for s in placement.layers}
        self.cost = GpuCost(system.spec, self.tp, work.weights_format.compute,
                            work.expert_weights_format.compute, work.kv_format.compute,
                            graph.attention.latent)  # fmt: skip
        gpus_per_node = int(system.spec.params.gpus_per_node)
        self.kernels = _kernels_for(graph, self.cost, self.stage_of, gpus_per_node)
        if self.ep_plan:
            self.kernels = ep.with_all_to_all(self.kernels, self.cost.empty)
        self.attn_at = {k.layer: i for i, k in enumerate(self.kernels) if k.kind == "attention"}
        fixed = [k for k in self.kernels if k.kind != "attention"]
        self.base_c = _stage_cycles(fixed, self.pp)
        self.host = host_cycles(system.spec.params, system.spec.clock_hz)
        # eager launches (gpu.eager_host): every kernel's cycles in order, per stage, with
        # each attention kernel's place in them (re-costed per step)
        self._cycles = [np.array([k.cycles for k in self.kernels if k.stage == s],
                                 dtype=np.int64) for s in range(self.pp)]  # fmt: skip
        seen, slot = [0] * self.pp, {}
        for i, k in enumerate(self.kernels):
            slot[i], seen[k.stage] = seen[k.stage], seen[k.stage] + 1
        self._attn_slot = {layer: slot[i] for layer, i in self.attn_at.items()}
        # routed-expert kernels, re-costed each step for the experts its router drew
        experts = _expert_names(graph)
        self.expert_at = {k.op: i for i, k in enumerate(self.kernels) if k.op in experts}
        self._slot = slot
        self._ep_at = {layer: [i for i, k in enumerate(self.kernels) if k.layer == layer
                               and (k.kind in ep.EXPERT_KINDS or k.kind in ep.A2A_KINDS)]
                       for layer in graph.moe_layers} if self.ep_plan else {}  # fmt: skip
        self._ep_ops: dict = {}  # each MoE layer's expert ops by kind (EP re-costs them)
        self._delta_memo: dict = {}  # routing (its ops' ids) -> (its ops, cycles per stage)
        for op in graph.ops if self.ep_plan else ():
            if op.expert:
                self._ep_ops.setdefault(op.layer, {})[op.kind] = op

    def group_key(self, layer: int) -> int:
        """A layer's attention costs the same on every rank of its stage."""
        return self.stage_of[layer]

    def time(self, step: StepShape, events: bool) -> PassTiming:
        """Stage cycles of the pass at ``step`` (and its spans when ``events``)."""
        from dataclasses import replace

        stage_c = list(self.base_c)
        kernels = list(self.kernels) if events else []
        for g in step.groups():
            stage = self.stage_of[g.layers[0]]
            k = self.cost.kernel(g.op, stage)
            stage_c[stage] += k.cycles * len(g.layers)
            for layer in g.layers if self.host else ():
                self._cycles[stage][self._attn_slot[layer]] = k.cycles
            for layer in g.layers if events else ():
                i = self.attn_at[layer]
                kernels[i] = replace(k, op=kernels[i].op, layer=layer)
        if events or self.host or self.ep_plan:
            for i, k in self._routed_kernels(step):
                base = self.kernels[i]
                stage_c[base.stage] += k.cycles - base.cycles
                if self.host:
                    self._cycles[base.stage][self._slot[i]] = k.cycles
                if events:
                    kernels[i] = k
        else:
            for stage, extra in self._routed_delta(step):
                stage_c[stage] += extra
        if self.host:  # the host's launches may hold the GPU back (gpu.eager_host)
            stage_c = [stage_end(c, self.host) for c in self._cycles]
        spans = _spans(kernels, self.width, self.host) if events else ()
        return PassTiming(tuple(stage_c), spans)

    def stage_cycles_over(self, contexts: np.ndarray, layout,
                          routed: RoutedSteps | None = None) -> StepsTiming | None:  # fmt: skip
        """Stage cycles (one row a step) of the pass at each of ``contexts``, as :meth:`time`
        gives them, all steps at once; ``layout``: the attention groups
        (:func:`~pyaccel.sim.contract.attention_layout`); ``routed``: each step's routing, whose
        expert kernels add what they cost beyond the graph's own. None with eager launches
        (each kernel waits on its own launch: :meth:`time` times those). With expert
        parallelism each step's slowest GPU follows its rows' expert ids (``routed.picks``)."""
        if self.host or (self.ep_plan and (routed is None or routed.picks is None)):
            return None
        out = np.tile(np.asarray(self.base_c, dtype=np.int64), (len(contexts), 1))
        for _, layers in layout:
            op = self.graph.attention_op(layers[0], int(contexts[0]))
            _, flops, kv_read, kv_write = self.graph.attention_counts(layers[0], contexts)
            kernel = self.cost.cycles_over(op, kv_read + kv_write, flops)
            out[:, self.stage_of[layers[0]]] += kernel * len(layers)
        if self.ep_plan:
            for n, layer in enumerate(self.ep_plan.layers):
                at = self._ep_at[layer]
                stage = self.kernels[at[0]].stage
                new = self.ep_plan.layer_cycles_over(self.cost, n, self._ep_ops[layer], stage,
                                                     routed.picks, routed.ranks)  # fmt: skip
                out[:, stage] += new - sum(self.kernels[i].cycles for i in at)
            return StepsTiming(out)
        for _, op, versions, which in routed.op_versions(self.graph) if routed else ():
            base = self.kernels[self.expert_at[op.name]]
            extra = [self.cost.kernel(v, base.stage).cycles - base.cycles for v in versions]
            out[:, base.stage] += np.asarray(extra, dtype=np.int64)[which]
        return StepsTiming(out)

    def _routed_delta(self, step: StepShape) -> tuple:
        """``(stage, cycles)`` the step's routed-expert kernels add beyond the graph's own,
        kept per routing: a step's routed ops are the graph's memoised ops
        (:meth:`~pyaccel.model.graph.DecodeGraph.routed_ops`), so equal routings are the same
        objects, which the memo holds (their ids stay theirs)."""
        if not step.routed:
            return ()
        key = tuple(map(id, step.routed.values()))
        hit = self._delta_memo.get(key)
        if hit is None:
            extra = [0] * self.pp
            for i, k in self._routed_kernels(step):
                extra[self.kernels[i].stage] += k.cycles - self.kernels[i].cycles
            hit = (tuple(step.routed.values()), tuple(enumerate(extra)))
            self._delta_memo[key] = hit
        return hit[1]

    def _routed_kernels(self, step: StepShape):
        """(index, kernel) of every routed-expert kernel re-costed for ``step``'s routing (with
        expert parallelism, each MoE layer's all-to-alls and its slowest GPU's kernels)."""
        if self.ep_plan is None or step.picks is None:
            for op in (step.routed or {}).values():
                i = self.expert_at[op.name]
                yield i, self.cost.kernel(op, self.kernels[i].stage)
            return
        for n, layer in enumerate(self.ep_plan.layers):
            at = self._ep_at[layer]
            new = self.ep_plan.layer_kernels(self.cost, n, self._ep_ops[layer],
                                             self.kernels[at[0]].stage, step.picks,
                                             step.ranks)  # fmt: skip
            yield from zip(at, new, strict=True)

    def notes(self) -> dict:
        """The TP x PP layout (and the EP width with expert parallelism)."""
        return {"tp": self.tp, "pp": self.pp, **({"ep": self.width} if self.ep_plan else {})}


def _expert_names(graph) -> set[str]:
    """Names of the graph's routed-expert ops (their kernels are named after them)."""
    return {op.name for op in graph.ops if op.expert}


pass_model = GpuPass
