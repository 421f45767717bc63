"""Steps without events are timed all at once (``MicroBatchPasses.steps_over``, each engine's
``stage_cycles_over``): the same cycles, step for step, as timing each step on its own."""

import numpy as np
import pytest

import pyaccel as pa
from pyaccel.model.graph import build_graph
from pyaccel.sim import driver
from pyaccel.sim.inputs import engine_module

# Tiny models' GPU steps are shorter than the host's own step, which then sets every step: these
# cases leave the host out so that the steps differ (the 8B cases keep it)
QUIET_HOST = {"step_host_s": 0}
EP = {"expert_layout": "ep"}
# chips of 0.7 MB of SRAM, at most 2 a group: tiny MoE models need pipeline stages (2 and 4)
LPU_EP_STAGES = {**EP, "sram_bytes": 700_000, "tp_max_chips": 2}
CASES = [  # (system, units, model, workload, --set overrides)
    ("h100", 1, "tiny-llama", pa.Workload(context=5, tokens=40), QUIET_HOST),
    ("h100", 2, "tiny-gemma2", pa.Workload(context=3, tokens=60, batch=3), QUIET_HOST),
    ("h100", 4, "tiny-gemma3", pa.Workload(context=0, tokens=30, batch=5), None),
    ("h100", 16, "llama-3.1-8b", pa.Workload(context=1000, tokens=50, batch=7), None),  # PP
    ("h100", 1, "tiny-qwen3", pa.Workload(context=7, tokens=30, step_tokens=4), QUIET_HOST),
    ("h100", 1, "tiny-llama", pa.Workload(context=5, tokens=30), {"host_overlap": "serial"}),
    ("h100", 1, "llama-3.1-8b", pa.Workload(tokens=30, batch=64), {"step_host_s": 2e-3}),
    ("wse3", 1, "llama-3.1-8b", pa.Workload(context=1000, tokens=400), None),
    ("wse3", 1, "tiny-gemma2", pa.Workload(context=3, tokens=200, batch=3), None),
    ("wse3", 6, "llama-3.1-70b", pa.Workload(context=500, tokens=300, batch=6), None),  # links
    ("wse3", 4, "llama-3.1-70b", pa.Workload(context=500, tokens=300), None),  # one micro-batch
    ("wse2", 1, "tiny-qwen3", pa.Workload(context=7, tokens=90, step_tokens=3), None),
    ("groq-tsp", "auto", "llama-3.1-8b", pa.Workload(context=950, tokens=150), None),
    ("groq-tsp", 16, "tiny-gemma3", pa.Workload(context=1, tokens=300, batch=4), None),
    pytest.param(
        "groq-tsp",
        "auto",
        "llama-2-70b",
        pa.Workload(tokens=200, batch=3, weights="int8"),
        None,
        marks=pytest.mark.slow,
    ),
    ("groq-tsp", 1, "tiny-llama", pa.Workload(context=60, tokens=200, step_tokens=2), None),
    # routed experts: each step's own routing, drawn for all steps at once
    ("h100", 1, "tiny-mixtral", pa.Workload(context=5, tokens=60, batch=3), QUIET_HOST),
    (
        "h100",
        2,
        "tiny-deepseek-v2",
        pa.Workload(tokens=40, batch=4, router="zipf:1.2"),
        {**QUIET_HOST, "expert_layout": "tp"},
    ),
    (
        "h100",
        8,
        "tiny-deepseek-v3",
        pa.Workload(tokens=40, batch=5, step_tokens=2),
        {**QUIET_HOST, "expert_layout": "tp"},
    ),
    ("wse3", 1, "tiny-mixtral", pa.Workload(context=9, tokens=80, batch=4), None),
    ("wse3", 2, "tiny-llama4", pa.Workload(tokens=60, batch=5, router="zipf:2"), None),
    (
        "groq-tsp",
        8,
        "tiny-mixtral",
        pa.Workload(context=3, tokens=60, batch=16, router="zipf:1.5"),
        None,
    ),  # fmt: skip
    ("groq-tsp", "auto", "tiny-deepseek-v3", pa.Workload(tokens=50, batch=16), None),
    # expert parallelism: each step's slowest GPU / busiest chip from its rows' expert ids
    ("h100", 4, "tiny-mixtral", pa.Workload(context=5, tokens=60, batch=8), {**QUIET_HOST, **EP}),
    (
        "h100",
        8,
        "tiny-deepseek-v3",
        pa.Workload(tokens=40, batch=5, step_tokens=2, router="zipf:1.2"),
        {**QUIET_HOST, **EP},
    ),
    (
        "groq-tsp",
        "auto",
        "tiny-mixtral",
        pa.Workload(context=3, tokens=60, batch=16, router="zipf:1.5"),
        LPU_EP_STAGES,
    ),
    ("groq-tsp", "auto", "tiny-deepseek-v3", pa.Workload(tokens=40, batch=9), LPU_EP_STAGES),
]


