"""One point of a sweep: its inputs run as ``pyaccel run --json`` runs them, as one flat row."""

from __future__ import annotations

import json

from ..errors import PyaccelError

ERROR = "error"  # the column that holds why a point could not run (None when it ran)


def run_point(inputs: dict) -> dict:
    """The ``run --json`` record of one point (:func:`~pyaccel.sweep.grid.inputs_of`), flattened
    with ``.`` (lists as JSON strings), plus ``error``: None; or, when the point cannot run,
    only ``error``: the message (``pyaccel run``'s ``error:`` line, or the exception's type and
    message for anything else), so that one bad point never stops a sweep."""
    try:
        record = _record(inputs)
    except PyaccelError as exc:
        return {ERROR: str(exc)}
    except Exception as exc:  # noqa: BLE001 - a sweep reports every failure as its row
        return {ERROR: f"{type(exc).__name__}: {exc}"}
    return {**flatten(record), ERROR: None}


def _record(inputs: dict) -> dict:
    from ..results import measured_record, run
    from ..workload import Workload

    work = Workload(**{k: inputs[k] for k in ("batch", "context", "tokens", "weights",
                                              "expert_weights", "kv", "spec_decode", "seed",
                                              "router")})  # fmt: skip
    sets = [f"{k.removeprefix('set.')}={v}" for k, v in inputs.items() if k.startswith("set.")]
    result = run(str(inputs["model"]), str(inputs["system"]), _units(inputs["units"]), work,
                 sets or None, bool(inputs["etch"]))  # fmt: skip
    return measured_record(result).to_dict()


def _units(value):
    """A grid's ``units``: ``auto`` (any case) or a positive count."""
    from ..hw.io import unit_count

    return unit_count(value)


def flatten(record: dict, prefix: str = "") -> dict:
    """``record``'s values by dotted key (nested objects flattened, lists as JSON strings)."""
    out = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, (list, tuple)):
            out[name] = json.dumps(value, sort_keys=True)
        else:
            out[name] = value
    return out
