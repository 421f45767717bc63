"""The one placement file format (SPEC §7): what ``place --json`` and ``Placement.to_json`` write,
and ``place --check`` and ``Placement.from_json`` read.

Format version 2 (``format_version``) records the system it was made for (``system_source``: a
preset name, or a TOML file's path and SHA-256 content hash), the ``--set`` overrides (``sets``:
every parameter that differs from that preset or file) and ``etch``; loading reapplies them. The
capacities, levels and runtime reserve it prints (top level and ``per_unit``) are for reading:
loading recomputes them from the system, never from the file. Files of the unversioned format that
pyaccel wrote before (version 1: ``n_units``, the system as a preset name) still load.
Version 3 adds, per layer with expert parallelism, ``expert_units`` (the unit of each routed
expert); version 2 files, which have none, still load.
"""

from __future__ import annotations

import hashlib
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .kinds import as_dict, capacity_of, kind_module
from .slot import MAX_UNITS, LayerSlot, is_count

FORMAT_VERSION = 3
READS = (1, 2, 3)
PRESET_PREFIX = "preset "  # HardwareSpec.origin of a preset (hw.io.load_spec)
# what sizes a placement's resident bytes, in the order the file writes them
WORKLOAD_FIELDS = ("batch", "context", "tokens", "weights", "expert_weights", "kv")


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- writing


def system_source(system) -> dict:
    """Where ``system``'s spec came from: ``{"preset": NAME}`` or ``{"file": PATH, "sha256":
    HEX}``; ``{}`` when neither (a spec built from text in Python)."""
    origin = str(system.spec.origin)
    if origin.startswith(PRESET_PREFIX):
        return {"preset": origin[len(PRESET_PREFIX) :]}
    path = Path(origin)
    if origin and path.is_file():
        return {"file": origin, "sha256": file_sha256(path)}
    return {}


def model_source(graph) -> dict:
    """Where ``graph``'s model config came from: ``{"preset": NAME}`` or ``{"file": absolute
    path of its config.json, "sha256": HEX}``; ``{}`` when neither (a config built in Python,
    or no graph)."""
    origin = str(getattr(graph, "model_source", "") or "")
    if origin.startswith(PRESET_PREFIX):
        return {"preset": origin[len(PRESET_PREFIX) :]}
    path = Path(origin)
    if origin and path.is_file():
        return {"file": str(path.resolve()), "sha256": file_sha256(path)}
    return {}


def overrides_of(system) -> dict[str, Any]:
    """Parameters of ``system`` that differ from the preset or file it was loaded from (the
    ``--set`` overrides), by name."""
    from ..hw.io import load_spec

    src = system_source(system)
    if not src:
        return {}
    base = load_spec(src.get("preset") or src["file"]).params
    now = system.spec.params
    return {
        f.name: getattr(now, f.name)
        for f in fields(now)
        if getattr(now, f.name) != getattr(base, f.name)
    }


def _provenance(plc) -> tuple[dict, dict, bool]:
    system = plc.basis[1] if plc.basis else None
    if system is None:  # built by hand in Python: the system name is all there is
        from ..hw.io import preset_names

        src = {"preset": plc.system} if plc.system in preset_names() else {}
        etched = getattr(plc.layout, "etched", None) if plc.kind == "asic" else False
        return src, {}, bool(etched)
    return system_source(system), overrides_of(system), bool(system.etch)


def workload_dict(work) -> dict:
    """The file's ``workload``: what sizes the resident bytes (batch, lengths, formats, and a
    speculative request, whose verification writes its drafted tokens' K/V: recorded only when
    set); ``{}`` for none."""
    if work is None:
        return {}
    out = {k: getattr(work, k) for k in WORKLOAD_FIELDS}
    if work.spec_decode:
        out["spec_decode"] = work.spec_decode
    return out


def per_unit(plc) -> list[dict]:
    """One row per unit: layer keys, resident bytes by category, the runtime reserve, used
    (their sum) and capacity, all summed over memory levels."""
    capacity = sum(plc.capacity_bytes.values())
    reserved = sum(plc.reserved_bytes.values())
    rows = [
        {"unit": u, "layers": [], "weight_bytes": 0, "kv_bytes": 0, "buffer_bytes": 0}
        for u in range(plc.n_units)
    ]
    for s in plc.layers:  # one pass over the slots, not one per unit
        for i, u in enumerate(s.units):
            row = rows[u]
            row["layers"].append(s.layer)
            row["weight_bytes"] += s.weight_bytes[i]
            row["kv_bytes"] += s.kv_bytes[i]
            row["buffer_bytes"] += s.buffer_bytes[i]
    for row in rows:
        used = row["weight_bytes"] + row["kv_bytes"] + row["buffer_bytes"] + reserved
        row.update(reserved_bytes=reserved, used_bytes=used, capacity_bytes=capacity)
    return rows


