"""MLA's compressed KV cache on every kind: one latent of ``kv_lora_rank`` plus the shared rope
key of ``qk_rope_head_dim`` per token per layer, for every head (DeepSeek-V3: (512 + 64) x 2 B
= 1,152 B at bf16), stored and read as such whatever the machine."""

from __future__ import annotations

import pytest

import pyaccel as pa

KINDS = [("h100", {}), ("wse3", {}), ("groq-tsp", {}), ("taalas-hc1", {"etch": True})]


def test_deepseek_v3_cache_is_1152_bytes_per_token_per_layer():
    cfg = pa.load_model("deepseek-v3")
    assert (cfg.kv_lora_rank, cfg.qk_rope_dim) == (512, 64)
    work = pa.Workload(batch=2, context=1000, tokens=24, kv="bf16")
    g = pa.build_graph(cfg, work, native_format="bf16")
    for layer in (0, 30, 60):
        att = next(o for o in g.ops_of(layer) if o.kind == "attention")
        assert att.resident_kv_bytes == 2 * 1024 * 1152  # 2 users x 1,024 positions
        assert att.kv_read_bytes == 2 * 1000 * 1152 and att.kv_write_bytes == 2 * 1152
    # fp8 halves the elements' bytes (576 B a token; its scales come on top)
    g8 = pa.build_graph(cfg, pa.Workload(batch=1, context=10, tokens=1, kv="fp8"),
                        native_format="bf16")  # fmt: skip
    fp8 = next(o for o in g8.ops_of(0) if o.kind == "attention").resident_kv_bytes
    assert 11 * 576 <= fp8 < 11 * 1152


@pytest.mark.parametrize(("system", "opts"), KINDS, ids=[k for k, _ in KINDS])
def test_every_kind_stores_and_reads_the_latent_cache(system, opts):
    # tiny-deepseek-v3: latent 32 + rope 8 = 40 elements = 80 B per token per layer at bf16
    cfg = pa.load_model("tiny-deepseek-v3")
    per_token = (cfg.kv_lora_rank + cfg.qk_rope_dim) * 2
    assert per_token == 80
    work = pa.Workload(batch=2, context=60, tokens=4, kv="bf16")
    sysm = pa.load_system(system, units="auto", etch=opts.get("etch", False))
    plc = pa.place(cfg, sysm, work)
    for slot in (s for s in plc.layers if isinstance(s.layer, int)):
        assert slot.need_kv_bytes == 2 * 64 * per_token
        # every GPU rank keeps the whole latent cache (vLLM replicates it); other kinds split it
        held = max(slot.kv_bytes) if system == "h100" else sum(slot.kv_bytes)
        assert held == slot.need_kv_bytes, slot.layer
    trace = pa.emulate(cfg, sysm, plc, work, trace_steps="all")
    ev = trace.to_dataframe()
    att = ev[(ev.kind == "attention") & (ev.step == 1)]
    assert att.bytes.sum() > 0


# --- a prompt chunk's MLA attention: expanded on GPUs, absorbed as decode elsewhere ---------------


def _attention(model: str, **work):
    graph = pa.build_graph(pa.load_model(model), pa.Workload(**work))
    return next(o for o in graph.ops if o.kind == "attention")


def test_expanded_and_absorbed_counts_by_hand():
    # tiny-deepseek-v3: 4 heads, latent 32, rope 8, nope 16, v 16. One sequence, 4 prompt
    # tokens after 2 cached: 6 keys, 2x4 + (1+2+3+4) = 18 (query, key) pairs.
    chunk = dict(context=2, step_tokens=4, tokens=1, prefill=True)
    up = 2 * 4 * (16 + 16) * 32  # one key's (or query's) W_UK and W_UV: 8,192 FLOPs
    expanded = _attention("tiny-deepseek-v3", **chunk, expand_mla=True)
    absorbed = _attention("tiny-deepseek-v3", **chunk)
    # expanded: every key up-projected once, each pair 2 x 4 x (16 + 8 + 16) = 320 FLOPs
    assert expanded.flops == 6 * up + 18 * 320
    # absorbed: each pair 2 x 4 x (32 + 8) + 2 x 4 x 32 = 576 FLOPs, each query crosses W_UK, W_UV
    assert absorbed.flops == 4 * up + 18 * 576
    # the same latent cache read (2 tokens x 40 x 2 B) and written (4 tokens), the same weights
    for op in (expanded, absorbed):
        assert (op.kv_read_bytes, op.kv_write_bytes) == (2 * 80, 4 * 80)
        assert op.weight_bytes == 4 * (16 + 16) * 32 * 2
    # activations: queries in and outputs out (4 rows x 2 x 64 x 2 B), and the expanded keys'
    # and values' 6 x 4 x 32 elements written and read back
    assert absorbed.act_bytes == 4 * 2 * 64 * 2
    assert expanded.act_bytes == 4 * 2 * 64 * 2 + 2 * 6 * 4 * 32 * 2
    # one row a sequence shares no up-projection: absorbed (vLLM's decode path)
    one = dict(context=2, step_tokens=1, tokens=1, prefill=True)
    assert _attention("tiny-deepseek-v3", **one, expand_mla=True) == _attention(
        "tiny-deepseek-v3", **one
    )


