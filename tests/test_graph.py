"""DecodeGraph: bytes, FLOPs, KV and MoE accounting against hand arithmetic."""

import pytest

import pyaccel as pa
from pyaccel.formats import get_format


def test_llama_8b_bytes_read_per_token_match_hand_count(llama8b):
    # layers 13.96 GB + untied head 1.05 GB + KV 0.13 GB at context 1,024 (shared/reference B)
    g = pa.build_graph(llama8b, pa.Workload(context=1024))
    layers = sum(op.weight_bytes for op in g.ops if isinstance(op.layer, int))
    head = g.ops_of("head")[1].weight_bytes
    kv = sum(op.kv_read_bytes for op in g.ops)
    assert layers == pytest.approx(13.96e9, rel=1e-3)
    assert head == 128256 * 4096 * 2
    assert kv == 32 * 1024 * 2 * 8 * 128 * 2
    assert g.bytes_read_per_step == pytest.approx(15.14e9, rel=1e-3)
    embed = g.ops_of("embed")[0]
    assert embed.weight_bytes == 4096 * 2 and embed.resident_weight_bytes == 128256 * 4096 * 2


def test_resident_and_read_bytes_are_distinct(llama8b):
    g = pa.build_graph(llama8b, pa.Workload(batch=4, context=100, tokens=28))
    attn = g.ops_of(0)[[op.kind for op in g.ops_of(0)].index("attention")]
    per_token = 2 * 8 * 128 * 2
    assert attn.resident_kv_bytes == 4 * 128 * per_token  # batch x (context + tokens)
    assert attn.kv_read_bytes == 4 * 100 * per_token
    assert attn.kv_write_bytes == 4 * per_token


def test_matmul_flops_are_two_m_n_k(llama8b):
    g = pa.build_graph(llama8b, pa.Workload(batch=3))
    qkv = next(op for op in g.ops if op.kind == "qkv_proj")
    assert (qkv.m, qkv.n, qkv.k) == (3, 4096 + 2 * 1024, 4096)
    assert qkv.flops == 2 * 3 * 6144 * 4096


@pytest.mark.parametrize(
    "fmt,bits",
    [
        ("bf16", 16),
        ("fp8", 8),
        ("int8", 8),
        ("int4", 4.125),
        ("int4-g32", 4.5),
        ("mxfp4", 4.25),
        ("nvfp4", 4.5),
    ],
)
def test_weight_formats_scale_bytes(llama8b, fmt, bits):
    g = pa.build_graph(llama8b, pa.Workload(weights=fmt))
    down = next(op for op in g.ops if op.kind == "down_proj")
    assert down.weight_bytes == pytest.approx(4096 * 14336 * bits / 8, rel=1e-3)
    assert get_format(fmt).bits_per_weight() == pytest.approx(bits, rel=1e-3)


def test_expert_weights_override_only_routed_experts():
    cfg = pa.load_model("kimi-k2")
    g = pa.build_graph(cfg, pa.Workload(weights="bf16", expert_weights="int4-g32"))
    up = next(op for op in g.ops if op.kind == "experts_gate_up_proj")
    shared = next(op for op in g.ops if op.kind == "shared_gate_up_proj")
    assert up.resident_weight_bytes == 384 * get_format("int4-g32").tensor_bytes(2 * 2048, 7168)
    assert shared.resident_weight_bytes == 2 * 2048 * 7168 * 2


@pytest.mark.parametrize("batch", [1, 2, 16, 256])
def test_moe_reads_expected_distinct_experts(batch):
    cfg = pa.load_model("mixtral-8x7b")
    g = pa.build_graph(cfg, pa.Workload(batch=batch))
    up = next(op for op in g.ops if op.kind == "experts_gate_up_proj")
    one = up.resident_weight_bytes / 8
    distinct = 8 * (1 - (1 - 2 / 8) ** batch)
    assert up.weight_bytes == pytest.approx(distinct * one, rel=1e-9)
    assert up.flops == 2 * batch * 2 * (2 * 14336) * 4096
    assert up.weight_bytes <= up.resident_weight_bytes


def test_sliding_window_caps_kv_reads():
    cfg = pa.load_model("gpt-oss-120b")
    g = pa.build_graph(cfg, pa.Workload(context=4096))
    attn = [op for op in g.ops if op.kind == "attention"]
    sliding = [a for a in attn if cfg.is_sliding(a.layer)]
    full = [a for a in attn if not cfg.is_sliding(a.layer)]
    assert sliding and full
    assert max(a.kv_read_bytes for a in sliding) < min(a.kv_read_bytes for a in full)
    assert sliding[0].kv_read_bytes == (128 - 1) * 2 * 8 * 64 * 2


def test_mla_reads_latent_cache_and_lists_mtp():
    cfg = pa.load_model("deepseek-v3")
    g = pa.build_graph(cfg, pa.Workload(context=1000))
    attn = next(op for op in g.ops if op.kind == "attention")
    assert attn.kv_read_bytes == 1000 * 576 * 2
    assert any("MTP" in x for x in g.left_out)


