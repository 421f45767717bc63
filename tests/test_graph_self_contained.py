"""The decode graph carries what engines, placers and bounds need, and no model config: a graph
at another batch, context, length or format is made from the graph alone and equals the one the
builder makes from the model."""

import gc
import itertools

import pytest

import pyaccel as pa
from pyaccel.model.config import ModelConfig, load_model, preset_names
from pyaccel.model.graph import build_graph

BASE = pa.Workload(batch=4, context=100, tokens=8)
TRIALS = list(
    itertools.product(
        (1, 3, 64),  # batch
        (0, 5000),  # context
        (9,),  # tokens
        (None, "int4", "nvfp4"),  # weights
        ("bf16", "fp8"),  # kv
    )
)


def _reachable(root, limit=200_000):
    """Every object reachable from ``root`` through references (breadth first)."""
    seen, todo = {id(root): root}, [root]
    while todo and len(seen) < limit:
        for ref in gc.get_referents(todo.pop()):
            if id(ref) not in seen and not isinstance(ref, type):
                seen[id(ref)] = ref
                todo.append(ref)
    return seen.values()


@pytest.mark.parametrize("name", preset_names())
def test_with_workload_equals_the_builder_for_every_preset(name):
    model = load_model(name)
    base = build_graph(model, BASE)
    for batch, context, tokens, weights, kv in TRIALS:
        work = pa.Workload(batch=batch, context=context, tokens=tokens, weights=weights, kv=kv)
        got = base.with_workload(work)
        want = build_graph(model, work)
        assert got == want, (batch, context, tokens, weights, kv)
        assert got.workload.weights_format is want.workload.weights_format
        assert got.assumptions == want.assumptions  # the hc1 note follows the format


def test_with_workload_keeps_the_graphs_formats_when_unset():
    model = load_model("mixtral-8x7b")
    base = build_graph(model, pa.Workload(weights="int8", expert_weights="int4", kv="fp8"))
    got = base.with_workload(pa.Workload(batch=8, kv="fp8"))
    assert (got.workload.weights, got.workload.expert_weights) == ("int8", "int4")
    assert got == build_graph(model, pa.Workload(batch=8, weights="int8", expert_weights="int4",
                                                 kv="fp8"))  # fmt: skip


def test_with_workload_keeps_the_graphs_it_made():
    # a run's micro-batch graphs are asked for again by its what-ifs: the same object comes
    # back, until more than KEPT_DERIVED others were made since it was last asked for
    from pyaccel.model.graph import KEPT_DERIVED

    base = build_graph(load_model("tiny-llama"), BASE)
    work = pa.Workload(batch=3, context=40)
    first = base.with_workload(work)
    assert base.with_workload(pa.Workload(batch=3, context=40)) is first
    assert base.with_workload(work, 41) is not first and base.with_workload(work, 41).context == 41
    for b in range(4, 4 + KEPT_DERIVED):
        base.with_workload(pa.Workload(batch=b))
    again = base.with_workload(work)
    assert again is not first and again == first == build_graph(load_model("tiny-llama"), work)


def test_no_model_config_is_reachable_from_a_graph():
    for name in ("llama-3.1-8b", "mixtral-8x7b", "deepseek-v3", "gpt-oss-120b"):
        graph = build_graph(load_model(name), BASE)
        found = [o for o in _reachable(graph) if isinstance(o, ModelConfig)]
        assert not found, name
        assert not any(isinstance(o, ModelConfig) for o in _reachable(graph.with_workload(BASE)))


def test_the_reachability_check_can_fail():
    """The walk above does find a config where one hides inside a graph's fields."""
    model = load_model("llama-3.1-8b")
    graph = build_graph(model, BASE)
    smuggled = graph.__class__(**{**graph.__dict__, "left_out": (model,)})
    assert any(isinstance(o, ModelConfig) for o in _reachable(smuggled))


def test_graph_carries_what_engines_read():
    model = load_model("gpt-oss-120b")
    graph = build_graph(model, BASE)
    assert (graph.model_name, graph.hidden, graph.vocab, graph.n_layers) == (
        model.name, model.hidden, model.vocab, model.n_layers)  # fmt: skip
    assert (graph.n_experts, graph.top_k) == (model.n_experts, model.top_k)
    assert graph.attention.kv_elems_per_token == model.kv_elems_per_token_layer
    for layer in range(model.n_layers):
        assert graph.attention.is_sliding(layer) == model.is_sliding(layer)
        assert graph.attention_group(layer) == (model.sliding_window if model.is_sliding(layer)
                                                else 0)  # fmt: skip
    experts = [op for op in graph.ops if op.expert]
    assert experts and all(op.kind.startswith("experts_") for op in experts)
    assert not [op for op in graph.ops if op.kind.startswith("experts_") and not op.expert]


def test_attention_op_at_a_context_matches_the_graph_there():
    graph = build_graph(load_model("llama-3.1-8b"), BASE)
    at = graph.at_context(4096)
    assert graph.attention_op(3, 4096) == at.ops_of(3)[[o.kind for o in at.ops_of(3)].index(
        "attention")]  # fmt: skip
