"""The router's kernels: the C draws reproduce NumPy's per-step generators bit for bit, the
counts per micro-batch equal counting each step, and a run's routing summary equals the
per-step counts it stands for."""

import numpy as np
import pytest

from pyaccel import kernels
from pyaccel.kernels import reference_routing
from pyaccel.routing import ROUTER_STREAM, Router, parse

BACKENDS = [b for b in kernels.available_backends() if b != "numba"]  # C and the NumPy twin


def _weights(n_experts, skew):
    w = np.arange(1, n_experts + 1, dtype=np.float64) ** -skew
    return w / w.sum()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n_experts,k,n,skew,entropy", [
    (8, 2, 5, 0.0, (0, ROUTER_STREAM)),  # seed 0: one word of zero
    (384, 8, 61, 0.0, (7, ROUTER_STREAM)),  # Kimi K2's shape at batch 1
    (64, 8, 32, 8.0, (1, ROUTER_STREAM)),  # steep skew: the renormalised direct draws
    (16, 4, 96, 1.2, (2**40 + 3, 5)),  # a seed of two words
    (3, 2, 100, 1.0, (0, 1)),  # collisions in almost every row
])  # fmt: skip
def test_draws_are_numpys_own_generators_bit_for_bit(backend, n_experts, k, n, skew, entropy):
    w = _weights(n_experts, skew)
    steps = np.array([0, 1, 2, 5, 2**33 + 1, 4095])  # a step of two words too
    got = kernels.get("route_draws", backend)(entropy, steps, w, n, k)
    assert got.shape == (len(steps), n, k)
    for i, t in enumerate(steps.tolist()):  # the specification: one generator a step
        rng = np.random.default_rng([*entropy, t])
        assert np.array_equal(got[i], reference_routing.distinct_draws(rng, w, n, k))


@pytest.mark.parametrize("backend", BACKENDS)
def test_draws_of_a_step_do_not_depend_on_the_others_drawn(backend):
    draw = kernels.get("route_draws", backend)
    w = _weights(32, 1.1)
    both = draw((3, ROUTER_STREAM), np.array([4, 9]), w, 10, 4)
    assert np.array_equal(both[1], draw((3, ROUTER_STREAM), np.array([9]), w, 10, 4)[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_counts_per_span_are_counted_rows(backend):
    rng = np.random.default_rng(0)
    picks = rng.integers(0, 9, size=(6, 10, 3, 2))
    count = kernels.get("route_counts", backend)
    for spans in ([[0, 10]], [[0, 4], [4, 10]], [[0, 10], [2, 3], [5, 5]]):
        hot, distinct, whole = count(picks, np.array(spans), 9)
        for t in range(6):
            for s, (lo, hi) in enumerate(spans):
                for layer in range(3):
                    n = np.bincount(picks[t, lo:hi, layer].ravel(), minlength=9)
                    assert hot[t, s, layer] == n.max() and distinct[t, s, layer] == (n > 0).sum()
            assert whole[t].tolist() == [len(set(picks[t, :, i].ravel())) for i in range(3)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("call,match", [
    (lambda f: f((-1,), np.arange(2), np.ones(4) / 4, 2, 2), "entropy"),
    (lambda f: f((1,), np.array([-3]), np.ones(4) / 4, 2, 2), r"steps\[0\] = -3"),
    (lambda f: f((1,), np.arange(2), np.ones(4) / 4, 2, 5), "k = 5"),
    (lambda f: f((1,), np.arange(2), np.array([1.0, 0, 0, 0]), 2, 2), "positive on at least"),
])  # fmt: skip
def test_draws_refuse_bad_inputs_on_every_backend(backend, call, match):
    with pytest.raises(ValueError, match=match):
        call(kernels.get("route_draws", backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_counts_refuse_ids_outside_the_experts(backend):
    with pytest.raises(ValueError, match=r"picks\[3\] = 9"):
        kernels.get("route_counts", backend)(np.array([[[[0, 1]], [[2, 9]]]]), [[0, 2]], 9)


@pytest.mark.parametrize("router,rows,spans", [
    ("uniform", 10, [(0, 10)]),
    ("zipf:1.5", 7, [(0, 3), (3, 5), (5, 7)]),
    ("uniform", 1, [(0, 1)]),  # one row: top_k experts of one row each, nothing drawn
    ("zipf:2", 1, [(0, 1), (1, 1)]),
    ("trace", 3, [(0, 2), (2, 3)]),
])  # fmt: skip
def test_summary_of_many_steps_is_each_steps_counts(tmp_path, router, rows, spans):
    if router == "trace":
        path = tmp_path / "route.npy"
        ids = np.random.default_rng(1).permuted(np.tile(np.arange(6), (5, 2, 1)), axis=2)[..., :3]
        np.save(path, ids)
        router = str(path)
    r = Router(parse(router), 6, 3, 2, seed=11)
    steps = np.array([0, 3, 4, 17])
    hot, distinct, whole = r.summary(steps, rows, spans)
    for i, t in enumerate(steps.tolist()):
        counts = r.counts(t, rows, spans)
        for s, c in enumerate(counts):
            assert hot[i, s].tolist() == c.max(axis=1).tolist()
            assert distinct[i, s].tolist() == (c > 0).sum(axis=1).tolist()
        every = r.counts(t, rows, [(0, rows)])[0]
        assert whole[i].tolist() == (every > 0).sum(axis=1).tolist()
    assert np.array_equal(r.choices_over(steps, rows)[2], r.choices(4, rows))
