"""Spans handed to the event log as columns (:class:`pyaccel.trace.SpanColumns`, what the LPU's
passes of tens of thousands of spans use) give the events span tuples give, in the same order."""

import numpy as np
import pytest

import pyaccel as pa
from pyaccel.sim.asic import engine as asic_engine
from pyaccel.sim.contract import Span
from pyaccel.sim.gpu import engine as gpu_engine
from pyaccel.sim.lpu import engine as lpu_engine
from pyaccel.sim.lpu import spans as lpu_spans
from pyaccel.sim.wafer import engine as wafer_engine
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


def _pass_spans_reference(sim, scheds, stage_c):
    # a pass's spans as before hops were kept per run: each hop built afresh, span by span, at
    # its hand-over cycle, its bytes added rank by rank
    n_chips = max(c for chips, _ in sim.stages for c in chips) + 1
    sent = np.zeros(n_chips, dtype=np.int64)
    links = np.zeros((n_chips, sim.n_link_slots), dtype=np.int64)
    out, t = [], 0
    for i, ((sch, ops), (chips, _)) in enumerate(zip(scheds, sim.stages, strict=True)):
        out.append(lpu_spans._op_spans(sch, ops, chips, t))
        by_rank, by_slot = lpu_spans._c2c_bytes(sim, sch, len(chips))
        sent[list(chips)] += by_rank
        links[list(chips)] += by_slot
        hop, end, layer = sim.hops[i], t + sch.cycles, ops[-1].layer
        if hop is not None:
            both = list(chips) + list(sim.stages[(i + 1) % len(sim.stages)][0])
            for rank, slot, nb in hop.slot_bytes:
                links[both[rank], slot] += nb
            rows = []
            for rank, c in enumerate(both):
                if rank < len(hop.send_bytes) and hop.send_bytes[rank]:
                    sent[c] += hop.send_bytes[rank]
                    rows.append(Span(layer, f"stage{i}.hop", "stage_hop", c, "c2c_link",
                                     end + hop.send_start[rank],
                                     max(1, hop.send_end[rank] - hop.send_start[rank]),
                                     hop.send_bytes[rank]))  # fmt: skip
            lat = end + max(hop.send_end)
            rows.append(Span(layer, f"stage{i}.hop", "stage_hop", chips[0], "c2c_latency", lat,
                             max(0, end + hop.cycles - lat)))  # fmt: skip
            transits = lpu_spans.TRANSITS_PER_C2C * sim.chip.transit
            rows.append(Span(layer, f"stage{i}.hop", "stage_hop", chips[0], "fixed_latency",
                             end + hop.cycles, transits))  # fmt: skip
            out.append(SpanColumns.of_rows(rows))
        t += stage_c[i]
    return SpanColumns.concat(out), sent, links


@pytest.mark.parametrize("model,work", [
    ("llama-3.1-8b", pa.Workload(tokens=3)),
    ("mixtral-8x7b", pa.Workload(batch=4, tokens=2, weights="int8")),
])  # fmt: skip
def test_lpu_stage_hops_kept_per_run_are_the_hops_built_each_pass(monkeypatch, model, work):
    """A stage hop's spans and C2C bytes are built once per run and shifted to each pass's
    hand-over cycle: the events and the per-chip, per-link byte arrays of a run whose first
    and last steps both log events are those of hops built afresh on every pass."""
    cfg, sysm = pa.load_model(model), pa.load_system("groq-tsp", units="auto")
    plc = pa.place(cfg, sysm, work)
    fast = pa.emulate(cfg, sysm, plc, work)
    monkeypatch.setattr(lpu_engine, "pass_spans", _pass_spans_reference)
    slow = pa.emulate(cfg, sysm, plc, work)
    assert (fast.events["op"] == "stage0.hop").sum() >= 2 * 2  # two steps' hops, each sent
    _same(fast.events, slow.events)
    for name in ("c2c_bytes_sent_per_chip", "c2c_bytes_per_chip_link"):
        assert np.array_equal(fast.arrays[name], slow.arrays[name]) and fast.arrays[name].any()


def _same_as_reference(monkeypatch, patch, model, sysm, work):
    # a run's events with the columns, then with the engine's span builder patched to the
    # per-span reference: equal, in order
    cfg = pa.load_model(model)
    plc = pa.place(cfg, sysm, work)
    fast = pa.emulate(cfg, sysm, plc, work)
    monkeypatch.setattr(*patch)
    slow = pa.emulate(cfg, sysm, plc, work)
    assert len(fast.events["start"]) > 20
    _same(fast.events, slow.events)


