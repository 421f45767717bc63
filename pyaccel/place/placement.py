"""Placement: which unit(s) and region hold every layer, and the bytes each unit keeps (SPEC §2).

Resident bytes are what a unit must hold (weights and scales, KV cache, buffers), distinct from the
bytes an op reads per step. A layer may span several units (tensor parallel): ``units`` lists them
and the byte tuples give each one's share, aligned with ``units``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, PlacementError
from ..hw.kinds import MACHINE_KINDS
from ..hw.spec import System
from ..model.graph import DecodeGraph
from ..units import fmt_bytes
from ..workload import Workload
from .files import load, record
from .kinds import Record, capacity_of, check_levels, kind_module
from .slot import MAX_UNITS, LayerSlot, is_count

CATEGORIES = ("weights", "kv", "buffers")


@dataclass(frozen=True)
class Placement:
    """A model placed on ``n_units`` units of one system.

    ``capacity_bytes`` maps each memory level to the bytes one unit has there; ``level_of`` maps
    the categories weights/kv/buffers to a level; ``reserved_bytes`` is kept per unit per level by
    the runtime. All three come from the system (a placement file's copies are never trusted).
    ``layout`` holds the strategy (its kind's layout record, e.g. ``GpuLayout(tp=8, pp=2)``;
    None when not recorded), ``workload`` the one it was made for (its batch, lengths and formats
    size the resident bytes) and ``reason`` why this many units were chosen. ``basis`` is the
    ``(graph, system)`` the placement was made for or loaded against (not serialised, not
    compared): with it :meth:`check` checks every level a layer can
    overflow (per PE on a wafer, per MEM slice on an LPU) against the system's capacities.
    """

    system: str
    kind: str
    model: str
    n_units: int
    capacity_bytes: dict[str, int]
    level_of: dict[str, str]
    reserved_bytes: dict[str, int]
    layers: tuple[LayerSlot, ...]
    layout: Record | None = None
    workload: Workload | None = None
    reason: str = ""
    basis: Any = field(default=None, compare=False, repr=False)

    @property
    def unit_noun(self) -> str:
        """What one unit is on this kind: wafer, chip, die or GPU."""
        kind = MACHINE_KINDS.get(self.kind)
        return kind.unit_noun if kind else "unit"

    def layer_keys(self) -> list[int | str]:
        """Every placed layer key, in order (decoder layers are ints; ``"embed"``, ``"head"``)."""
        return [s.layer for s in self.layers]

    def slot(self, layer: int | str) -> LayerSlot:
        """The slot of one layer key; a missing one raises :class:`PlacementError` listing the
        valid keys."""
        for s in self.layers:
            if s.layer == layer:
                return s
        raise PlacementError(
            f"layer {layer!r} is not placed; layer keys are {keys_text(self.layer_keys())}"
        )

    def units_of(self, layer: int | str) -> tuple[int, ...]:
        """The units holding ``layer``."""
        return self.slot(layer).units

    def layers_on(self, unit: int) -> list[int | str]:
        """Layer keys that have ``unit`` among their units, in order."""
        return [s.layer for s in self.layers if unit in s.units]

    def unit_bytes(self, unit: int) -> dict[str, int]:
        """Resident bytes on one unit by category (weights, kv, buffers)."""
        out = dict.fromkeys(CATEGORIES, 0)
        for s in self.layers:
            for i, u in enumerate(s.units):
                if u == unit:
                    out["weights"] += s.weight_bytes[i]
                    out["kv"] += s.kv_bytes[i]
                    out["buffers"] += s.buffer_bytes[i]
        return out

    def level_use(self, unit: int) -> dict[str, int]:
        """Bytes used on one unit per memory level, runtime reservation included."""
        use = dict(self.reserved_bytes)
        for cat, n in self.unit_bytes(unit).items():
            level = self.level_of[cat]
            use[level] = use.get(level, 0) + n
        return use

    def shortfalls(self) -> list[tuple[int, str, int, int]]:
        """(unit, level, bytes needed, bytes available) for every over-full unit and level, by
        unit, then level (the reserved levels first, then those of weights, kv, buffers)."""
        cat_levels = (self.level_of[c] for c in CATEGORIES)
        levels = list(dict.fromkeys([*self.reserved_bytes, *cat_levels]))
        units = np.array([u for s in self.layers for u in s.units], dtype=np.int64)
        size = max(self.n_units, int(units.max()) + 1 if len(units) else 0)
        # one pass over all slots at once (a placer checks hundreds of candidate placements)
        used = np.zeros((size, len(levels)), dtype=np.int64)
        used += [self.reserved_bytes.get(lv, 0) for lv in levels]
        for cat, of in zip(CATEGORIES, ("weight_bytes", "kv_bytes", "buffer_bytes"), strict=True):
            n = np.array([b for s in self.layers for b in getattr(s, of)], dtype=np.int64)
            np.add.at(used[:, levels.index(self.level_of[cat])], units, n)
        held = np.zeros(size, dtype=bool)
        held[units] = True
        idle = np.flatnonzero(~held[: self.n_units])
        if len(idle):  # an idle unit holds the runtime's reserve alone
            held[idle[0]] = True
        cap = np.array([self.capacity_bytes.get(lv, 0) for lv in levels], dtype=np.int64)
        over = np.argwhere((used > cap) & held[:, None])  # row-major: by unit, then level
        return [(int(u), levels[j], int(used[u, j]), int(cap[j])) for u, j in over]

    def with_capacity_of(self, system, graph=None) -> Placement:
        """A copy whose capacities, levels and runtime reservation are the system's."""
        got = capacity_of(system, graph)
        if got is None:  # not derivable without the graph (etched ASIC dies): keep the placer's
            return self
        cap, level_of, reserved = got
        return replace(self, capacity_bytes=cap, level_of=level_of, reserved_bytes=reserved)

    def check(self, graph=None, system=None, *, exact: bool = True) -> Placement:
        """Verify capacity on every unit and level; with a graph, that every layer is placed once
        with the resident bytes the graph needs; with a graph and a system (by default the
        placement's ``basis``), every finer level a layer can overflow: each PE of a wafer
        (largest tile + KV share + code and buffers) and overlapping PE rectangles, each MEM
        slice range of an LPU chip. Capacities come from the system when one is known.
        ``exact=False`` accepts a placement made for a larger workload than ``graph``'s (each
        layer holds at least what the graph needs), as when emulating fewer users. Raises
        :class:`PlacementError` naming the unit (PE, slice), the bytes and the limit; returns
        ``self``."""
        _check_structure(self)
        _check_basis_types(graph, system)
        b_graph, b_system = self.basis or (None, None)
        graph = graph if graph is not None else b_graph
        system = system if system is not None else b_system
        if system is not None and system.kind != self.kind:
            raise PlacementError(
                f"a {self.kind} placement cannot be checked against {system.name}, a {system.kind}"
            )
        plc = self.with_capacity_of(system, graph) if system is not None else self
        _check_structure(plc)
        _check_units(plc)
        if graph is not None:
            _check_coverage(plc, graph, exact)
            if system is not None:
                check_levels(plc, graph, system)
        return self

    def to_dict(self) -> dict:
        """This placement in the one placement file format (versioned; SPEC §7): what
        ``place --json`` prints and :meth:`from_json` reads."""
        return record(self)

    def to_json(self, path: str | Path | None = None) -> str:
        """This placement as JSON text (:meth:`to_dict`); with ``path``, also written there
        atomically."""
        text = json.dumps(self.to_dict(), indent=1, allow_nan=False)
        if path is not None:
            from ..io_util import write_atomic

            write_atomic(path, text)
        return text

    @classmethod
    def from_json(cls, text_or_path: str | Path | dict, system=None, model=None) -> Placement:
        """A placement from JSON text (str or bytes), a file, or the dict :meth:`to_dict`
        gives, in the format :meth:`to_json` writes (or the unversioned format of pyaccel
        before it). The system is the one the file records
        (preset name, or a TOML file whose content hash must match) with its ``--set``
        overrides reapplied, unless ``system`` (a name, TOML path or :class:`System`) is given;
        the model is the recorded one unless ``model`` (a name, folder or ``ModelConfig``).
        Capacities come from that system, never from the file. Malformed input raises
        :class:`ConfigError`."""
        where, folder = "placement JSON", None
        if isinstance(text_or_path, dict):
            data = text_or_path
        else:
            text, where, folder = _json_text(text_or_path)
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"{where}: not valid JSON (line {exc.lineno}: {exc.msg})"
                ) from None
        plc = load(cls, data, where, folder, system, model)
        _check_structure(plc, where)
        return plc