def test_deepseek_v3_prefill_attention_is_3_4x_lighter_expanded():
    # per (query, key) pair: absorbed 2 x 128 x (512 + 64 + 512) = 278,528 FLOPs, expanded
    # 2 x 128 x (128 + 64 + 128) = 81,920: 3.4x; the up-projection of the keys brings a chunk of
    # 8,192 tokens after 24,576 cached to 3.2x
    chunk = dict(context=24_576, step_tokens=8192, tokens=1, prefill=True)
    absorbed = _attention("deepseek-v3", **chunk).flops
    expanded = _attention("deepseek-v3", **chunk, expand_mla=True).flops
    pairs = 8192 * 24_576 + 8192 * 8193 // 2
    up = 2 * 128 * 256 * 512
    assert absorbed == 278_528 * pairs + up * 8192
    assert expanded == 81_920 * pairs + up * (24_576 + 8192)
    assert 3.2 < absorbed / expanded < 3.3


def test_decode_and_verification_stay_absorbed():
    # expand_mla applies to prompt chunks only where a runtime sets it; a decode step's
    # attention is the absorbed one whatever the chunk does
    decode = _attention("deepseek-v3", context=4096, tokens=1)
    verify = _attention("deepseek-v3", context=4096, step_tokens=4, tokens=1)
    assert decode.flops == 278_528 * 4097 + 2 * 128 * 256 * 512
    assert verify.flops == 278_528 * (4 * 4096 + 10) + 4 * 2 * 128 * 256 * 512


@pytest.mark.parametrize(("system", "opts"), KINDS, ids=[k for k, _ in KINDS])
@pytest.mark.parametrize("model", ["tiny-deepseek-v3", "tiny-deepseek-v2"])
def test_every_kind_prefills_mla_in_its_form(system, opts, model):
    from pyaccel.prefill import MLA_ABSORBED, MLA_EXPANDED, expands_mla
    from pyaccel.results import prefill_assumptions, run

    result = run(model, system, "auto", pa.Workload(context=64, tokens=1), etch=bool(opts))
    expanded = system == "h100"  # GPUs prefill expanded (vLLM); the others keep decode's form
    assert expands_mla(result.system) == expanded
    notes = prefill_assumptions(result)
    assert (MLA_EXPANDED in notes, MLA_ABSORBED in notes) == (expanded, not expanded)
    # the chunk's attention as the engine costs it: 64 prompt rows, 64 x 65 / 2 pairs, 4 layers
    work = pa.Workload(context=0, step_tokens=64, tokens=1, prefill=True, expand_mla=expanded,
                       weights=result.workload.weights)  # fmt: skip
    trace = pa.emulate(result.model, result.system, result.placement, work, event_steps={0})
    df = trace.to_dataframe()
    flops = int(df[df.kind == "attention"].flops.sum())
    up, pairs = 2 * 4 * 32 * 32, 64 * 65 // 2
    # (the ASIC's rows one at a time, each one absorbed query at its own context; the LPU's
    # events carry no FLOPs, its plan is absorbed)
    if system != "groq-tsp":
        per_layer = up * 64 + (320 if expanded else 576) * pairs
        assert flops == 4 * per_layer


def test_absorbed_gemvs_by_hand():
    # tiny-deepseek-v3: 4 heads, nope 16, v 16, latent 32. Per decode token W_UK takes each
    # head's 16 query elements to the 32-wide latent (4 x 16 x 32 = 2,048 MACs), W_UV each
    # head's latent output to 16 values (4 x 32 x 16 = 2,048 MACs); their 4,096 weights (the
    # kv_b_proj's 4 x (16 + 16) rows of 32) are 8,192 B at bf16
    graph = pa.build_graph(pa.load_model("tiny-deepseek-v3"),
                           pa.Workload(context=10, tokens=1, weights="bf16"))  # fmt: skip
    uk, uv = graph.attention.absorbed
    assert (uk.name, uk.heads, uk.k, uk.n, uk.macs) == ("w_uk", 4, 16, 32, 2048)
    assert (uv.name, uv.heads, uv.k, uv.n, uv.macs) == ("w_uv", 4, 32, 16, 2048)
    op = next(o for o in graph.ops if o.kind == "attention")
    assert op.params == 4096 and op.weight_bytes == 8192
    # the graph's attention FLOPs: 11 pairs of 2 x 4 x (32 + 8) + 2 x 4 x 32, and the two GEMVs
    assert op.flops == 11 * (320 + 256) + 2 * 4096
    # DeepSeek-V3: 128 heads x 128 x 512 each, 8,388,608 MACs a token per GEMV; GQA has none
    v3 = pa.build_graph(pa.load_model("deepseek-v3"), pa.Workload(context=10, tokens=1))
    assert [g.macs for g in v3.attention.absorbed] == [128 * 128 * 512] * 2 == [8_388_608] * 2
    llama = pa.build_graph(pa.load_model("tiny-llama"), pa.Workload(context=10, tokens=1))
    assert llama.attention.absorbed == ()