def record(plc) -> dict:
    """The placement as a format-version-3 document (JSON types only)."""
    source, sets, etch = _provenance(plc)
    return {
        "format_version": FORMAT_VERSION,
        "system": plc.system,
        "system_source": source,
        "sets": sets,
        "etch": etch,
        "kind": plc.kind,
        "model": plc.model,
        "model_source": model_source(plc.basis[0] if plc.basis else None),
        "units": plc.n_units,
        "workload": workload_dict(plc.workload),
        "layout": as_dict(plc.layout),
        "reason": plc.reason,
        "capacity_bytes": dict(plc.capacity_bytes),
        "reserved_bytes": dict(plc.reserved_bytes),
        "level_of": dict(plc.level_of),
        "per_unit": per_unit(plc),
        "layers": [
            {
                "layer": s.layer,
                "units": list(s.units),
                "weight_bytes": list(s.weight_bytes),
                "kv_bytes": list(s.kv_bytes),
                "buffer_bytes": list(s.buffer_bytes),
                "need_weight_bytes": s.need_weight_bytes,
                "need_kv_bytes": s.need_kv_bytes,
                "region": as_dict(s.region),
                **({"expert_units": list(s.expert_units)} if s.expert_units else {}),
            }
            for s in plc.layers
        ],
    }


# ----------------------------------------------------------------------------- reading


def load(cls, data: Any, where: str, folder: Path | None, system=None, model=None):
    """A placement (of class ``cls``, :class:`~pyaccel.place.placement.Placement`) from a parsed
    document; ``folder`` (the file's) helps find a TOML system file recorded by a relative path.
    Capacities, levels and reserve come from the system. The caller checks its structure."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object")
    version = data.get("format_version", 1)
    if version not in READS or isinstance(version, bool):
        raise ConfigError(
            f"{where}: format_version {version!r} is not one this pyaccel reads "
            f"({', '.join(map(str, READS))})"
        )
    units_key = "units" if version >= 2 else "n_units"
    try:
        n_units, kind = data[units_key], data["kind"]
        names = (data["system"], data["model"])
        slots, regions = _slots(data["layers"])
    except KeyError as exc:
        raise ConfigError(f"{where}: missing field {exc}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{where}: malformed field ({exc})") from None
    if not is_count(n_units) or not 1 <= n_units <= MAX_UNITS:
        raise ConfigError(
            f"{where}: {units_key} must be an integer from 1 to {MAX_UNITS:,}, got {n_units!r}"
        )
    for key, typ in (("workload", dict), ("layout", dict), ("sets", dict),
                     ("system_source", dict), ("model_source", dict), ("etch", bool)):  # fmt: skip
        if key in data and not isinstance(data[key], typ):
            raise ConfigError(f"{where}: field '{key}' must be a JSON {_json_type(typ)}")
    if not all(isinstance(x, str) for x in (*names, kind)):
        raise ConfigError(f"{where}: fields 'system', 'model' and 'kind' must be strings")
    try:
        sysm = _system(data, where, folder, system, n_units)
        graph = _graph(data, model or _recorded_model(data, where, folder), sysm)
    except ConfigError as exc:
        text = str(exc)
        raise ConfigError(text if text.startswith(where) else f"{where}: {text}") from None
    if sysm.kind != kind:
        raise ConfigError(f"{where}: kind '{kind}', but system {sysm.name} is a {sysm.kind}")
    cap = capacity_of(sysm, graph)
    kind_mod = kind_module(kind)
    return cls(
        system=sysm.name,
        kind=kind,
        model=graph.model_name,
        n_units=n_units,
        capacity_bytes=cap[0],
        level_of=cap[1],
        reserved_bytes=cap[2],
        layers=tuple(_typed(s, r, kind_mod, where) for s, r in zip(slots, regions, strict=True)),
        layout=_record(kind_mod.LAYOUT, data.get("layout"), f"{where}: layout"),
        workload=graph.workload if data.get("workload") else None,
        reason=_reason(data, sysm.name, graph.model_name),
        basis=(graph, sysm),
    )


def _reason(data: dict, system: str, model: str) -> str:
    """The file's reason for its unit count, said to be of the recorded case when the check is
    against another system or model (``place --check --system``)."""
    reason, placed = str(data.get("reason", "")), (data["system"], data["model"])
    if reason and placed != (system, model):
        return f"when placed for {placed[1]} on {placed[0]}: {reason}"
    return reason


def _json_type(typ) -> str:
    return {dict: "object", bool: "boolean (true/false)"}.get(typ, typ.__name__)


def _record(cls, data, what: str):
    """The record of ``cls`` for a JSON object, None for a missing or empty one."""
    return cls.from_dict(data, what) if data else None


def _typed(slot: LayerSlot, region, kind_mod, where: str) -> LayerSlot:
    """``slot`` with its region read as its kind's record (refused unless a JSON object)."""
    if region is not None and not isinstance(region, dict):
        raise ConfigError(f"{where}: layer {slot.layer!r} field 'region' must be an object")
    return replace(
        slot, region=_record(kind_mod.REGION, region, f"{where}: layer {slot.layer!r}: region")
    )


