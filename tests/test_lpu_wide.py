"""Tensor parallelism across nodes on the LPU: hand-derived collectives over local links and the
node pairs' global ports (sim/lpu/wide.py), and the attention's sequence split."""

import pytest

import pyaccel as pa
from pyaccel.errors import ConfigError
from pyaccel.sim.lpu import plans
from pyaccel.sim.lpu.net import Network

# 1 GHz clock, 600-cycle hops: a node pair's local link 2 x 14 GB/s = 28 B/cycle, a global port
# (16 - 14) x 14 GB/s / 4 = 7 B/cycle; 8 nodes a rack, so 32 // 7 = 4 ports join two nodes. No
# VXM pass latency, so a sum of c cycles is ready c cycles after it starts.
ROUND = ["clock_hz=1e9", "c2c_latency_s=6e-7"]


def _net(deskew=0):
    spec = pa.load_system("groq-tsp", units=16, overrides=[*ROUND, f"deskew_cycles={deskew}"]).spec
    return Network(spec.params, 1e9)


def test_golden_allreduce_across_two_nodes():
    """224 B over 16 chips (2 nodes of 8), 1 VXM cycle per n/tp chunk (each sum's result 8
    cycles of VXM pass latency after its last cycle), no deskew.

    1. reduce-scatter in each node: chunks of 224 / 8 = 28 B, one cycle on a local link each,
       all at once: arrive 1 + 600 = 601; each chip sums its 8 partials (1 x 2 nodes = 2
       cycles, [601, 603)): ready 611.
    2. one-shot across the nodes (it beats reduce-scatter + all-gather's two crossings): chip j
       sends its 28 B to chip j of the other node over port j mod 4 of the pair; all 4 ports
       toward the one peer belong to chip 0 (ports numbered chip after chip), so chips 1..7
       first relay to chip 0: [611, 612), arriving 1,212. Chip 0's own chunk leaves at 611 on
       port 0 (28 / 7 = 4 cycles), arrives 1,215. The relayed chunks go on cut-through once
       their first bytes are in (1 + 600 after the relay's start = 1,212): ports 1..3 carry
       chips 1..3 in [1212, 1216), and then -- contending for the same port -- chips 5..7 in
       [1216, 1220); port 0 carries chip 4 after chip 0, [1212, 1216). They arrive 600 later
       (1,816 and 1,820) at chip 0 of the other node, which relays each to its rank
       cut-through: start 4 + 600 after the port's start, arrive 600 after: 2,417 (ranks
       1..4) and 2,421 (ranks 5..7). Each chip sums the two partials: [2421, 2423), ready
       2,431 at the latest.
    3. all-gather in each node: 28 B from every chip to every peer, the last leaving at 2,431,
       arriving 2,431 + 1 + 600 = 3,032.
    """
    coll = _net().allreduce(16, 224, 1)
    assert coll.cycles == 3032
    # with a 128-cycle deskew before the crossing, everything after it moves by 128
    assert _net(128).allreduce(16, 224, 1).cycles == 3032 + 128


def test_wide_allreduce_ranks_send_their_share():
    coll = _net().allreduce(16, 224, 1)
    assert len(coll.send_bytes) == 16
    # every chip sends 7 x 28 B in each node phase; chip 0 also forwards 7 relayed chunks and its
    # own over the global ports (8 x 28), chips 1..7 relay theirs to chip 0 (28)
    assert coll.send_bytes[0] == 2 * 7 * 28 + 8 * 28 + 7 * 28
    assert coll.send_bytes[1] == 2 * 7 * 28 + 28
    assert {slot for c, slot, _ in coll.slot_bytes if c == 0} >= {7, 8, 9, 10}  # global ports


@pytest.mark.parametrize("tp", [12, 72])
def test_wide_group_must_be_whole_nodes_of_a_rack(tp):
    with pytest.raises(ConfigError, match="whole nodes of one rack"):
        _net().allreduce(tp, 224, 1)


def test_narrow_groups_keep_the_node_collectives():
    # up to a node nothing crosses nodes, so the deskew never applies
    assert _net(0).allreduce(8, 7000, 10) == _net(256).allreduce(8, 7000, 10)


