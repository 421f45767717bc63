"""The speed search inside layout families (pyaccel.layout_search): where a placer's layouts come
in families that differ in one whole number (the LPU's TP widths over their stage counts, the
wafer's interleave over its grid sizes), the members between a family's ends are searched, not
only the two ends. At batch > 1 a middle stage count can win: groq-tsp llama-3.1-8b at batch 8
on 98 chips ran TP 8 x 12 (304,811 cycles) while TP 8 x 10, what 84 chips got, runs in 301,867,
so more chips ran slower. A tiny model's interleave ran on the smallest grid that holds it
(tiny-llama on wse3: 5 x 5 PEs), and lower precision, a smaller grid, ran slower."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import pyaccel as pa
from pyaccel import layout_search
from pyaccel.place import lpu as placer
from pyaccel.place import wafer as wafer_placer
from pyaccel.place.common import capped_partition, contiguous_partition
from pyaccel.sim import lpu as engine
from pyaccel.sim import wafer as wafer_engine
from pyaccel.sim.driver import step_cycles
from pyaccel.sim.inputs import run_graph


def _search(f, lo, hi):
    memo = {lo: f(lo), hi: f(hi)}
    return layout_search.golden_positions(f, lo, hi, memo)


@pytest.mark.parametrize("best", [1, 2, 7, 20, 39, 40])
def test_golden_section_finds_a_unimodal_minimum_in_few_steps(best):
    asked = []

    def f(pp):
        asked.append(pp)
        return (pp - best) ** 2 + 100

    memo = _search(f, 1, 40)
    assert min(memo, key=lambda pp: (memo[pp], pp)) == best
    assert len(asked) == len(set(asked)) == len(memo)  # each count timed once
    assert len(memo) <= 13  # ~1.44 log2(39) + 4, against 40 for every count


def test_plateaus_keep_the_fewer_stages():
    memo = _search(lambda pp: 5 if pp >= 9 else 10, 3, 30)
    assert min(memo, key=lambda pp: (memo[pp], pp)) == 9
    flat = _search(lambda pp: 7, 3, 30)
    assert min(flat, key=lambda pp: (flat[pp], pp)) == 3


def test_a_short_range_is_timed_whole():
    assert sorted(_search(lambda pp: -pp, 4, 7)) == [4, 5, 6, 7]


def test_a_step_that_rises_from_the_least_stops_there():
    """Unimodal and rising from the least position: the least is the minimum, found with one
    more timing (a wafer's smallest grid for a large model: its lines are shortest there)."""
    memo = layout_search.golden_positions(lambda x: 100 + x, 600, 1170, {})
    assert sorted(memo) == [600, 601, 1170]
    assert min(memo, key=memo.get) == 600


@pytest.fixture(scope="module")
def llama8b():
    return pa.load_model("llama-3.1-8b")


def _every_count(graph, system, tp):
    """Cycles of every stage count of ``tp``-wide stages that fits on the system's chips."""
    spec, units = system.spec, int(system.units)
    most = placer.build(graph, spec, tp, units)
    few = placer._fewest_stages(graph, spec, tp, most)
    return {
        pp: step_cycles(engine, graph, system, placer.member(graph, system, few, pp), 1024)
        for pp in range(few.layout.pp, most.layout.pp + 1)
    }


def test_a_middle_stage_count_is_found_at_batch_8(llama8b):
    work = pa.Workload(batch=8, context=1024, tokens=1)
    system = pa.load_system("groq-tsp", 98)
    plc = pa.place(llama8b, system, work)
    graph = run_graph(llama8b, system, work, "test")
    every = _every_count(graph, system, 8)
    assert plc.layout.tp == 8
    best = min(every, key=lambda pp: (every[pp], pp))
    assert min(every) < best < max(every), every  # the fewest and the most both lose
    assert f"TP 8 x {best}: {every[best]:,} cycles" in plc.reason  # the search found it
    kept = step_cycles(engine, graph, system, plc, 1024)
    assert kept <= every[best]  # (stages balanced by time do better still)
    # more chips no longer run slower: 84 chips' best layout is reachable on 98
    on_84 = pa.place(llama8b, pa.load_system("groq-tsp", 84), work)
    assert kept <= step_cycles(engine, graph, pa.load_system("groq-tsp", 84), on_84, 1024)


def test_one_sequence_times_only_the_ends(llama8b):
    """At batch 1 a step is one pass through every stage: more stages only add hops, so the
    counts between are not timed."""
    work = pa.Workload(batch=1, context=1024, tokens=1)
    plc = pa.place(llama8b, pa.load_system("groq-tsp", 98), work)
    tried = plc.reason.split("one step each: ")[1].split("; kept")[0].split("; ")
    labels = [t.split(":")[0] for t in tried if t.startswith("TP 8 x")]
    assert len(labels) == 2


# --- stages balanced by each layer's cycles, not its bytes ---------------------------------


def _brute_min_max(costs, rows, room, parts):
    """The smallest largest block cost over every split into ``parts`` contiguous non-empty
    blocks whose per-unit bytes stay within ``room`` (None: no such split)."""
    n, best = len(costs), None
    for cuts in itertools.combinations(range(1, n), parts - 1):
        edges = (0, *cuts, n)
        blocks = [range(a, b) for a, b in itertools.pairwise(edges)]
        if any((rows[list(b)].sum(axis=0) > room).any() for b in blocks):
            continue
        worst = max(sum(costs[i] for i in b) for b in blocks)
        best = worst if best is None else min(best, worst)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_capped_partition_matches_every_split_tried(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 9))
    costs = rng.integers(1, 30, n).tolist()
    rows = rng.integers(0, 10, (n, int(rng.integers(1, 4))))
    room, parts = int(rng.integers(8, 25)), int(rng.integers(1, n + 1))
    got = capped_partition(costs, parts, rows, room)
    want = _brute_min_max(costs, rows, room, parts)
    if want is None:
        assert got is None
        return
    assert got is not None and len(got) == n and got[0] == 0
    assert all(b - a in (0, 1) for a, b in itertools.pairwise(got))  # contiguous, in order
    assert got[-1] + 1 == parts  # every stage used
    blocks = [[i for i in range(n) if got[i] == s] for s in range(parts)]
    assert all((rows[b].sum(axis=0) <= room).all() for b in blocks)
    assert max(sum(costs[i] for i in b) for b in blocks) == want
    # without a byte limit: the byte-balanced split the placers use (contiguous_partition)
    free = capped_partition(costs, parts)
    assert free == contiguous_partition(costs, parts) or parts == 1
    loose = _brute_min_max(costs, np.zeros_like(rows), 0, parts)
    assert max(sum(c for c, s in zip(costs, free, strict=True) if s == b)
               for b in range(parts)) == loose  # fmt: skip


