"""What if one resource class were twice as fast: the run re-emulated once per class, ranked by
how much the step time drops (SPEC §5). Re-emulating is orchestration; the report only shows
the rows (:class:`~pyaccel.report.WhatIfRow`)."""

from __future__ import annotations

from .emulation import emulate, engine_module, what_if_system
from .records import WhatIfRow


def what_if_gains(model, system, placement, workload, step_time_s: float) -> list[WhatIfRow]:
    """Re-emulate ``model`` on ``system`` as ``placement`` lays it out, with each resource class
    of the system's engine twice as fast (rates doubled, latencies halved); each row's gain is
    ``step_time_s`` (the unchanged run's mean step time, s) over the new one. Largest gain
    first."""
    rows = []
    for resource in engine_module(system.kind).WHAT_IF:
        faster = what_if_system(system, resource)
        t = emulate(model, faster, placement, workload, event_steps=())
        rows.append(WhatIfRow(resource, t.step_time_s, step_time_s / t.step_time_s))
    return sorted(rows, key=lambda r: -r.gain)


def run_what_if(result) -> list[WhatIfRow]:
    """:func:`what_if_gains` of a :class:`~pyaccel.results.Run`."""
    return what_if_gains(result.model, result.system, result.placement, result.workload,
                         result.trace.step_time_s)  # fmt: skip
