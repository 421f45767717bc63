"""ASIC (hardwired-weight) engine: golden cycles by hand, bounds, determinism, capacity, etching."""

from __future__ import annotations

import json
import math
import tomllib
from importlib import resources

import numpy as np
import pytest

import pyaccel as pa
from pyaccel import kernels
from pyaccel.emulation import emulate
from pyaccel.errors import CapacityError, ConfigError, PlacementError
from pyaccel.kernels import reference_asic
from pyaccel.place.kinds import asic_die as asic_design
from pyaccel.sim.asic import engine as asic
from pyaccel.sim.contract import StepShape

HC1 = "taalas-hc1"


def _run(model, work, etch=False, units="auto", sets=None):
    cfg = pa.load_model(model)
    system = pa.load_system(HC1, units=units, overrides=sets, etch=etch)
    plc = pa.place(cfg, system, work)
    return plc, emulate(cfg, system, plc, work)


# --- the pipeline kernel: a 3-stage pipeline with two users, by hand ---------------------------


def test_golden_three_stage_pipeline_two_users():
    # Stages busy 3, 5, 2 cycles per token; 1, 1, 0 cycles of latency after them.
    occ = np.array([[3, 5, 2], [3, 5, 2]], dtype=np.int64)
    lat = np.array([1, 1, 0], dtype=np.int64)
    record = np.array([True, True])
    # step 0, user 0: s0 [0,3) ->4; s1 [4,9) ->10; s2 [10,12) -> finish 12
    # step 0, user 1: s0 [3,6) ->7; s1 waits for user 0: [9,14) ->15; s2 [15,17) -> finish 17
    # step 1, user 0 (ready 12): s0 [12,15) ->16; s1 [16,21) ->22; s2 [22,24) -> finish 24
    # step 1, user 1 (ready 17): s0 [17,20) ->21; s1 [21,26) ->27; s2 [27,29) -> finish 29
    for backend in kernels.available_backends():
        try:
            fn = kernels.get("asic_pipeline", backend)
        except kernels.KernelBuildError:
            continue
        finish, starts = fn(occ, lat, np.arange(3), 2, record)
        assert finish.tolist() == [[12, 17], [24, 29]]
        assert starts[0].tolist() == [[0, 4, 10], [3, 9, 15]]
        assert starts[1].tolist() == [[12, 16, 22], [17, 21, 27]]


def test_golden_shared_unit_waits():
    # stages 0 and 2 share one unit (e.g. a die's chip link); one user, one step:
    # s0 [0,4) ->4; s1 [4,6) ->6; s2 needs the unit s0 freed at 4: [6,10) -> finish 10.
    # A second user: s0 can only start when the shared unit is free again at 10 -> [10,14),
    # s1 [14,16), s2 [16,20) -> finish 20 (no back-filling into [4,6)).
    occ = np.array([[4, 2, 4]], dtype=np.int64)
    finish, _ = reference_asic.asic_pipeline(
        occ, np.zeros(3, dtype=np.int64), np.array([0, 1, 0]), 2, np.array([False])
    )
    assert finish.tolist() == [[10, 20]]


def test_golden_stage_taking_two_units_at_once():
    # stage 0 holds units 0 and 1 together (a gather over two dies' links), stage 1 unit 1
    # (die 1's hop); two users: user 0 s0 [0,2), s1 [2,5) -> 5; user 1 s0 needs unit 1 free
    # at 5: [5,7), s1 [7,10) -> 10. Stage 0 on unit 0 alone lets user 1 in at 2 -> 8.
    occ = np.array([[2, 3]], dtype=np.int64)
    lat, rec = np.zeros(2, dtype=np.int64), np.array([False])
    for backend in kernels.available_backends():
        fn = kernels.get("asic_pipeline", backend)
        finish, _ = fn(occ, lat, np.array([[0, 1], [1, -1]]), 2, rec)
        assert finish.tolist() == [[5, 10]]
        finish, _ = fn(occ, lat, np.array([0, 1]), 2, rec)
        assert finish.tolist() == [[5, 8]]
        with pytest.raises(ValueError, match="res"):
            fn(occ, lat, np.array([[-1, 1], [1, -1]]), 2, rec)  # no first unit