def keys_text(keys) -> str:
    ints = [k for k in keys if isinstance(k, int)]
    names = [repr(k) for k in keys if not isinstance(k, int)]
    span = [f"{min(ints)}..{max(ints)}"] if ints else []
    return ", ".join(names[:1] + span + names[1:]) if names or span else "(none)"


def _json_text(source) -> tuple[str, str, Path | None]:
    """(JSON text, where it came from, the file's folder or None) of ``source``: JSON text
    (str or bytes; anything starting with ``{`` or ``[``, or blank) or a file's path."""
    if isinstance(source, (bytes, bytearray)):
        try:
            return bytes(source).decode("utf-8"), "placement JSON", None
        except UnicodeDecodeError:
            raise ConfigError("placement JSON: bytes are not UTF-8 text") from None
    if not isinstance(source, (str, PathLike)):
        raise ConfigError(
            "Placement.from_json(): takes JSON text, a file's path or a dict (to_dict()); got "
            f"{type(source).__name__}"
        )
    text = str(source)
    looks_json = not text.strip() or text.lstrip()[:1] in ("{", "[")
    if isinstance(source, str) and looks_json and not _is_file(text):
        return text, "placement JSON", None
    try:
        return Path(text).read_text(encoding="utf-8"), text, Path(text).parent
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{text}: cannot read ({exc.__class__.__name__})") from None