def _system(name, units, sets):
    return pa.load_system(name, units=units, overrides=sets)


@pytest.mark.parametrize("system,units,model,work,sets", CASES)
def test_steps_at_once_equal_steps_one_by_one(system, units, model, work, sets):
    cfg, sysm = pa.load_model(model), _system(system, units, sets)
    plc = pa.place(cfg, sysm, work)
    engine = engine_module(sysm.kind)
    passes = driver.MicroBatchPasses(engine, build_graph(cfg, work), sysm, plc)
    contexts = work.context + np.arange(work.tokens, dtype=np.int64)
    at_once = passes.steps_over(contexts, np.arange(work.tokens))
    assert at_once is not None, "this pass model times steps at once"
    one_by_one = [passes.step(int(c), False, i)[0] for i, c in enumerate(contexts)]
    assert at_once.tolist() == one_by_one
    assert len(set(one_by_one)) > 1, "the case crosses a context where the step's cost changes"
    # and through emulate: every step's events recorded (one by one) or only the ends'
    every = pa.emulate(cfg, sysm, plc, work, trace_steps="all")
    ends = pa.emulate(cfg, sysm, plc, work)
    assert list(ends.step_cycles) == list(every.step_cycles) == one_by_one
    # routed runs: the bound's fewest experts over the run are the same either way
    assert list(ends.lower_bound_cycles) == list(every.lower_bound_cycles)


def test_routed_steps_need_their_places_in_the_run():
    work = pa.Workload(context=4, tokens=3)
    model, sysm = pa.load_model("tiny-mixtral"), _system("h100", 1, None)
    passes = driver.MicroBatchPasses(engine_module("gpu"), build_graph(model, work), sysm,
                                     pa.place(model, sysm, work))  # fmt: skip
    assert passes.steps_over(np.arange(4, 7)) is None  # which routing each step draws
    assert passes.steps_over(np.arange(4, 7), np.arange(3)) is not None


def test_steps_that_launch_eagerly_are_timed_one_by_one():
    work = pa.Workload(context=4, tokens=3)
    model, sysm = pa.load_model("tiny-llama"), _system("h100", 1, {"launch_mode": "eager"})
    passes = driver.MicroBatchPasses(engine_module("gpu"), build_graph(model, work), sysm,
                                     pa.place(model, sysm, work))  # fmt: skip
    assert passes.steps_over(np.arange(4, 7), np.arange(3)) is None


