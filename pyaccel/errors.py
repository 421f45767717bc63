"""Exceptions raised for bad input; the CLI turns each into one ``error:`` line and exit 2.

A message that tells the user which setting to change names it as the Python API spells it
(:func:`option`: ``units=4``); the command line shows the same message with its flags
(:func:`as_flags`: ``--units 4``), so one text serves both surfaces.
"""

import operator
import re

# The settings a message may name, by their Python names: load_system's ``units``, ``etch`` and
# ``overrides`` (``--set``) and the Workload's fields; each has a flag of the same name.
OPTIONS = ("units", "etch", "overrides", "batch", "context", "tokens", "weights",
           "expert_weights", "kv", "spec_decode", "router")  # fmt: skip
# One setting as option() writes it: the name, '=', and the repr of an int, a bool, a str or a
# one-item list of str (never inside a longer name or a quoted word).
_OPTION = re.compile(rf"(?<![\w.'-])({'|'.join(OPTIONS)})=(True|\d+|'[^']*'|\['[^']*'\])")


def option(name: str, value) -> str:
    """How a message names a setting the user can change, as a Python caller writes it:
    ``units=4``, ``units='auto'``, ``weights='int4'``, ``etch=True``, and a preset override as
    ``overrides=['expert_layout=auto']`` (``value``: the ``KEY=VALUE`` text)."""
    if name not in OPTIONS:
        raise ValueError(f"option {name!r}: not one of {OPTIONS}")
    if name == "overrides":
        value = [str(value)]
    elif not isinstance(value, (bool, str)):
        value = operator.index(value)  # a NumPy integer reads as a plain int
    return f"{name}={value!r}"


def as_flags(text: str) -> str:
    """``text`` with each setting :func:`option` wrote as the command line's flag: ``--units
    4``, ``--expert-weights int4``, ``--etch``, ``--set expert_layout=auto``."""

    def flag(match: re.Match) -> str:
        name, value = match.group(1), match.group(2)
        if name == "etch":
            return "--etch"
        if name == "overrides":
            return f"--set {value[2:-2]}"
        value = value.strip("'")
        return f"--{name.replace('_', '-')} {value}"

    return _OPTION.sub(flag, text)


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
    ask for it (as :func:`option` writes them), for commands that take no ``--etch`` (compare)
    to give the ``run`` line."""

    def __init__(self, reason: str, remedy: str, flags: str = "") -> None:
        super().__init__(f"{reason}; pass {option('etch', True)} to {remedy}")
        self.reason, self.remedy, self.flags = reason, remedy, flags

    def as_run_hint(self, system: str, model: str) -> str:
        """The message for a command without ``--etch``: the ``run`` line that would do it."""
        line = " ".join(x for x in (f"--system {system} --model {model}", as_flags(self.flags))
                        if x)  # fmt: skip
        return f"{self.reason}; `pyaccel run {line} --etch` would {self.remedy}"


class CapacityError(PlacementError):
    """The workload's KV cache (batch x context) does not fit; says how many users or tokens fit."""


class EtchedModelError(NeedsEtch, PlacementError):
    """An etched ASIC cannot run this model (it holds another one in ROM): ``--etch`` could."""


class EtchedFormatError(NeedsEtch, ConfigError):
    """An etched ASIC cannot run its model at this weight format: ``--etch`` could."""


class EngineNotBuiltError(PyaccelError):
    """The engine for a machine kind does not exist yet."""
