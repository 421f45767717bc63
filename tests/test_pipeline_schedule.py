"""The simulated micro-batch schedule over stages and the links between them (the wafer's
multi-wafer pipeline): by hand, against the closed form, and settled."""

import random

import numpy as np
import pytest

from pyaccel import kernels
from pyaccel.kernels import reference_pipeline
from pyaccel.sim.pipeline import (
    coalesced_windows,
    one_micro_batch_over,
    pipeline_cycles,
    pipeline_schedule,
)


def test_one_micro_batch_is_its_pass_with_the_crossings():
    # 3 stages of 10, 20, 30 cycles; crossings into stages 1 and 2 busy 4, latency 6; the loop
    # back into stage 0 busy 1, latency 5: a token takes 10 + 10 + 20 + 10 + 30 + 6 = 86.
    links = {1: [(1, 5), (4, 6), (4, 6)]}
    assert pipeline_schedule({1: [10, 20, 30]}, links, [1]) == 86


def _one_micro_batch_case(rng):
    """Stage cycles, crossings (half of them relaying on the receiving stage's links) and each
    stage's windows (sorted, disjoint, within its cycles) of one random pipeline."""
    n = rng.randint(1, 6)
    occ = [rng.randint(0, 50) for _ in range(n)]
    crossings, windows = [], []
    for s in range(n):
        busy, lat = rng.randint(0, 60 if rng.random() < 0.2 else 20), rng.randint(0, 20)
        relay = (rng.randint(0, 10), rng.randint(0, 15)) if rng.random() < 0.5 else ()
        crossings.append((busy, lat, *relay))
        wins, at = [], 0
        for _ in range(rng.randint(0, 3)):
            a = at + rng.randint(0, 10)
            b = a + rng.randint(1, 10)
            if b <= occ[s]:
                wins.append((a, b))
                at = b
        windows.append(tuple(wins))
    return occ, crossings, windows


def test_one_micro_batch_at_many_steps_is_the_simulated_schedule():
    # one micro-batch never meets a window a stage booked: a round is its stages and crossings
    rng = random.Random(5)
    cases = [_one_micro_batch_case(rng) for _ in range(600)]
    for n in sorted({len(occ) for occ, _, _ in cases}):  # one call per stage count, as a run
        alike = [c for c in cases if len(c[0]) == n]
        got, valid = one_micro_batch_over([occ for occ, _, _ in alike],
                                          [links for _, links, _ in alike],
                                          np.arange(len(alike)))  # fmt: skip
        assert valid.mean() > 0.9
        for (occ, links, windows), interval, ok in zip(alike, got, valid, strict=True):
            if ok:
                want = pipeline_schedule({1: occ}, {1: links}, [1], windows_of={1: windows})
                assert int(interval) == want, (occ, links, windows)
    # a link still carrying the last round's micro-batch when it comes again: not valid
    # (two relays of 1 + 1 cycles on links busy 50: a round of 6 cycles, the links 50)
    links = ((50, 0, 1, 1), (50, 0, 1, 1))
    got, valid = one_micro_batch_over([[1, 1]], [links], [0])
    assert not valid[0] and got[0] == 6
    assert pipeline_schedule({1: [1, 1]}, {1: list(links)}, [1]) == 50


def test_a_link_overlaps_the_next_micro_batch_by_hand():
    # 2 stages of 10 cycles, one crossing busy 8, latency 0 (no loop back cost), 2 equal
    # micro-batches. Round 1: A: stage 0 [0, 10), link [10, 18), stage 1 [18, 28).
    # B: stage 0 [10, 20), link [20, 28), stage 1 [28, 38). Round 2: A back at 28: stage 0
    # [28, 38), link [38, 46), stage 1 [46, 56); B at 38: stage 0 [38, 48), link [48, 56),
    # stage 1 [56, 66); the period is 28 = 10 + 8 + 10: the wafers (20 a round each) are not
    # the limit, one micro-batch's round trip is. Counted inside the stages, as the closed form
    # does, the link would make the second stage 18 a micro-batch: 2 x 18 = 36.
    stages, links = {4: [10, 10]}, {4: [(0, 0), (8, 0)]}
    assert pipeline_schedule(stages, links, [4, 4]) == 28
    assert pipeline_cycles({4: [10, 18]}, [4, 4]) == 36


def test_without_links_it_is_the_closed_form():
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 7)
        stages = {3: [rng.randint(1, 200) for _ in range(n)]}
        sizes = [3] * rng.randint(1, n)
        links = {3: [(0, 0)] * n}
        assert pipeline_schedule(stages, links, sizes) == pipeline_cycles(stages, sizes)


def _random_case(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 8)
    sizes = sorted((rng.randint(1, 3) for _ in range(rng.randint(1, n))), reverse=True)
    stages = {s: [rng.randint(1, 300) * s for _ in range(n)] for s in set(sizes)}
    links = {s: [(rng.randint(0, 40), rng.randint(0, 80)) for _ in range(n)] for s in set(sizes)}
    return stages, links, sizes


@pytest.mark.parametrize("seed", range(200))
def test_more_rounds_change_nothing(seed):
    # uneven micro-batches can drift for a dozen rounds (seeds 65 and 112 did after 2n + 2)
    stages, links, sizes = _random_case(seed)
    settled = pipeline_schedule(stages, links, sizes)
    assert pipeline_schedule(stages, links, sizes, rounds=64 * len(sizes) + 64) == settled