def test_golden_rows_of_one_sequence_wait_for_its_last():
    # one sequence verifying 2 tokens (group 2) on the 3-stage pipeline above, two steps:
    # step 0, row 0: finish 12; row 1: s0 [3,6) ->7; s1 [9,14) ->15; s2 [15,17) -> finish 17
    # step 1: both rows wait for the sequence's last row (17), not their own (12 and 17):
    #   row 0: s0 [17,20) ->21; s1 [21,26) ->27; s2 [27,29) -> 29
    #   row 1: s0 [20,23) ->24; s1 [26,31) ->32; s2 [32,34) -> 34
    # (occ has a row a position: 2 steps and the group's second row, the same at each here)
    occ = np.array([[3, 5, 2], [3, 5, 2], [3, 5, 2]], dtype=np.int64)
    lat = np.array([1, 1, 0], dtype=np.int64)
    for backend in kernels.available_backends():
        fn = kernels.get("asic_pipeline", backend)
        finish, _ = fn(occ, lat, np.arange(3), 2, np.array([False, False]), 2)
        assert finish.tolist() == [[12, 17], [29, 34]]
        with pytest.raises(ValueError, match="occ has 2 positions; expected 3"):
            fn(occ[:2], lat, np.arange(3), 2, np.array([False, False]), 2)
    with pytest.raises(ValueError, match="group = 2"):
        reference_asic.asic_pipeline(occ, lat, np.arange(3), 3, np.array([False, False]), 2)


def test_golden_each_row_of_a_group_is_busy_at_its_own_position():
    # one sequence's 2 rows a step (group 2), 2 steps; stage 1 (attention) grows by 2 cycles a
    # position (one cached token more): positions 0, 1, 2 busy 3, 5 / 7 / 9, then 2; latencies
    # 1, 1, 0. Step t's row j is at position t + j:
    # step 0, row 0 (pos 0): s0 [0,3) ->4; s1 [4,9) ->10; s2 [10,12) -> 12
    # step 0, row 1 (pos 1): s0 [3,6) ->7; s1 waits for row 0: [9,16) ->17; s2 [17,19) -> 19
    # step 1, row 0 (pos 1): ready 19: s0 [19,22) ->23; s1 [23,30) ->31; s2 [31,33) -> 33
    # step 1, row 1 (pos 2): s0 [22,25) ->26; s1 waits: [30,39) ->40; s2 [40,42) -> 42
    # (every row at its step's own position instead would give [[12, 17], [31, 38]])
    occ = (np.array([3, 0, 2]), np.array([[5], [7], [9]]), np.array([1]))
    lat = np.array([1, 1, 0], dtype=np.int64)
    for backend in kernels.available_backends():
        fn = kernels.get("asic_pipeline", backend)
        finish, starts = fn(occ, lat, np.arange(3), 2, np.array([True, False]), 2)
        assert finish.tolist() == [[12, 19], [33, 42]]
        assert starts[0].tolist() == [[0, 4, 10], [3, 9, 17]]


def test_golden_only_the_sampled_row_takes_the_tail_stages():
    # one sequence's prompt chunk of 2 rows (group 2) through stages busy 2, 2, 6 (the last,
    # its LM head, the slowest), no latencies, one step.
    # every row takes every stage: row 0 s0 [0,2) s1 [2,4) s2 [4,10) -> 10; row 1 s0 [2,4)
    #   s1 [4,6), s2 waits for row 0: [10,16) -> 16
    # tail = 2 (only the sampled, last row takes s2): row 0 leaves after s1 at 4; row 1
    #   s0 [2,4) s1 [4,6) s2 [6,12) -> 12; row 0's start at the stage it skips is -1
    occ = np.array([[2, 2, 6], [2, 2, 6]], dtype=np.int64)  # a row a position (2 rows)
    lat, rec = np.zeros(3, dtype=np.int64), np.array([True])
    for backend in kernels.available_backends():
        fn = kernels.get("asic_pipeline", backend)
        finish, _ = fn(occ, lat, np.arange(3), 2, rec, 2)
        assert finish.tolist() == [[10, 16]]
        finish, starts = fn(occ, lat, np.arange(3), 2, rec, 2, None, 2)
        assert finish.tolist() == [[4, 12]]
        assert starts[0].tolist() == [[0, 2, -1], [2, 4, 6]]
        with pytest.raises(ValueError, match="tail = 4"):
            fn(occ, lat, np.arange(3), 2, rec, 2, None, 4)