def test_attention_splits_the_cache_beyond_the_kv_heads():
    # 8 KV heads on 16 chips: each head's 2 chips hold half its cached tokens each, stream all 8
    # of its query heads, and combine partial outputs (+ max, sum) with one all-reduce of 2
    model = pa.load_model("llama-3.1-70b")
    graph = pa.build_graph(model, pa.Workload(batch=1, context=4096))
    op = next(o for o in graph.ops if o.kind == "attention")
    op = graph.attention_op(op.layer, 4096)
    att = graph.attention
    narrow, wide = plans.attention_plan(op, att, 8), plans.attention_plan(op, att, 16)
    assert narrow[-1][0] == "gemv" and wide[-1] == ("seqreduce", 8 * (128 * 2 + 8), 2)
    # the chip's share of the cache halves; the scores it computes stay 8 heads x its tokens
    assert wide[1][1] * 2 == narrow[1][1]
    assert wide[2] == ("reduce", 8 * -(-op.k // 2)) and narrow[2] == ("reduce", 8 * op.k)


@pytest.mark.parametrize(
    "model, weights",
    [("llama-3.1-70b", "bf16"), ("llama-3.3-70b", None), ("llama-3.1-405b", None),
     ("gpt-oss-120b", None)],
)  # fmt: skip
def test_models_groq_serves_place_and_run(model, weights):
    # issue 16: these were refused while tensor parallelism stopped at one node (llama-3.1-70b
    # at bf16: its 16-bit embedding shard alone overfilled a chip of an 8-chip stage)
    cfg = pa.load_model(model)
    work = pa.Workload(tokens=1, weights=weights) if weights else pa.Workload(tokens=1)
    system = pa.load_system("groq-tsp", "auto")
    plc = pa.place(cfg, system, work)
    assert not plc.shortfalls() and "the fewest chips that hold it" in plc.reason
    tr = pa.emulate(cfg, system, plc, work)
    assert tr.tokens_per_s_per_user > 0
    assert (tr.step_cycles >= tr.lower_bound_cycles).all()


def test_wide_stage_spans_whole_nodes_of_one_rack():
    cfg = pa.load_model("llama-3.1-405b")
    plc = pa.place(cfg, pa.load_system("groq-tsp", "auto"), pa.Workload(tokens=1))
    tp, node, rack = plc.layout.tp, 8, 64
    assert tp > node and tp % node == 0 and rack % tp == 0
    for s in plc.layers:
        first, last = s.region.chips
        assert first % tp == 0 and last == first + tp - 1
        assert first // rack == last // rack  # never straddles racks


def test_refusal_names_the_layer_that_overfills_the_widest_group():
    # kimi-k2's routed experts overfill a chip even on a rack-wide (64-chip) stage
    with pytest.raises(pa.PlacementError) as err:
        pa.place(pa.load_model("kimi-k2"), pa.load_system("groq-tsp", "auto"), pa.Workload())
    text = str(err.value)
    assert "stage of 64 chips" in text and "lpu.tp_width" in text and "routed experts" in text


def test_narrowest_tp_width_keeps_groups_inside_a_node():
    system = pa.load_system("groq-tsp", 576, overrides=["tp_max_chips=8"])
    assert system.spec.ranges["tp_max_chips"] == (8, 64)
    cfg = pa.load_model("llama-2-70b")
    plc = pa.place(cfg, system, pa.Workload(context=4096, tokens=1, weights="int8"))
    assert plc.layout.tp <= 8


@pytest.mark.parametrize(
    "model,weights,sets",
    [("llama-2-70b", "int8", []), ("llama-3.1-8b", "bf16", ["activation_buffers=6"]),
     ("mixtral-8x7b", "int8", ["expert_layout=tp"]), ("mixtral-8x7b", "int8", [])],
)  # fmt: skip
def test_fit_check_is_the_built_layout_without_shortfalls(model, weights, sets):
    # the search asks `fits` of dozens of chip and stage counts instead of building each
    # layout: it must answer what building it and counting shortfalls answers, on either side
    # of the line (stage counts and chip counts around the fewest that fit)
    from pyaccel.model.graph import build_graph
    from pyaccel.place import lpu

    sysm = pa.load_system("groq-tsp", overrides=sets)
    graph = build_graph(pa.load_model(model), pa.Workload(weights=weights).resolved("int8"))
    floor = lpu.fewest(graph, sysm.spec).n_units
    answers = set()
    for tp in lpu.tp_candidates(sysm.spec):
        for units in sorted({tp, floor - 2 * tp, floor - tp, floor, floor + 3 * tp}):
            if units < tp:
                continue
            for stages in (None, 1, 2, units // tp // 2 or 1):
                for ep in lpu._expert_layouts(graph, sysm.spec, tp):
                    built = lpu.build(graph, sysm.spec, tp, units, stages=stages, ep=ep)
                    fit = lpu.fits(graph, sysm.spec, tp, units, stages=stages, ep=ep)
                    assert fit == (not built.shortfalls()), (tp, units, stages, ep)
                    answers.add(fit)
    assert answers == {True, False}  # both sides of the line were asked
