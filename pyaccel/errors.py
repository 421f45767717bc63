"""Exceptions raised for bad input; the CLI turns each into one ``error:`` line and exit 2."""


class PyaccelError(Exception):
    """Base class for every error caused by the user's input (configs, presets, placements)."""


class ConfigError(PyaccelError):
    """A model config, hardware preset, workload or placement file is malformed or inconsistent."""


class PresetError(ConfigError):
    """An unknown preset name was asked for; the message lists the known ones."""


class PlacementError(PyaccelError):
    """A model cannot be placed on a system, or a placement is invalid (capacity, coverage)."""


class NeedsEtch(PyaccelError):
    """An etched ASIC asked for a model or weight format it was not etched with, which dies
    designed with ``--etch`` could run. ``reason`` says what it cannot run, ``remedy`` what
    ``--etch`` does about it and ``flags`` any run options beyond --system and --model that
    ask for it, for commands that take no ``--etch`` (compare) to give the ``run`` line."""

    def __init__(self, reason: str, remedy: str, flags: str = "") -> None:
        super().__init__(f"{reason}; pass --etch to {remedy}")
        self.reason, self.remedy, self.flags = reason, remedy, flags

    def as_run_hint(self, system: str, model: str) -> str:
        """The message for a command without ``--etch``: the ``run`` line that would do it."""
        line = " ".join(x for x in (f"--system {system} --model {model}", self.flags) if x)
        return f"{self.reason}; `pyaccel run {line} --etch` would {self.remedy}"


class CapacityError(PlacementError):
    """The workload's KV cache (batch x context) does not fit; says how many users or tokens fit."""


class EtchedModelError(NeedsEtch, PlacementError):
    """An etched ASIC cannot run this model (it holds another one in ROM): ``--etch`` could."""


class EtchedFormatError(NeedsEtch, ConfigError):
    """An etched ASIC cannot run its model at this weight format: ``--etch`` could."""


class EngineNotBuiltError(PyaccelError):
    """The engine for a machine kind does not exist yet."""
