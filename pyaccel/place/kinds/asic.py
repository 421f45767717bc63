"""What an ASIC placement records (hardwired-weight dies, Taalas HC1): each layer block's dies,
ROM rows, MSA lanes and KV banks, the layout of the die design, and the checks below the chip.

Capacity per die: weights in ``rom``, KV cache and buffers in ``kv_sram`` with the LoRA
reserve; an etched design's ROM depends on the model. Finer checks: without ``--etch`` only
the etched model at the etched format runs, on one chip.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import EtchedFormatError, EtchedModelError, PlacementError, option
from ...units import BITS_PER_BYTE
from . import Record, ints, is_bool, is_int, is_str, jfield, list_of
from . import asic_die as design

LEVELS = {"weights": "rom", "kv": "kv_sram", "buffers": "kv_sram"}


@dataclass(frozen=True)
class AsicRegion(Record):
    """One layer block on hardwired dies: its ``dies``, the ``block`` name, the ROM's
    ``rom_rows`` per bitline, its MSA ``lanes`` and the KV SRAM banks it has on each die."""

    dies: tuple[int, ...] | None = jfield(ints(), "a list of dies")
    block: str | None = jfield(is_str, "a block name")
    rom_rows: int | None = jfield(is_int, "a row count (integer)")
    lanes: int | None = jfield(is_int, "a lane count (integer)")
    kv_banks_per_die: int | None = jfield(is_int, "a bank count (integer)")


@dataclass(frozen=True)
class AsicLayout(Record):
    """An ASIC placement's die design: ``dies`` used, whether ``etched`` for this model
    (``--etch``), ROM rows per bitline, MSA ``lanes`` in all, KV SRAM bytes and banks per die,
    the layers spanning several dies and the weight format etched."""

    dies: int | None = jfield(is_int, "a die count (integer)")
    etched: bool | None = jfield(is_bool, "true or false")
    rom_rows_per_bitline: int | None = jfield(is_int, "a row count (integer)")
    lanes: int | None = jfield(is_int, "a lane count (integer)")
    kv_sram_bytes: int | None = jfield(is_int, "bytes (integer)")
    kv_banks_per_die: int | None = jfield(is_int, "a bank count (integer)")
    spanning_layers: tuple[str, ...] | None = jfield(list_of(is_str), "a list of layer names")
    weights: str | None = jfield(is_str, "a weight format name")


REGION, LAYOUT = AsicRegion, AsicLayout


def capacity(system, graph=None) -> tuple[dict, dict, dict] | None:
    """(capacity, level of each category, runtime reserve) of one die: weights in ``rom``, KV
    cache and buffers in ``kv_sram`` with the LoRA reserve. An etched design's ROM depends on
    the model (``graph``): None without it."""
    p = system.spec.params
    if system.etch and graph is None:
        return None
    rom = (
        design.rom_capacity_bytes(graph, p)
        if system.etch
        else design.etched_budget(p).rom_bits // BITS_PER_BYTE
    )
    return (
        {"rom": int(rom), "kv_sram": int(design.kv_sram_bytes(p))},
        dict(LEVELS),
        {"kv_sram": int(p.lora_sram_bytes)},
    )


def check_etch(graph, system) -> None:
    """Without ``--etch``, only the etched model at the etched format runs (else a
    PlacementError naming the etched model, or a ConfigError naming the etched format: both
    :class:`~pyaccel.errors.NeedsEtch`, which says the run line that would etch dies)."""
    if system.etch:
        return
    p = system.spec.params
    if graph.model_name != p.etched_model:
        raise EtchedModelError(
            f"{system.name} is etched with {p.etched_model}; it cannot run {graph.model_name}",
            f"design dies of this kind for {graph.model_name} and size how many are needed",
        )
    work = graph.workload
    for name, fmt in (("weights", work.weights), ("expert_weights", work.expert_weights)):
        if fmt != p.etched_format:
            raise EtchedFormatError(
                f"{system.name} holds {p.etched_model} etched at {p.etched_format}; "
                f"{option(name, fmt)} needs new silicon",
                f"design dies at {fmt}",
                option(name, fmt),
            )


def check(plc, graph, system) -> None:
    """The etched model and format (without ``--etch``), on one chip."""
    check_etch(graph, system)
    if not system.etch and plc.n_units != 1:
        raise PlacementError(
            f"{system.name} holds all of {graph.model_name} on one chip; a placement of "
            f"{plc.n_units} units needs {option('etch', True)} (dies designed for the model)"
        )
