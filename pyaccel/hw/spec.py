"""Hardware specs: frozen dataclasses, one per machine kind, with units in every field name.

Each field's value comes from a preset file (``presets/*.toml``) that puts the public source, or a
named assumption, beside every number. ``HardwareSpec`` carries the parameters, their provenance and
any ``--set`` overrides; ``System`` is a spec plus a unit count.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

KINDS = ("wafer", "lpu", "asic", "gpu")


def _f(doc: str, minimum: float = 0.0, strict: bool = True) -> Any:
    """A real-valued parameter: its docstring and the bound it must respect (``> minimum`` when
    ``strict``, else ``>= minimum``)."""
    return field(metadata={"doc": doc, "min": minimum, "strict": strict})


def _i(doc: str, minimum: int = 0, strict: bool = True) -> Any:
    """A whole-number parameter (counts, bytes, cycles), bounded like :func:`_f`."""
    return field(metadata={"doc": doc, "min": minimum, "strict": strict, "integer": True})


def _s(doc: str) -> Any:
    """A text parameter (e.g. the model an ASIC was etched with)."""
    return field(metadata={"doc": doc, "text": True})


@dataclass(frozen=True)
class GpuParams:
    """A GPU with HBM, L2 and tensor cores; NVLink inside a node, a NIC per GPU across nodes."""

    clock_hz: float = _f("SM boost clock; engine times are integer cycles of it (Hz)")
    power_w: float = _f("board power per GPU (W)")
    hbm_capacity_bytes: int = _i("usable HBM per GPU (bytes)")
    hbm_peak_bytes_per_s: float = _f("datasheet HBM bandwidth (bytes/s); used by the lower bound")
    hbm_achievable_bytes_per_s: float = _f("HBM bandwidth a copy microbenchmark reaches (bytes/s)")
    l2_bytes: int = _i("L2 cache (bytes)")
    sm_count: int = _i("streaming multiprocessors")
    bf16_flops_per_s: float = _f("dense BF16/FP16 tensor-core peak (FLOP/s)")
    fp8_flops_per_s: float = _f("dense FP8 tensor-core peak (FLOP/s)", strict=False)
    fp4_flops_per_s: float = _f(
        "dense FP4 tensor-core peak, 0 if not native (FLOP/s)", strict=False
    )
    int8_ops_per_s: float = _f("dense INT8 tensor-core peak, 0 if not native (OP/s)", strict=False)
    kernel_launch_s: float = _f("cost of one kernel boundary inside a CUDA graph (s)", strict=False)
    nvlink_bytes_per_s: float = _f("NVLink bandwidth per GPU per direction (bytes/s)")
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


@dataclass(frozen=True)
class WaferParams:
    """A wafer-scale 2-D mesh of PEs with private SRAM (Cerebras WSE), several joined by I/O."""

    clock_hz: float = _f("PE and fabric clock (Hz)")
    power_w: float = _f("system power per wafer (CS box) (W)")
    fabric_width_pes: int = _i("PE columns of the fabric")
    fabric_height_pes: int = _i("PE rows of the fabric")
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
    hop_latency_cycles: int = _i("cycles for a wavelet to cross one router hop")
    message_overhead_cycles: int = _i("cycles to start a message / activate a task", strict=False)
    colours: int = _i("routable virtual channels (colours) per router")
    system_io_bytes_per_s: float = _f("I/O bandwidth of one system (bytes/s per direction)")
    system_io_latency_s: float = _f(
        "latency of one wafer-to-wafer hop through the switch (s)", strict=False
    )


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


@dataclass(frozen=True)
class AsicParams:
    """A hardwired-weight chip (Taalas HC1): weights in mask ROM beside multipliers, KV in SRAM."""

    etched_model: str = _s("model preset etched into the chip")
    etched_format: str = _s("weight format the chip was etched with")
    clock_hz: float = _f("pipeline clock (Hz)")
    power_w: float = _f("power per chip (W)")
    die_area_mm2: float = _f("die area (mm^2)")
    transistors: float = _f("transistors per die")
    kv_sram_bytes: int = _i("SRAM for KV cache and LoRA per chip (bytes)")
    chip_link_bytes_per_s: float = _f("bandwidth of the link between chips (bytes/s)")
    chip_link_latency_s: float = _f("latency of one chip-to-chip hop (s)", strict=False)


PARAMS_BY_KIND = {"gpu": GpuParams, "wafer": WaferParams, "lpu": LpuParams, "asic": AsicParams}


def param_doc(kind: str, name: str) -> str:
    """The one-line description (with unit) of parameter ``name`` of a machine ``kind``."""
    return {f.name: f.metadata["doc"] for f in fields(PARAMS_BY_KIND[kind])}[name]


@dataclass(frozen=True)
class HardwareSpec:
    """A machine preset: its parameters and, for every one, its source or named assumption."""

    name: str
    kind: str
    description: str
    native_format: str
    params: Any
    sources: Mapping[str, str]
    assumptions: Mapping[str, str]
    overrides: tuple[str, ...] = ()
    origin: str = ""

    @property
    def clock_hz(self) -> float:
        """Clock whose integer cycles the engine counts (Hz)."""
        return float(self.params.clock_hz)

    @property
    def power_w(self) -> float:
        """Power per unit (W)."""
        return float(self.params.power_w)

    def with_params(self, note: str | None = None, **changes: Any) -> "HardwareSpec":
        """A copy with some parameters changed (what-if, ``--set``); ``note`` is recorded."""
        notes = self.overrides + ((note,) if note else ())
        return replace(self, params=replace(self.params, **changes), overrides=notes)

    def assumption_list(self) -> list[str]:
        """Named assumptions this spec rests on, plus any overrides, for reports."""
        out = [f"{self.name}.{key}: {text}" for key, text in self.assumptions.items()]
        return out + [f"override: {o}" for o in self.overrides]


@dataclass(frozen=True)
class System:
    """``units`` identical machines of one spec (wafers, chips or GPUs); ``"auto"`` until placed.

    ``etch`` (asic only): design dies of this kind for the requested model instead of running the
    model the preset was etched with.
    """

    spec: HardwareSpec
    units: int | str = 1
    etch: bool = False

    @property
    def name(self) -> str:
        """The spec's preset name."""
        return self.spec.name

    @property
    def kind(self) -> str:
        """The machine kind: wafer, lpu, asic or gpu."""
        return self.spec.kind
