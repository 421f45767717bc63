"""A scheduled TSP program's spans per op (``Scheduled.op_event_columns``, array operations over
all ops at once) are those of :meth:`Scheduled.op_events`, its one-span-at-a-time reference: the
same spans in the same order, on random programs and on every program of real runs."""

import numpy as np
import pytest

import pyaccel as pa
from pyaccel.sim.lpu import scheduled
from pyaccel.sim.lpu.net import Network
from pyaccel.sim.lpu.program import ChipModel, Program

KINDS = ("install", "mxm", "vxm", "sxm", "memio", "delay")


def _as_columns(events: list) -> list[list]:
    return [list(c) for c in zip(*events, strict=True)] if events else [[]] * 5


def _same(sch, columns=scheduled.Scheduled.op_event_columns) -> int:
    got = [c.tolist() for c in columns(sch)]
    want = _as_columns(sch.op_events())
    assert got == want
    return len(want[0])


def _random_program(rng, chip, net) -> Program:
    """Ops of random instructions of every kind (some ops only delays, so without a span of
    their own; some with a collective), each depending on a few earlier ones."""
    prog = Program(chip)
    for o in range(int(rng.integers(1, 12))):
        prog.begin_op(o, f"op{o}", "matmul")
        only_delays = rng.random() < 0.2
        for _ in range(int(rng.integers(1, 9))):
            done = len(prog.res)
            deps = rng.choice(done, size=min(done, int(rng.integers(0, 3))), replace=False)
            kind = "delay" if only_delays else KINDS[int(rng.integers(len(KINDS)))]
            res = {"install": prog.r_install(0), "mxm": prog.r_mxm(0), "vxm": prog.r_vxm,
                   "sxm": prog.r_sxm, "memio": prog.r_memio}.get(kind, -1)  # fmt: skip
            prog.add(res, kind, int(rng.integers(0, 40)), int(rng.integers(0, 30)),
                     deps.tolist(), int(rng.integers(0, 4096)))  # fmt: skip
        if not only_delays and rng.random() < 0.3:
            coll = net.allreduce(int(rng.integers(2, 9)), int(rng.integers(64, 20_000)), 10)
            prog.collective(coll, len(prog.res) - 1)
    return prog


@pytest.mark.parametrize("seed", range(6))
def test_columns_are_the_reference_spans_on_random_programs(seed):
    p = pa.load_system("groq-tsp").spec.params
    chip, net = ChipModel.from_params(p), Network(p, 1e9)
    rng = np.random.default_rng(seed)
    spans = sum(_same(_random_program(rng, chip, net).schedule("numpy")) for _ in range(40))
    assert spans > 40 * 5


def test_an_op_of_delays_only_is_one_fixed_latency_span():
    p = pa.load_system("groq-tsp").spec.params
    prog = Program(ChipModel.from_params(p))
    prog.begin_op(0, "wait", "norm")
    first = prog.add(-1, "delay", 0, 7, [])
    prog.add(-1, "delay", 0, 5, [first])
    sch = prog.schedule("numpy")
    assert _same(sch) == 1
    assert [c.tolist() for c in sch.op_event_columns()] == [[0], ["fixed_latency"], [0], [12], [0]]


@pytest.mark.parametrize("model,work", [
    ("llama-3.1-8b", pa.Workload(batch=8, tokens=2)),
    ("mixtral-8x7b", pa.Workload(batch=4, tokens=2, weights="int8")),
])  # fmt: skip
def test_columns_are_the_reference_spans_on_every_program_of_a_run(monkeypatch, model, work):
    """Every schedule a run's events are made of (collectives, experts and stage programs
    included) is checked against its reference as the run asks for it."""
    checked = []
    fast = scheduled.Scheduled.op_event_columns

    def both(sch):
        checked.append(_same(sch))
        return fast(sch)

    monkeypatch.setattr(scheduled.Scheduled, "op_event_columns", both)
    cfg, sysm = pa.load_model(model), pa.load_system("groq-tsp", units="auto")
    pa.emulate(cfg, sysm, pa.place(cfg, sysm, work), work)
    assert len(checked) >= 2 and sum(checked) > 1000