def test_compact_occupancy_is_the_full_matrix_on_every_backend():
    # stages 1 and 3 change with the step (attention), the others never do
    rng = np.random.default_rng(3)
    base = np.array([4, 0, 2, 0, 7], dtype=np.int64)
    cols = rng.integers(1, 9, (6, 2)).astype(np.int64)
    compact = (base, cols, np.array([3, 1]))
    full = reference_asic.full_occupancy(compact)
    assert (
        full[:, [3, 1]].tolist() == cols.tolist() and (full[:, [0, 2, 4]] == base[[0, 2, 4]]).all()
    )
    lat, res, rec = rng.integers(0, 3, 5), np.array([0, 1, 0, 2, 1]), rng.random(6) < 0.5
    for backend in kernels.available_backends():
        fn = kernels.get("asic_pipeline", backend)
        got, want = fn(compact, lat, res, 3, rec), fn(full, lat, res, 3, rec)
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
        with pytest.raises(ValueError, match="col_stage names a stage twice"):
            fn((base, cols, np.array([1, 1])), lat, res, 3, rec)
        with pytest.raises(ValueError, match=r"col_stage\[1\] = 5"):
            fn((base, cols, np.array([1, 5])), lat, res, 3, rec)


def test_pipeline_twins_match_exactly():
    rng = np.random.default_rng(5)
    fasts = [kernels.get("asic_pipeline", b) for b in kernels.available_backends() if b != "numpy"]
    for _ in range(30):
        steps, stages, users = rng.integers(1, 6), rng.integers(1, 9), int(rng.integers(1, 5))
        group = int(rng.integers(1, 4))
        occ = rng.integers(0, 20, (steps + group - 1, stages)).astype(np.int64)  # positions
        lat = rng.integers(0, 6, stages).astype(np.int64)
        record = rng.random(steps) < 0.5
        res = rng.integers(0, stages, stages).astype(np.int64)  # some stages share hardware
        if rng.random() < 0.5:  # stages taking several units at once (-1: none)
            res = np.column_stack([res, rng.integers(-1, stages, (stages, 2))])
        tail = int(rng.integers(0, stages + 1)) if rng.random() < 0.5 else None
        f1, s1 = reference_asic.asic_pipeline(occ, lat, res, users * group, record, group,
                                              None, tail)  # fmt: skip
        for fast in fasts:
            f2, s2 = fast(occ, lat, res, users * group, record, group, None, tail)
            assert np.array_equal(f1, f2) and np.array_equal(s1, s2)


# --- the engine on a tiny etched model, by hand ------------------------------------------------


def test_golden_tiny_llama_two_users():
    # tiny-llama (hidden 64, 4 heads / 2 KV heads of 16, ffn 160, vocab 256, 4 layers) etched at
    # hc1 on one die; R = 512 cells per bitline. Every GEMV's K inputs fit one lane (K < R / c), so
    # a lane reads K x c rows and no adder tree joins lanes (asic_rom):
    #   qkv 6-bit (2 cells), K 64 -> 128 reads; o 6-bit -> 128; gate_up 3-bit (1 cell) -> 64;
    #   down 3-bit, K 160 -> 160; head 6-bit -> 128.
    # Latencies: GEMV 4 + tree 0 + register 1 = 5; fused op 4 + 1 = 5; norm + log2(64) = 11;
    #   sampling 4 + log2(256) + 1 = 13 (one tree level a cycle); all fused ops busy 1 cycle.
    # Attention at context 16: (16 + 1) x 64 elems x 2 B K/V over ~5,200 banks x 16 B -> 1 cycle
    #   busy, latency 4 + ceil(log2(17)) + 1 = 10.
    # Layer: norm 12 + qkv 133 + rope 6 + attn 11 + o 133 + res 6 + norm 12 + gate_up 69
    #   + act 6 + down 165 + res 6 = 559; pass = embed 6 + 4 x 559 + final norm 12 + head 133
    #   + sampling 14 = 2401.
    # User 1 queues behind user 0 at each block and ends 160 behind (down, the longest busy
    #   block): step 0 = mean(2401, 2561) = 2481. Step 1: user 1 re-enters 160 behind, more
    #   than any block's busy time, so both gaps are 2401.
    _, tr = _run("tiny-llama", pa.Workload(batch=2, context=16, tokens=2), etch=True)
    assert tr.units == 1
    assert tr.step_cycles.tolist() == [2481, 2401]


