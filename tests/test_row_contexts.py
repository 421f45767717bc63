"""Steps with several rows of one sequence (a prompt chunk, a speculative verify step): each row
attends causally to its own context (the ``j``-th to ``context + j + 1`` tokens). The ASIC's
rows stream one after another through its attention blocks, each reading its own K/V; the
LPU installs a sequence's K/V blocks into the MXM once for all its rows."""

from __future__ import annotations

import math

import numpy as np

import pyaccel as pa
from pyaccel.results import prepare
from pyaccel.sim.asic.engine import kv_banks_of
from pyaccel.sim.lpu.plans import op_plan


def _events(prepared, **work):
    w = pa.Workload(tokens=1, weights=prepared.workload.weights, **work)
    tr = pa.emulate(prepared.model, prepared.system, prepared.placement, w, event_steps={0})
    return tr.to_dataframe()


def test_asic_chunk_rows_read_the_kv_of_their_own_context_by_hand():
    # tiny-llama etched on one die: 4 heads of 16, 2 KV heads, bf16 K/V = 2 x 2 x 16 x 2 B =
    # 128 B a token. A chunk of 4 prompt rows after 10 cached tokens: row j reads the 10 + j
    # tokens before it and writes its own (128 B each: 11, 12, 13, 14 tokens' bytes) and
    # attends 11 + j tokens at 4 x 4 x 16 FLOPs each (scores and weighted sum of 4 heads)
    p = prepare("tiny-llama", "taalas-hc1", "auto", pa.Workload(context=14, tokens=1), etch=True)
    df = _events(p, context=10, step_tokens=4, prefill=True)
    att = df[df.op.str.match(r"L0\.attention\[u\d\]$")].sort_values("start")
    assert att.bytes.tolist() == [128 * (11 + j) for j in range(4)]
    assert att.flops.tolist() == [4 * 4 * 16 * (11 + j) for j in range(4)]
    # the rows' FLOPs are the graph's causal count, which the other engines cost
    graph = pa.build_graph(p.model, pa.Workload(context=10, step_tokens=4, tokens=1), None, "hc1")
    assert att.flops.sum() == graph.attention_op(0, 10).flops == 4 * 4 * 16 * (11 + 12 + 13 + 14)


def test_asic_chunk_rows_attention_cycles_grow_with_their_context_by_hand():
    # llama-3.1-8b on one hc1 die, bf16 K/V: 2 x 8 heads x 128 x 2 B = 4096 B a token; each of
    # its 32 layers has 20,927 // 32 = 653 KV banks of 16 B a cycle = 10,448 B a cycle. A chunk
    # of 64 rows after 1,000 cached tokens: row j reads 1,000 + j tokens and writes one, so its
    # attention block is busy ceil((1001 + j) x 4096 / 10448) cycles: 393 for row 0 ... 418 for
    # row 63 (all rows at the chunk's start would be 393 each)
    p = prepare("llama-3.1-8b", "taalas-hc1", "auto", pa.Workload(context=1064, tokens=1))
    assert set(kv_banks_of(p.placement, p.system.spec.params).values()) == {0, 653}
    df = _events(p, context=1000, step_tokens=64, prefill=True)
    att = df[df.op.str.match(r"L5\.attention\[u\d+\]$")].sort_values("start")
    want = [math.ceil((1001 + j) * 4096 / (653 * 16)) for j in range(64)]
    assert att.duration.tolist() == want and (want[0], want[-1]) == (393, 418)
    assert att.bytes.tolist() == [(1001 + j) * 4096 for j in range(64)]
    assert set(att.resource) == {"kv_sram"}
    # a verify step's rows alike: 3 rows after 1,000 tokens, the last at 1,002 cached
    df = _events(p, context=1000, step_tokens=3)
    att = df[df.op.str.match(r"L5\.attention\[u\d\]$")].sort_values("start")
    assert att.bytes.tolist() == [(1001 + j) * 4096 for j in range(3)]


def test_asic_verify_steps_of_a_run_take_each_row_at_its_position():
    # two verify steps of 3 rows from context 1000: step t's row j is at position t + j, so the
    # last step's last row reads 1,000 + 1 + 2 tokens and writes one
    p = prepare("llama-3.1-8b", "taalas-hc1", "auto", pa.Workload(context=1008, tokens=1))
    w = pa.Workload(context=1000, step_tokens=3, tokens=2, weights=p.workload.weights)
    df = pa.emulate(p.model, p.system, p.placement, w, event_steps={1}).to_dataframe()
    att = df[df.op.str.match(r"L5\.attention\[u\d\]$")].sort_values("start")
    assert att.bytes.tolist() == [(1002 + j) * 4096 for j in range(3)]
    assert np.all(np.diff(att.start.to_numpy()) > 0)


