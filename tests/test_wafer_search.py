"""The wafer placer's searches (bisection over grid sizes, fits kept per layer key) give the
answers of the exhaustive scan, and the monotonicity they rely on holds."""

import itertools

import pytest

import pyaccel as pa
from pyaccel.errors import PlacementError
from pyaccel.model.graph import build_graph
from pyaccel.place import wafer as placer
from pyaccel.place import wafer_fit

TINY = ("tiny-llama", "tiny-mixtral", "tiny-deepseek-v3")
# (width, height) of the usable grid: wide, tall and square; small enough that the tiny models
# need several wafers on some and fit one on others
GRIDS = ((5, 3), (3, 7), (6, 6), (9, 4), (12, 12))
STRATEGIES = ("auto", "interleave", "layer_regions", "layer_groups")


def _system(grid, strategy="auto", units=1, name="wse3"):
    sets = [f"usable_width_pes={grid[0]}", f"usable_height_pes={grid[1]}",
            f"placement_strategy={strategy}"]  # fmt: skip
    return pa.load_system(name, units=units, overrides=sets)


def _graph(model, batch=1, context=1024):
    return build_graph(pa.load_model(model), pa.Workload(batch=batch, context=context,
                                                         tokens=1).resolved("bf16"))  # fmt: skip


def _outcome(model, system, work):
    try:
        return pa.place(pa.load_model(model), system, work)
    except PlacementError as exc:
        return f"error: {exc}"


@pytest.mark.parametrize("model", TINY)
@pytest.mark.parametrize("grid", GRIDS)
def test_interleave_bisection_is_the_scan_for_every_block(model, grid):
    graph = _graph(model, batch=2)
    system = _system(grid)
    fit = wafer_fit.Fitter(graph, system)
    answers = []
    for units in range(1, len(graph.layer_keys) + 1):
        for block in placer._blocks(graph, units):
            want = wafer_fit.smallest_grid_scan(wafer_fit.Fitter(graph, system), block)
            assert wafer_fit.smallest_grid(fit, block) == want, (units, block)
            answers.append(want)
    if grid[0] * grid[1] < 25:  # "does not fit" is among the cases held to the scan
        assert any(a is None for a in answers)


@pytest.mark.parametrize("model", TINY)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_placements_and_errors_are_those_of_the_scan(monkeypatch, model, strategy):
    work = pa.Workload(batch=2, context=1024, tokens=1)
    cases = [(g, u) for g in GRIDS[:4] for u in ("auto", 1, 2, 3)]
    fast = [_outcome(model, _system(g, strategy, u), work) for g, u in cases]
    monkeypatch.setattr(placer, "_interleave", wafer_fit.smallest_grid_scan)
    slow = [_outcome(model, _system(g, strategy, u), work) for g, u in cases]
    for case, a, b in zip(cases, fast, slow, strict=True):
        assert a == b, case
    assert any(isinstance(a, str) for a in fast) and any(not isinstance(a, str) for a in fast)


@pytest.mark.parametrize("model", TINY)
@pytest.mark.parametrize("batch,context,experts_here", [(1, 64, None), (4, 4096, None),
                                                        (1, 64, 2)])  # fmt: skip
def test_pe_bytes_never_grow_with_the_region(model, batch, context, experts_here):
    """fits(w, h) implies fits(w + 1, h) and fits(w, h + 1) for any budget: every layer's and
    every block's bytes on the fullest PE are non-increasing in width and in height (also with
    a MoE layer's experts spread over wafers, ``experts_here`` a region)."""
    graph = _graph(model, batch, context)
    fit = wafer_fit.Fitter(graph, _system((40, 40)), experts_here)
    keys = list(graph.layer_keys)
    sets = [[k] for k in keys] + [keys[:3], keys[2:], keys]
    for block in sets:
        sides = itertools.product(range(1, 41), repeat=2)
        use = {(w, h): fit.pe_use(block, w, h) for w, h in sides}
        for (w, h), b in use.items():
            assert use.get((w + 1, h), 0) <= b and use.get((w, h + 1), 0) <= b, (block, w, h)


@pytest.mark.parametrize("model", TINY)
def test_a_blocks_bytes_are_the_sum_of_its_keys(model):
    """The fitter keeps bytes per key; a block's are what pe_bytes gives for all its ops."""
    graph = _graph(model, batch=3)
    fit = wafer_fit.Fitter(graph, _system((20, 20)))
    keys = list(graph.layer_keys)
    # the LM head leaves the hidden vector on the other axis: the layers after it start there
    blocks = [keys, keys[1:4], keys[2:3], keys[3:], ["head", 0, 1], ["head", "head"]]
    for block in blocks:
        ops = [op for k in block for op in graph.ops_of(k)]
        for w, h in [(1, 1), (3, 7), (20, 20), (13, 2)]:
            assert fit.pe_use(block, w, h) == sum(fit.tiles.pe_bytes(ops, w, h)), (block, w, h)
