"""Readers of single ``config.json`` fields, each refusing a wrong type or value with the file
and the field named (:class:`~pyaccel.errors.ConfigError`)."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError


def need(cfg: dict, key: str, where: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise ConfigError(f"{where}: missing field '{key}'")
    return cfg[key]


def integer(cfg: dict, key: str, where: str, default: int | None = None) -> int:
    value = cfg.get(key, default) if default is not None else need(cfg, key, where)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where}: field '{key}' must be a non-negative integer, got {value!r}")
    return value


def positive(cfg: dict, key: str, where: str, default: int | None = None) -> int:
    value = integer(cfg, key, where, default)
    if value == 0:
        raise ConfigError(f"{where}: field '{key}' must be positive, got 0")
    return value


def real(cfg: dict, key: str, where: str, default: float) -> float:
    """A positive finite real field (``rope_theta``, ``rms_norm_eps``); absent or null: default."""
    value = cfg.get(key)
    if value is None:
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (0 < value < float("inf"))
    ):
        raise ConfigError(f"{where}: field '{key}' must be a positive number, got {value!r}")
    return float(value)


def layer_list(cfg: dict, key: str, n_layers: int, where: str) -> set[int]:
    """A list of layer indices (e.g. ``mlp_only_layers``); absent or null: empty."""
    value = cfg.get(key)
    if value is None:
        return set()
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n_layers for i in value
    ):
        raise ConfigError(
            f"{where}: field '{key}' must be a list of layer indices 0..{n_layers - 1}, "
            f"got {value!r}"
        )
    return set(value)


def flag(cfg: dict, key: str, where: str, default: bool = False) -> bool:
    """A true/false field (absent or null: ``default``); strings such as "no" are refused."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: field '{key}' must be true or false, got {value!r}")
    return value
