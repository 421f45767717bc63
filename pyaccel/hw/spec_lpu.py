"""Parameters of the ``lpu`` machine kind (values and sources live in presets/*.toml)."""

from __future__ import annotations

from dataclasses import dataclass

from .fields import _f, _i, _s, at_most, relation


@dataclass(frozen=True)
class LpuParams:
    """A tensor-streaming chip (Groq TSP): SRAM in MEM slices, a fixed schedule, C2C links."""

    clock_hz: float = _f("core clock (Hz)")
    power_w: float = _f("power per chip (W)")
    sram_bytes: int = _i("on-chip SRAM per chip (bytes)")
    mem_slices: int = _i("MEM slices per chip (both hemispheres)")
    vector_bytes: int = _i("bytes in one vector (one byte per lane)")
    superlanes: int = _i("superlanes per chip")
    streams_per_direction: int = _i("stream registers flowing each way (east, west)")
    mxm_planes: int = _i("matrix (MXM) planes per chip")
    mxm_dim: int = _i("side of one MXM plane (MACs per side)")
    weight_install_streams: int = _i("streams feeding weights into one MXM plane per cycle")
    vxm_alus_per_lane: int = _i("vector ALUs per lane")
    c2c_links: int = _i("chip-to-chip links per chip")
    c2c_bytes_per_s: float = _f("bandwidth of one C2C link per direction (bytes/s)")
    c2c_latency_s: float = _f("latency of one C2C hop (s)", strict=False)
    chips_per_node: int = _i("chips fully connected in one node")
    global_links: int = _i(
        "global (Dragonfly) ports per chip leaving its node: a port count, not a rate; the C2C "
        "links a chip keeps after its node peers are split evenly over them, so more ports are "
        "each narrower (no what-if doubles it)"
    )
    chips_per_rack: int = _i("active chips per rack")
    local_links_per_peer: int = _i("C2C links joining each pair of chips in a node")
    mxm_operand_bytes: int = _i("bytes per weight element as installed in the MXM (1 int8, 2 fp16)")
    mxm_latency_cycles: int = _i("cycles from an MXM's last input vector to its result leaving")
    vxm_latency_cycles: int = _i("cycles of one pass through a VXM ALU chain")
    sxm_latency_cycles: int = _i("cycles of one SXM shift/transpose pass")
    sxm_pass_cycles: int = _i("cycles an SXM transpose of one block occupies the SXM")
    hemispheres: int = _i("mirrored halves of the chip, each with its own MEM slices and MXMs")
    stream_hop_cycles: float = _f("cycles a stream takes per slice hop or superlane of ripple")
    weight_buffers_per_plane: int = _i("weight blocks one MXM plane holds (install while compute)")
    norm_vxm_ops_per_elem: int = _i("VXM ALU ops per element of a norm's scaling pass")
    softmax_exp_vxm_ops_per_elem: int = _i("VXM ALU ops per score of softmax's max-subtract + exp")
    softmax_scale_vxm_ops_per_elem: int = _i("VXM ALU ops per score of softmax's 1/sum scaling")
    activation_buffers: int = _i("widest activations a layer keeps per chip (in/out, buffered)")
    tp_max_chips: int = _i("widest tensor-parallel group the compiler forms (chips, whole nodes)")
    expert_layout: str = _s(
        "how a model's routed experts are laid out over a stage's chips: tp (each expert split "
        "over the tensor-parallel chips), ep (experts whole on chips, each chip running its own "
        "experts on the tokens routed to them) or auto (time both, keep the faster)",
        choices=("auto", "tp", "ep"),
        moe_only=True,
    )
    deskew_cycles: int = _i(
        "cycles a collective spanning nodes waits to realign to global time", strict=False
    )

    prefill_chunk_tokens: int = _i(
        "prompt tokens of one sequence a prefill step takes (the runtime's chunk) (tokens)"
    )

    def relations(self) -> list:
        """Cross-field checks (see :func:`~pyaccel.hw.fields.relation`)."""
        peers = self.chips_per_node - 1
        return [
            relation(("mem_slices", "vector_bytes", "sram_bytes"),
                     self.mem_slices * self.vector_bytes,
                     f"mem_slices ({self.mem_slices:,}) x vector_bytes ({self.vector_bytes:,})",
                     self.sram_bytes, f"sram_bytes ({self.sram_bytes:,})",
                     "each MEM slice holds at least one vector"),
            relation(("local_links_per_peer", "chips_per_node", "c2c_links"),
                     self.local_links_per_peer * peers,
                     f"local_links_per_peer ({self.local_links_per_peer:,}) x (chips_per_node "
                     f"({self.chips_per_node:,}) - 1)", self.c2c_links,
                     f"c2c_links ({self.c2c_links:,})",
                     "the links to the node's peers must leave a C2C link for the global ports",
                     strict=True),
            at_most(self, ("chips_per_node",), "chips_per_rack", "a rack holds at least one node"),
            at_most(self, ("tp_max_chips",), "chips_per_rack",
                    "a tensor-parallel group stays inside one rack"),
            relation(("weight_install_streams", "streams_per_direction"),
                     self.weight_install_streams,
                     f"weight_install_streams ({self.weight_install_streams:,})",
                     2 * self.streams_per_direction,
                     f"2 x streams_per_direction ({self.streams_per_direction:,})",
                     "weights are installed over the chip's streams (both directions)"),
        ]  # fmt: skip
