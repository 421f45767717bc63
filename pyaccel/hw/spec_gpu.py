"""Parameters of the ``gpu`` machine kind (values and sources live in presets/*.toml)."""

from __future__ import annotations

from dataclasses import dataclass

from .fields import _f, _i, _s, at_most

LAUNCH_MODES = ("graph", "eager")
HOST_OVERLAP = ("overlap", "serial")
EXPERT_LAYOUTS = ("auto", "tp", "ep")


@dataclass(frozen=True)
class GpuParams:
    """A GPU with HBM, L2 and tensor cores; NVLink inside a node, a NIC per GPU across nodes."""

    clock_hz: float = _f("SM boost clock; engine times are integer cycles of it (Hz)")
    power_w: float = _f("board power per GPU (W)")
    hbm_capacity_bytes: int = _i("usable HBM per GPU (bytes)")
    hbm_peak_bytes_per_s: float = _f("datasheet HBM bandwidth (bytes/s); used by the lower bound")
    hbm_achievable_bytes_per_s: float = _f("HBM bandwidth a copy microbenchmark reaches (bytes/s)")
    hbm_latency_s: float = _f(
        "HBM load-to-use latency: a kernel's first bytes from HBM arrive after it, then the rest "
        "stream at hbm_achievable_bytes_per_s (s)",
        strict=False,
    )
    l2_bytes: int = _i("L2 cache (bytes)")
    sm_count: int = _i(
        "streaming multiprocessors (documents the GPU; the engine works from the rates)",
        informational=True,
    )
    bf16_flops_per_s: float = _f("dense BF16/FP16 tensor-core peak (FLOP/s)")
    fp8_flops_per_s: float = _f("dense FP8 tensor-core peak (FLOP/s)", strict=False)
    fp4_flops_per_s: float = _f(
        "dense FP4 tensor-core peak, 0 if not native (FLOP/s)", strict=False
    )
    int8_ops_per_s: float = _f("dense INT8 tensor-core peak, 0 if not native (OP/s)", strict=False)
    kernel_launch_s: float = _f("cost of one kernel boundary inside a CUDA graph (s)", strict=False)
    launch_mode: str = _s(
        "how the serving engine launches a decode step's kernels: graph (replayed from a CUDA "
        "graph, the GPU waits only kernel_launch_s per kernel) or eager (each launched by the "
        "host: kernel_launch_eager_s per kernel on the GPU, and the GPU waits for a host that "
        "issues one kernel per host_launch_s)",
        choices=LAUNCH_MODES,
    )
    kernel_launch_eager_s: float = _f(
        "cost of one kernel boundary between eagerly launched kernels, on the GPU (s)",
        strict=False,
    )
    host_launch_s: float = _f(
        "host (CPU) time to launch one kernel eagerly, framework included (s)", strict=False
    )
    sampler_kernels: int = _i(
        "kernels the sampler launches eagerly after the CUDA graph each step (kernels)"
    )
    step_host_s: float = _f(
        "host (CPU) time per decode step outside kernel launches: scheduling, input "
        "preparation, output processing (s)",
        strict=False,
    )
    host_overlap: str = _s(
        "whether the host prepares step t+1 while the GPUs run step t (overlap: the serving "
        "engines' async / overlap scheduler) or after it (serial)",
        choices=HOST_OVERLAP,
    )
    expert_layout: str = _s(
        "how a model's routed experts are laid out over a stage's GPUs: tp (each expert split "
        "over the tensor-parallel ranks), ep (attention data-parallel, experts whole on GPUs, "
        "tokens moved to them and back by all-to-all) or auto (time both, keep the faster)",
        choices=EXPERT_LAYOUTS,
        moe_only=True,
    )
    nvlink_bytes_per_s: float = _f("NVLink bandwidth per GPU per direction (bytes/s)")
    nvlink_effective_bytes_per_s: float = _f(
        "NVLink bytes per second per direction a collective or a stage send moves after the "
        "protocol's overhead (NCCL's own per-link figure x links) (bytes/s)"
    )
    nvlink_latency_s: float = _f(
        "fixed latency of a small all-reduce inside a node (s)", strict=False
    )
    gpus_per_node: int = _i("GPUs joined by NVLink in one node")
    internode_bytes_per_s: float = _f(
        "network bandwidth per GPU per direction across nodes (bytes/s)"
    )
    internode_latency_s: float = _f("one-way small-message latency across nodes (s)", strict=False)
    runtime_reserved_bytes: int = _i(
        "HBM per GPU kept by the runtime (context, workspaces) (bytes)", strict=False
    )

    prefill_chunk_tokens: int = _i(
        "prompt tokens of one sequence a prefill step takes (the runtime's chunk) (tokens)"
    )

    def relations(self) -> list:
        """Cross-field checks (see :func:`~pyaccel.hw.fields.at_most`)."""
        return [
            at_most(self, ("hbm_achievable_bytes_per_s",), "hbm_peak_bytes_per_s",
                    "a copy benchmark cannot beat the datasheet peak"),
            at_most(self, ("nvlink_effective_bytes_per_s",), "nvlink_bytes_per_s",
                    "a protocol cannot beat the line rate"),
            at_most(self, ("runtime_reserved_bytes",), "hbm_capacity_bytes",
                    "the runtime reserve is part of the HBM", strict=True),
            at_most(self, ("l2_bytes",), "hbm_capacity_bytes",
                    "L2 caches HBM and is smaller than it", strict=True),
        ]  # fmt: skip