def test_event_counts_match_simulated_stages():
    work = pa.Workload(batch=2, context=16, tokens=3)
    plc, tr = _run("tiny-llama", work, etch=True)
    graph = pa.build_graph(pa.load_model("tiny-llama"), work, native_format="hc1")
    stages, _ = asic.build_stages(graph, pa.load_system(HC1).spec, plc)
    with_latency = sum(1 for s in stages if s.lat)
    # two recorded steps (first and last) x two users x (busy + latency events)
    assert tr.n_events == 2 * 2 * (len(stages) + with_latency)
    assert set(tr.events["resource"]) <= set(asic.RESOURCES)


# --- the preset's ranges: each parameter moves the speed the way its mechanism says -----------


def _preset_ranges() -> dict:
    text = (resources.files("pyaccel.hw") / "presets" / f"{HC1}.toml").read_text()
    params = tomllib.loads(text)["params"]
    # kv_sram_bytes = 0 is derived from the others (its low/high document that derivation)
    return {
        k: (v["low"], v["high"]) for k, v in params.items() if "low" in v and k != "kv_sram_bytes"
    }


def _tok_s(sets: dict) -> float:
    # the published row's workload: 1k tokens in, 1k out, one user
    work = pa.Workload(batch=1, context=1024, tokens=1024)
    return _run("llama-3.1-8b", work, sets=sets)[1].tokens_per_s_per_user


# Which way each ranged parameter of the preset must move the speed, one at a time with the KV
# SRAM pinned at its nominal derived size: a faster clock is faster; more rows per bitline means
# fewer ROM lanes and more row reads per block; longer pipeline latencies add to every token's
# pass; wider SRAM ports and smaller banks (more ports) never slow attention; lane cost and
# lane share only resize the SRAM, which is pinned here, so they change nothing; more adder-tree
# levels a cycle shorten every GEMV's and reduction's drain.
DIRECTION = {
    "clock_hz": "faster",
    "rom_rows_per_bitline": "slower",
    "matmul_latency_cycles": "slower",
    "vector_latency_cycles": "slower",
    "fused_op_busy_cycles": "slower",
    "adder_tree_levels_per_cycle": "faster",
    "kv_sram_port_bytes": "not slower",
    "kv_sram_bank_bytes": "not faster",
    "lane_transistors": "same",
    "lane_logic_share": "same",
    "prefill_chunk_tokens": "same",  # the prompt's chunks: time to first token, not decode
}


def test_each_ranged_parameter_moves_the_speed_the_way_the_mechanism_says():
    ranges = _preset_ranges()
    assert set(ranges) == set(DIRECTION)
    p = pa.load_system(HC1).spec.params
    pinned = {"kv_sram_bytes": asic_design.kv_sram_bytes(p)}
    for name, (low, high) in ranges.items():
        at_low, at_high = _tok_s({**pinned, name: low}), _tok_s({**pinned, name: high})
        want = DIRECTION[name]
        ok = {"faster": at_high > at_low, "slower": at_high < at_low,
              "not slower": at_high >= at_low, "not faster": at_high <= at_low,
              "same": at_high == at_low}[want]  # fmt: skip
        assert ok, (name, want, at_low, at_high)