def _gpu_spans_reference(kernels, tp, host=0):
    # the per-span construction the columns replace: each kernel's parts on each rank in turn
    out, t, stage, t0, i = [], 0, None, 0, 0
    for k in kernels:
        if k.stage != stage:
            stage, t0, i = k.stage, t, 0
        i += 1
        wait = max(0, t0 + i * host - t)
        ranks = (
            [k.stage * tp + r for r in range(tp)] if k.resource != "node_link" else [k.stage * tp]
        )
        for unit in ranks:
            s = t
            for suffix, res, n in (("host", "host", wait), ("launch", "launch", k.launch),
                                   ("latency", "sync", k.latency),
                                   ("hbm_latency", "hbm", k.hbm_latency)):  # fmt: skip
                if n:
                    out.append(Span(k.layer, f"{k.op}.{suffix}", k.kind, unit, res, s, n))
                    s += n
            if k.body:  # a body of no time is left out (the kernel is its launch)
                out.append(Span(k.layer, k.op, k.kind, unit, k.resource, s, k.body, k.n_bytes,
                                k.flops))  # fmt: skip
        t += wait + k.cycles
    return out


@pytest.mark.parametrize("units,model,work,sets", [
    (8, "llama-3.1-8b", pa.Workload(batch=2, tokens=2), None),  # TP 8: all-reduces, node links
    (16, "llama-3.1-70b", pa.Workload(batch=4, tokens=3), None),  # two stages
    (2, "tiny-llama", pa.Workload(tokens=2), {"launch_mode": "eager"}),  # the host's waits
    (1, "tiny-llama", pa.Workload(tokens=2), {"host_overlap": "serial"}),  # the step's host
    (4, "tiny-mixtral", pa.Workload(batch=3, tokens=2), None),  # expert parallel all-to-alls
])  # fmt: skip
def test_gpu_span_columns_are_the_per_span_spans(monkeypatch, units, model, work, sets):
    sysm = pa.load_system("h100", units=units, overrides=sets)
    _same_as_reference(monkeypatch, (gpu_engine, "_spans", _gpu_spans_reference), model, sysm, work)


def _asic_spans_reference(stages, starts, per_row=None):
    # the per-span construction the columns replace: user by user, stage by stage, unit by unit
    # (a stage of per_row, attention, with the row's own cycles, bytes, FLOPs and resource)
    out, n_users = [], len(starts)
    own = {} if per_row is None else {int(s): a for a, s in enumerate(per_row.stages)}
    for u in range(n_users):
        tag = f"[u{u}]" if n_users > 1 else ""
        for s, st in enumerate(stages):
            t = int(starts[u][s])
            occ, n_bytes, flops, resource = st.occ, st.n_bytes, st.flops, st.resource
            if s in own:
                a = own[s]
                occ, n_bytes = int(per_row.occ[u, a]), int(per_row.n_bytes[u, a])
                flops, resource = int(per_row.flops[u, a]), per_row.resource[u, a]
            for unit in st.units:
                out.append(Span(st.layer, st.name + tag, st.kind, unit, resource, t, occ,
                                n_bytes, flops))  # fmt: skip
                if st.lat:
                    out.append(Span(st.layer, f"{st.name}.latency{tag}", st.kind, unit,
                                    "fixed_latency", t + occ, st.lat))  # fmt: skip
    return out


@pytest.mark.parametrize("model,work", [
    ("llama-3.1-8b", pa.Workload(tokens=3)),
    ("tiny-mixtral", pa.Workload(batch=3, tokens=2)),  # users told apart, routed experts
    ("tiny-llama", pa.Workload(batch=2, step_tokens=3, tokens=2)),  # rows at their contexts
])  # fmt: skip
def test_asic_span_columns_are_the_per_span_spans(monkeypatch, model, work):
    sysm = pa.load_system("taalas-hc1", units="auto", etch=True)
    _same_as_reference(monkeypatch, (asic_engine, "step_spans", _asic_spans_reference), model, sysm,
                       work)  # fmt: skip


def _wafer_spans_reference(entries, copies):
    # the per-span construction the columns replace: each part on its wafer, then the others
    out, t = [], 0
    for e in entries:
        first = True
        others = copies.get(e.layer, ()) if e.kind != "host_io" else ()
        for resource, n in e.cost.parts:
            if n <= 0:
                continue
            label = e.name if first else f"{e.name}.{resource}"
            out.append(Span(e.layer, label, e.kind, e.unit, resource, t, n,
                            e.n_bytes if first else 0, e.flops if first else 0))  # fmt: skip
            out += [Span(e.layer, label, e.kind, w, resource, t, n, 0, 0) for w in others]
            t += n
            first = False
    return out


@pytest.mark.parametrize("system,units,model,work", [
    ("wse3", "auto", "llama-3.1-8b", pa.Workload(tokens=3)),
    ("wse3", 4, "llama-3.1-70b", pa.Workload(batch=2, tokens=2)),  # system I/O hand-offs
    ("wse3", "auto", "gpt-oss-120b", pa.Workload(tokens=2)),  # experts over wafers: copies
])  # fmt: skip
def test_wafer_span_columns_are_the_per_span_spans(monkeypatch, system, units, model, work):
    sysm = pa.load_system(system, units=units)
    _same_as_reference(monkeypatch, (wafer_engine, "pass_spans", _wafer_spans_reference), model,
                       sysm, work)  # fmt: skip
