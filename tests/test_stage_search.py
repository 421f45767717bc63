"""The speed search over pipeline stage counts (pyaccel.placing): where a placer's layouts come in
families that differ only in their stage count (the LPU's TP widths), the counts between a
family's fewest and most stages are searched, not only the two ends. At batch > 1 a middle count
can win: groq-tsp llama-3.1-8b at batch 8 on 98 chips ran TP 8 x 12 (304,811 cycles) while
TP 8 x 10, what 84 chips got, runs in 301,867, so more chips ran slower."""

from __future__ import annotations

import pytest

import pyaccel as pa
from pyaccel import placing
from pyaccel.place import lpu as placer
from pyaccel.sim import lpu as engine
from pyaccel.sim.driver import step_cycles
from pyaccel.sim.inputs import run_graph


def _search(f, lo, hi):
    memo = {lo: f(lo), hi: f(hi)}
    return placing._stage_counts(f, lo, hi, memo)


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


@pytest.fixture(scope="module")
def llama8b():
    return pa.load_model("llama-3.1-8b")


def _every_count(graph, system, tp):
    """Cycles of every stage count of ``tp``-wide stages that fits on the system's chips."""
    spec, units = system.spec, int(system.units)
    most = placer.build(graph, spec, tp, units)
    few = placer._fewest_stages(graph, spec, tp, most)
    return {
        pp: step_cycles(engine, graph, system, placer.restaged(graph, system, few, pp), 1024)
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
    assert plc.layout.pp == best
    assert f"TP 8 x {best}: {every[best]:,} cycles" in plc.reason
    # more chips no longer run slower: 84 chips' best layout is reachable on 98
    on_84 = pa.place(llama8b, pa.load_system("groq-tsp", 84), work)
    c84 = step_cycles(engine, graph, pa.load_system("groq-tsp", 84), on_84, 1024)
    assert every[best] <= c84


def test_one_sequence_times_only_the_ends(llama8b):
    """At batch 1 a step is one pass through every stage: more stages only add hops, so the
    counts between are not timed."""
    work = pa.Workload(batch=1, context=1024, tokens=1)
    plc = pa.place(llama8b, pa.load_system("groq-tsp", 98), work)
    tried = plc.reason.split("one step each: ")[1].split("; kept")[0].split("; ")
    labels = [t.split(":")[0] for t in tried if t.startswith("TP 8 x")]
    assert len(labels) == 2
