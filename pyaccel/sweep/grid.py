"""A sweep's grid: the points a sweep runs, from a TOML file or a dict.

``[axes]`` names run options (``_`` for ``-``) or ``set.NAME`` overrides of a preset's named
parameters, each a list of values (or one value); their product, the last axis varying fastest,
gives the grid's points in order. ``[[point]]`` tables add explicit points after them. Every
point needs a ``system`` and a ``model``; whatever else it leaves out takes ``run``'s default.
"""

from __future__ import annotations

import itertools
import json
import os
import tomllib
from dataclasses import replace
from pathlib import Path

from ..errors import ConfigError
from ..model.config import preset_names as model_presets
from ..spec_decode import parse as parse_spec_decode
from ..workload import Workload

# run's options a grid may sweep, with run's defaults (None: the preset's or the model's own)
DEFAULTS = {
    "system": None,
    "model": None,
    "units": "auto",
    "batch": 1,
    "context": 1024,
    "tokens": 128,
    "weights": None,
    "expert_weights": None,
    "kv": "bf16",
    "spec_decode": None,
    "router": "uniform",
    "seed": 0,
    "etch": False,
}
SET_PREFIX = "set."
_SCALARS = (str, int, float, bool)
# the run options a Workload checks (their values are checked when the grid loads, by the same
# rules as run's; a point that cannot run for its system or model is a row, not an error)
_WORKLOAD = ("batch", "context", "tokens", "weights", "expert_weights", "kv", "spec_decode",
             "router", "seed")  # fmt: skip
_WHOLE = ("batch", "context", "tokens", "seed")  # the rest of _WORKLOAD are names (text)


def load_grid(grid: str | Path | dict) -> dict:
    """The grid as a dict (``grid``: a TOML file's path, or the dict itself)."""
    if isinstance(grid, dict):
        return grid
    path = Path(grid)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8-sig"))  # an editor's BOM too
    except FileNotFoundError:
        raise ConfigError(f"grid {grid}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"grid {grid}: cannot read it ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"grid {grid}: not valid TOML ({exc})") from None


def points(grid: str | Path | dict) -> list[dict]:
    """The grid's points in order: the product of ``[axes]``, then the ``[[point]]`` tables.
    Each point holds the names it was given (axis names, ``set.NAME`` for overrides).
    ConfigError (naming the grid's file, the table, the name and the value) for an unknown
    name, a value of the wrong type or out of run's limits, a point without a system or a
    model, and a point that repeats another (the same run once run's defaults fill it in)."""
    spec = load_grid(grid)
    src = "grid" if isinstance(grid, dict) else f"grid {grid}"
    unknown = set(spec) - {"axes", "point"}
    if unknown:
        raise ConfigError(f"{src}: unknown table(s) {sorted(unknown)}; a grid has [axes] and "
                          "[[point]] tables")  # fmt: skip
    out = _axes_points(spec.get("axes", {}), src) + _table_points(spec.get("point", []), src)
    if not out:
        raise ConfigError(f"{src}: no points (give [axes] or [[point]] tables)")
    seen: dict[str, int] = {}
    for i, p in enumerate(out):
        missing = [n for n in ("system", "model") if n not in p]
        if missing:
            raise ConfigError(f"{src}: point {i + 1} ({p}) has no {' and no '.join(missing)}; "
                              "give it as an axis or in the [[point]] table")  # fmt: skip
        first = seen.setdefault(json.dumps(inputs_of(p), sort_keys=True), i)
        if first != i:
            raise ConfigError(f"{src}: point {i + 1} ({p}) repeats point {first + 1} "
                              f"({out[first]}): the same run once run's defaults fill them "
                              "in; remove one")  # fmt: skip
    return out