@pytest.mark.parametrize(
    "system,model,sets",
    [("h100", "tiny-mixtral", {**QUIET_HOST, **EP}), ("groq-tsp", "tiny-mixtral", LPU_EP_STAGES)],
)
def test_expert_ids_drawn_a_chunk_of_steps_at_a_time(monkeypatch, system, model, sets):
    # the rows' expert ids of a long run are drawn in chunks of steps (a run's would not fit):
    # chunks of a few steps give every step the cycles it has alone
    work = pa.Workload(context=3, tokens=40, batch=16, router="zipf:1.2")
    cfg, sysm = pa.load_model(model), _system(system, "auto", sets)
    plc = pa.place(cfg, sysm, work)
    passes = driver.MicroBatchPasses(engine_module(sysm.kind), build_graph(cfg, work), sysm, plc)
    contexts = work.context + np.arange(work.tokens, dtype=np.int64)
    one_by_one = [passes.step(int(c), False, i)[0] for i, c in enumerate(contexts)]
    picks_a_step = 16 * len(passes.models[passes.first].graph.moe_layers) * cfg.top_k
    monkeypatch.setattr(driver, "CHUNK_PICKS", 7 * picks_a_step)  # chunks of 7 steps
    assert passes.steps_over(contexts, np.arange(work.tokens)).tolist() == one_by_one
    assert len(set(one_by_one)) > 1


def test_cycles_of_an_array_are_the_scalar_rule_bit_for_bit():
    from pyaccel.units import cycles, cycles_over

    rng = np.random.default_rng(11)
    clock = 1.755e9
    whole = np.arange(1, 2000) / clock  # exact cycle counts, where round(n, 6) matters
    seconds = np.concatenate([rng.uniform(0, 1e-3, 20000), whole, whole * (1 + 1e-15),
                              [0.0, -1.0, 5e-7 / clock]])  # fmt: skip
    assert cycles_over(seconds, clock).tolist() == [cycles(float(s), clock) for s in seconds]


def test_pipeline_interval_of_many_steps_is_each_steps():
    from pyaccel.sim.pipeline import pipeline_cycles, pipeline_cycles_over

    rng = np.random.default_rng(5)
    for sizes in ([3], [2, 2, 1], [4, 4, 4, 3, 3]):
        per = {s: rng.integers(0, 1000, (20, 4)) for s in set(sizes)}
        each = [pipeline_cycles({s: per[s][i].tolist() for s in per}, sizes) for i in range(20)]
        assert pipeline_cycles_over(per, sizes).tolist() == each


def test_unique_rows_of_repeating_steps_are_numpys():
    from pyaccel.sim.contract import unique_rows

    rng = np.random.default_rng(3)
    for n in (0, 1, 7, 200):
        rows = np.repeat(rng.integers(0, 3, (n, 4)), rng.integers(1, 5, n), axis=0)
        got, which = unique_rows(rows)
        want, inverse = np.unique(rows, axis=0, return_inverse=True)
        assert np.array_equal(got, want) and np.array_equal(which, inverse.ravel())
        assert np.array_equal(got[which], rows)


def test_lpu_stage_plans_of_many_steps_are_each_steps():
    # expert parallel stages: each distinct set of a stage's busiest chips planned once gives
    # every step the plans it has alone
    work = pa.Workload(context=3, tokens=4, batch=16, router="zipf:1.2")
    sets = {**LPU_EP_STAGES, "sram_bytes": 200_000}  # 3 stages of 2 chips
    cfg, sysm = pa.load_model("tiny-mixtral"), _system("groq-tsp", "auto", sets)
    passes = driver.MicroBatchPasses(engine_module(sysm.kind), build_graph(cfg, work), sysm,
                                     pa.place(cfg, sysm, work))  # fmt: skip
    sim = passes.models[passes.first]
    ep, holes = sim._ep, sim._expert_holes
    assert len(holes) > 1 and sum(map(bool, holes)) > 1, "the case has several MoE stages"
    rng = np.random.default_rng(3)
    rows = sim.graph.workload.rows
    picks = rng.integers(0, cfg.n_experts, size=(30, rows, len(ep.layers), cfg.top_k))
    busiest = ep.busiest_over(picks)
    widths = [len(chips) for chips, _ in sim.stages]
    index, plans = ep.stage_plans_over(holes, widths, busiest)
    assert any(len(p) > 1 for p in plans), "the steps' routing differs"
    for t in range(len(busiest)):
        for s, stage_holes in enumerate(holes):
            assert plans[s][index[t, s]] == ep.stage_plans(stage_holes, widths[s], busiest[t])