@pytest.mark.parametrize("backend", kernels.available_backends())
@pytest.mark.parametrize("seed", range(20))
def test_fast_twins_match_the_reference(backend, seed):
    rng = np.random.default_rng(seed)
    m, s = int(rng.integers(1, 6)), int(rng.integers(0, 7))
    occ, busy, lat = (rng.integers(0, 90, size=(m, s)) for _ in range(3))
    want = reference_pipeline.micro_batch_rounds(occ, busy, lat, 9)
    got = kernels.get("micro_batch_rounds", backend)(occ, busy, lat, 9)
    np.testing.assert_array_equal(got, want)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="busy has shape"):
        reference_pipeline.micro_batch_rounds(np.ones((2, 3)), np.ones((2, 2)), np.ones((2, 3)), 1)
    with pytest.raises(ValueError, match="lat"):
        reference_pipeline.micro_batch_rounds(np.ones((1, 2)), np.ones((1, 2)), -np.ones((1, 2)), 1)


def test_the_wafer_driver_simulates_the_schedule_over_its_io_links():
    import pyaccel as pa
    from pyaccel.model.graph import build_graph
    from pyaccel.sim import driver
    from pyaccel.sim.wafer import engine

    model, sysm = pa.load_model("llama-3.1-8b"), pa.load_system("wse3", units=2)
    work = pa.Workload(batch=4, context=256, tokens=1)
    plc = pa.place(model, sysm, work)
    graph = build_graph(model, work.resolved("bf16"))
    passes = driver.MicroBatchPasses(engine, graph, sysm, plc)
    cycles, timing = passes.step(work.context)
    assert len(timing.stage_cycles) == 2 and timing.links is not None
    # both wafers hand over on the system I/O: the crossing into wafer 1 and the loop back
    assert all(busy > 0 and lat > 0 for busy, lat in timing.links)
    stages = {
        s: m.time(_shape(m, work.context), False).stage_cycles for s, m in passes.models.items()
    }
    links = {s: m.time(_shape(m, work.context), False).links for s, m in passes.models.items()}
    assert cycles == pipeline_schedule(stages, links, passes.sizes)
    # counted inside the wafers' stages, as the closed form does, the I/O would cost more
    inside = {s: [a + b + c for a, (b, c) in zip(stages[s], links[s], strict=True)]
              for s in stages}  # fmt: skip
    assert cycles < pipeline_cycles(inside, passes.sizes)


def _shape(model, context):
    from pyaccel.sim.contract import StepShape

    return StepShape(model.graph, context, model.group_key)


def test_windows_join_across_gaps_no_relay_fits_by_hand():
    # one micro-batch, two stages of 60 cycles; relays into stage 1 take 5 cycles, so its
    # windows' 2-cycle gap joins and the 20-cycle gap stays; stage 0 has none entering it
    occ = np.array([[60, 60]])
    rbusy = np.array([[0, 5]])
    ptr = np.array([0, 2, 5])
    starts, ends = np.array([0, 30, 0, 12, 40]), np.array([10, 35, 10, 20, 50])
    _, _, got_ptr, got_starts, got_ends = coalesced_windows(occ, (rbusy, rbusy, ptr, starts, ends))
    assert got_ptr.tolist() == [0, 1, 3]
    assert list(zip(got_starts.tolist(), got_ends.tolist(), strict=True)) == [
        (0, 35),  # no relay enters stage 0: its windows are never searched, one is enough
        (0, 20),
        (40, 50),
    ]


def test_windows_outside_their_stage_are_left_as_given():
    occ = np.array([[10]])
    relay = (np.zeros((1, 1)), np.ones((1, 1)), np.array([0, 2]), np.array([0, 8]),
             np.array([4, 12]))  # fmt: skip
    assert coalesced_windows(occ, relay) is relay


def _relayed_case(rng, n_micro: int, n_stages: int):
    """Random stage cycles and crossings whose relays into a stage all take its own length
    (or none), and windows as an engine makes them: sorted, disjoint and within their stage's
    cycles, their gaps often just shorter or just longer than the relays into the stage."""
    occ = rng.integers(50, 400, size=(n_micro, n_stages))
    busy, lat, roff = (rng.integers(0, 30, size=(n_micro, n_stages)) for _ in range(3))
    length = rng.integers(1, 20, size=n_stages) * (rng.random(n_stages) < 0.8)
    rbusy = np.repeat(length[None, :], n_micro, axis=0)
    ptr, starts, ends = [0], [], []
    for k in range(n_micro * n_stages):
        at, near = 0, int(length[k % n_stages]) or 10
        for _ in range(int(rng.integers(0, 16))):
            a = at + int(rng.integers(max(near - 2, 0), near + 2))
            b = a + int(rng.integers(1, 15))
            if b > occ.reshape(-1)[k]:
                break
            starts.append(a)
            ends.append(b)
            at = b
        ptr.append(len(starts))
    relay = (roff, rbusy, np.array(ptr), np.array(starts, dtype=np.int64),
             np.array(ends, dtype=np.int64))  # fmt: skip
    return occ, busy, lat, relay


@pytest.mark.parametrize("backend", ["numpy", *kernels.available_backends()])
@pytest.mark.parametrize("seed", range(40))
def test_joined_windows_give_the_same_schedule(backend, seed):
    rng = np.random.default_rng(500 + seed)
    occ, busy, lat, relay = _relayed_case(rng, int(rng.integers(1, 6)), int(rng.integers(1, 6)))
    joined = coalesced_windows(occ, relay)
    assert joined is not relay and len(joined[3]) <= len(relay[3])
    fn = kernels.get("micro_batch_rounds", backend)
    want = kernels.get("micro_batch_rounds", "numpy")(occ, busy, lat, 24, relay)
    np.testing.assert_array_equal(fn(occ, busy, lat, 24, joined), want)