def _is_file(text: str) -> bool:
    try:
        return Path(text).is_file()
    except OSError:  # e.g. a JSON text too long to be a file name
        return False


def _check_basis_types(graph, system) -> None:
    """What :meth:`Placement.check` checks against: a graph and a system, or None for the
    placement's own (ConfigError naming the argument otherwise)."""
    if graph is not None and not isinstance(graph, DecodeGraph):
        raise ConfigError(
            "placement check: graph must be a DecodeGraph (pa.build_graph(model, workload)), or "
            f"left out for the one the placement was made for; got {type(graph).__name__}"
        )
    if system is not None and not isinstance(system, System):
        raise ConfigError(
            "placement check: system must be a System (pa.load_system(NAME, units=N)), or left "
            f"out for the one the placement was made for; got {type(system).__name__}"
        )


def _check_units(plc: Placement) -> None:
    """Every unit and memory level holds what is placed on it."""
    short = plc.shortfalls()
    if short:
        unit, level, used, cap = max(short, key=lambda s: s[2] - s[3])
        more = f" ({len(short) - 1} more unit(s) short)" if len(short) > 1 else ""
        reserve = plc.reserved_bytes.get(level, 0)
        incl = f", {fmt_bytes(reserve)} of it the runtime's reserve" if reserve else ""
        raise PlacementError(
            f"{plc.system} unit {unit} is short of {fmt_bytes(used - cap)} in {level} of "
            f"{plc.unit_noun} {unit}: needs {used:,} B ({fmt_bytes(used)}{incl}), has {cap:,} B "
            f"({fmt_bytes(cap)}){more}"
        )


def _check_structure(plc: Placement, where: str = "placement") -> None:
    """Types and index ranges of a placement (hand-written JSON goes through this)."""
    if not is_count(plc.n_units) or not 1 <= plc.n_units <= MAX_UNITS:
        raise ConfigError(
            f"{where}: units must be an integer from 1 to {MAX_UNITS:,}, got {plc.n_units!r}"
        )
    for cat in CATEGORIES:
        if plc.level_of.get(cat) not in plc.capacity_bytes:
            raise ConfigError(f"{where}: level_of['{cat}'] must name a level of capacity_bytes")
    for name in ("capacity_bytes", "reserved_bytes"):
        for level, n in getattr(plc, name).items():
            if not is_count(n):
                raise ConfigError(
                    f"{where}: {name} for level '{level}' must be a non-negative integer, got {n!r}"
                )
    _check_record(plc.layout, "LAYOUT", plc.kind, f"{where}: field 'layout'")
    for s in plc.layers:
        if isinstance(s.layer, bool) or not isinstance(s.layer, (int, str)):
            raise ConfigError(
                f"{where}: layer key {s.layer!r} must be an integer (a decoder layer) or a "
                "string ('embed', 'head')"
            )
        _check_record(s.region, "REGION", plc.kind, f"{where}: layer {s.layer!r} field 'region'")
        if not s.units:
            raise ConfigError(f"{where}: layer {s.layer!r} has no units")
        bad = [u for u in s.units if not is_count(u) or u >= plc.n_units]
        if bad:
            raise ConfigError(
                f"{where}: layer {s.layer!r} names unit {bad[0]!r}; units are 0..{plc.n_units - 1}"
            )
        if len(set(s.units)) != len(s.units):
            raise ConfigError(f"{where}: layer {s.layer!r} names a unit twice: {list(s.units)}")
        for name in ("weight_bytes", "kv_bytes", "buffer_bytes"):
            vals = getattr(s, name)
            if len(vals) != len(s.units) or not all(is_count(v) for v in vals):
                raise ConfigError(
                    f"{where}: layer {s.layer!r} field '{name}' needs one "
                    f"non-negative integer per unit ({len(s.units)})"
                )
        stray = [u for u in s.expert_units if not is_count(u) or u not in s.units]
        if stray:
            raise ConfigError(f"{where}: layer {s.layer!r} puts an expert on unit {stray[0]!r}, "
                              f"which is not one of its units {list(s.units)}")  # fmt: skip


