"""``compare``: one model on several systems (``--units auto``) and batch sizes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .errors import ConfigError, PyaccelError
from .hw.io import preset_names
from .report import Report
from .results import error_record, run, run_record
from .workload import Workload, resolve_workload


def parse_batches(text: str | None, default: int) -> list[int]:
    """``--batches 1,2,4``: positive integers."""
    if not text:
        return [default]
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--batches '{text}': expected comma-separated integers") from None
    if not values or min(values) < 1:
        raise ConfigError(f"--batches '{text}': batch sizes must be positive")
    return values


def compare(
    model: str,
    systems: str | None,
    workload: Workload,
    batches: str | None,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict]:
    """One ``run --json`` record per system and batch; a system that cannot run the model gets
    an ``error`` field instead of numbers. ``progress(done, total)`` is called after each run."""
    names = [s.strip() for s in systems.split(",") if s.strip()] if systems else preset_names()
    from .hw.io import load_spec
    from .model.config import load_model

    # unknown names are errors of the whole command, not of one system
    cfg = load_model(model)
    specs = {name: load_spec(name) for name in names}
    sizes = parse_batches(batches, workload.batch)
    if progress is not None:
        progress(0, len(names) * len(sizes))
    records = []
    for name in names:
        for b in sizes:
            work = replace(workload, batch=b)
            try:
                result = run(model, name, "auto", work)
                rep = Report.from_trace(result.trace, what_if=False)
                records.append(run_record(result, rep.bottleneck))
            except PyaccelError as exc:
                # the formats it was tried at, and why, still belong with the error
                resolved = resolve_workload(work, cfg, specs[name])
                rec = error_record(model, name, b, str(exc))
                rec.update(formats_from=resolved.formats_from, warnings=list(resolved.warnings))
                records.append(rec)
            if progress is not None:
                progress(len(records), len(names) * len(sizes))
    return records