def test_published_speed_is_a_check():
    # The published claim (17,000 tok/s per user, 1k tokens in / 1k out; a public demo measured
    # 14,357) is a check, never an input. `pyaccel validate` emulates the row's workload: 1,024
    # decode steps from context 1024, their mean speed, the whole run's. It averages 11,239
    # tok/s: x1.513 under 17,000, just outside x1.5 (issue 17 asks x1.5; the derivation's
    # structure, not a tuned value, sets it), and within x1.3 of the demo's measurement. The
    # first steps alone (context 1024) are faster: within x1.5.
    from pyaccel.validate import read_table, validate_row

    table = resources.files("pyaccel.data").joinpath("published.csv").read_text()
    (row,) = [r for r in read_table(table, "published.csv") if r.system == HC1]
    assert (row.context, row.tokens) == (1024, 1024)
    whole = _tok_s({})
    assert validate_row(row).emulated_tok_s == whole
    assert 17_000 / 1.55 <= whole < 17_000 / 1.5 and 14_357 / 1.3 <= whole
    first = _run("llama-3.1-8b", pa.Workload(batch=1, context=1024, tokens=16))[1]
    assert 17_000 / 1.5 <= first.tokens_per_s_per_user <= 17_000 * 1.5


def test_derived_sram_follows_the_budget():
    p = pa.load_system(HC1).spec.params
    b = asic_design.etched_budget(p)
    # ROM cells (asic_rom): a 6-bit weight takes two 4-bit cells, a 3-bit weight one; scales,
    # norms and the bf16 embedding table pack at 4 bits a cell.
    h, f, kv, v, layers = 4096, 14336, 1024, 128256, 32
    attn = (h * (h + 2 * kv) + h * h) * 2 + (h + 2 * kv + h) * 16 // 4
    mlp = 3 * h * f + (2 * f + h) * 16 // 4
    per_layer = attn + mlp + 2 * h * 16 // 4
    head, embed, final = v * h * 2 + v * 16 // 4, v * h * 16 // 4, h * 16 // 4
    cells = layers * per_layer + head + embed + final
    assert cells == 11_480_601_600 and b.rom_transistors == cells
    # lanes: each output channel's K inputs over R // c inputs a lane (R = 512): q, k, v, o at
    # 6 bits hold 256 inputs a lane (16 lanes a channel), gate/up 512 (8), down 28; head 16
    lanes = layers * ((h + 2 * kv + h) * 16 + 2 * f * 8 + h * 28) + v * 16
    assert b.lanes == lanes == 18_305_024
    total = b.rom_transistors + b.logic_transistors + b.kv_sram_bytes * 8 * 6
    assert b.logic_transistors == pytest.approx(lanes * 800 / 0.6)
    assert total <= p.transistors < total + 48  # the remainder is all SRAM (floor to a byte)
    assert asic_design.kv_sram_bytes(p) == 356_514_577
    # and it fits the die's area: 356.5 MB x 8 x 0.0386 um^2 = ~110 mm^2 of 815 mm^2
    assert b.sram_area_mm2 == pytest.approx(110.1, abs=0.1) and b.sram_area_mm2 < p.die_area_mm2


def test_mixed_precision_sets_rom_bits_and_dies():
    # hc1: attention projections and LM head at 6 bits, MLP at 3, 16-bit scale per row
    p = pa.load_system(HC1).spec.params
    b = asic_design.etched_budget(p)
    h, f, kv, v, layers = 4096, 14336, 1024, 128256, 32
    attn_bits = (h * (h + 2 * kv) + h * h) * 6 + (h + 2 * kv + h) * 16
    mlp_bits = 3 * h * f * 3 + (2 * f + h) * 16
    head_bits, embed_bits, norm_bits = v * h * 6 + v * 16, v * h * 16, (2 * layers + 1) * h * 16
    assert b.rom_bits == layers * (attn_bits + mlp_bits) + head_bits + embed_bits + norm_bits
    # fp8 takes two 4-bit cells a weight everywhere, more ROM than the die holds: two dies;
    # mxfp4's 4-bit values take one cell each, fewer than hc1's 6-bit halves: one die
    plc, _ = _run("llama-3.1-8b", pa.Workload(tokens=2, weights="fp8"), etch=True)
    assert plc.n_units == 2
    plc, _ = _run("llama-3.1-8b", pa.Workload(tokens=2, weights="mxfp4"), etch=True)
    assert plc.n_units == 1


