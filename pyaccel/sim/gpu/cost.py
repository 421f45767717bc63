"""GPU kernel costs: what one graph op (or collective, or stage send) costs as a kernel on the
busiest tensor-parallel rank of its stage, in cycles of the GPU's clock (see the engine's
assumptions: gpu.hbm_first_access, gpu.tp_allreduce, gpu.low_bit_dequant, gpu.sampler_eager)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...units import cycles, cycles_over, largest_share

RING_ALLREDUCE_PHASES = 2  # a ring all-reduce: reduce-scatter, then all-gather (gpu.tp_allreduce)


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
    hbm_latency: int = 0  # before the body: the first bytes' trip from HBM

    @property
    def cycles(self) -> int:
        """Total cycles of the kernel (launch + fixed latency + HBM latency + body)."""
        return self.launch + self.latency + self.hbm_latency + self.body


def launch_s(p) -> float:
    """The GPU's gap at each kernel boundary in the preset's launch mode (s)."""
    return p.kernel_launch_eager_s if p.launch_mode == "eager" else p.kernel_launch_s


def sampler_launch_s(p) -> float:
    """The GPU's gaps before the sampler's kernels, launched eagerly after the graph (s)."""
    return int(p.sampler_kernels) * p.kernel_launch_eager_s


def tensor_core_rate(p, compute: str) -> float:
    """Dense tensor-core rate for a format's arithmetic, falling back to BF16."""
    rate = {"fp8": p.fp8_flops_per_s, "int8": p.int8_ops_per_s, "fp4": p.fp4_flops_per_s}.get(
        compute, 0.0
    )
    return rate if rate > 0 else p.bf16_flops_per_s


def _share(total, parts: int, split: bool):
    """:func:`~pyaccel.units.largest_share` of an int or of an int64 array."""
    return -(-total // parts) if split and parts > 1 else total


class GpuCost:
    """Cost of every graph op on one spec and TP width (cycles of the spec's clock)."""

    def __init__(
        self, spec, tp: int, weights_compute: str, expert_compute: str, kv_compute: str, mla: bool
    ):
        self.p, self.clock, self.tp, self.mla = spec.params, spec.clock_hz, tp, mla
        self.launch = cycles(launch_s(self.p), self.clock)
        self.hbm_latency = cycles(self.p.hbm_latency_s, self.clock)
        self.sampler_launch = cycles(sampler_launch_s(self.p), self.clock)
        self.rates = {
            "weights": tensor_core_rate(self.p, weights_compute),
            "experts": tensor_core_rate(self.p, expert_compute),
            "kv": tensor_core_rate(self.p, kv_compute),
        }

    def kernel(self, op, stage: int) -> Kernel:
        """The kernel that runs ``op`` on the stage's busiest rank (the sampler: its kernels,
        launched eagerly after the graph, gpu.sampler_eager)."""
        hbm_bytes, flops, mem_s, tc_s = self._work(op, op.kv_read_bytes + op.kv_write_bytes,
                                                   op.flops)  # fmt: skip
        return Kernel(
            op.name,
            op.kind,
            op.layer,
            stage,
            "tensor_core" if tc_s > mem_s else "hbm",
            self.sampler_launch if op.kind == "sampling" else self.launch,
            0,
            cycles(max(mem_s, tc_s), self.clock),
            hbm_bytes,
            flops,
            self.hbm_latency if hbm_bytes else 0,
        )

    def cycles_over(self, op, kv_bytes: np.ndarray, flops: np.ndarray) -> np.ndarray:
        """:meth:`kernel`'s cycles for ``op`` at each of a run's steps, whose KV bytes (read and
        written) and FLOPs (int64 arrays) are all that change between them: an attention op."""
        hbm_bytes, _, mem_s, tc_s = self._work(op, kv_bytes, flops)
        body = cycles_over(np.maximum(mem_s, tc_s), self.clock)
        return self.launch + np.where(hbm_bytes > 0, self.hbm_latency, 0) + body

    def _work(self, op, kv_bytes, flops) -> tuple:
        """(HBM bytes, FLOPs, memory s, tensor-core s) of ``op``'s kernel on the busiest rank,
        with ``kv_bytes`` and ``flops`` (ints, or int64 arrays of several steps) for the op's."""
        p, tp = self.p, self.tp
        sharded = op.split != "replicate" and not (op.kind == "sampling")
        weight = largest_share(op.weight_bytes, tp, sharded)
        kv_sharded = sharded and not (self.mla and op.kind == "attention")
        kv = _share(kv_bytes, tp, kv_sharded)
        act = largest_share(op.act_bytes, tp, sharded)
        hbm_bytes = weight + kv + (act if act > p.l2_bytes else 0)
        flops = _share(flops, tp, sharded)
        rate = self._rate(op)
        return (
            hbm_bytes,
            flops,
            hbm_bytes / p.hbm_achievable_bytes_per_s,
            (flops / rate if rate else 0.0 * flops),
        )

    def _rate(self, op) -> float:
        if op.op_class == "matmul":
            return self.rates["experts" if op.expert else "weights"]
        if op.op_class == "attention":
            return self.rates["kv"]
        return 0.0  # vector ops: memory-bound (gpu.vector_ops_memory_bound)

    def all_to_all(self, kind: str, layer, stage: int, n_bytes: int) -> Kernel:
        """An expert-parallel dispatch or combine (``kind``) whose busiest GPU sends or
        receives ``n_bytes`` over NVLink: a launch, the small-message latency, the bytes at
        NCCL's effective rate (gpu.expert_parallel)."""
        p = self.p
        body = cycles(n_bytes / p.nvlink_effective_bytes_per_s, self.clock)
        return Kernel(f"L{layer}.{kind}", kind, layer, stage, "nvlink", self.launch,
                      cycles(p.nvlink_latency_s, self.clock), body, n_bytes, 0)  # fmt: skip

    def empty(self, kind: str, layer, stage: int) -> Kernel:
        """A kernel slot a step fills in (no cycles until then)."""
        return Kernel(f"L{layer}.{kind}", kind, layer, stage, "nvlink", 0, 0, 0, 0, 0)

    def collective(self, kind: str, layer, stage: int, n_bytes: int, name: str,
                   op_kind: str | None = None) -> Kernel:  # fmt: skip
        """A collective over the stage's TP ranks via NVLink: a launch, the fixed small-message
        latency, then the data each rank receives. ``allreduce``: one-shot ((t-1) peer buffers)
        or ring (2(t-1)/t of the message), whichever is less, as NCCL and vLLM pick by size;
        ``allgather``: the (t-1)/t of a sharded tensor a rank lacks. ``op_kind``: the graph op
        it belongs to in the trace (default: a kind of its own, ``kind``)."""
        p, tp = self.p, self.tp
        ring = RING_ALLREDUCE_PHASES * (tp - 1) / tp
        share = min(tp - 1, ring) if kind == "allreduce" else (tp - 1) / tp
        move = share * n_bytes / p.nvlink_effective_bytes_per_s
        latency = cycles(p.nvlink_latency_s, self.clock)
        return Kernel(name, op_kind or kind, layer, stage, "nvlink", self.launch, latency,
                      cycles(move, self.clock), n_bytes, 0)  # fmt: skip

    def transfer(self, layer, stage: int, n_bytes: int, internode: bool) -> Kernel:
        """Activations from one pipeline stage to the next (NVLink or the node network)."""
        p = self.p
        bw, lat = (
            (p.internode_bytes_per_s, p.internode_latency_s)
            if internode
            else (p.nvlink_effective_bytes_per_s, p.nvlink_latency_s)
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
