"""Placement type, GPU placer, JSON round trip and the pyaccel.testing helpers."""

import pytest

import pyaccel as pa
from pyaccel.place.common import contiguous_partition, split_even
from pyaccel.testing import assert_balanced, assert_fits, assert_layers_on


def _place(model, system, units, **work):
    cfg = pa.load_model(model)
    w = pa.Workload(**work)
    return cfg, pa.place(cfg, pa.load_system(system, units=units), w), w


def test_split_even_sums_exactly():
    assert split_even(10, 3) == [4, 3, 3]
    assert sum(split_even(123457, 8)) == 123457


@pytest.mark.parametrize(
    "weights,parts",
    [([5] * 10, 3), ([1, 9, 1, 1, 9, 1], 2), ([3, 1, 4, 1, 5, 9, 2, 6], 4), ([7], 3)],
)
def test_contiguous_partition_is_optimal_and_contiguous(weights, parts):
    stages = contiguous_partition(weights, parts)
    assert stages == sorted(stages) and stages[0] == 0
    assert max(stages) + 1 == min(parts, len(weights))
    best = max(sum(w for w, s in zip(weights, stages, strict=True) if s == k) for k in set(stages))
    # brute force over every cut of the list into the same number of blocks
    from itertools import combinations

    n, k = len(weights), max(stages) + 1
    brute = min(
        max(sum(weights[a:b]) for a, b in zip((0, *cuts), (*cuts, n), strict=True))
        for cuts in combinations(range(1, n), k - 1)
    )
    assert best == brute


def test_resident_bytes_placed_equal_bytes_needed():
    cfg, plc, w = _place("llama-3.1-8b", "h100", 1)
    graph = pa.build_graph(cfg, w.resolved("bf16"))
    b = plc.unit_bytes(0)
    assert b["weights"] == graph.total_resident_weight_bytes
    assert b["kv"] == graph.total_resident_kv_bytes
    assert_fits(plc, graph)


def test_tensor_parallel_shares_add_up_with_replication():
    cfg, plc, w = _place("llama-3.1-70b", "h100", 8)
    graph = pa.build_graph(cfg, w.resolved("bf16"))
    replicated = sum(op.resident_weight_bytes for op in graph.ops if op.split == "replicate")
    total = sum(plc.unit_bytes(u)["weights"] for u in range(8))
    assert total == graph.total_resident_weight_bytes + 7 * replicated
    assert sum(plc.unit_bytes(u)["kv"] for u in range(8)) == graph.total_resident_kv_bytes
    assert_balanced(plc, 0.01)
    assert_layers_on(plc, 5, range(80))


def test_does_not_fit_names_unit_bytes_and_units_that_fit():
    with pytest.raises(pa.PlacementError) as exc:
        _place("llama-3.1-70b", "h100", 1)
    msg = str(exc.value)
    assert "unit 0" in msg and "short of" in msg and "; units=2 would fit" in msg


def test_auto_405b_picks_fewest_valid_layout_and_says_why():
    """The fewest GPUs in a layout that widens TP within a node before it adds stages: on
    fewer, no such layout fits (a narrower TP over more stages might: --units N allows it)."""
    from pyaccel.model.graph import build_graph
    from pyaccel.place import gpu as gpu_place

    cfg, plc, w = _place("llama-3.1-405b", "h100", "auto")
    tp, pp = plc.layout.tp, plc.layout.pp
    assert 8 % tp == 0 and plc.n_units == tp * pp and (pp == 1 or tp == 8)
    assert "TP" in plc.reason and "fewest" in plc.reason
    graph, spec = build_graph(cfg, plc.workload), pa.load_system("h100").spec
    for fewer in range(1, plc.n_units):
        assert gpu_place.best_for(graph, spec, fewer, auto=True) is None, fewer


def test_more_units_never_lose_capacity():
    cfg = pa.load_model("llama-3.1-70b")
    w = pa.Workload()
    fits = []
    for units in (2, 4, 8, 16, 32):
        try:
            pa.place(cfg, pa.load_system("h100", units=units), w)
            fits.append(True)
        except pa.PlacementError:
            fits.append(False)
    assert fits == sorted(fits)  # once it fits, every larger count fits


def test_layers_balanced_across_pipeline_stages():
    _, plc, _ = _place("llama-3.1-405b", "h100", 16)
    stage_layers = [len(plc.layers_on(s * 8)) for s in range(2)]
    assert abs(stage_layers[0] - stage_layers[1]) <= 2
    assert plc.units_of("embed") == tuple(range(8))
    assert plc.units_of("head") == tuple(range(8, 16))


def test_json_round_trip_and_check(tmp_path):
    cfg, plc, w = _place("llama-3.1-70b", "h100", 8)
    path = tmp_path / "plc.json"
    plc.to_json(path)
    back = pa.Placement.from_json(str(path))
    assert back == plc
    back.check(pa.build_graph(cfg, w.resolved("bf16")))


