"""Parameters of the ``wafer`` machine kind (values and sources live in presets/*.toml)."""

from __future__ import annotations

from dataclasses import dataclass

from .fields import _f, _i, _s, _ticks, at_most, in_range

STRATEGIES = ("auto", "layer_regions", "interleave", "layer_groups")
# The finest tick the mesh simulation keeps a latency exact in (wafer.half_cycle_ticks): a
# mesh latency is a multiple of 1/MESH_TICKS_PER_CYCLE cycle.
MESH_TICKS_PER_CYCLE = 4


@dataclass(frozen=True)
class WaferParams:
    """A wafer-scale 2-D mesh of PEs with private SRAM (Cerebras WSE), several joined by I/O."""

    clock_hz: float = _f("PE and fabric clock (Hz)")
    power_w: float = _f("system power per wafer (CS box) (W)")
    fabric_width_pes: int = _i(
        "PE columns of the fabric (documents the wafer; programs get usable_width_pes)",
        informational=True,
    )
    fabric_height_pes: int = _i(
        "PE rows of the fabric (documents the wafer; programs get usable_height_pes)",
        informational=True,
    )
    usable_width_pes: int = _i("PE columns available to a program (fabric minus I/O halo)")
    usable_height_pes: int = _i("PE rows available to a program")
    pe_sram_bytes: int = _i("SRAM per PE (bytes)")
    pe_code_bytes: int = _i("SRAM per PE taken by code (bytes)", strict=False)
    pe_buffer_bytes: int = _i(
        "SRAM per PE kept for activation and message buffers (bytes)", strict=False
    )
    fmac_fp16_per_cycle: int = _i("FP16 fused multiply-accumulates per PE per cycle")
    sram_read_bytes_per_cycle: int = _i("SRAM read bandwidth per PE (bytes/cycle)")
    sram_write_bytes_per_cycle: int = _i("SRAM write bandwidth per PE (bytes/cycle)")
    link_bytes_per_cycle: int = _i("fabric link width per direction (bytes/cycle)")
    hop_latency_cycles: float = _ticks(
        "cycles for a wavelet to cross one router hop", MESH_TICKS_PER_CYCLE
    )
    ramp_latency_cycles: float = _ticks(
        "cycles for a wavelet to cross a ramp between a PE and its router (each way)",
        MESH_TICKS_PER_CYCLE, strict=False,
    )  # fmt: skip
    message_overhead_cycles: int = _i("cycles to start a message / activate a task", strict=False)
    colours: int = _i("routable virtual channels (colours) per router")
    reserved_colours: int = _i(
        "colours the SDK's runtime (memcpy) keeps, not available to collectives", strict=False
    )
    fabric_queues: int = _i("fabric transfers a PE can have in flight (queues, microthreads)")
    reserved_queues: int = _i("fabric queues the SDK's runtime (memcpy) keeps", strict=False)
    stream_add_latency_cycles: float = _ticks(
        "cycles a PE adds to a streaming reduction (receive, add own element, forward)",
        MESH_TICKS_PER_CYCLE, strict=False,
    )  # fmt: skip
    dsd_issue_cycles: int = _i(
        "cycles to issue one vector (DSD) instruction on a PE, before its elements flow",
        strict=False,
    )
    fabric_bytes_per_elem: int = _i(
        "link bytes one 16-bit activation element occupies in a wavelet (bytes)"
    )
    exp_cycles_per_elem: int = _i(
        "PE cycles per element for exp() in softmax (cycles)", strict=False
    )
    norm_scale_lane_ops_per_elem: int = _i(
        "FMAC lane ops per element of a norm's scaling pass (after its sum of squares)"
    )
    norm_scale_dsds_per_token: int = _i("DSD instructions a norm's scaling pass issues per token")
    elementwise_task_messages: int = _i(
        "message start costs an elementwise op pays to activate its PE task", strict=False
    )
    host_io_latency_s: float = _f("fixed cost of one host <-> wafer transfer (s)", strict=False)
    host_io_bytes_per_s: float = _f("host <-> wafer rate of the channel a token uses (bytes/s)")
    host_transfers_per_step: int = _i(
        "host <-> wafer transfers a decode pass waits on (sampled token out, next token in)",
        strict=False,
    )
    host_sampling: int = _i(
        "1: the logits go to the host, which samples them; 0: arg-max on the wafer", strict=False
    )
    host_sample_s: float = _f("host CPU time to sample one step from the logits (s)", strict=False)
    system_io_bytes_per_s: float = _f("I/O bandwidth of one system (bytes/s per direction)")
    system_io_latency_s: float = _f(
        "latency of one wafer-to-wafer hop through the switch (s)", strict=False
    )
    placement_strategy: str = _s(
        "how layers are mapped onto each wafer: auto (the fastest that fits), layer_regions, "
        "interleave or layer_groups",
        choices=STRATEGIES,
    )

    prefill_chunk_tokens: int = _i(
        "prompt tokens of one sequence a prefill step takes (the runtime's chunk) (tokens)"
    )

    def relations(self) -> list:
        """Cross-field checks (see :func:`~pyaccel.hw.fields.at_most`)."""
        return [
            at_most(self, ("usable_width_pes",), "fabric_width_pes",
                    "a program cannot use more PE columns than the fabric has"),
            at_most(self, ("usable_height_pes",), "fabric_height_pes",
                    "a program cannot use more PE rows than the fabric has"),
            at_most(self, ("reserved_colours",), "colours",
                    "the runtime cannot keep more colours than a router has"),
            at_most(self, ("reserved_queues",), "fabric_queues",
                    "the runtime must leave a PE a fabric queue", strict=True),
            at_most(self, ("host_sampling",), "host_transfers_per_step",
                    "the logits reach the host only in a transfer the pass waits on"),
            in_range(self, "host_sampling", "0 (on the wafer) or 1 (on the host)", high=1),
            at_most(self, ("pe_code_bytes", "pe_buffer_bytes"), "pe_sram_bytes",
                    "code and buffers must leave PE SRAM for weights and KV", strict=True),
            in_range(self, "fabric_bytes_per_elem", "a 16-bit element takes at least 2 link bytes",
                     low=2),
        ]  # fmt: skip
