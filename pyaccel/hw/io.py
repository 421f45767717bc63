"""Load and validate hardware presets (TOML) and apply ``--set key=value`` overrides."""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from dataclasses import fields
from importlib import resources
from os import PathLike
from pathlib import Path
from typing import Any

from ..errors import ConfigError, PresetError, option
from ..formats import get_format
from ..units import as_int
from .fields import MAX_INTEGER, TICK_SLACK, time_ranges
from .kinds import kind_names
from .spec import PARAMS_BY_KIND, HardwareSpec, System


def preset_names() -> list[str]:
    """Names of the hardware presets shipped with pyaccel."""
    folder = resources.files("pyaccel.hw") / "presets"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def _coerce(kind: str, name: str, value: Any, meta: dict, where: str) -> Any:
    """Check one parameter value against its field's type and bound."""
    if meta.get("text"):
        if not isinstance(value, str) or not value:
            raise ConfigError(
                f"{where}: parameter '{name}' must be a non-empty string, got {value!r}"
            )
        choices = meta.get("choices") or ()
        if choices and value not in choices:
            raise ConfigError(
                f"{where}: parameter '{name}' = {value!r} is not one of {', '.join(choices)}"
            )
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: parameter '{name}' must be a finite number, got {value!r}")
    per_cycle = meta.get("per_cycle")
    if per_cycle and abs(value * per_cycle - round(value * per_cycle)) > TICK_SLACK:
        raise ConfigError(
            f"{where}: parameter '{name}' must be a multiple of 1/{per_cycle} cycle (the engine "
            f"simulates {per_cycle} ticks a cycle), got {value!r}"
        )
    if meta.get("integer"):
        if value != int(value):
            raise ConfigError(f"{where}: parameter '{name}' must be a whole number, got {value!r}")
        value = int(value)
        if abs(value) > MAX_INTEGER:
            raise ConfigError(
                f"{where}: parameter '{name}' = {value:.6g} must be <= 2**53 ({MAX_INTEGER:,})"
            )
    low, strict = meta["min"], meta["strict"]
    if value < low or (strict and value == low):
        bound = ">" if strict else ">="
        raise ConfigError(f"{where}: parameter '{name}' = {value!r} must be {bound} {low}")
    return value


def _parse_range(name: str, entry: dict, value: Any, meta: dict, where: str):
    """A parameter's optional ``low``/``high`` (the range its sources allow), checked like its
    value; ``None`` when the entry gives neither."""
    if "low" not in entry and "high" not in entry:
        return None
    if "low" not in entry or "high" not in entry or meta.get("text"):
        raise ConfigError(
            f"{where}: parameter '{name}' needs both 'low' and 'high' for a range (numbers only)"
        )
    low = _coerce("", f"{name}.low", entry["low"], meta, where)
    high = _coerce("", f"{name}.high", entry["high"], meta, where)
    # a value of 0 means "derive it": its range documents what the derivation may give
    if not low <= high or (value != 0 and not low <= value <= high):
        raise ConfigError(
            f"{where}: parameter '{name}': its range low = {low!r} .. high = {high!r} must be "
            f"ordered and hold its value {value!r}"
        )
    return (low, high)


def _parse_params(kind: str, table: Any, where: str) -> tuple[Any, dict, dict, dict]:
    """Params dataclass, sources, assumptions and ranges from the ``[params]`` table."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: missing table [params]")
    cls = PARAMS_BY_KIND[kind]
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(
            f"{where}: unknown parameter '{unknown[0]}' for kind '{kind}'; known: "
            f"{', '.join(known)}"
        )
    values, sources, assumptions, ranges = {}, {}, {}, {}
    for name, fld in known.items():
        entry = table.get(name)
        if entry is None:
            raise ConfigError(f"{where}: missing parameter '{name}' ({fld.metadata['doc']})")
        if not isinstance(entry, dict) or "value" not in entry:
            raise ConfigError(
                f"{where}: parameter '{name}' must be an inline table "
                '{ value = ..., source = "..." } or { value = ..., assumption = '
                '"name: reasoning" }'
            )
        has_src, has_asm = bool(entry.get("source")), bool(entry.get("assumption"))
        if has_src == has_asm:
            raise ConfigError(
                f"{where}: parameter '{name}' needs exactly one of 'source' or 'assumption'"
            )
        values[name] = _coerce(kind, name, entry["value"], fld.metadata, where)
        span = _parse_range(name, entry, values[name], fld.metadata, where)
        if span is not None:
            ranges[name] = span
        (sources if has_src else assumptions)[name] = str(
            entry.get("source") or entry["assumption"]
        )
    return cls(**values), sources, assumptions, ranges


def spec_from_toml(text: str, where: str) -> HardwareSpec:
    """Parse and validate a preset's TOML text; ``where`` names the file in errors."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML ({exc})") from None
    head = data.get("preset")
    if not isinstance(head, dict):
        raise ConfigError(
            f"{where}: missing table [preset] (name, kind, description, native_format)"
        )
    for key in ("name", "kind", "description", "native_format"):
        if not isinstance(head.get(key), str) or not head[key]:
            raise ConfigError(f"{where}: [preset] field '{key}' must be a non-empty string")
    kind = head["kind"]
    if kind not in kind_names():
        raise ConfigError(
            f"{where}: [preset] kind '{kind}' is not one of {', '.join(kind_names())}"
        )
    native = get_format(head["native_format"], f"{where}: native_format").name
    params, sources, assumptions, ranges = _parse_params(kind, data.get("params"), where)
    check_relations(params, lambda names: where)
    return HardwareSpec(head["name"], kind, head["description"], native, params, sources,
                        assumptions, origin=where, ranges=ranges)  # fmt: skip