def test_long_context_attention_bounds_the_pipeline():
    # fp8 K/V at context 5,000: 5,000 x 2 x 8 x 128 B = 10.2 MB per layer per token over 654
    # banks x 16 B = 10.4 KB/cycle -> ~980 cycles, more than a GEMV's 512 row reads
    plc, tr = _run("llama-3.1-8b", pa.Workload(context=5000, tokens=2, kv="fp8"))
    assert tr.meta["bottleneck_stage"].endswith("attention")
    short = _run("llama-3.1-8b", pa.Workload(context=256, tokens=2, kv="fp8"))[1]
    assert short.meta["bottleneck_stage"].endswith("proj")


@pytest.mark.parametrize(
    "model,work,etch",
    [
        ("llama-3.1-8b", pa.Workload(context=64, tokens=40, kv="fp8"), False),
        ("gpt-oss-120b", pa.Workload(context=100, tokens=30), True),  # sliding windows
        ("tiny-deepseek-v3", pa.Workload(batch=2, context=5, tokens=20, kv="int8"), True),
    ],
)
def test_vectorised_attention_matches_per_step_costs(model, work, etch):
    cfg = pa.load_model(model)
    system = pa.load_system(HC1, units="auto", etch=etch)
    plc = pa.place(cfg, system, work)
    graph = pa.build_graph(cfg, work, None, "hc1")
    pipe = asic.AsicPipeline(graph, system, plc)
    occ = reference_asic.full_occupancy(
        pipe.occupancy(StepShape(graph, work.context, pipe.group_key), work.tokens)
    )
    cost = asic.AsicCost(system.spec, graph)
    for idx, layer, dies, banks in pipe.attn:
        per_step = [cost.attention(layer, work.context + t, dies, banks).occ
                    for t in range(work.tokens)]  # fmt: skip
        assert occ[:, idx].tolist() == per_step


# --- invariants --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model,work,etch",
    [
        ("llama-3.1-8b", pa.Workload(batch=1, context=512, tokens=4), False),
        ("llama-3.1-8b", pa.Workload(batch=2, context=1024, tokens=4), False),
        ("tiny-llama", pa.Workload(batch=4, context=100, tokens=4), True),
        ("tiny-mixtral", pa.Workload(batch=2, context=64, tokens=3), True),
        ("tiny-deepseek-v3", pa.Workload(batch=2, context=64, tokens=3), True),
    ],
)
def test_emulated_at_least_lower_bound(model, work, etch):
    _, tr = _run(model, work, etch=etch)
    assert np.all(tr.step_cycles >= tr.lower_bound_cycles)


def test_engine_same_cycles_on_every_kernel_backend(monkeypatch):
    work = pa.Workload(batch=3, context=40, tokens=3)
    runs = []
    for backend in kernels.available_backends():
        monkeypatch.setenv("PYACCEL_BACKEND", backend)
        runs.append(_run("tiny-llama", work, etch=True, units=2)[1])
    for other in runs[1:]:
        assert np.array_equal(runs[0].step_cycles, other.step_cycles)
        assert np.array_equal(runs[0].events["start"], other.events["start"])


def test_longer_context_is_slower():
    short = _run("llama-3.1-8b", pa.Workload(context=512, tokens=8, kv="fp8"))[1]
    long = _run("llama-3.1-8b", pa.Workload(context=4096, tokens=8, kv="fp8"))[1]
    assert long.step_time_s > short.step_time_s


def test_batch_fills_pipeline_per_user_speed_held():
    one = _run("llama-3.1-8b", pa.Workload(batch=1, context=256, tokens=4))[1]
    three = _run("llama-3.1-8b", pa.Workload(batch=3, context=256, tokens=4))[1]
    # three users fit in a ~78k-cycle pass whose slowest block is busy ~512 cycles per token
    assert three.tokens_per_s == pytest.approx(3 * one.tokens_per_s, rel=0.02)


