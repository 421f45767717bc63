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