def check_relations(params: Any, where: Callable[[tuple[str, ...]], str]) -> None:
    """Raise :class:`ConfigError` on the first cross-field relation ``params`` breaks (achievable
    above peak, reserves above capacities...); ``where(fields)`` names the file or ``--set``
    item that set them."""
    for broken in [*params.relations(), *time_ranges(params)]:
        if broken is not None:
            names, message = broken
            raise ConfigError(f"{where(names)}: {message}")


def load_spec(name_or_path: str | Path) -> HardwareSpec:
    """A hardware spec from a preset name or a TOML file path."""
    if not isinstance(name_or_path, (str, PathLike)):
        raise ConfigError(
            "load_system(): takes a preset name or a TOML file's path; got "
            f"{type(name_or_path).__name__} {name_or_path!r:.60}"
        )
    text = str(name_or_path)
    path = Path(text)
    if path.suffix == ".toml" or path.exists():
        try:
            return spec_from_toml(path.read_text(encoding="utf-8"), str(path))
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read ({exc.__class__.__name__})") from None
    if text in preset_names():
        res = resources.files("pyaccel.hw") / "presets" / f"{text}.toml"
        return spec_from_toml(res.read_text(encoding="utf-8"), f"preset {text}")
    raise PresetError(
        f"unknown system '{text}'; known presets: {', '.join(preset_names())} "
        "(or give a .toml file)"
    )


def apply_overrides(spec: HardwareSpec, sets: list[str] | dict | None) -> HardwareSpec:
    """Apply ``--set key=value`` overrides (``key`` a parameter name) to a spec."""
    if not sets:
        return spec
    pairs = list(sets.items()) if isinstance(sets, dict) else [_split_set(s) for s in sets]
    meta = {f.name: f.metadata for f in fields(PARAMS_BY_KIND[spec.kind])}
    for key, raw in pairs:
        if key not in meta:
            raise ConfigError(
                f"--set {key}: no such parameter for kind '{spec.kind}'; known: {', '.join(meta)}"
            )
        if meta[key].get("informational"):
            raise ConfigError(
                f"--set {key}={raw}: '{key}' has no effect ({meta[key]['doc']}); no engine "
                "reads it, so setting it would change nothing"
            )
        value = raw if meta[key].get("text") else _number(key, raw)
        value = _coerce(spec.kind, key, value, meta[key], f"--set {key}")
        spec = spec.with_params(
            f"{key}={raw} (preset: {getattr(spec.params, key)})", **{key: value}
        )
    given = {key: f"--set {key}={raw}" for key, raw in pairs}
    check_relations(
        spec.params,
        lambda names: next((given[n] for n in names if n in given), spec.origin or spec.name),
    )
    return spec


def check_unique_sets(sets: list[str] | None) -> None:
    """Refuse a ``--set`` key given twice (which value was meant is not clear)."""
    seen: dict[str, str] = {}
    for item in sets or []:
        key, value = _split_set(item)
        if key in seen:
            raise ConfigError(
                f"--set {key}: given twice ({key}={seen[key]} and {key}={value}); give each "
                "key once"
            )
        seen[key] = value


def _split_set(item: str) -> tuple[str, str]:
    """``KEY=VALUE`` as its stripped key and value; a ConfigError saying the form otherwise."""
    if "=" not in item:
        raise ConfigError(f"--set '{item}': no '=' in it; expected --set KEY=VALUE")
    key, value = item.split("=", 1)
    if not key.strip():
        raise ConfigError(f"--set '{item}': no key before '='; expected --set KEY=VALUE")
    return key.strip(), value.strip()


def _number(key: str, raw: Any) -> float:
    try:
        return float(str(raw).replace("_", ""))
    except ValueError:
        raise ConfigError(f"--set {key}={raw}: value must be a number") from None


def unit_count(value: str | int, where: str = "units") -> int | str:
    """A unit count as a user writes it (``--units``, a published-speed table, a sweep grid):
    a positive integer, as a number or as text, or ``auto`` in any case (returned as
    ``"auto"``). A ConfigError names ``where``, the value and what it must be."""
    count = as_int(value)
    if count is None:
        text = str(value).strip()
        if text.lower() == "auto":
            return "auto"
        try:
            count = int(text)
        except ValueError:
            raise ConfigError(f"{where} '{value}': expected a positive integer or 'auto'") from None
    if count < 1:
        raise ConfigError(f"{where} {count}: must be at least 1")
    return count


def load_system(
    name_or_path: str | Path,
    units: int | str = 1,
    overrides: list[str] | dict | None = None,
    etch: bool = False,
) -> System:
    """A :class:`System` of ``units`` machines (``"auto"``: resolved by :func:`pyaccel.place`);
    ``etch`` applies to asic systems only."""
    spec = apply_overrides(load_spec(name_or_path), overrides)
    if units != "auto":
        count = as_int(units)  # NumPy integers too
        if count is None or count < 1:
            raise ConfigError(f"units must be a positive integer or 'auto', got {units!r}")
        units = count
    if etch and spec.kind != "asic":
        raise ConfigError(
            f"{option('etch', True)} applies to asic systems; {spec.name} is a {spec.kind}"
        )
    return System(spec, units, etch)
