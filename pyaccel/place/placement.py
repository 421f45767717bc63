"""Placement: which unit(s) and region hold every layer, and the bytes each unit keeps (SPEC §2).

Resident bytes are what a unit must hold (weights and scales, KV cache, buffers), distinct from the
bytes an op reads per step. A layer may span several units (tensor parallel): ``units`` lists them
and the byte tuples give each one's share, aligned with ``units``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, PlacementError
from ..units import fmt_bytes

CATEGORIES = ("weights", "kv", "buffers")


@dataclass(frozen=True)
class LayerSlot:
    """Where one layer lives: its units, a kind-specific ``region`` and per-unit resident bytes.

    ``need_weight_bytes``/``need_kv_bytes`` are the layer's own resident bytes as the graph counts
    them (once); per-unit bytes may add up to more where a part is replicated on every unit.
    """

    layer: int | str
    units: tuple[int, ...]
    weight_bytes: tuple[int, ...]
    kv_bytes: tuple[int, ...]
    buffer_bytes: tuple[int, ...]
    need_weight_bytes: int
    need_kv_bytes: int
    region: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Placement:
    """A model placed on ``n_units`` units of one system.

    ``capacity_bytes`` maps each memory level to the bytes one unit has there; ``level_of`` maps
    the categories weights/kv/buffers to a level; ``reserved_bytes`` is kept per unit per level by
    the runtime. ``layout`` holds the strategy (e.g. ``{"tp": 8, "pp": 2}``) and ``reason`` why this
    many units were chosen.
    """

    system: str
    kind: str
    model: str
    n_units: int
    capacity_bytes: dict[str, int]
    level_of: dict[str, str]
    reserved_bytes: dict[str, int]
    layers: tuple[LayerSlot, ...]
    layout: dict = field(default_factory=dict)
    workload: dict = field(default_factory=dict)
    reason: str = ""

    def slot(self, layer: int | str) -> LayerSlot:
        """The slot of one layer key; a missing one raises :class:`PlacementError`."""
        for s in self.layers:
            if s.layer == layer:
                return s
        raise PlacementError(f"layer {layer!r} is not placed")

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
        """(unit, level, bytes needed, bytes available) for every over-full unit and level."""
        out = []
        for unit in range(self.n_units):
            for level, used in self.level_use(unit).items():
                cap = self.capacity_bytes.get(level, 0)
                if used > cap:
                    out.append((unit, level, used, cap))
        return out

    def check(self, graph=None) -> "Placement":
        """Verify capacity on every unit and, with a graph, that every layer is placed once with
        the resident bytes the graph needs. Raises :class:`PlacementError` naming the unit and
        the bytes; returns ``self``."""
        _check_structure(self)
        short = self.shortfalls()
        if short:
            unit, level, used, cap = max(short, key=lambda s: s[2] - s[3])
            more = f" ({len(short) - 1} more unit(s) short)" if len(short) > 1 else ""
            raise PlacementError(
                f"{self.system} unit {unit} is short of {fmt_bytes(used - cap)} in {level}: needs "
                f"{used:,} B ({fmt_bytes(used)}), has {cap:,} B ({fmt_bytes(cap)}){more}"
            )
        if graph is not None:
            _check_coverage(self, graph)
        return self

    def to_json(self, path: str | Path | None = None) -> str:
        """This placement as JSON text; with ``path``, also written there atomically."""
        text = json.dumps(asdict(self), indent=1)
        if path is not None:
            from ..io_util import write_atomic

            write_atomic(path, text)
        return text

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> "Placement":
        """A placement from JSON text or a file; malformed input raises :class:`ConfigError`."""
        where, text = "placement JSON", str(text_or_path)
        is_text = not isinstance(text_or_path, Path) and text.lstrip().startswith("{")
        if not is_text or _is_file(text):
            where = text
            try:
                text = Path(text).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{where}: cannot read ({exc.__class__.__name__})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
        return _from_dict(data, where)


def _is_file(text: str) -> bool:
    try:
        return Path(text).is_file()
    except OSError:  # e.g. a JSON text too long to be a file name
        return False


def _from_dict(data: Any, where: str) -> Placement:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object")
    try:
        slots = tuple(
            LayerSlot(
                layer=s["layer"],
                units=tuple(s["units"]),
                weight_bytes=tuple(s["weight_bytes"]),
                kv_bytes=tuple(s["kv_bytes"]),
                buffer_bytes=tuple(s["buffer_bytes"]),
                need_weight_bytes=s["need_weight_bytes"],
                need_kv_bytes=s["need_kv_bytes"],
                region=dict(s.get("region") or {}),
            )
            for s in data["layers"]
        )
        plc = Placement(
            system=data["system"],
            kind=data["kind"],
            model=data["model"],
            n_units=data["n_units"],
            capacity_bytes=dict(data["capacity_bytes"]),
            level_of=dict(data["level_of"]),
            reserved_bytes=dict(data.get("reserved_bytes", {})),
            layers=slots,
            layout=dict(data.get("layout") or {}),
            workload=dict(data.get("workload") or {}),
            reason=str(data.get("reason", "")),
        )
    except KeyError as exc:
        raise ConfigError(f"{where}: missing field {exc}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{where}: malformed field ({exc})") from None
    _check_structure(plc, where)
    return plc


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _check_structure(plc: Placement, where: str = "placement") -> None:
    """Types and index ranges of a placement (hand-written JSON goes through this)."""
    if not _is_count(plc.n_units) or plc.n_units < 1:
        raise ConfigError(f"{where}: n_units must be a positive integer, got {plc.n_units!r}")
    for cat in CATEGORIES:
        if plc.level_of.get(cat) not in plc.capacity_bytes:
            raise ConfigError(f"{where}: level_of['{cat}'] must name a level of capacity_bytes")
    for name in ("capacity_bytes", "reserved_bytes"):
        for level, n in getattr(plc, name).items():
            if not _is_count(n):
                raise ConfigError(
                    f"{where}: {name} for level '{level}' must be a non-negative integer, got {n!r}"
                )
    for s in plc.layers:
        if not s.units:
            raise ConfigError(f"{where}: layer {s.layer!r} has no units")
        bad = [u for u in s.units if not _is_count(u) or u >= plc.n_units]
        if bad:
            raise ConfigError(
                f"{where}: layer {s.layer!r} names unit {bad[0]!r}; units are 0..{plc.n_units - 1}"
            )
        for name in ("weight_bytes", "kv_bytes", "buffer_bytes"):
            vals = getattr(s, name)
            if len(vals) != len(s.units) or not all(_is_count(v) for v in vals):
                raise ConfigError(
                    f"{where}: layer {s.layer!r} field '{name}' needs one "
                    f"non-negative integer per unit ({len(s.units)})"
                )


def _check_coverage(plc: Placement, graph) -> None:
    """Every graph layer placed once, with at least the resident bytes the graph needs."""
    keys = [s.layer for s in plc.layers]
    dup = sorted({str(k) for k in keys if keys.count(k) > 1})
    if dup:
        raise PlacementError(f"layer(s) placed more than once: {', '.join(dup)}")
    missing = [k for k in graph.layer_keys if k not in keys]
    extra = [k for k in keys if k not in graph.layer_keys]
    if missing or extra:
        raise PlacementError(
            f"placement does not match model {graph.model.name}: missing layers "
            f"{missing[:5]}, unknown layers {extra[:5]}"
        )
    for s in plc.layers:
        need_w, need_kv = graph.resident_bytes(s.layer)
        if (s.need_weight_bytes, s.need_kv_bytes) != (need_w, need_kv):
            raise PlacementError(
                f"layer {s.layer!r}: placement records {s.need_weight_bytes:,} B "
                f"weights / {s.need_kv_bytes:,} B KV, the model needs "
                f"{need_w:,} B / {need_kv:,} B"
            )
        if sum(s.weight_bytes) < need_w or sum(s.kv_bytes) < need_kv:
            raise PlacementError(
                f"layer {s.layer!r}: units hold {sum(s.weight_bytes):,} B "
                f"weights / {sum(s.kv_bytes):,} B KV, fewer than the "
                f"{need_w:,} B / {need_kv:,} B it needs"
            )
