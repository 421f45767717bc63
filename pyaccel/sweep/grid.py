"""A sweep's grid: the points a sweep runs, from a TOML file or a dict.

``[axes]`` names run options (``_`` for ``-``) or ``set.NAME`` overrides of a preset's named
parameters, each a list of values (or one value); their product, the last axis varying fastest,
gives the grid's points in order. ``[[point]]`` tables add explicit points after them. Every
point needs a ``system`` and a ``model``; whatever else it leaves out takes ``run``'s default.
"""

from __future__ import annotations

import itertools
import tomllib
from pathlib import Path

from ..errors import ConfigError

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


def load_grid(grid: str | Path | dict) -> dict:
    """The grid as a dict (``grid``: a TOML file's path, or the dict itself)."""
    if isinstance(grid, dict):
        return grid
    path = Path(grid)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"grid {grid}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"grid {grid}: cannot read it ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"grid {grid}: not valid TOML ({exc})") from None


def points(grid: str | Path | dict) -> list[dict]:
    """The grid's points in order: the product of ``[axes]``, then the ``[[point]]`` tables.
    Each point holds the names it was given (axis names, ``set.NAME`` for overrides)."""
    spec = load_grid(grid)
    unknown = set(spec) - {"axes", "point"}
    if unknown:
        raise ConfigError(f"grid: unknown table(s) {sorted(unknown)}; a grid has [axes] and "
                          "[[point]] tables")  # fmt: skip
    axes = spec.get("axes", {})
    if not isinstance(axes, dict):
        raise ConfigError("grid: [axes] must be a table of name = [values]")
    names = list(axes)
    for name in names:
        _check_name(name, "[axes]")
    values = [_values(name, axes[name]) for name in names]
    out = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values)] if (
        names) else []  # fmt: skip
    extra = spec.get("point", [])
    if not isinstance(extra, list) or not all(isinstance(p, dict) for p in extra):
        raise ConfigError("grid: [[point]] entries must be tables of name = value")
    for i, p in enumerate(extra):
        for name, value in p.items():
            _check_name(name, f"[[point]] {i + 1}")
            _check_value(name, value, f"[[point]] {i + 1}")
        out.append(dict(p))
    for i, p in enumerate(out):
        missing = [n for n in ("system", "model") if n not in p]
        if missing:
            raise ConfigError(f"grid: point {i + 1} ({p}) has no {' and no '.join(missing)}; "
                              "give it as an axis or in the [[point]] table")  # fmt: skip
    if not out:
        raise ConfigError("grid: no points (give [axes] or [[point]] tables)")
    return out


def inputs_of(point: dict) -> dict:
    """A point with every run option filled in (run's defaults) and its overrides sorted: the
    same run has the same inputs however the grid spelled it."""
    full = {name: point.get(name, default) for name, default in DEFAULTS.items()}
    sets = sorted((k, point[k]) for k in point if k.startswith(SET_PREFIX))
    return {**full, **dict(sets)}


def _check_name(name: str, where: str) -> None:
    if name in DEFAULTS or (name.startswith(SET_PREFIX) and len(name) > len(SET_PREFIX)):
        return
    raise ConfigError(f"grid {where}: unknown name '{name}'; known: {', '.join(DEFAULTS)} and "
                      "set.NAME for an override of a preset parameter")  # fmt: skip


def _values(name: str, raw) -> list:
    vals = raw if isinstance(raw, list) else [raw]
    if not vals:
        raise ConfigError(f"grid [axes] {name}: no values")
    for v in vals:
        _check_value(name, v, "[axes]")
    return vals


def _check_value(name: str, value, where: str) -> None:
    if not isinstance(value, _SCALARS):
        raise ConfigError(f"grid {where} {name}: {value!r} is not a string, number or boolean")