def test_hand_edited_overfull_placement_fails_with_numbers(tmp_path):
    import json

    _, plc, _ = _place("llama-3.1-8b", "h100", 1)
    data = json.loads(plc.to_json())
    data["capacity_bytes"]["hbm"] = 10**16  # a file's capacity is not trusted
    slot = next(s for s in data["layers"] if s["layer"] == 3)
    slot["weight_bytes"][0] += 80 * 10**9
    with pytest.raises(pa.PlacementError, match=r"unit 0 is short of .* in hbm of GPU 0: needs"):
        pa.Placement.from_json(json.dumps(data)).check()


def test_testing_helpers_fail_with_unit_and_bytes():
    _, plc, _ = _place("llama-3.1-405b", "h100", 16)
    with pytest.raises(AssertionError, match="not on unit 0"):
        assert_layers_on(plc, 0, [120])
    import dataclasses

    lopsided = dataclasses.replace(plc, layers=plc.layers[:-3])
    with pytest.raises(AssertionError, match=r"unit \d+ of h100 holds .* B"):
        assert_balanced(lopsided, 0.001)


def test_kv_cache_grows_units_needed():
    small = _place("llama-3.1-70b", "h100", "auto", batch=1, context=1024)[1]
    big = _place("llama-3.1-70b", "h100", "auto", batch=64, context=32768)[1]
    assert big.n_units > small.n_units


def test_kv_beyond_capacity_says_how_many_users_and_tokens_fit():
    cfg = pa.load_model("llama-3.1-8b")
    work = pa.Workload(batch=64, context=131072, tokens=128)
    with pytest.raises(pa.CapacityError) as exc:
        pa.place(cfg, pa.load_system("h100", units=1), work)
    msg = str(exc.value)
    # KV per token: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 128 KiB; a 131,200-token user
    # takes 17.2 GB, so 3 fit beside the 16.1 GB of weights in 85.0 - 11.8 GB of usable HBM.
    assert "at 131200 tokens per user 3 user(s) fit" in msg
    assert "units=" in msg and "--units" not in msg


def _shortfalls_slot_by_slot(plc) -> list[tuple[int, str, int, int]]:
    """The reference: every slot's bytes added to its units' levels one at a time."""
    cats = ("weights", "kv", "buffers")
    use: dict[int, dict[str, int]] = {}
    for s in plc.layers:
        for i, u in enumerate(s.units):
            lv = use.setdefault(u, dict(plc.reserved_bytes))
            shares = (s.weight_bytes[i], s.kv_bytes[i], s.buffer_bytes[i])
            for cat, n in zip(cats, shares, strict=True):
                lv[plc.level_of[cat]] = lv.get(plc.level_of[cat], 0) + n
    idle = next((u for u in range(plc.n_units) if u not in use), None)
    if idle is not None:
        use[idle] = dict(plc.reserved_bytes)
    return [(u, level, used, plc.capacity_bytes.get(level, 0))
            for u in sorted(use) for level, used in use[u].items()
            if used > plc.capacity_bytes.get(level, 0)]  # fmt: skip


@pytest.mark.parametrize("system, units", [("h100", 2), ("groq-tsp", 64), ("wse3", 1)])
def test_shortfalls_match_the_slot_by_slot_sum(system, units):
    import random
    from dataclasses import replace

    _, plc, _ = _place("llama-3.1-8b", system, units)
    assert plc.shortfalls() == _shortfalls_slot_by_slot(plc) == []
    rng = random.Random(7)
    for _ in range(20):  # capacities cut at random, some units left idle: the same list
        levels = {**plc.capacity_bytes}
        cut = {lv: int(cap * rng.uniform(0.01, 1.2)) for lv, cap in levels.items()}
        layers = tuple(replace(s, units=tuple(u % max(1, units - 1) for u in s.units))
                       if rng.random() < 0.3 else s for s in plc.layers)  # fmt: skip
        bad = replace(plc, capacity_bytes=cut, layers=layers, n_units=units + 1)
        assert bad.shortfalls() == _shortfalls_slot_by_slot(bad)
    assert any(_shortfalls_slot_by_slot(replace(plc, capacity_bytes={
        lv: 1 for lv in plc.capacity_bytes})))  # fmt: skip


@pytest.mark.parametrize("model", ["tiny-llama", "tiny-mixtral", "tiny-deepseek-v3"])
def test_gpu_any_fits_answers_as_the_fewest_search_does(model):
    """A failed run's KV-capacity message bisects over users and tokens asking "does any layout
    fit?"; the one-build answer (the roomiest layout) must be the full search's, on both sides
    of the boundary (it made kimi-k2 at batch 1e6 on ascend-950 fail in 6 s, not 67)."""
    from pyaccel.model.graph import build_graph
    from pyaccel.place.gpu import _any_fits, _fewest

    cfg, spec = pa.load_model(model), pa.load_system("h100", 1).spec
    seen = set()
    for batch in (1, 2**12, 2**14, 2**16, 2**18, 10**6):
        graph = build_graph(cfg, pa.Workload(batch=batch, context=2**20, tokens=1, weights="bf16"))
        fits = _fewest(graph, spec) is not None
        assert _any_fits(graph, spec) == fits, batch
        seen.add(fits)
    assert seen == {True, False}  # the batches cross the boundary
