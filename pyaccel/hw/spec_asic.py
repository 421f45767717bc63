"""Parameters of the ``asic`` machine kind (values and sources live in presets/*.toml).

The derived quantities (multiply-select-add lanes, ROM read width per block, KV SRAM size and ROM
capacity per die) are computed from these by :mod:`pyaccel.place.kinds.asic_die`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .fields import _f, _i, _s, at_most, in_range


@dataclass(frozen=True)
class AsicParams:
    """A hardwired-weight chip (Taalas HC1): weights in mask ROM beside multipliers, KV in SRAM."""

    etched_model: str = _s("model preset etched into the chip")
    etched_format: str = _s("weight format the chip was etched with")
    clock_hz: float = _f("pipeline clock (Hz)")
    power_w: float = _f("power per chip (W)")
    die_area_mm2: float = _f("die area (mm^2)")
    transistors: float = _f("transistors per die")
    rom_bits_per_transistor: float = _f("weight bits stored per mask-ROM transistor (bits)")
    rom_rows_per_bitline: int = _i(
        "rows of a ROM sub-array sharing one bitline: the row reads one token's GEMV takes"
    )
    rom_rows_per_cycle: float = _f("ROM rows each sub-array reads per clock cycle (rows/cycle)")
    lane_transistors: float = _f(
        "transistors of one multiply-select-add lane (accumulator adder + pipeline register)"
    )
    lane_logic_share: float = _f("share of the die's logic transistors spent on MSA lanes (0-1)")
    sram_transistors_per_bit: float = _f("transistors per SRAM bit cell (transistors/bit)")
    sram_um2_per_bit: float = _f("die area per SRAM bit, array overhead included (um^2/bit)")
    kv_sram_bytes: int = _i(
        "SRAM for KV cache and LoRA per die (bytes); 0 = derive from the transistor budget",
        strict=False,
    )
    kv_sram_bank_bytes: int = _i("bytes of one SRAM bank (macro) holding KV cache (bytes)")
    kv_sram_port_bytes: float = _f("bytes one SRAM bank reads or writes per cycle (bytes/cycle)")
    lora_sram_bytes: int = _i("SRAM kept for LoRA adapters per die (bytes)", strict=False)
    lora_rank: int = _i(
        "rank of the LoRA adapter loaded on q_proj and v_proj (0 = none; timed from its SRAM)",
        strict=False,
    )
    attn_mac_factor: float = _f(
        "attention MAC lanes per layer relative to consuming KV at the SRAM port rate (x)"
    )
    matmul_latency_cycles: float = _f(
        "fixed cycles of a GEMV block: multiplier bank and accumulator drain (cycles)",
        strict=False,
    )
    vector_latency_cycles: float = _f(
        "pipeline depth of a fused vector op (norm, RoPE, SiLU, residual, softmax) (cycles)",
        strict=False,
    )
    fused_op_busy_cycles: float = _f(
        "cycles a fused vector op (norm, RoPE, SiLU, residual add, argmax) holds its block per "
        "token, before its pipeline depth"
    )
    adder_tree_levels_per_cycle: float = _f(
        "adder-tree levels (two partial sums into one) a clock cycle covers (levels/cycle)"
    )
    stage_register_cycles: float = _f(
        "pipeline-register cycles between consecutive blocks (cycles)", strict=False
    )
    chip_link_bytes_per_s: float = _f("bandwidth of the link between chips (bytes/s)")
    chip_link_latency_s: float = _f("latency of one chip-to-chip hop (s)", strict=False)

    prefill_chunk_tokens: int = _i(
        "prompt tokens of one sequence a prefill step takes (the runtime's chunk) (tokens)"
    )

    def relations(self) -> list:
        """Cross-field checks (see :func:`~pyaccel.hw.fields.at_most`); with
        ``kv_sram_bytes = 0`` the derived size is checked by :mod:`pyaccel.place.kinds.asic_die`."""
        out = [
            in_range(self, "lane_logic_share", "a share of the die's logic transistors", high=1),
            at_most(
                self,
                ("rom_rows_per_cycle",),
                "rom_rows_per_bitline",
                "a sub-array cannot read more rows per cycle than it has",
            ),
            at_most(
                self,
                ("kv_sram_port_bytes",),
                "kv_sram_bank_bytes",
                "a bank's port reads at most the whole bank per cycle",
            ),
        ]
        if self.kv_sram_bytes:
            out += [
                at_most(
                    self,
                    ("lora_sram_bytes",),
                    "kv_sram_bytes",
                    "the LoRA SRAM is part of the KV SRAM and must leave room for KV",
                    strict=True,
                ),
                at_most(
                    self,
                    ("kv_sram_bank_bytes",),
                    "kv_sram_bytes",
                    "one bank is part of the KV SRAM",
                ),
            ]
        return out
