"""Steps that push several tokens of each sequence (a speculative round's verification): the
graph's rows, attention's causal work and the engines' costs."""

from __future__ import annotations

from dataclasses import replace

import pytest

import pyaccel as pa
from pyaccel.errors import ConfigError


def _graph(model: str, **work):
    return pa.build_graph(pa.load_model(model), pa.Workload(**work))


def test_rows_scale_every_op_but_the_cache_reads():
    one = _graph("tiny-llama", batch=2, context=10)
    four = _graph("tiny-llama", batch=2, context=10, step_tokens=4)
    for a, b in zip(one.ops, four.ops, strict=True):
        assert b.m == 4 * a.m, a.name
        if a.kind != "attention":
            # weights are read once a step; the embedding reads one row a token
            weights = 4 * a.weight_bytes if a.kind == "embed" else a.weight_bytes
            assert (b.flops, b.weight_bytes) == (4 * a.flops, weights), a.name
            assert b.act_bytes == 4 * a.act_bytes, a.name
    # tiny-llama: 4 heads of 16, 2 KV heads, bf16 K/V: 2 x 2 x 16 x 2 B = 128 B a token
    att1 = next(o for o in one.ops if o.kind == "attention")
    att4 = next(o for o in four.ops if o.kind == "attention")
    assert att1.kv_read_bytes == att4.kv_read_bytes == 2 * 10 * 128  # the cache, read once
    assert (att1.kv_write_bytes, att4.kv_write_bytes) == (2 * 128, 2 * 4 * 128)
    # the i-th new token attends context + i: 11 + 12 + 13 + 14 = 50 tokens, 4 x 4 x 16 FLOPs
    assert att1.flops == 2 * 4 * 4 * 16 * 11
    assert att4.flops == 2 * 4 * 4 * 16 * 50
    assert att1.resident_kv_bytes == att4.resident_kv_bytes


def test_with_workload_matches_build_graph_at_several_tokens():
    base = _graph("tiny-mixtral", batch=2, context=20)
    work = pa.Workload(batch=3, context=20, step_tokens=3).resolved("bf16")
    assert base.with_workload(work) == pa.build_graph(pa.load_model("tiny-mixtral"), work)


def test_step_tokens_must_be_positive():
    with pytest.raises(ConfigError, match="step_tokens"):
        pa.Workload(step_tokens=0)


@pytest.mark.parametrize("system", ["h100", "wse3", "groq-tsp"])
def test_verifying_k_tokens_costs_less_than_k_steps(system):
    cfg, sysm = pa.load_model("llama-3.1-8b"), pa.load_system(system, units="auto")
    one = pa.Workload(context=512, tokens=1)
    plc = pa.place(cfg, sysm, one)
    t1 = pa.emulate(cfg, sysm, plc, one).step_time_s
    t5 = pa.emulate(cfg, sysm, plc, replace(one, step_tokens=5)).step_time_s
    assert t1 <= t5 < 5 * t1


def test_asic_verifies_several_tokens_back_to_back():
    # a sequence's 3 rows enter the spatial pipeline one after another: the step waits for the
    # last of them, so it is longer than one row's pass but far from three passes
    cfg, sysm = pa.load_model("llama-3.1-8b"), pa.load_system("taalas-hc1")
    work = pa.Workload(context=64, tokens=2)
    plc = pa.place(cfg, sysm, work)
    t1 = pa.emulate(cfg, sysm, plc, work).step_time_s
    t3 = pa.emulate(cfg, sysm, plc, replace(work, step_tokens=3)).step_time_s
    assert t1 < t3 < 1.5 * t1
