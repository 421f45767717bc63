"""MoE routing (``--router``): the draws, trace files, the step graph's routed experts and what
each engine makes of a skew."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import pyaccel as pa
from pyaccel import kernels
from pyaccel.errors import ConfigError
from pyaccel.kernels import reference_asic
from pyaccel.results import run
from pyaccel.routing import Router, counts_of, parse
from pyaccel.sim.driver import router_of
from pyaccel.sim.inputs import run_graph

# --- the request -------------------------------------------------------------------------------


def test_parse_spellings_and_refusals(tmp_path):
    assert parse("uniform").text == "uniform"
    assert parse("zipf:1.20").text == "zipf:1.2" and parse("zipf:1.2").skew == 1.2
    trace = tmp_path / "r.npy"
    np.save(trace, np.zeros((1, 1, 1), dtype=np.int64))
    assert parse(str(trace)).kind == "trace"
    for bad, match in (("zipf", "exponent"), ("zipf:-1", "exponent"), ("zipf:x", "exponent"),
                       ("zipf:9", "exponent"), ("hot", "expected uniform"),
                       (str(tmp_path / "none.npy"), "no such")):  # fmt: skip
        with pytest.raises(ConfigError, match=match):
            parse(bad)
    with pytest.raises(ConfigError, match="^router='hot': expected uniform"):
        pa.Workload(router="hot")  # as the Python caller wrote it; the CLI says --router hot


# --- the draws ---------------------------------------------------------------------------------


def test_choices_are_distinct_seeded_and_per_step():
    r = Router(parse("zipf:1.2"), 16, 4, 3, seed=7)
    a = r.choices(5, 32)
    assert a.shape == (32, 3, 4) and a.min() >= 0 and a.max() < 16
    s = np.sort(a, axis=2)
    assert not (s[:, :, 1:] == s[:, :, :-1]).any()
    assert np.array_equal(a, Router(parse("zipf:1.2"), 16, 4, 3, seed=7).choices(5, 32))
    r.choices(4, 32)  # another step drawn first changes nothing
    assert np.array_equal(a, r.choices(5, 32))
    assert not np.array_equal(a, Router(parse("zipf:1.2"), 16, 4, 3, seed=8).choices(5, 32))


def test_successive_sampling_is_exact():
    # 3 experts of weights 1, 1/2, 1/3 (zipf:1), 2 a token: P(a then b) = w_a w_b / (1 - w_a)
    r = Router(parse("zipf:1"), 3, 2, 1, seed=0)
    r.perm[:] = np.arange(3)  # rank = expert id
    w = np.array([1, 1 / 2, 1 / 3]) / (1 + 1 / 2 + 1 / 3)
    picks = np.concatenate([r.choices(t, 2000) for t in range(20)])[:, 0, :]
    for a, b in itertools.permutations(range(3), 2):
        got = ((picks[:, 0] == a) & (picks[:, 1] == b)).mean()
        assert got == pytest.approx(w[a] * w[b] / (1 - w[a]), abs=0.01)


def test_steep_skew_still_draws_distinct_experts_quickly():
    # zipf:8 over 64 experts: the 8th pick has ~1e-7 of the weight; the direct renormalised
    # draw finishes what draw-and-skip cannot
    picks = Router(parse("zipf:8"), 64, 8, 2, seed=1).choices(0, 16)
    s = np.sort(picks, axis=2)
    assert not (s[:, :, 1:] == s[:, :, :-1]).any()


def test_skew_reads_fewer_distinct_experts_by_hand():
    # one expert a token (k = 1) among E = 4, B = 8 tokens a step: the expected distinct
    # experts are sum_e 1 - (1 - p_e)^B. Uniform: 4 (1 - (3/4)^8) = 3.5995; zipf:1 (weights
    # 12/25, 6/25, 4/25, 3/25): 0.9947 + 0.8887 + 0.7521 + 0.6404 = 3.2758.
    zipf_p = (12 / 25, 6 / 25, 4 / 25, 3 / 25)
    expect = {"uniform": 4 * (1 - 0.75**8), "zipf:1": sum(1 - (1 - p) ** 8 for p in zipf_p)}
    assert expect["uniform"] == pytest.approx(3.5995, abs=1e-4)
    assert expect["zipf:1"] == pytest.approx(3.2758, abs=1e-4)
    for name, want in expect.items():
        r = Router(parse(name), 4, 1, 1, seed=3)
        got = np.mean([(r.counts(t, 8, [(0, 8)])[0] > 0).sum() for t in range(4000)])
        assert got == pytest.approx(want, abs=0.03)


def test_counts_split_by_micro_batch():
    r = Router(parse("uniform"), 8, 2, 2, seed=0)
    whole, a, b = r.counts(3, 10, [(0, 10), (0, 6), (6, 10)])
    assert np.array_equal(whole, a + b) and whole.sum() == 10 * 2 * 2
    assert np.array_equal(whole, counts_of(r.choices(3, 10), 8))


# --- trace files -------------------------------------------------------------------------------


def test_trace_file_rows_in_order_and_wrapping(tmp_path):
    ids = np.array([[[0, 1]], [[2, 3]], [[1, 3]]], dtype=np.int32)  # 3 tokens, 1 layer, top 2
    path = tmp_path / "route.npy"
    np.save(path, ids)
    r = Router(parse(str(path)), 4, 2, 1, seed=0)
    # step 1 of 2-row steps takes trace tokens 2 and 3 mod 3 = 0
    assert r.choices(1, 2).tolist() == [[[1, 3]], [[0, 1]]]
    assert r.counts(1, 2, [(0, 2)])[0].tolist() == [[1, 2, 0, 1]]


@pytest.mark.parametrize("array, match", [
    (np.zeros((2, 2, 2), dtype=np.int64), "shape"),
    (np.array([[[0, 9]]]), "outside 0..3"),
    (np.array([[[2, 2]]]), "token 0 picks one expert twice in MoE layer 0"),
    (np.array([[[0.0, 1.0]]]), "dtype"),
])  # fmt: skip
def test_trace_file_refusals(tmp_path, array, match):
    path = tmp_path / "bad.npy"
    np.save(path, array)
    with pytest.raises(ConfigError, match=match):
        Router(parse(str(path)), 4, 2, 1, seed=0)


def test_trace_file_drives_a_run(tmp_path):
    cfg = pa.load_model("tiny-mixtral")
    moe = sum(not cfg.is_dense_layer(i) for i in range(cfg.n_layers))
    path = tmp_path / "one.npy"  # every token to experts 0 and 1
    np.save(path, np.tile(np.array([0, 1]), (5, moe, 1)))
    work = pa.Workload(batch=4, context=16, tokens=2, router=str(path))
    system = pa.load_system("h100", units=1)
    trace = pa.emulate(cfg, system, pa.place(cfg, system, work), work)
    one = _one_expert_bytes(run_graph(cfg, system, work), "L0.experts_gate_up_proj")
    ev = trace.to_dataframe()
    rows = ev[(ev.step == 0) & (ev.op == "L0.experts_gate_up_proj")]
    assert int(rows.bytes.sum()) == 2 * one


# --- the step graph and the engines ------------------------------------------------------------


def _one_expert_bytes(graph, name):
    op = next(o for o in graph.ops if o.name == name)
    return op.resident_weight_bytes // graph.n_experts


def test_routed_ops_read_the_routed_experts_only():
    g = pa.build_graph(pa.load_model("tiny-mixtral"), pa.Workload(batch=4), native_format="bf16")
    counts = np.zeros((len(g.moe_layers), g.n_experts), dtype=np.int64)
    counts[:, 1], counts[:, 2] = 5, 3  # 8 = 4 tokens x top 2, on experts 1 and 2
    routed = g.routed_ops(counts)
    up = routed["L0.experts_gate_up_proj"]
    assert up.weight_bytes == 2 * _one_expert_bytes(g, "L0.experts_gate_up_proj")
    assert up.hot_rows == 5 and routed["L0.experts_act"].hot_rows == 5
    assert up.m == 8 and up.flops == next(o for o in g.ops if o.name == up.name).flops


def test_gpu_trace_reads_exactly_the_routed_experts_bytes():
    cfg = pa.load_model("tiny-mixtral")
    work = pa.Workload(batch=8, context=32, tokens=3, router="zipf:1.2", seed=4)
    system = pa.load_system("h100", units=1)
    trace = pa.emulate(cfg, system, pa.place(cfg, system, work), work, trace_steps="all")
    graph = run_graph(cfg, system, work)
    router = router_of(graph)
    ev = trace.to_dataframe()
    for step in range(3):
        counts = router.counts(step, 8, [(0, 8)])[0]
        for i, layer in enumerate(graph.moe_layers):
            for kind in ("experts_gate_up_proj", "experts_down_proj"):
                name = f"L{layer}.{kind}"
                want = _one_expert_bytes(graph, name) * int((counts[i] > 0).sum())
                got = ev[(ev.step == step) & (ev.op == name)].bytes.sum()
                assert int(got) == want, (step, name)


def _step_s(system, model, router, units="auto", etch=False, batch=16):
    work = pa.Workload(batch=batch, context=256, tokens=3, router=router)
    return run(model, system, units, work, etch=etch).trace


def test_skew_on_gpu_reads_fewer_experts_and_is_faster():
    uni, zipf = (_step_s("h100", "mixtral-8x7b", r) for r in ("uniform", "zipf:1.2"))
    assert zipf.step_time_s < uni.step_time_s
    assert (zipf.step_cycles >= zipf.lower_bound_cycles).all()


def test_skew_on_wafer_loads_the_hot_experts_band_and_is_slower():
    uni, zipf = (_step_s("wse3", "mixtral-8x7b", r, units=4) for r in ("uniform", "zipf:1.2"))
    assert zipf.step_time_s > uni.step_time_s


def test_steep_skew_keeps_the_bound_below_every_step():
    trace = _step_s("h100", "mixtral-8x7b", "zipf:6")
    assert (trace.step_cycles >= trace.lower_bound_cycles).all()
    assert any(a.startswith("bound.routed_fewest") for a in trace.assumptions)
    assert any(a.startswith("router.zipf") for a in trace.assumptions)


# --- the ASIC pipeline kernel with expert blocks, by hand --------------------------------------


def test_golden_asic_rows_wait_only_for_their_own_expert():
    # stage 0 busy 2 (unit 0); stage 1 = two expert blocks (units 1, 2) busy 5; three rows of
    # one step routed to experts 0, 1, 0 (k = 1), no latencies:
    # row 0: s0 [0,2), expert 0 [2,7) -> 7; row 1: s0 [2,4), expert 1 [4,9) -> 9;
    # row 2: s0 [4,6), expert 0 is busy until 7: [7,12) -> 12.
    # One block for both experts would give row 1 [7,12) and row 2 [12,17).
    occ = np.array([[2, 5]], dtype=np.int64)
    lat = np.zeros(2, dtype=np.int64)
    picks = np.array([[[[0]], [[1]], [[0]]]], dtype=np.int64)  # [step, row, layer, k]
    routes = (np.array([-1, 0]), picks)
    for backend in kernels.available_backends():
        fn = kernels.get("asic_pipeline", backend)
        finish, starts = fn(occ, lat, np.array([0, 1]), 3, np.array([True]), 1, routes)
        assert finish.tolist() == [[7, 9, 12]]
        assert starts[0, :, 1].tolist() == [2, 4, 7]
    finish, _ = reference_asic.asic_pipeline(occ, lat, np.array([0, 1]), 3, np.array([False]))
    assert finish.tolist() == [[7, 12, 17]]


def test_asic_routed_twins_match():
    rng = np.random.default_rng(11)
    fasts = [kernels.get("asic_pipeline", b) for b in kernels.available_backends() if b != "numpy"]
    for _ in range(30):
        steps, stages, users = (
            int(rng.integers(1, 5)),
            int(rng.integers(2, 7)),
            int(rng.integers(1, 6)),
        )
        n_exp, top = int(rng.integers(2, 5)), 1 + int(rng.integers(0, 2))
        occ = rng.integers(0, 20, (steps, stages)).astype(np.int64)
        lat = rng.integers(0, 4, stages).astype(np.int64)
        ex = np.where(rng.random(stages) < 0.4, 0, -1)
        res = np.cumsum([0] + [n_exp if e >= 0 else 1 for e in ex[:-1]]).astype(np.int64)
        picks = np.stack([[rng.permutation(n_exp)[:top] for _ in range(users)]
                          for _ in range(steps)])[:, :, None, :]  # fmt: skip
        record = rng.random(steps) < 0.5
        f1, s1 = reference_asic.asic_pipeline(occ, lat, res, users, record, 1, (ex, picks))
        for fast in fasts:
            f2, s2 = fast(occ, lat, res, users, record, 1, (ex, picks))
            assert np.array_equal(f1, f2) and np.array_equal(s1, s2)


def test_golden_asic_experts_sharing_a_unit_queue_on_it():
    # stage 0 busy 2 (unit 0); stage 1 busy 3 is routed, experts 0 and 1 on unit 1 (one die's
    # link), 2 and 3 on unit 2; rows routed to experts 0, 1, 2 (k = 1), no latencies:
    # row 0: s0 [0,2), unit 1 [2,5) -> 5; row 1: s0 [2,4), unit 1 busy until 5: [5,8) -> 8;
    # row 2: s0 [4,6), unit 2 [6,9) -> 9. A block per expert gives row 1 [4,7) -> 7.
    occ = np.array([[2, 3]], dtype=np.int64)
    lat = np.zeros(2, dtype=np.int64)
    picks = np.array([[[[0]], [[1]], [[2]]]], dtype=np.int64)
    ex_unit = np.array([[0, 0, 0, 0], [1, 1, 2, 2]], dtype=np.int64)
    res, rec = np.array([0, 1]), np.array([True])
    for backend in kernels.available_backends():
        fn = kernels.get("asic_pipeline", backend)
        finish, starts = fn(occ, lat, res, 3, rec, 1, (np.array([-1, 0]), picks, ex_unit))
        assert finish.tolist() == [[5, 8, 9]]
        assert starts[0, :, 1].tolist() == [2, 5, 6]
        finish, _ = fn(occ, lat, res, 3, rec, 1, (np.array([-1, 0]), picks))
        assert finish.tolist() == [[5, 7, 9]]
    # a row routed to experts 0 and 1 (k = 2) takes unit 1 once: [2,5) -> 5
    both = np.array([[[[0, 1]]]], dtype=np.int64)
    finish, _ = reference_asic.asic_pipeline(occ, lat, res, 1, rec, 1,
                                             (np.array([-1, 0]), both, ex_unit))  # fmt: skip
    assert finish.tolist() == [[5]]


def test_asic_routed_twins_match_on_shared_units():
    rng = np.random.default_rng(12)
    fasts = [kernels.get("asic_pipeline", b) for b in kernels.available_backends() if b != "numpy"]
    for _ in range(30):
        steps, stages, users = (int(x) for x in rng.integers(1, [5, 7, 6]) + [0, 1, 0])
        n_exp, top = int(rng.integers(2, 6)), 1 + int(rng.integers(0, 2))
        occ = rng.integers(0, 20, (steps, stages)).astype(np.int64)
        lat = rng.integers(0, 4, stages).astype(np.int64)
        ex = np.where(rng.random(stages) < 0.5, 0, -1)
        res = rng.integers(0, 4, stages).astype(np.int64)  # stages may share units too
        ex_unit = rng.integers(0, 6, (stages, n_exp)).astype(np.int64)
        picks = np.stack([[rng.permutation(n_exp)[:top] for _ in range(users)]
                          for _ in range(steps)])[:, :, None, :]  # fmt: skip
        record = rng.random(steps) < 0.5
        routes = (ex, picks, ex_unit)
        f1, s1 = reference_asic.asic_pipeline(occ, lat, res, users, record, 1, routes)
        for fast in fasts:
            f2, s2 = fast(occ, lat, res, users, record, 1, routes)
            assert np.array_equal(f1, f2) and np.array_equal(s1, s2)


@pytest.mark.parametrize("ex_unit,match", [
    (np.zeros((2, 1), dtype=np.int64), "ex_unit has shape"),
    (np.zeros((3, 4), dtype=np.int64), "ex_unit has shape"),
    (np.array([[0, 0, 0, 0], [1, -1, 2, 2]]), "ex_unit"),
])  # fmt: skip
def test_asic_routing_check_refuses_bad_expert_units(ex_unit, match):
    occ = np.array([[2, 3]], dtype=np.int64)
    picks = np.array([[[[0]], [[1]], [[2]]]], dtype=np.int64)
    for backend in kernels.available_backends():
        fn = kernels.get("asic_pipeline", backend)
        with pytest.raises(ValueError, match=match):
            fn(occ, np.zeros(2, dtype=np.int64), np.array([0, 1]), 3, np.array([False]), 1,
               (np.array([-1, 0]), picks, ex_unit))  # fmt: skip


def test_asic_routing_check_refuses_bad_picks():
    occ = np.array([[2, 5]], dtype=np.int64)
    with pytest.raises(ValueError, match="picks has shape"):
        reference_asic.asic_pipeline(occ, np.zeros(2, dtype=np.int64), np.array([0, 1]), 3,
                                     np.array([False]), 1,
                                     (np.array([-1, 0]), np.zeros((1, 2, 1, 1))))  # fmt: skip


# --- the command line --------------------------------------------------------------------------


def test_cli_router_option_and_its_error():
    import json

    from typer.testing import CliRunner

    from pyaccel.cli import app

    base = ["run", "--system", "h100", "--model", "tiny-mixtral", "--units", "1", "--batch", "8",
            "--tokens", "2", "--json"]  # fmt: skip
    out = {}
    for router in ("uniform", "zipf:2"):
        res = CliRunner().invoke(app, [*base, "--router", router])
        assert res.exit_code == 0, res.output
        out[router] = json.loads(res.stdout)
    assert any("--router zipf:2" in a for a in out["zipf:2"]["assumptions"])
    bad = CliRunner().invoke(app, [*base, "--router", "zipf:-1"])
    assert bad.exit_code != 0 and "error: --router zipf:-1: " in bad.output
