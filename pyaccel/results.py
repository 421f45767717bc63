"""One emulated run end to end (load, place, emulate) and its ``run --json`` record (SPEC §7)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ConfigError
from .hw.io import load_system
from .model.config import load_model
from .place import place
from .sim.engine import emulate
from .workload import Workload, resolve_workload

SCHEMA_VERSION = 1


def pyaccel_version() -> str:
    """The installed package version (or ``0+unknown`` in a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyaccel")
    except PackageNotFoundError:
        return "0+unknown"


def parse_units(text: str | int) -> int | str:
    """``--units``: a positive integer or ``auto``."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    elif str(text).strip().lower() == "auto":
        return "auto"
    else:
        try:
            value = int(str(text))
        except ValueError:
            raise ConfigError(f"--units '{text}': expected a positive integer or 'auto'") from None
    if value < 1:
        raise ConfigError(f"--units {value}: must be at least 1")
    return value


@dataclass
class Run:
    """Everything one run produced: inputs, placement and trace; ``formats_from`` and
    ``warnings`` as :func:`pyaccel.workload.resolve_workload` decided them."""

    model: object
    system: object
    workload: Workload
    placement: object
    trace: object
    formats_from: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def prepare(
    model: str,
    system: str,
    units: str | int = "auto",
    workload: Workload | None = None,
    sets: list[str] | None = None,
    etch: bool = False,
):
    """Load model and system, check flags, and place; returns (model, system, workload,
    placement)."""
    cfg, sysm, resolved, plc = _prepare(model, system, units, workload, sets, etch)
    return cfg, sysm, resolved.workload, plc


def _prepare(model, system, units, workload, sets, etch):
    """:func:`prepare` keeping the whole format resolution (formats_from, warnings)."""
    cfg = load_model(model)
    sysm = load_system(system, parse_units(units), sets, etch)
    resolved = resolve_workload(workload or Workload(), cfg, sysm.spec)
    return cfg, sysm, resolved, place(cfg, sysm, resolved.workload)


def run(
    model: str,
    system: str,
    units: str | int = "auto",
    workload: Workload | None = None,
    sets: list[str] | None = None,
    etch: bool = False,
    progress=None,
    functional: bool = False,
    trace_steps: str = "ends",
) -> Run:
    """Load, place and emulate one case (``functional``: also run the numerics; ``trace_steps``:
    which steps' events the trace records, as :func:`pyaccel.emulate` takes it)."""
    from .sim.engine import parse_trace_steps

    parse_trace_steps(trace_steps, (workload or Workload()).tokens)  # bad syntax: fail first
    cfg, sysm, resolved, plc = _prepare(model, system, units, workload, sets, etch)
    work = resolved.workload
    trace = emulate(cfg, sysm, plc, work, functional=functional, progress=progress,
                    trace_steps=trace_steps)  # fmt: skip
    return Run(cfg, sysm, work, plc, trace, resolved.formats_from, resolved.warnings)


def run_record(result: Run, bottleneck: str) -> dict:
    """The ``run --json`` object: SPEC §7 keys plus layout details."""
    tr = result.trace
    rec = {
        "schema_version": SCHEMA_VERSION,
        "pyaccel_version": pyaccel_version(),
        "kind": tr.kind,
        **tr.summary(),
        "bottleneck": bottleneck,
        # a bound under one cycle floors to 0 (tiny models on a wafer): no ratio, as in Report
        "emulated_over_lower_bound": tr.step_time_s / tr.lower_bound_step_time_s
        if tr.lower_bound_step_time_s
        else None,
        "layout": result.placement.layout,
        "placement_reason": result.placement.reason,
        "assumptions": tr.assumptions,
        "left_out": tr.left_out,
        "formats_from": dict(result.formats_from),
        "warnings": list(result.warnings),
        **tr.functional,
    }
    return rec


def error_record(model: str, system: str, batch: int, message: str) -> dict:
    """A ``compare --json`` entry for a system that could not run the model."""
    return {
        "schema_version": SCHEMA_VERSION,
        "pyaccel_version": pyaccel_version(),
        "system": system,
        "model": model,
        "batch": batch,
        "error": message,
    }
