"""What if one resource class were twice as fast: the run re-emulated once per class, ranked by
how much the step time drops (SPEC §5). Re-emulating is orchestration; the report only shows
the rows (:class:`~pyaccel.report.WhatIfRow`).

A what-if needs only the step times, so it runs the step driver on the run's own graph and
placement with no events, no lower bound and no trace (:func:`pyaccel.emulation.step_time_s`).
A class on which the run books no time is not re-emulated: engines book every cycle a class's
parameters add to an op (rates as their serialisation, latencies as the difference they make
to the op's schedule), so a class no op touches cannot move the step and its gain is exactly 1.
"""

from __future__ import annotations

from .emulation import engine_module, step_time_s, what_if_system
from .records import WhatIfRow
from .sim.inputs import run_graph


def what_if_gains(model, system, placement, workload, step_time_s_base: float,
                  touched: frozenset[str] | None = None) -> list[WhatIfRow]:  # fmt: skip
    """Re-emulate ``model`` on ``system`` as ``placement`` lays it out, with each resource class
    of the system's engine twice as fast (rates doubled, latencies halved); each row's gain is
    ``step_time_s_base`` (the unchanged run's mean step time, s) over the new one. ``touched``:
    the classes the unchanged run books time on (:func:`touched_classes`); the others keep the
    unchanged step (gain 1) without re-emulation. ``None`` re-emulates every class. Largest
    gain first."""
    graph = run_graph(model, system, workload)
    rows = []
    for resource in engine_module(system.kind).WHAT_IF:
        if touched is not None and resource not in touched:
            rows.append(WhatIfRow(resource, step_time_s_base, 1.0))
            continue
        t = step_time_s(graph, what_if_system(system, resource), placement)
        rows.append(WhatIfRow(resource, t, step_time_s_base / t))
    return sorted(rows, key=lambda r: -r.gain)


def touched_classes(trace) -> frozenset[str] | None:
    """Resource classes with time booked in ``trace``'s recorded events (``None`` when it
    recorded none: then nothing can be skipped). Every step books the same classes (the
    graph's ops do not change with the context), so the recorded steps stand for all."""
    events = trace.events
    if not len(events["duration"]):
        return None
    return frozenset(str(r) for r in set(events["resource"][events["duration"] > 0].tolist()))


def trace_what_if(trace) -> list[WhatIfRow]:
    """:func:`what_if_gains` of a trace that carries its inputs (model, system, placement,
    workload)."""
    model, system, placement, work = trace.inputs
    return what_if_gains(model, system, placement, work, trace.step_time_s,
                         touched_classes(trace))  # fmt: skip


def run_what_if(result) -> list[WhatIfRow]:
    """:func:`what_if_gains` of a :class:`~pyaccel.results.Run`; of a speculative run, over
    its whole round (drafting and verifying, :func:`pyaccel.speculate.round_what_if`)."""
    if getattr(result, "spec", None) is not None:
        from .speculate import round_what_if

        return round_what_if(result)
    return trace_what_if(result.trace)
