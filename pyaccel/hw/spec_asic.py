"""Parameters of the ``asic`` machine kind (values and sources live in presets/*.toml)."""

from __future__ import annotations

from dataclasses import dataclass

from .fields import _f, _i, _s


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
