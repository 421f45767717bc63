"""Lower bounds under expert parallelism (SPEC §5, §9): a GPU stage's data-parallel ranks sum
no partial outputs."""

from __future__ import annotations

import pyaccel as pa
from pyaccel.report import Report
from pyaccel.sim.roofline import StepBounds


def _work(batch, context=64):
    return pa.Workload(batch=batch, context=context, tokens=2)


def _gpu(model, batch, units=4):
    cfg, work = pa.load_model(model), _work(batch)
    system = pa.load_system("h100", units, overrides=["expert_layout=ep"])
    return cfg, system, pa.place(cfg, system, work), work


def _bounds(cfg, system, plc, work):
    return StepBounds(pa.build_graph(cfg, work, native_format=system.spec.native_format),
                      system, plc)  # fmt: skip


def test_gpu_no_partial_sums_cross_data_parallel_ranks():
    # under EP a stage's GPUs run their own sequences' o_proj and experts whole: no
    # all-reduce, so no NVLink term in those ops' bounds. One of (4 - 1) / 4 x 64 x 64 x 2 B
    # at 450e9 B/s = 13.7 ns set o_proj's and the down projection's bounds above their ~3.5 ns
    # kernel bodies (emulated / bound 0.994 and 0.995 for the 4 layers)
    cfg, system, plc, work = _gpu("tiny-mixtral", 64)
    for b in _bounds(cfg, system, plc, work).fixed_ops:
        assert "nvlink" not in b.times, b.op
    rows = {r.kind: r for r in Report.from_trace(pa.emulate(cfg, system, plc, work),
                                                 what_if=False).by_kind}  # fmt: skip
    assert rows["o_proj"].ratio >= 1.0 and rows["experts_down_proj"].ratio >= 1.0
