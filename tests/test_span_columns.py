"""Spans handed to the event log as columns (:class:`pyaccel.trace.SpanColumns`, what the LPU's
passes of tens of thousands of spans use) give the events span tuples give, in the same order."""

import numpy as np

import pyaccel as pa
from pyaccel.sim.contract import Span
from pyaccel.sim.lpu import spans as lpu_spans
from pyaccel.trace import EVENT_FIELDS, EventLog, SpanColumns

ROWS = [
    Span(0, "q", "matmul", 3, "lpu_mem", 5, 7, 64, 128),
    Span("head", "lm_head", "matmul", 1, "lpu_mxm", 0, 2),
    Span(np.int64(2), "norm", "norm", 0, "lpu_vxm", 9, 1, 8, 4),
]


def _same(a: dict, b: dict) -> None:
    assert list(a) == list(b) == list(EVENT_FIELDS)
    for name in EVENT_FIELDS:
        assert a[name].dtype == b[name].dtype, name
        assert a[name].tolist() == b[name].tolist(), name
        assert [type(x) for x in a[name].tolist()] == [type(x) for x in b[name].tolist()], name


def test_columns_and_tuples_log_the_same_events_in_order():
    rows, cols = EventLog(), EventLog()
    for log, spans in ((rows, ROWS), (cols, SpanColumns.of_rows(ROWS))):
        log.add(0, "embed", "embed", "embed", 0, "lpu_mem", 1, 2)
        log.add_spans(0, 100, spans)  # starts count from the step's start
        log.add(1, 3, "o", "matmul", 2, "lpu_mxm", 4, 5, 6, 7)
        log.add_spans(1, 200, spans)
    _same(cols.columns(), rows.columns())
    assert cols.columns()["start"].tolist() == [1, 105, 100, 109, 4, 205, 200, 209]
    got = list(SpanColumns.of_rows(ROWS))  # iterated back as tuples, layer keys as the graph's
    assert got[:2] == [tuple(ROWS[0]), tuple(ROWS[1])] and got[2][0] == 2
    assert type(got[2][0]) is int
    empty = SpanColumns.concat([])
    assert len(empty) == 0 and EventLog().columns().keys() == cols.columns().keys()


def _op_spans_reference(sch, ops, chips, t):
    # the per-event construction the columns replace: every op event on every chip
    out = []
    for o, res, s, d, nb in sch.op_events():
        op = ops[o]
        out += [Span(op.layer, op.name, op.kind, c, res, t + s, d, nb) for c in chips]
    return SpanColumns.of_rows(out)


def test_lpu_span_columns_are_the_per_event_spans(monkeypatch):
    model, work = pa.load_model("llama-3.1-8b"), pa.Workload(batch=2, tokens=2)
    sysm = pa.load_system("groq-tsp", units="auto")
    plc = pa.place(model, sysm, work)
    fast = pa.emulate(model, sysm, plc, work)
    monkeypatch.setattr(lpu_spans, "_op_spans", _op_spans_reference)
    slow = pa.emulate(model, sysm, plc, work)
    assert len(fast.events["start"]) > 1000
    _same(fast.events, slow.events)