def test_at_context_changes_only_attention(llama8b):
    g = pa.build_graph(llama8b, pa.Workload(context=10))
    h = g.at_context(500)
    changed = [a.name for a, b in zip(g.ops, h.ops, strict=True) if a != b]
    assert changed and all(name.endswith("attention") for name in changed)
    # resident KV stays sized for the run that started at context 10; reads follow the context
    fresh = pa.build_graph(llama8b, pa.Workload(context=500))
    assert [op.kv_read_bytes for op in h.ops] == [op.kv_read_bytes for op in fresh.ops]
    assert h.total_resident_kv_bytes == g.total_resident_kv_bytes


def test_tied_embeddings_stored_once(tiny_llama_dir):
    import json

    cfg = json.loads((tiny_llama_dir / "config.json").read_text())
    cfg["tie_word_embeddings"] = True
    (tiny_llama_dir / "config.json").write_text(json.dumps(cfg))
    g = pa.build_graph(pa.load_model(tiny_llama_dir), pa.Workload())
    head = next(op for op in g.ops if op.kind == "lm_head")
    assert head.resident_weight_bytes == 0 and head.weight_bytes == 256 * 64 * 2


def test_workload_validation():
    with pytest.raises(pa.ConfigError, match="batch"):
        pa.Workload(batch=0)
    with pytest.raises(pa.ConfigError, match="unknown --weights format 'int3'"):
        pa.Workload(weights="int3")
    assert pa.Workload(weights="fp8-e4m3").weights == "fp8"


@pytest.mark.parametrize("name", ["llama-3.1-8b", "mixtral-8x7b", "deepseek-v3"])
def test_only_row_split_matmuls_and_the_experts_down_projection_reduce(name):
    """Op.reduces: the ranks' outputs are partial sums only after a row-split matmul (o_proj,
    down_proj) and the routed experts' down projection; the experts' gate/up projection and
    activation stay on the rank that holds the expert, so no all-reduce follows them."""
    graph = pa.build_graph(pa.load_model(name), pa.Workload())
    reducing = {op.kind for op in graph.ops if op.reduces}
    want = {op.kind for op in graph.ops if op.split == "row"}
    if any(op.expert for op in graph.ops):
        want |= {"experts_down_proj"}
    assert reducing == want and "experts_gate_up_proj" not in reducing
    assert not any(op.reduces for op in graph.ops if op.op_class != "matmul")


def test_lpu_moe_layer_all_reduces_once_per_expert_block():
    from pyaccel.sim.lpu.plans import plan_kinds

    graph = pa.build_graph(pa.load_model("mixtral-8x7b"), pa.Workload())
    kinds = {op.kind: plan_kinds(op, 8) for op in graph.ops_of(0)}
    assert kinds["experts_gate_up_proj"] == ("xgemv",)
    assert kinds["experts_down_proj"] == ("xgemv", "allreduce")


def _spans_by_hand(context: int, q: int, window: int, chunk: int) -> list[int]:
    """Tokens the i-th of ``q`` new tokens attends, one by one."""
    if chunk:
        return [(context + i - 1) % chunk + 1 for i in range(1, q + 1)]
    return [min(context + i, window) if window else context + i for i in range(1, q + 1)]


@pytest.mark.parametrize("window, chunk", [(0, 0), (4096, 0), (100, 0), (0, 8192), (0, 37)])
@pytest.mark.parametrize("q", [1, 3, 512, 5000])
def test_attended_spans_in_closed_form_match_the_token_by_token_count(window, chunk, q):
    import numpy as np

    from pyaccel.model.attention import _spans

    contexts = [0, 1, 36, 99, 100, 4000, 4095, 8191, 20000]
    for c in contexts:
        by_hand = _spans_by_hand(c, q, window, chunk)
        got = _spans(c, q, window, chunk)
        assert got == (by_hand[0], by_hand[-1], sum(by_hand))
        assert all(type(x) is int for x in got)
    first, last, total = _spans(np.array(contexts), q, window, chunk)  # a trace's steps at once
    assert [*zip(first.tolist(), last.tolist(), total.tolist(), strict=True)] == [
        (s[0], s[-1], sum(s)) for s in (_spans_by_hand(c, q, window, chunk) for c in contexts)
    ]


def test_a_run_shares_the_graph_its_placement_holds(llama8b):
    # run_graph gives the graph already in use for the same model, resolved workload and
    # native format (placement, emulation and what-ifs then share its memos); another
    # workload gets its own, and a graph nobody holds any more is not kept
    import gc
    import weakref
    from dataclasses import replace

    from pyaccel.sim.inputs import run_graph

    sysm, work = pa.load_system("h100", units=1), pa.Workload(context=64, tokens=2)
    plc = pa.place(llama8b, sysm, work)
    graph = plc.basis[0]
    assert run_graph(llama8b, sysm, work) is graph
    assert run_graph(llama8b, sysm, replace(work, tokens=3)) is not graph
    assert run_graph(llama8b, sysm, replace(work, tokens=3)) == pa.build_graph(
        llama8b, replace(work, tokens=3).resolved("bf16"))  # fmt: skip
    gone = weakref.ref(graph)
    del plc, graph
    gc.collect()
    assert gone() is None
