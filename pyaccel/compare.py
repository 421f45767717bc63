"""``compare``: one model on several systems (``--units auto``) and batch sizes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .errors import NeedsEtch, PyaccelError
from .hw.io import preset_names
from .records import ErrorRecord, RunRecord
from .results import error_record, run_and_record
from .workload import Workload, resolve_workload


def compare(
    model: str,
    systems: list[str] | None,
    workload: Workload,
    batches: list[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[RunRecord | ErrorRecord]:
    """One ``run --json`` record per system (``None``: every preset) and batch size
    (``None``: the workload's); a system that cannot run the model gets an
    :class:`ErrorRecord` saying why instead of numbers. ``progress(done, total)`` is called
    after each run."""
    names = list(systems) if systems else preset_names()
    from .hw.io import load_spec
    from .model.config import load_model

    # unknown names are errors of the whole command, not of one system
    cfg = load_model(model)
    specs = {name: load_spec(name) for name in names}
    sizes = list(batches) if batches else [workload.batch]
    if progress is not None:
        progress(0, len(names) * len(sizes))
    records = []
    for name in names:
        for b in sizes:
            work = replace(workload, batch=b)
            try:
                records.append(run_and_record(model, name, "auto", work)[2])
            except PyaccelError as exc:
                # the formats it was tried at, and why, still belong with the error
                resolved = resolve_workload(work, cfg, specs[name])
                text = exc.as_run_hint(name, model) if isinstance(exc, NeedsEtch) else str(exc)
                records.append(error_record(model, name, specs[name].kind, "auto",
                                            resolved.workload, text, resolved.formats_from,
                                            resolved.warnings))  # fmt: skip
            if progress is not None:
                progress(len(records), len(names) * len(sizes))
    return records
