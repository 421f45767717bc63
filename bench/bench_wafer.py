"""Wafer engine speed (SPEC §10) and validation against published decode speeds (SPEC §9).

Run: ``python -m pytest bench/bench_wafer.py -p no:cacheprovider --benchmark-only -s``.
Goals: one llama-3.1-70b step over its wafers <= 1 s warm (also on the published 4 wafers,
placement included); a 4,096-token trace <= 5x one step;
``run --system wse3 --model llama-3.1-8b --tokens 256`` <= 3 s.
"""

import csv
from pathlib import Path

import pytest

import pyaccel as pa
from pyaccel.sim.wafer.mesh import Line, Tasks, allreduce

PUBLISHED = Path(__file__).with_name("published.csv")
_TIMES: dict = {}


@pytest.fixture(scope="module")
def seventy():
    model, sysm = pa.load_model("llama-3.1-70b"), pa.load_system("wse3", units="auto")
    plc = pa.place(model, sysm, pa.Workload(tokens=1))
    pa.emulate(model, sysm, plc, pa.Workload(tokens=1))  # warm numba and the caches
    return model, sysm, plc


def test_bench_70b_one_step(benchmark, seventy):
    model, sysm, plc = seventy
    work = pa.Workload(tokens=1)
    benchmark.pedantic(pa.emulate, args=(model, sysm, plc, work), rounds=5, iterations=1)
    _TIMES["step"] = benchmark.stats.stats.median
    print(f"\n70B one step over {plc.n_units} wafers: {_TIMES['step']:.3f} s (goal <= 1 s)")
    assert _TIMES["step"] <= 1.0


def test_bench_70b_one_step_on_four_wafers(benchmark):
    """The published deployment's shape: 70B over 4 wafers (at the low end of pe_code_bytes'
    sourced range, where it fits), placement included, one step, in-process."""
    model = pa.load_model("llama-3.1-70b")
    sysm = pa.load_system("wse3", units=4, overrides=["pe_code_bytes=2048"])
    work = pa.Workload(tokens=1)

    def place_and_step():
        return pa.emulate(model, sysm, pa.place(model, sysm, work), work)

    place_and_step()  # warm numba and the caches
    benchmark.pedantic(place_and_step, rounds=5, iterations=1)
    t = benchmark.stats.stats.median
    print(f"\n70B one step over 4 wafers, placement included: {t:.3f} s (goal <= 1 s)")
    assert t <= 1.0


@pytest.mark.parametrize("backend", ["c", "numba", "numpy"])
def test_bench_whole_grid_layer(benchmark, backend):
    """A layer's six collectives on every line of a 120 x 90 grid (2-D, XY routing)."""
    from pyaccel.sim.wafer import grid, mesh

    def op(axis, n, setup, nwav, seg=None, two_level=True, broadcast=True):
        tpl = mesh._allreduce_template(n, seg or n, 1, two_level, broadcast, 2)
        return grid.GridOp(axis, tpl, setup, 20, nwav)

    w, h = 120, 90
    ops = [op(0, w, 3, 1), op(0, w, 9, 3), op(1, h, 5, 2, seg=h // 8), op(1, h, 7, 4),
           op(0, w, 2, 6), op(1, h, 4, 2, broadcast=False)]  # fmt: skip
    if backend not in pa.kernels.available_backends():
        pytest.skip(f"{backend} backend not built")
    run = benchmark.pedantic(grid.grid_sequence, args=(w, h, ops, 1, 1, 2, backend),
                             rounds=3, iterations=1)  # fmt: skip
    print(f"\nwhole-grid layer {w}x{h} ({len(run.result.tail):,} tasks) on {backend}: "
          f"{benchmark.stats.stats.median:.3f} s")  # fmt: skip


def test_bench_70b_4096_token_trace(benchmark, seventy):
    model, sysm, plc = seventy
    work = pa.Workload(tokens=4096)
    benchmark.pedantic(
        pa.emulate, args=(model, sysm, plc, work), kwargs={"event_steps": ()}, rounds=2,
        iterations=1,
    )  # fmt: skip
    t = benchmark.stats.stats.median
    step = _TIMES.get("step")
    ratio = t / step if step else float("nan")
    benchmark.extra_info["ratio_to_one_step"] = ratio
    print(f"\n70B 4,096-token trace: {t:.3f} s = {ratio:.1f} x one step (goal <= 5 x)")


def test_bench_8b_run_256_tokens(benchmark):
    from pyaccel.results import run

    run("llama-3.1-8b", "wse3", "auto", pa.Workload(tokens=2))
    benchmark.pedantic(run, args=("llama-3.1-8b", "wse3", "auto", pa.Workload(tokens=256)),
                       rounds=3, iterations=1)  # fmt: skip
    print(f"\n8B run --tokens 256 (place + emulate): {benchmark.stats.stats.median:.3f} s")


@pytest.mark.parametrize("model,weights", [("deepseek-v3", "bf16"), ("llama-3.1-405b", None)])
def test_bench_auto_placement(benchmark, model, weights):
    """``--units auto`` placement alone: the fewest wafers that hold the model (grid sizes
    bisected, each layer fitted once per region) and the fastest layout on them."""
    mdl, sysm = pa.load_model(model), pa.load_system("wse3", units="auto")
    work = pa.Workload(tokens=1, weights=weights)
    pa.place(mdl, sysm, work)  # warm numba and the collective caches
    plc = benchmark.pedantic(pa.place, args=(mdl, sysm, work), rounds=3, iterations=1)
    print(f"\n{model} auto placement on {plc.n_units} wafers: "
          f"{benchmark.stats.stats.median:.3f} s")  # fmt: skip


@pytest.mark.parametrize("backend", ["c", "numba", "numpy"])
def test_bench_mesh_kernel_1170_line_allreduce(benchmark, backend):
    from pyaccel import kernels

    if backend not in kernels.available_backends():
        pytest.skip(f"{backend} not available")
    line, tk = Line(1170, 1), Tasks()
    allreduce(tk, line, 0, 1170, 30, 200, 20, 34)
    tk.run(line.link_lat, 1170, 1, backend)
    res = benchmark(tk.run, line.link_lat, 1170, 1, backend)
    print(f"\n{backend}: {len(tk)} tasks -> {res.cycles} cycles")


def _published(system: str, model: str) -> float:
    with PUBLISHED.open() as fh:
        for row in csv.DictReader(fh):
            if row["system"] == system and row["model"] == model:
                return float(row["tokens_per_s_per_user"])
    raise KeyError((system, model))


@pytest.mark.parametrize(
    "system,model",
    [("wse3", "llama-3.1-8b"), ("wse2", "waferllm-8b-shapes"), ("wse3", "llama-3.1-70b")],
)
def test_published_speed_side_by_side(benchmark, system, model):
    from pyaccel.results import run

    result = benchmark.pedantic(run, args=(model, system, "auto", pa.Workload(tokens=8)),
                                rounds=1, iterations=1)  # fmt: skip
    emulated = result.trace.tokens_per_s_per_user
    published = _published(system, model)
    benchmark.extra_info.update(emulated=emulated, published=published,
                                ratio=emulated / published)  # fmt: skip
    print(f"\n{system} {model}: emulated {emulated:,.0f} tok/s on {result.placement.n_units} "
          f"wafer(s) vs published {published:,.0f} (x{emulated / published:.2f})")  # fmt: skip