def test_asic_chunk_step_is_the_last_rows_pass_after_the_attention_queue_by_hand():
    # llama-3.1-8b, fp8 K/V (2048 B a token, plus a 4 B tensor scale on the read and on the
    # written part), a chunk of 64 rows after 3,000 tokens: row j's attention block is busy
    # ceil(((3001 + j) x 2048 + 8) / 10448) = 589 .. 601 cycles, longer than any other block
    # (512 ROM row reads), so the layer-0 attention block is the queue every row waits in:
    # it is busy from row 0's arrival without a gap, and the last row, once through it, meets
    # a free block at every later stage (each row ahead of it left each block at least one
    # attention time earlier). The step is the last row's own pass (a one-row step at context
    # 3,063) plus the 63 earlier rows' layer-0 attention cycles. Rows all at the chunk's start
    # context would give a one-row pass at 3,000 plus 63 x 589.
    p = prepare("llama-3.1-8b", "taalas-hc1", "auto", pa.Workload(context=3064, tokens=1,
                                                                  kv="fp8"))  # fmt: skip
    work = pa.Workload(tokens=1, weights=p.workload.weights, kv="fp8", context=3000,
                       step_tokens=64, prefill=True)  # fmt: skip
    att = [math.ceil(((3001 + j) * 2048 + 8) / 10448) for j in range(64)]
    assert (att[0], att[-1]) == (589, 601)
    last = pa.emulate(p.model, p.system, p.placement, pa.Workload(
        tokens=1, weights=p.workload.weights, kv="fp8", context=3063)).step_cycles[0]  # fmt: skip
    step = pa.emulate(p.model, p.system, p.placement, work).step_cycles[0]
    assert step == last + sum(att[:63])


def _lpu_attention_plan(tp, **work):
    graph = pa.build_graph(pa.load_model("llama-3.1-8b"), pa.Workload(tokens=1, **work))
    op = next(o for o in graph.ops if o.kind == "attention")
    return op_plan(op, graph, tp)


def test_lpu_rows_of_a_sequence_install_its_kv_once_by_hand():
    # llama-3.1-8b on a TP-8 LPU group: one KV head a chip, 128 K (and 128 V) elements a token,
    # 4 query heads sharing it. A 2,048-row prompt chunk after 2,048 cached tokens attends
    # 4,096 keys: the chip installs 4,096 x 128 = 524,288 K weights once (not 2,048 times:
    # 1,073,741,824) and streams 2,048 rows x 4 query heads = 8,192 vectors through each block
    plan = _lpu_attention_plan(8, context=2048, step_tokens=2048, prefill=True)
    gemvs = [st for st in plan if st[0] == "gemv"]
    assert gemvs == [("gemv", 524288, 8192)] * 2  # K (scores), then V (weighted sum)
    # the scores, softmax and written K/V stay per row: 2,048 rows x 4 heads x 4,096 keys
    assert ("reduce", 2048 * 4 * 4096) in plan
    # different sequences keep caches of their own: 4 sequences decoding at 4,095 install
    # 4 x 4,096 x 128 weights, each block fed its own sequence's 4 query heads; 2 sequences
    # verifying 3 rows each at 4,093: 2 caches of 4,096 keys, 3 x 4 vectors a block
    assert [st for st in _lpu_attention_plan(8, batch=4, context=4095) if st[0] == "gemv"] == [
        ("gemv", 4 * 4096 * 128, 4)
    ] * 2
    verify = _lpu_attention_plan(8, batch=2, context=4093, step_tokens=3)
    assert [st for st in verify if st[0] == "gemv"] == [("gemv", 2 * 4096 * 128, 12)] * 2


def test_lpu_verify_step_installs_what_one_row_at_the_same_keys_does():
    # llama-3.1-8b on groq-tsp (TP 8, bf16 operands: 160 x 160 = 25,600 weights a block):
    # 3 rows after 1,024 tokens attend up to 1,027 keys, as one row after 1,026 does; chip 0
    # installs ceil(1,027 x 128 / 25,600) = 6 K blocks and 6 V blocks of 51,200 B for either
    # (614,400 B; once per row it would be ceil(3 x 131,456 / 25,600) = 16 each: 1,638,400 B)
    p = prepare("llama-3.1-8b", "groq-tsp", "auto", pa.Workload(context=1032, tokens=1))
    installed = []
    for q, context in ((1, 1026), (3, 1024)):
        df = _events(p, context=context, step_tokens=q)
        mem = df[(df.op == "L0.attention") & (df.unit == 0) & (df.resource == "lpu_mem")]
        installed.append(int(mem.bytes.max()))  # the installs (the other: the K/V written)
    assert installed == [12 * 160 * 160 * 2] * 2 == [614400] * 2