def _axes_points(axes, src: str) -> list[dict]:
    """The product of ``[axes]`` (the last axis varying fastest), each value checked."""
    if not isinstance(axes, dict):
        raise ConfigError(f"{src}: [axes] must be a table of name = [values]")
    names = list(axes)
    for name in names:
        _check_name(name, f"{src} [axes]")
    values = [_values(name, axes[name], f"{src} [axes]") for name in names]
    if not names:
        return []
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values)]


def _table_points(extra, src: str) -> list[dict]:
    """The ``[[point]]`` tables, each name and value checked."""
    if not isinstance(extra, list) or not all(isinstance(p, dict) for p in extra):
        raise ConfigError(f"{src}: [[point]] entries must be tables of name = value")
    for i, p in enumerate(extra):
        for name, value in p.items():
            _check_name(name, f"{src} [[point]] {i + 1}")
            _check_value(name, value, f"{src} [[point]] {i + 1}")
    return [dict(p) for p in extra]


def inputs_of(point: dict) -> dict:
    """A point with every run option filled in (run's defaults) and its overrides sorted: the
    same run has the same inputs however the grid spelled it, and the files it names (a
    system's TOML, a model's or a draft model's folder, a routing trace) as absolute paths: a
    Dask worker, a separately started one included, may run in another folder."""
    full = {name: _absolute(name, point.get(name, default)) for name, default in DEFAULTS.items()}
    sets = sorted((k, point[k]) for k in point if k.startswith(SET_PREFIX))
    return {**full, **dict(sets)}


def _absolute(name: str, value):
    """``value`` of run option ``name`` with a file or folder it names made absolute (a model
    preset's name is left as it is, even beside a folder of that name: the loader says which
    is meant); any other value as given."""
    if name == "spec_decode" and isinstance(value, str) and value.startswith("draft:"):
        spec = parse_spec_decode(value)
        draft = _absolute("model", spec.draft)
        return replace(spec, draft=draft).text if draft != spec.draft else value
    if name not in ("system", "model", "router") or not isinstance(value, str):
        return value
    if not Path(value).exists() or (name == "model" and value in model_presets()):
        return value
    return os.path.abspath(value)


def _check_name(name: str, where: str) -> None:
    if name in DEFAULTS or (name.startswith(SET_PREFIX) and len(name) > len(SET_PREFIX)):
        return
    raise ConfigError(f"{where}: unknown name '{name}'; known: {', '.join(DEFAULTS)} and "
                      "set.NAME for an override of a preset parameter")  # fmt: skip


def _values(name: str, raw, where: str) -> list:
    vals = raw if isinstance(raw, list) else [raw]
    if not vals:
        raise ConfigError(f"{where} {name}: no values")
    for v in vals:
        _check_value(name, v, where)
    return vals


def _check_value(name: str, value, where: str) -> None:
    if not isinstance(value, _SCALARS):
        raise ConfigError(f"{where} {name}: {value!r} is not a string, number or boolean")
    problem = _problem(name, value)
    if problem:
        raise ConfigError(f"{where} {name}: {problem}")


def _problem(name: str, value) -> str | None:
    """What is wrong with a run option's value in a grid (None: nothing); ``set.NAME``
    overrides are checked by the system they override, when the point runs."""
    if name == "etch":
        return None if isinstance(value, bool) else f"{value!r} is not true or false"
    if name in ("system", "model"):
        ok = isinstance(value, str) and value.strip()
        return None if ok else f"{value!r} is not a preset name or a file (as text)"
    if name == "units":
        ok = (value.strip().lower() == "auto" if isinstance(value, str)
              else type(value) is int and value >= 1)  # fmt: skip
        return None if ok else f"{value!r} is not a positive integer or 'auto'"
    if name not in _WORKLOAD:
        return None
    if name not in _WHOLE and not isinstance(value, str):
        return f"{value!r} is not text (run's --{name.replace('_', '-')} takes a name)"
    try:
        Workload(**{name: value})  # run's own checks and limits, one field at a time
    except ConfigError as exc:
        return str(exc)
    return None
