"""What ``emulate()`` and ``roofline()`` start from: the engine of a machine kind, and the decode
graph of the model or graph they are given (formats resolved for the system, SPEC §6).

Both entry points need both; holding them here keeps ``engine`` and ``roofline`` from importing
each other.
"""

from __future__ import annotations

from weakref import WeakValueDictionary

from ..errors import ConfigError
from ..hw.kinds import kind_module
from ..hw.spec import System
from ..model.config import ModelConfig
from ..model.graph import DecodeGraph, build_graph
from ..workload import Workload, resolve_workload


def engine_module(kind: str):
    """The engine of machine ``kind`` (``pyaccel.sim.<kind>`` for the built-in kinds, from the
    kind registry); kinds without one raise EngineNotBuiltError."""
    return kind_module(kind, "engine")


def run_graph(
    model_or_graph, system: System, workload: Workload, caller: str = "emulate()"
) -> DecodeGraph:
    """The graph a run times: a :class:`DecodeGraph` as given, or the graph of a
    :class:`ModelConfig` for ``workload`` with its formats resolved for ``system``. Arguments
    of another type raise :class:`ConfigError` naming ``caller`` (:func:`check_args`).

    A graph built for the same model, resolved workload and native format while an earlier
    one is still in use (a placement holds the graph it was placed with) is that graph: the
    placement, the emulation and the what-ifs of one run then share it and the costs its
    ``placer_memo`` keeps (each keyed by every parameter it depends on)."""
    check_args(caller, model_or_graph, system, workload)
    if isinstance(model_or_graph, DecodeGraph):
        return model_or_graph
    work = resolve_workload(workload, model_or_graph, system.spec).workload  # SPEC §6 formats
    key = (model_or_graph, work, system.spec.native_format)
    graph = _GRAPHS.get(key)
    if graph is None:
        graph = _GRAPHS[key] = build_graph(model_or_graph, work, native_format=key[2])
    return graph


# What to call to make each argument of the Python API, for the error a wrong one gets.
MAKERS = {
    "model": (
        (ModelConfig, DecodeGraph),
        "a ModelConfig or DecodeGraph: pa.load_model(NAME or FOLDER)",
    ),
    "system": (System, "a System: pa.load_system(NAME or FILE.toml, units=N or 'auto')"),
    "workload": (Workload, "a Workload: pa.Workload(batch=..., context=..., tokens=...)"),
}


def check_args(caller: str, model, system, workload, placement=None, *, placed=False) -> None:
    """The types of the Python API's arguments (``pa.place``, ``pa.emulate``): one of another
    type raises :class:`ConfigError` naming the function, the argument, what it got and what
    makes the right one (with ``placed``, ``placement`` too)."""
    from ..place.placement import Placement

    given = {"model": model, "system": system, "workload": workload}
    makers = dict(MAKERS)
    if placed:
        given["placement"] = placement
        makers["placement"] = (
            Placement,
            "a Placement: pa.place(...) or pa.Placement.from_json(FILE)",
        )
    for name, value in given.items():
        cls, what = makers[name]
        if not isinstance(value, cls):
            raise ConfigError(
                f"{caller}: {name} must be {what}; got {type(value).__name__} {value!r:.60}"
            )


# graphs in use by their inputs, held weakly: a graph lives as long as a run holds it
_GRAPHS: WeakValueDictionary = WeakValueDictionary()