@pytest.mark.parametrize("resource", list(asic.WHAT_IF))
def test_faster_resource_never_slows(resource):
    from pyaccel.emulation import what_if_system

    cfg = pa.load_model("llama-3.1-8b")
    system = pa.load_system(HC1)
    work = pa.Workload(batch=2, context=512, tokens=3)
    plc = pa.place(cfg, system, work)
    base = emulate(cfg, system, plc, work)
    faster = what_if_system(system, resource)
    fast = emulate(cfg, faster, pa.place(cfg, faster, work), work)
    assert np.all(fast.step_cycles <= base.step_cycles)


# --- capacity ----------------------------------------------------------------------------------


def test_context_beyond_sram_says_tokens_fit():
    with pytest.raises(CapacityError) as exc:
        _run("llama-3.1-8b", pa.Workload(context=8192, tokens=128))
    msg = str(exc.value)
    assert "each user fits" in msg and "tokens" in msg and "user(s) fit" in msg
    fit = int(msg.split("each user fits ")[1].split(" ")[0])
    # 343 MB of KV at 128 KiB per token (bf16, 32 layers x 8 KV heads x 128 x 2 x 2 B)
    avail = asic_design.kv_sram_bytes(pa.load_system(HC1).spec.params) - 13_631_488
    assert fit == avail // (32 * 8 * 128 * 2 * 2)


def test_batch_beyond_sram_says_users_fit():
    with pytest.raises(CapacityError) as exc:
        _run("llama-3.1-8b", pa.Workload(batch=8, context=1024, tokens=128))
    # 342.9 MB for KV at 128 KiB a token: 2,615 tokens, two users of 1,152
    assert "at 1152 tokens 2 user(s) fit" in str(exc.value)


def _cli(*args):
    from typer.testing import CliRunner

    from pyaccel.cli import app

    return CliRunner().invoke(app, ["run", "--system", HC1, *args])


def test_cli_capacity_error_exits_2():
    result = _cli("--model", "llama-3.1-8b", "--context", "8192", "--json")
    assert result.exit_code == 2
    err = result.stderr.strip()
    assert err.startswith("error:") and "each user fits" in err and len(err.splitlines()) == 1


def test_cli_70b_needs_etch_then_reports_dies():
    result = _cli("--model", "llama-3.1-70b", "--tokens", "2", "--json")
    assert result.exit_code == 2 and "llama-3.1-8b" in result.stderr
    result = _cli("--model", "llama-3.1-70b", "--etch", "--tokens", "2", "--json")
    assert result.exit_code == 0
    rec = json.loads(result.stdout)
    assert rec["units"] == rec["layout"]["dies"] > 1 and rec["tokens_per_s_per_user"] > 0


# --- etching -----------------------------------------------------------------------------------


def test_other_model_without_etch_names_the_etched_model():
    with pytest.raises(PlacementError, match="etched with llama-3.1-8b"):
        _run("llama-3.1-70b", pa.Workload(tokens=2))


def test_other_format_without_etch_is_an_error():
    with pytest.raises(ConfigError, match=r"weights='mxfp4' needs new silicon; pass etch=True"):
        _run("llama-3.1-8b", pa.Workload(tokens=2, weights="mxfp4"))


def test_etch_70b_sizes_dies_and_runs():
    plc, tr = _run("llama-3.1-70b", pa.Workload(context=1024, tokens=4), etch=True)
    # ~33 GB of hc1 ROM at ~3.8 GB of this model per die
    assert 8 <= tr.units <= 11
    assert plc.layers_on(0)[0] == "embed" and "head" in plc.layers_on(tr.units - 1)
    assert tr.tokens_per_s_per_user > 0
    assert "chip_link" in set(tr.events["resource"])


def test_etch_tiny_model_one_die_and_same_model_one_die():
    plc, _ = _run("tiny-llama", pa.Workload(tokens=2), etch=True)
    assert plc.n_units == 1
    plc, _ = _run("llama-3.1-8b", pa.Workload(tokens=2), etch=True)
    assert plc.n_units == 1  # the budget derivation holds its own etched model


