"""The machine kinds pyaccel emulates: one registry entry each (SPEC §2).

A kind is its spec parameters (a dataclass in ``hw/spec_<kind>.py``, presets in
``hw/presets/``), its placer, its engine and its functional executor. The registry holds the
three by module name and imports them when first used, so this leaf module imports nothing of
the layers above it. A new kind adds its modules and one :class:`MachineKind` to
:data:`MACHINE_KINDS` (or :func:`register_kind`); the driver, CLI, report and orchestration
look kinds up here and are not edited.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from ..errors import EngineNotBuiltError
from .spec_asic import AsicParams
from .spec_gpu import GpuParams
from .spec_lpu import LpuParams
from .spec_wafer import WaferParams


@dataclass(frozen=True)
class MachineKind:
    """One machine kind: ``params`` its spec dataclass, ``unit_noun`` what one unit is (wafer,
    chip, die, GPU), and the modules of its placement ``records`` (region and layout types,
    capacity and checks: spine types), ``placer``, ``engine`` and functional ``executor``
    (``"module:Class"``), by name; a kind made at run time (a test's) may give the objects."""

    name: str
    params: type
    unit_noun: str
    records: Any
    placer: Any
    engine: Any
    executor: Any


MACHINE_KINDS: dict[str, MachineKind] = {
    k.name: k
    for k in (
        MachineKind("wafer", WaferParams, "wafer", "pyaccel.place.kinds.wafer",
                    "pyaccel.place.wafer", "pyaccel.sim.wafer",
                    "pyaccel.numerics.executors.wafer:WaferExecutor"),
        MachineKind("lpu", LpuParams, "chip", "pyaccel.place.kinds.lpu", "pyaccel.place.lpu",
                    "pyaccel.sim.lpu", "pyaccel.numerics.executors.lpu:LpuExecutor"),
        MachineKind("asic", AsicParams, "die", "pyaccel.place.kinds.asic", "pyaccel.place.asic",
                    "pyaccel.sim.asic", "pyaccel.numerics.executors.asic:AsicExecutor"),
        MachineKind("gpu", GpuParams, "GPU", "pyaccel.place.kinds.gpu", "pyaccel.place.gpu",
                    "pyaccel.sim.gpu", "pyaccel.numerics.executors.gpu:GpuExecutor"),
    )
}  # fmt: skip


def register_kind(kind: MachineKind) -> None:
    """Add (or replace) a machine kind."""
    MACHINE_KINDS[kind.name] = kind


def kind_names() -> tuple[str, ...]:
    """The registered kinds, in registration order."""
    return tuple(MACHINE_KINDS)


def machine_kind(name: str) -> MachineKind:
    """The registry entry of kind ``name``; an unknown kind raises :class:`EngineNotBuiltError`."""
    try:
        return MACHINE_KINDS[name]
    except KeyError:
        raise EngineNotBuiltError(
            f"the {name} machine kind is not built yet (kinds: {', '.join(MACHINE_KINDS)})"
        ) from None


# what a missing part of a kind is called in the error (a placer and its records come together)
_PART_TEXT = {"records": "placer and engine are", "placer": "placer and engine are",
              "engine": "engine is"}  # fmt: skip


def kind_module(name: str, part: str) -> Any:
    """The ``part`` (``records``, ``placer``, ``engine``) module of kind ``name``, imported on
    first use; a kind or module that does not exist raises :class:`EngineNotBuiltError`."""
    kind = MACHINE_KINDS.get(name)
    module = getattr(kind, part) if kind else None
    if module is not None and not isinstance(module, str):
        return module
    if module is None or importlib.util.find_spec(module) is None:
        raise EngineNotBuiltError(f"the {name} {_PART_TEXT[part]} not built yet")
    return import_module(module)


def kind_executor(name: str) -> type:
    """The functional executor class of kind ``name``."""
    if name not in MACHINE_KINDS:
        raise EngineNotBuiltError(f"the {name} functional executor is not built yet")
    executor = machine_kind(name).executor
    if not isinstance(executor, str):
        return executor
    module, cls = executor.split(":")
    return getattr(import_module(module), cls)