def test_capped_partition_by_hand():
    """An embedding and a head heavy in bytes (10) but light in cycles (1, 7) around four
    layers (1 B, 8 cycles). With room for 12 B a unit, each may share a stage with a layer:
    [1, 8] [8] [8] [8, 7], 15 cycles at most (by bytes alone the four layers would share
    stages). With room for 10 B neither may: [1] [8, 8] [8, 8] [7], 16. With 9, none fits."""
    costs = [1, 8, 8, 8, 8, 7]
    rows = np.array([[10], [1], [1], [1], [1], [10]])
    assert capped_partition(costs, 4, rows, 12) == [0, 0, 1, 2, 3, 3]
    assert capped_partition(costs, 3, rows, 12) == [0, 0, 1, 1, 2, 2]  # 9, 16, 15
    assert capped_partition(costs, 4, rows, 10) == [0, 1, 1, 2, 2, 3]
    assert capped_partition(costs, 4, rows, 9) is None


def test_a_one_billion_model_runs_faster_with_stages_balanced_by_time(llama_1b):
    """llama-3.2-1b at batch 8 on 16 chips: its tied embedding and LM head are as heavy in
    bytes as several layers, so stages balanced by bytes left one stage holding most layers
    (TP 8 x 2: 172,502 cycles). Balanced by each key's cycles on a stage of its own, the same
    chips run the step in fewer cycles; the reason names both."""
    work = pa.Workload(batch=8, context=1024, tokens=1)
    system = pa.load_system("groq-tsp", 16)
    plc = pa.place(llama_1b, system, work)
    graph = run_graph(llama_1b, system, work, "test")
    assert plc.layout.split == "time" and plc.reason.endswith("by time = 16 chips")
    kept = step_cycles(engine, graph, system, plc, 1024)
    by_bytes = placer.build(graph, system.spec, plc.layout.tp, 16, stages=plc.layout.pp)
    assert kept < step_cycles(engine, graph, system, by_bytes, 1024)
    assert f"{placer.label(by_bytes)}: " in plc.reason and plc.layout.split == "time"
    # what the costs are: each key on a stage of its own, as many stages as keys
    one = placer.keywise(graph, system, plc)
    assert one.layout.pp == len(graph.layer_keys) and one.n_units == 8 * one.layout.pp
    # the placement says so and reads back
    data = json.loads(plc.to_json())
    assert data["layout"]["split"] == "time"
    again = pa.Placement.from_json(data)
    assert again.layout == plc.layout and again.layers == plc.layers
    data["layout"]["split"] = "bytes"
    with pytest.raises(pa.ConfigError, match="split"):
        pa.Placement.from_json(data)


