"""What a placement of each machine kind records (spine types, below placers, engines and
executors): one module per kind, ``pyaccel.place.kinds.<kind>``, found by kind name.

Each kind module holds the typed, frozen records a placer writes and an engine or executor
reads — ``REGION`` (where one layer lives: a wafer's PE rectangle, an LPU stage and MEM slices,
a GPU stage, an ASIC block's dies) and ``LAYOUT`` (the placement's strategy: wafer grids, GPU
TP x PP, ...) — plus ``capacity(system, graph)`` (one unit's bytes per memory level) and
``check(placement, graph, system)`` (every level finer than a unit that a layer can overflow).
A new kind adds a module here; nothing else in the spine switches on the kind.

Regions and layouts are written to the placement file (SPEC §7) by :meth:`Record.to_dict` —
the JSON object of each field that is set, under the field's name, tuples as lists — and read
back by :meth:`Record.from_dict`, which refuses an unknown field or a value of the wrong shape
with :class:`ConfigError`. Fields are optional (``None``: not recorded) so that hand-written and
older files load; the kind's ``check`` says which ones a layer needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ...errors import ConfigError, PlacementError
from ...hw.kinds import kind_module as registered_module


def kind_module(kind: str):
    """The placement records of machine ``kind`` (``pyaccel.place.kinds.<kind>`` for the
    built-in kinds, from the kind registry); kinds without one raise EngineNotBuiltError."""
    return registered_module(kind, "records")


def capacity_of(system, graph=None) -> tuple[dict, dict, dict] | None:
    """(capacity per level, level of each category, runtime reserve per level) of one unit of
    ``system``, from its kind; None where the graph is needed and not given."""
    return kind_module(system.kind).capacity(system, graph)


def check_levels(plc, graph, system) -> None:
    """Raise :class:`PlacementError` at the first level finer than a unit that overflows (the
    kind's ``check``)."""
    kind_module(plc.kind).check(plc, graph, system)


def check_stages(plc, required: bool) -> None:
    """A slot's pipeline ``stage`` (which the engine orders by) is an integer in range."""
    for s in plc.layers:
        stage = s.region.stage if s.region is not None else None
        if stage is None and not required:
            continue
        if stage is None or not 0 <= stage < plc.n_units:
            raise PlacementError(
                f"layer {s.layer!r}: region 'stage' must be a pipeline stage 0..{plc.n_units - 1}, "
                f"got {stage!r}"
            )


# ----------------------------------------------------------------------------- JSON fields


def is_int(v: Any) -> bool:
    """An integer (a bool is not one)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    """An integer or a float (a bool is not one)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_str(v: Any) -> bool:
    """A string."""
    return isinstance(v, str)


def is_bool(v: Any) -> bool:
    """True or false."""
    return isinstance(v, bool)


def ints(n: int | None = None):
    """A test for a list of ``n`` integers (any length when ``n`` is None)."""

    def test(v: Any) -> bool:
        ok = isinstance(v, (list, tuple)) and (n is None or len(v) == n)
        return ok and all(is_int(x) for x in v)

    return test


def list_of(test):
    """A test for a list whose items all pass ``test``."""
    return lambda v: isinstance(v, (list, tuple)) and all(test(x) for x in v)


def jfield(test, text: str):
    """An optional record field: ``test(value)`` says whether a JSON value is well formed,
    ``text`` what it must be (for the error)."""
    return field(default=None, metadata={"test": test, "text": text})


def _frozen(v: Any) -> Any:
    return tuple(_frozen(x) for x in v) if isinstance(v, (list, tuple)) else v


def _plain(v: Any) -> Any:
    return [_plain(x) for x in v] if isinstance(v, (list, tuple)) else v


@dataclass(frozen=True)
class Record:
    """A frozen record of JSON fields (a kind's region or layout); lists are kept as tuples."""

    def to_dict(self) -> dict:
        """The JSON object: every field that is set, in field order, tuples as lists."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = _plain(value)
        return out

    @classmethod
    def from_dict(cls, data: dict, what: str):
        """The record of a JSON object; ``what`` names it in errors (``layer 5: region``)."""
        known = {f.name: f for f in fields(cls)}
        for key, value in data.items():
            f = known.get(key)
            if f is None:
                raise ConfigError(f"{what} field '{key}' is not one of {', '.join(known)}")
            if value is not None and not f.metadata["test"](value):
                raise ConfigError(f"{what} '{key}' must be {f.metadata['text']}, got {value!r}")
        return cls(**{k: _frozen(v) for k, v in data.items()})


def as_dict(record: Record | None) -> dict:
    """A region's or layout's JSON object; ``{}`` for none."""
    return record.to_dict() if record is not None else {}
