"""Per-kind functional executors: one module per machine kind behind one interface, a registry
that a new kind joins with one entry, and no switch on the machine kind in the shared code."""

import ast
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import pyaccel as pa
from pyaccel.errors import EngineNotBuiltError
from pyaccel.hw.io import load_system
from pyaccel.hw.kinds import MACHINE_KINDS, kind_executor
from pyaccel.model.config import load_model
from pyaccel.model.graph import build_graph
from pyaccel.numerics import execute
from pyaccel.numerics.executor import Executor

from test_numerics_execute import hand_placement  # a placement of every layer on one kind

NUMERICS = Path(pa.__file__).parent / "numerics"
EXECUTORS_DIR = NUMERICS / "executors"
KNOWN_KINDS = ("gpu", "asic", "wafer", "lpu")


# -- the check: which machine kinds a module's code names ---------------------------------------


def _words(identifier: str) -> set[str]:
    """Lower-case words of a snake_case, CamelCase or dotted identifier."""
    parts = re.split(r"[._]|(?<=[a-z0-9])(?=[A-Z])", identifier)
    return {p.lower() for p in parts if p}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes (prose may name any kind)."""
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                out.add(id(body[0].value))
    return out


def _names_kind(node: ast.AST) -> bool:
    """``<anything>.kind`` (``placement.kind``, ``system.kind``; a local ``kind`` is left to
    the other rules: the rope type in ``reference.py`` is one)."""
    return isinstance(node, ast.Attribute) and node.attr == "kind"


def kind_mentions(source: str, kinds) -> list[str]:
    """What in ``source`` names one of ``kinds`` or compares a machine kind: string constants
    equal to a kind (``== "gpu"``, ``in ("gpu", "lpu")``, dict keys), identifiers holding a kind
    as a word (``asic_act_bits``, ``GpuExecutor``, ``executors.wafer``) and comparisons of
    ``x.kind`` with anything. Docstrings and comments are prose and not looked at."""
    tree = ast.parse(source)
    skip, kinds, found = _docstrings(tree), set(kinds), []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if node.value in kinds:
                found.append(f"line {node.lineno}: string {node.value!r}")
        elif isinstance(node, ast.Compare) and any(
            map(_names_kind, [node.left, *node.comparators])
        ):
            found.append(f"line {node.lineno}: comparison on the machine kind")
        elif isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.keyword) and node.arg:
            names = [node.arg]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if _words(name) & kinds:
                found.append(f"line {getattr(node, 'lineno', '?')}: name {name!r}")
    return found


def test_the_check_catches_a_kind_switch():
    """The check fails on each shape a switch on the machine kind takes."""
    switches = (
        'if self.kind == "gpu":\n    pass\n',
        'n = 1 if placement.kind in ("gpu", "lpu") else 2\n',
        "if kind != WAFER:\n    pass\n",
        "if placement.kind not in SPLIT_KINDS:\n    pass\n",
        "y = self.asic_act_bits\n",
        "from .executors.gpu import reduce\n",
        'RULES = {"asic": 1}\n',
    )
    for src in switches:
        assert kind_mentions(src, KNOWN_KINDS), src
    prose = '"""gpu, asic, wafer and lpu in a docstring."""\n# a comment on the wafer\nx = 1\n'
    assert kind_mentions(prose, KNOWN_KINDS) == []


def test_only_a_kinds_own_module_and_the_registry_name_it():
    """Shared numerics code names no machine kind; each per-kind module names only its own."""
    kinds = set(KNOWN_KINDS) | set(MACHINE_KINDS)
    checked = 0
    for path in sorted(NUMERICS.rglob("*.py")):
        own = {path.stem} if path.parent == EXECUTORS_DIR else set()
        found = kind_mentions(path.read_text(), kinds - own)
        assert found == [], f"{path.relative_to(NUMERICS)}: {found}"
        checked += 1
    assert checked >= len(MACHINE_KINDS) + 3  # the kinds' modules, the interface, execute.py


def test_each_registered_kind_has_its_own_module():
    """Every registered kind's executor is an Executor defined in
    ``numerics/executors/<kind>.py``."""
    assert set(KNOWN_KINDS) <= set(MACHINE_KINDS)
    for kind in MACHINE_KINDS:
        cls = kind_executor(kind)
        assert issubclass(cls, Executor)
        assert cls.__module__ == f"pyaccel.numerics.executors.{kind}"


# -- a fifth kind, registered at test time --------------------------------------------------------


class FifthExecutor(Executor):
    """A minimal new kind: inputs split over the layer's units, partial sums added last part
    first (fp32), every call of ``reduce`` counted."""

    ASSUMPTIONS = ("numerics.fifth_reversed_sum: partial sums are added last part first, fp32",)
    reduced = 0

    def describe(self) -> str:
        return f"fifth: inputs over {len(self.placement.layers[0].units)} units, reversed sum"

    def input_parts(self, slot) -> int:
        return len(slot.units)

    def reduce(self, partials: np.ndarray) -> np.ndarray:
        type(self).reduced += 1
        return np.cumsum(partials[::-1], axis=0, dtype=np.float32)[-1]


def _tiny_graph():
    work = pa.Workload(batch=1, context=8, tokens=8, weights="bf16")
    return build_graph(load_model("tiny-llama"), work)


def test_a_fifth_kind_runs_the_functional_decode_through_its_placement(monkeypatch):
    lpu = MACHINE_KINDS["lpu"]
    fifth = replace(lpu, name="fifth", unit_noun="unit", executor=FifthExecutor)
    monkeypatch.setitem(MACHINE_KINDS, "fifth", fifth)
    monkeypatch.setattr(FifthExecutor, "reduced", 0)
    graph = _tiny_graph()
    plc = hand_placement(graph, "fifth", units=2)
    m = execute.functional_metrics(
        load_model(graph.model_name), graph, load_system("groq-tsp"), plc
    )
    assert m["functional_partition"] == "fifth: inputs over 2 units, reversed sum"
    assert FifthExecutor.reduced > 0  # its partial sums went through its own reduction
    assert m["top1_agreement"] >= 0.9 and 0 < m["max_abs_logit_error"] < 0.2
    assert len(m["generated_tokens"]) == len(m["reference_tokens"]) == 8
    assert m["functional_assumptions"][-1].startswith("numerics.fifth_reversed_sum:")


def test_an_unregistered_kind_is_not_built():
    graph = _tiny_graph()
    with pytest.raises(EngineNotBuiltError, match="the fifth functional executor is not built"):
        execute.functional_metrics(
            load_model(graph.model_name),
            graph,
            load_system("groq-tsp"),
            hand_placement(graph, "fifth"),
        )


def test_options_reach_the_kind_that_reads_them():
    """``asic_act_bits`` changes the asic's result and is ignored by a kind that does not read
    it."""
    graph = build_graph(load_model("tiny-llama"), pa.Workload(context=8, tokens=4, weights="hc1"))
    asic = load_system("taalas-hc1")
    plc = hand_placement(graph, "asic", {"block": 0})
    eight = execute.functional_metrics(load_model(graph.model_name), graph, asic, plc)
    four = execute.functional_metrics(
        load_model(graph.model_name), graph, asic, plc, asic_act_bits=4
    )
    assert four["max_abs_logit_error"] > eight["max_abs_logit_error"]
    lpu, lpu_plc = load_system("groq-tsp"), hand_placement(graph, "lpu", units=2)
    assert execute.functional_metrics(
        load_model(graph.model_name), graph, lpu, lpu_plc, asic_act_bits=4
    ) == (execute.functional_metrics(load_model(graph.model_name), graph, lpu, lpu_plc))


# -- size limits of the numerics package -----------------------------------------------------------