def test_one_sequence_never_balances_by_time(llama_1b):
    work = pa.Workload(batch=1, context=1024, tokens=1)
    plc = pa.place(llama_1b, pa.load_system("groq-tsp", 16), work)
    assert " by time:" not in plc.reason and plc.layout.split is None
    assert "split" not in json.loads(plc.to_json())["layout"]


@pytest.fixture(scope="module")
def llama_1b():
    return pa.load_model("llama-3.2-1b")


# --- the wafer's interleave over grid sizes ------------------------------------------------


def test_a_tiny_model_interleaves_on_a_middle_grid():
    """tiny-llama on one wse3 ran its interleave on the smallest grid that holds it, 5 x 5 PEs:
    each PE then works on a large share of every layer. The whole wafer's lines are too long.
    A grid between them is faster than both ends, and the search finds one."""
    tiny, system, work = pa.load_model("tiny-llama"), pa.load_system("wse3", 1), pa.Workload()
    graph = run_graph(tiny, system, work, "test")
    ends = [p for p in wafer_placer.layouts_units(graph, system, 1)
            if p.layout.strategy == "interleave"]  # fmt: skip
    low = min(ends, key=wafer_placer.position)
    assert low.layout.grids[0] == (5, 5) and len(ends) == 2
    plc = pa.place(tiny, system, work)
    kept = step_cycles(wafer_engine, graph, system, plc, graph.context)
    end_cycles = [step_cycles(wafer_engine, graph, system, p, graph.context) for p in ends]
    assert plc.layout.strategy == "interleave" and kept < min(end_cycles)
    side = wafer_placer.position(plc)
    assert low.layout.grids[0][0] < side < max(ends[1].layout.grids[0])
    assert f"interleave {side}x{side}: {kept:,} cycles" in plc.reason
    assert wafer_placer.member(graph, system, low, side).layers == plc.layers


def test_a_grid_grows_only_where_it_is_smaller():
    """A member's grid on each wafer: its base grid where that is as large, else the grid of
    the asked long side on the same path (squares, then the short side by the long one)."""
    llama, system = pa.load_model("llama-3.1-70b"), pa.load_system("wse3", 5)
    work = pa.Workload(tokens=1)
    graph = run_graph(llama, system, work, "test")
    low = min((p for p in wafer_placer.layouts_units(graph, system, 5)
               if p.layout.strategy == "interleave"), key=wafer_placer.position)  # fmt: skip
    grids = low.layout.grids
    side = wafer_placer.position(low) + 10
    grown = wafer_placer.member(graph, system, low, side).layout.grids
    for before, after in zip(grids, grown, strict=True):
        assert after == (before if max(before) >= side else (755, side))


def test_lower_precision_is_no_longer_slower_on_a_wafer():
    """wse2 tiny-mixtral on 2 wafers ran int4 slower than fp8 and bf16 (a smaller smallest
    grid: 4 x 4 PEs against 5 x 5 and 6 x 6); the grid search puts each on the grid that suits
    the step."""
    tiny, rates = pa.load_model("tiny-mixtral"), {}
    for fmt in ("bf16", "fp8", "int4"):
        system = pa.load_system("wse2", 2)
        w = pa.Workload(tokens=2, weights=fmt)
        plc = pa.place(tiny, system, w)
        rates[fmt] = pa.emulate(tiny, system, plc, w).tokens_per_s_per_user
    assert rates["int4"] >= rates["fp8"] * (1 - 1e-9)
    assert rates["fp8"] >= rates["bf16"] * (1 - 1e-9)
