"""Exceptions raised for bad input; the CLI turns each into one ``error:`` line and exit 2."""


class PyaccelError(Exception):
    """Base class for every error caused by the user's input (configs, presets, placements)."""


class ConfigError(PyaccelError):
    """A model config, hardware preset, workload or placement file is malformed or inconsistent."""


class PresetError(ConfigError):
    """An unknown preset name was asked for; the message lists the known ones."""


class PlacementError(PyaccelError):
    """A model cannot be placed on a system, or a placement is invalid (capacity, coverage)."""


class CapacityError(PlacementError):
    """The workload's KV cache (batch x context) does not fit; says how many users or tokens fit."""


class EngineNotBuiltError(PyaccelError):
    """The engine for a machine kind does not exist yet."""
