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


def run_graph(model_or_graph, system: System, workload: Workload) -> DecodeGraph:
    """The graph a run times: a :class:`DecodeGraph` as given, or the graph of a
    :class:`ModelConfig` for ``workload`` with its formats resolved for ``system``.

    A graph built for the same model, resolved workload and native format while an earlier
    one is still in use (a placement holds the graph it was placed with) is that graph: the
    placement, the emulation and the what-ifs of one run then share it and the costs its
    ``placer_memo`` keeps (each keyed by every parameter it depends on)."""
    if isinstance(model_or_graph, DecodeGraph):
        return model_or_graph
    if not isinstance(model_or_graph, ModelConfig):
        raise ConfigError(
            f"emulate() takes a ModelConfig or DecodeGraph, got {type(model_or_graph).__name__}"
        )
    work = resolve_workload(workload, model_or_graph, system.spec).workload  # SPEC §6 formats
    key = (model_or_graph, work, system.spec.native_format)
    graph = _GRAPHS.get(key)
    if graph is None:
        graph = _GRAPHS[key] = build_graph(model_or_graph, work, native_format=key[2])
    return graph


# graphs in use by their inputs, held weakly: a graph lives as long as a run holds it
_GRAPHS: WeakValueDictionary = WeakValueDictionary()