def _slots(layers) -> tuple[tuple[LayerSlot, ...], list]:
    """The slots (regions not yet read: they need the kind) and each one's region as given."""
    if not isinstance(layers, list):
        raise TypeError("'layers' must be a list of objects")
    slots = tuple(
        LayerSlot(
            layer=s["layer"],
            units=tuple(s["units"]),
            weight_bytes=tuple(s["weight_bytes"]),
            kv_bytes=tuple(s["kv_bytes"]),
            buffer_bytes=tuple(s["buffer_bytes"]),
            need_weight_bytes=s["need_weight_bytes"],
            need_kv_bytes=s["need_kv_bytes"],
            expert_units=tuple(s.get("expert_units", ())),
        )
        for s in layers
    )
    return slots, [s.get("region") for s in layers]


def _system(data: dict, where: str, folder: Path | None, system, n_units: int):
    """The system to check against: ``system`` if given, else the recorded preset or TOML file
    (whose content hash must match), with the recorded ``--set`` overrides reapplied."""
    from ..hw.io import load_system
    from ..hw.spec import System

    if isinstance(system, System):
        return replace(system, units=n_units)
    sets = data.get("sets") or None
    etch = data.get("etch", bool((data.get("layout") or {}).get("etched", False)))
    if system is None:
        system = _recorded_system(data, where, folder)
    return load_system(system, n_units, sets, etch)


def _recorded_model(data: dict, where: str, folder: Path | None) -> str | Path:
    """The model to check against when none is given: the recorded config file (whose content
    hash must match; looked for where it was, then beside the placement), else the name."""
    src = data.get("model_source") or {}
    if "file" not in src:  # a preset, or a file older than model_source: the name
        return data["model"]
    recorded = Path(str(src["file"]))
    beside = [folder / recorded.parent.name / recorded.name] if folder else []
    return _verified(src, where, [recorded, *beside], "model config", "--model", folder_of=True)


def _recorded_system(data: dict, where: str, folder: Path | None) -> str | Path:
    src = data.get("system_source") or {}
    if "preset" in src:
        return str(src["preset"])
    if "file" not in src:  # version 1, or a spec built in Python: the name is a preset's
        return data["system"]
    recorded = Path(str(src["file"]))
    beside = [folder / recorded, folder / recorded.name] if folder else []
    return _verified(src, where, [recorded, *beside], "system file", "--system")


def _verified(src: dict, where: str, tries: list[Path], what: str, option: str,
              folder_of: bool = False) -> Path:  # fmt: skip
    """The first of ``tries`` that is a file, if its SHA-256 is the one ``src`` records; else
    an error naming ``what`` was not found or changed and the ``option`` to pass instead (with
    the file's folder, ``folder_of``, or the file)."""
    path = next((p for p in tries if p.is_file()), None)
    if path is None:
        raise ConfigError(
            f"{where}: {what} {tries[0]} not found (also looked beside the placement); "
            f"pass {option} {'FOLDER' if folder_of else 'FILE.toml'}"
        )
    got, want = file_sha256(path), str(src.get("sha256", ""))
    if got != want:
        raise ConfigError(
            f"{where}: {what} {path} changed since the placement was written (sha256 "
            f"{got[:12]}..., the placement records {want[:12] or 'none'}...); pass "
            f"{option} {path.parent if folder_of else path} to check against it as it is now"
        )
    return path


def _graph(data: dict, model, sysm):
    from ..model.config import ModelConfig, load_model
    from ..model.graph import build_graph
    from ..workload import Workload

    cfg = model if isinstance(model, ModelConfig) else load_model(model)
    given = data.get("workload") or {}
    known = [f.name for f in fields(Workload) if f.init]  # not the names it resolves itself
    unknown = sorted(k for k in given if k not in known)
    if unknown:
        raise ConfigError(f"workload field '{unknown[0]}' is not one of {', '.join(known)}")
    work = Workload(**given)
    return build_graph(cfg, work, native_format=sysm.spec.native_format)
