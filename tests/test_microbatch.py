"""Pipeline micro-batches: sizes add up to the batch, and no op in the by-kind table beats the
lower bound of the micro-batch it ran (issue 12 item 8)."""

import pytest

import pyaccel as pa
from pyaccel.batches import micro_batch_sizes
from pyaccel.report import Report, op_bound_seconds
from pyaccel.results import run
from pyaccel.sim.pipeline import pipeline_cycles


@pytest.mark.parametrize("batch", range(1, 41))
@pytest.mark.parametrize("stages", [1, 2, 5, 9, 35])
def test_micro_batch_sizes_add_up_to_the_batch(batch, stages):
    sizes = micro_batch_sizes(batch, stages)
    assert sum(sizes) == batch
    assert len(sizes) == min(batch, stages)
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_sixteen_over_five_stages_is_four_three_three_three_three():
    assert micro_batch_sizes(16, 5) == [4, 3, 3, 3, 3]


def test_pipeline_cycles_of_equal_micro_batches_is_the_old_formula():
    # max(one pass = 23, n x slowest stage = 11 n): 23, 23, 33, 44
    stage_c = [7, 3, 11, 2]
    assert [pipeline_cycles({5: stage_c}, [5] * n) for n in range(1, 5)] == [23, 23, 33, 44]


def test_pipeline_cycles_counts_every_micro_batch_on_the_busiest_stage():
    # stage 0 serves one micro-batch of 4 (10 cycles) and two of 3 (8 each): 26 > any pass
    assert pipeline_cycles({4: [10, 1], 3: [8, 1]}, [4, 3, 3]) == 26
    # one long pass dominates a lightly loaded pipeline
    assert pipeline_cycles({2: [50, 50], 1: [1, 1]}, [2, 1]) == 100


def _ratios_at_least_one(rep):
    # 1e-12: an op whose bound is exactly its emulated cycles (a GPU norm: its launch and one
    # body cycle) sums the same cycles in another order, in seconds
    low = [(r.kind, r.ratio) for r in rep.by_kind if r.ratio is not None and r.ratio < 1 - 1e-12]
    assert not low, f"ops below their bound: {low}"


@pytest.mark.parametrize(("weights", "units"), [(None, 5), ("fp8", 5), ("bf16", 9), (None, 8)])
def test_b200_deepseek_v3_batch_16_no_op_below_its_bound(weights, units):
    # fp8 on 5 B200s is the 5 stages (16 = 4+3+3+3+3); bf16 on 9 is 9 stages
    # (16 = 7 x 2 + 2 x 1); on 8, the layout --units auto picks, one stage of TP 8
    work = pa.Workload(batch=16, tokens=2, weights=weights)
    # experts split with TP: the stages under test (expert parallelism: test_expert_parallel)
    r = run("deepseek-v3", "b200", units=units, workload=work, sets=["expert_layout=tp"])
    meta = r.trace.meta
    assert sum(meta["micro_batch_sizes"]) == 16
    assert meta["micro_batches"] == len(meta["micro_batch_sizes"]) == meta["pp"]
    assert meta["pp"] * meta["tp"] == units
    rep = Report.from_trace(r.trace)
    _ratios_at_least_one(rep)
    experts = next(row for row in rep.by_kind if row.kind == "experts_gate_up_proj")
    assert experts.ratio >= 1.0


def test_lpu_micro_batches_add_up_and_ops_keep_their_bounds():
    r = run("llama-3.1-8b", "groq-tsp", workload=pa.Workload(batch=7, context=64, tokens=2))
    sizes = r.trace.meta["micro_batch_sizes"]
    assert r.trace.meta["stages"] > 1 and sum(sizes) == 7 and len(set(sizes)) == 2
    _ratios_at_least_one(Report.from_trace(r.trace))


def test_wafer_micro_batches_add_up_and_ops_keep_their_bounds():
    regions = pa.load_system("wse3", units=1, overrides=["placement_strategy=layer_regions"])
    model, work = pa.load_model("llama-3.1-8b"), pa.Workload(batch=40, tokens=1, context=64)
    tr = pa.emulate(model, regions, pa.place(model, regions, work), work)
    sizes = tr.meta["micro_batch_sizes"]
    assert sum(sizes) == 40 and len(set(sizes)) == 2
    assert (tr.step_cycles >= tr.lower_bound_cycles).all()
    _ratios_at_least_one(Report.from_trace(tr))


def test_op_bounds_are_whole_cycles_never_below_the_true_bound():
    clock = 1e9
    assert op_bound_seconds(5.27e-13, clock) == pytest.approx(1e-9)  # under a cycle -> one
    assert op_bound_seconds(3e-9, clock) >= 3e-9
    assert op_bound_seconds(0.0, clock) == 0.0
    for s in (1e-12, 2.5e-9, 7.000001e-6):
        b = op_bound_seconds(s, clock)
        assert b >= s and round(b * clock, 6) == round(b * clock)


def test_report_bounds_no_op_kind_below_one_cycle():
    r = run("llama-3.1-8b", "groq-tsp", workload=pa.Workload(context=64, tokens=2))
    rep = Report.from_trace(r.trace)
    one_cycle = 1.0 / r.trace.clock_hz
    bounded = [row for row in rep.by_kind if row.bound_s > 0]
    assert bounded and all(row.bound_s >= one_cycle * (1 - 1e-12) for row in bounded)
    _ratios_at_least_one(rep)