def test_etch_more_dies_never_lose_capacity():
    cfg = pa.load_model("llama-3.1-70b")
    work = pa.Workload(context=1024, tokens=4)
    fits = []
    for units in (9, 12, 20):
        system = pa.load_system(HC1, units=units, etch=True)
        plc = pa.place(cfg, system, work)
        fits.append(min(plc.capacity_bytes["kv_sram"] - plc.level_use(u)["kv_sram"]
                        for u in range(units)))  # fmt: skip
    assert fits == sorted(fits)


def test_etch_too_few_units_says_how_many_fit():
    with pytest.raises(PlacementError, match=r"units=\d+ would fit"):
        _run("llama-3.1-70b", pa.Workload(tokens=2), etch=True, units=2)


def test_layer_larger_than_a_die_spans_dies():
    # llama-3.1-405b's embedding (128,256 x 16,384 x 2 B = 4.2 GB) exceeds one die's ~3.7 GB
    cfg = pa.load_model("llama-3.1-405b")
    work = pa.Workload(context=1024, tokens=2)
    system = pa.load_system(HC1, units="auto", etch=True)
    plc = pa.place(cfg, system, work)
    assert len(plc.units_of("embed")) == 2
    assert sum(plc.slot("embed").weight_bytes) == plc.slot("embed").need_weight_bytes
    tr = emulate(cfg, system, plc, work)
    assert np.all(tr.step_cycles >= tr.lower_bound_cycles)
    assert any(op.endswith(".gather") for op in tr.events["op"])


def test_units_without_etch_is_one_chip():
    with pytest.raises(PlacementError, match="use units=1"):
        _run("llama-3.1-8b", pa.Workload(tokens=2), units=2)


def test_placement_round_trips_and_checks():
    plc, _ = _run("llama-3.1-8b", pa.Workload(tokens=2))
    back = pa.Placement.from_json(plc.to_json())
    assert back == plc
    graph = pa.build_graph(pa.load_model("llama-3.1-8b"), pa.Workload(tokens=2), None, "hc1")
    back.check(graph)
    need = graph.total_resident_weight_bytes + graph.total_resident_kv_bytes
    assert math.isclose(sum(plc.unit_bytes(0).values()), need)


def test_die_whose_sram_takes_every_transistor_is_refused():
    with pytest.raises(ConfigError, match="transistors = 9e.08: the die's SRAM"):
        _run("tiny-llama", pa.Workload(tokens=2), etch=True,
             sets={"transistors": 9e8, "kv_sram_bytes": 2e7})  # fmt: skip


def test_one_row_pipeline_is_the_kernel_for_one_row():
    # one row never waits (units shared by stages, several units at once, routed experts):
    # the sums give the kernel's finish and starts on every backend
    from pyaccel.sim.contract import StageOccupancy
    from pyaccel.sim.pipeline import one_row_pipeline

    rng = np.random.default_rng(8)
    for _ in range(25):
        steps, stages = int(rng.integers(1, 7)), int(rng.integers(1, 9))
        n_cols = int(rng.integers(0, stages + 1))
        occ = StageOccupancy(rng.integers(0, 30, stages), rng.integers(0, 30, (steps, n_cols)),
                             rng.permutation(stages)[:n_cols])  # fmt: skip
        lat = rng.integers(0, 6, stages)
        res = rng.integers(0, 3, stages)  # few units: stages share them
        if rng.random() < 0.5:
            res = np.column_stack([res, rng.integers(-1, 3, (stages, 2))])
        record = rng.random(steps) < 0.5
        layers, top_k, n_experts = 2, 2, 4
        ex_layer = np.where(rng.random(stages) < 0.4, rng.integers(0, layers, stages), -1)
        picks = np.stack([rng.permutation(n_experts)[:top_k] for _ in range(steps * layers)])
        routes = (ex_layer, picks.reshape(steps, 1, layers, top_k),
                  rng.integers(0, 3, (stages, n_experts)))  # fmt: skip
        want = one_row_pipeline(occ, lat, record)
        for backend in kernels.available_backends():
            fn = kernels.get("asic_pipeline", backend)
            for r in (None, routes):
                got = fn(occ, lat, res, 1, record, 1, r)
                assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