def _check_record(record, which: str, kind: str, what: str) -> None:
    """A region or layout is its kind's record (``which``: ``REGION`` or ``LAYOUT``), or None."""
    if record is None:
        return
    cls = getattr(kind_module(kind), which)
    if not isinstance(record, cls):
        raise ConfigError(f"{what} must be a {cls.__name__} (or None), got {record!r}")


def _check_coverage(plc: Placement, graph, exact: bool = True) -> None:
    """Every graph layer placed once, with at least the resident bytes the graph needs (and,
    ``exact``, recording exactly the bytes the graph counts)."""
    keys = [s.layer for s in plc.layers]
    dup = sorted({str(k) for k in keys if keys.count(k) > 1})
    if dup:
        raise PlacementError(f"layer(s) placed more than once: {', '.join(dup)}")
    missing = [k for k in graph.layer_keys if k not in keys]
    extra = [k for k in keys if k not in graph.layer_keys]
    if missing or extra:
        made = f" (made for {plc.model})" if plc.model != graph.model_name else ""
        quoted = [k for k in extra if isinstance(k, str) and k.isdigit()]
        hint = (
            f"; decoder layer keys are integers ({quoted[0]}, not '{quoted[0]}')" if quoted else ""
        )
        raise PlacementError(
            f"placement{made} does not match model {graph.model_name}: missing layers "
            f"{missing[:5]}, unknown layers {extra[:5]}{hint}"
        )
    moe = set(graph.moe_layers)
    for s in plc.layers:
        if s.expert_units and (s.layer not in moe or len(s.expert_units) != graph.n_experts):
            raise PlacementError(
                f"layer {s.layer!r}: expert_units lists {len(s.expert_units)} experts; the "
                f"layer has {graph.n_experts if s.layer in moe else 0} routed experts"
            )
        need_w, need_kv = graph.resident_bytes(s.layer)
        if exact and (s.need_weight_bytes, s.need_kv_bytes) != (need_w, need_kv):
            raise PlacementError(
                f"layer {s.layer!r}: placement records {s.need_weight_bytes:,} B "
                f"weights / {s.need_kv_bytes:,} B KV, the model needs "
                f"{need_w:,} B / {need_kv:,} B"
            )
        if sum(s.weight_bytes) < need_w or sum(s.kv_bytes) < need_kv:
            raise PlacementError(
                f"layer {s.layer!r}: units {list(s.units)} hold {sum(s.weight_bytes):,} B "
                f"weights / {sum(s.kv_bytes):,} B KV, fewer than the "
                f"{need_w:,} B / {need_kv:,} B it needs{_made_for(plc, graph)}"
            )


def _made_for(plc: Placement, graph) -> str:
    """Where the placement's workload differs from ``graph``'s in what sizes resident bytes:
    the two, and that placing again for this workload is the way (empty when unknown)."""
    if plc.workload is None:
        return ""
    fields = ("batch", "context", "tokens", "weights", "kv", "spec_decode")
    if graph.moe_layers:  # a dense model's expert format changes nothing
        fields += ("expert_weights",)
    was, now = plc.workload, graph.workload
    diff = [f"{k} {getattr(was, k)} (now {getattr(now, k)})" for k in fields
            if getattr(was, k) != getattr(now, k)]  # fmt: skip
    if not diff:
        return ""
    return f"; the placement was made for {', '.join(diff)}: place again for this workload"
