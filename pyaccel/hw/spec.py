"""Hardware specs: frozen dataclasses, one per machine kind, with units in every field name.

Each field's value comes from a preset file (``presets/*.toml``) that puts the public source, or a
named assumption, beside every number. ``HardwareSpec`` carries the parameters, their provenance and
any ``--set`` overrides; ``System`` is a spec plus a unit count.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .kinds import MACHINE_KINDS


class _ParamsByKind(Mapping):
    """kind -> its params dataclass, read live from the kind registry (``hw/kinds.py``)."""

    def __getitem__(self, kind: str) -> type:
        return MACHINE_KINDS[kind].params

    def __iter__(self) -> Iterator[str]:
        return iter(MACHINE_KINDS)

    def __len__(self) -> int:
        return len(MACHINE_KINDS)


PARAMS_BY_KIND: Mapping[str, type] = _ParamsByKind()


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
    # (low, high) a parameter's sources allow, where its preset gives one (--sensitivity runs
    # both ends instead of a fixed percentage)
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def clock_hz(self) -> float:
        """Clock whose integer cycles the engine counts (Hz)."""
        return float(self.params.clock_hz)

    @property
    def power_w(self) -> float:
        """Power per unit (W)."""
        return float(self.params.power_w)

    def with_params(self, note: str | None = None, **changes: Any) -> HardwareSpec:
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
