"""Parameters of the ``lpu`` machine kind (values and sources live in presets/*.toml)."""

from __future__ import annotations

from dataclasses import dataclass

from .fields import _f, _i


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
    global_links: int = _i("links per chip leaving its node")
    chips_per_rack: int = _i("active chips per rack")
    local_links_per_peer: int = _i("C2C links joining each pair of chips in a node")
    mxm_operand_bytes: int = _i("bytes per weight element as installed in the MXM (1 int8, 2 fp16)")
    mxm_latency_cycles: int = _i("cycles from an MXM's last input vector to its result leaving")
    vxm_latency_cycles: int = _i("cycles of one pass through a VXM ALU chain")
    sxm_latency_cycles: int = _i("cycles of one SXM shift/transpose pass")
