"""Trace exports and the Report (union of intervals, what-if ranking, Markdown/JSON)."""

import json
from itertools import pairwise

import numpy as np
import pytest

import pyaccel as pa
from pyaccel import report
from pyaccel.report import grouped_union_cycles, union_cycles


@pytest.fixture(scope="module")
def run70b():
    model, work = pa.load_model("llama-3.1-70b"), pa.Workload(tokens=3)
    sysm = pa.load_system("h100", units=8)
    plc = pa.place(model, sysm, work)
    return pa.emulate(model, sysm, plc, work)


def test_union_counts_overlap_once():
    assert union_cycles(np.array([0, 5, 20]), np.array([10, 10, 1])) == 16
    assert union_cycles(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == 0


@pytest.mark.parametrize("seed", range(6))
def test_grouped_union_is_each_groups_union(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    n, groups = 300, 7
    group = rng.integers(0, groups, n)
    group[:groups] = np.arange(groups)  # every id present
    starts = rng.integers(-50, 1_000, n)
    durs = rng.integers(-5, 120, n)  # empty and negative durations cover nothing
    want = [union_cycles(starts[group == g], durs[group == g]) for g in range(groups)]
    assert grouped_union_cycles(group, starts, durs).tolist() == want
    assert grouped_union_cycles(np.zeros(0, int), np.zeros(0, int), np.zeros(0, int)).size == 0
    monkeypatch.setattr(report, "_INT64_SAFE", 1)  # groups too far apart to shift: one by one
    assert grouped_union_cycles(group, starts, durs).tolist() == want


def test_dataframe_has_event_columns_and_seconds(run70b):
    df = run70b.to_dataframe()
    for col in (
        "step",
        "layer",
        "op",
        "kind",
        "unit",
        "resource",
        "start",
        "duration",
        "bytes",
        "flops",
        "start_s",
        "duration_s",
    ):
        assert col in df.columns
    assert set(df["step"]) == {0, 2}  # first and last steps keep their events
    assert len(df) == run70b.n_events


def test_perfetto_tracks_do_not_overlap(run70b, tmp_path):
    path = run70b.to_perfetto(tmp_path / "t.json")
    data = json.loads(path.read_text())
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in data["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert {"hbm", "sync", "nvlink"} <= set(names.values())
    tracks: dict = {}
    for e in data["traceEvents"]:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["dur"]))
    assert len(tracks) == len(names)
    for events in tracks.values():
        events.sort()
        for (t0, d0), (t1, _) in pairwise(events):
            assert t1 >= t0 + d0 - 1e-9 * max(1.0, t1)


def test_report_ranks_what_if_and_explains(run70b):
    model, sysm, plc, work = run70b.inputs  # the run's own inputs, re-emulated
    what_if = pa.what_if_gains(model, sysm, plc, work, run70b.step_time_s)
    rep = pa.Report.from_trace(run70b, what_if)
    gains = [r.gain for r in rep.what_if]
    assert gains == sorted(gains, reverse=True) and gains[0] > 1.0
    assert rep.what_if[0].resource == rep.bottleneck == "hbm"
    assert rep.bound_ratio >= 1.0
    assert sum(rep.by_resource.values()) <= run70b.step_cycles[0] / run70b.clock_hz + 1e-12
    md = rep.to_markdown()
    assert "bottleneck (what-if winner): **hbm**" in md and "what if" in md
    data = json.loads(rep.to_json())
    assert data["bottleneck"] == "hbm" and data["assumptions"]


def test_joules_per_token_follows_definition(run70b):
    expected = 8 * 700 * run70b.step_time_s / 1
    assert run70b.joules_per_token == pytest.approx(expected)


def test_roofline_chain_and_resource_terms():
    model, work = pa.load_model("llama-3.1-8b"), pa.Workload(batch=64)
    sysm = pa.load_system("h100", units=1)
    plc = pa.place(model, sysm, work)
    roof = pa.roofline(model, sysm, plc, work)
    # at batch 64 the KV reads of all sequences dominate the resource term, not the chain
    assert roof.resource_s["hbm"] > roof.chain_s
    assert roof.step_s == max(roof.chain_s, *roof.resource_s.values())
    assert roof.bottleneck == "hbm"


@pytest.mark.parametrize(
    "system, units, model, work",
    [
        ("h100", 8, "llama-3.1-70b", pa.Workload(batch=4, context=100, tokens=3)),
        ("h100", 4, "gpt-oss-120b", pa.Workload(batch=2, context=200, kv="fp8", tokens=3)),
        ("b200", 8, "deepseek-v3", pa.Workload(batch=3, context=50, weights="fp8", tokens=3)),
        ("wse3", 1, "llama-3.1-8b", pa.Workload(context=64, tokens=3)),
        ("taalas-hc1", 1, "llama-3.1-8b", pa.Workload(context=64, tokens=3)),
        ("groq-tsp", 40, "llama-3.1-8b", pa.Workload(batch=2, context=64, tokens=3)),
        ("h100", 2, "mixtral-8x7b", pa.Workload(batch=2, context=64, tokens=3)),
    ],
)
def test_step_bounds_over_many_contexts_match_one_at_a_time(system, units, model, work):
    """The vectorised bound a trace uses for all its steps equals the per-context roofline,
    across sliding-window layers (gpt-oss, window 128 crossed), MLA and an fp8 KV cache."""
    from pyaccel.sim.roofline import StepBounds

    cfg, sysm = pa.load_model(model), pa.load_system(system, units=units)
    graph = pa.build_graph(cfg, work, native_format=sysm.spec.native_format)
    plc = pa.place(cfg, sysm, work, graph=graph)
    bounds = StepBounds(graph, sysm, plc)
    contexts = np.array([0, 1, 2, 127, 128, 129, 1000, 4096])
    many = bounds.step_seconds(contexts)
    one = np.array([bounds.at(int(c)).step_s for c in contexts])
    np.testing.assert_allclose(many, one, rtol=1e-12, atol=0)
    assert (np.diff(many) >= 0).all()  # more context never lowers the bound


def test_report_reads_only_the_plain_trace(run70b):
    # the report needs no model, system or placement: a trace without its inputs (as one
    # loaded from plain data would be) gives the same report, op bounds included
    from dataclasses import replace

    plain = replace(run70b, inputs=None)
    rep = pa.Report.from_trace(plain, what_if=False)
    assert rep.to_json() == pa.Report.from_trace(run70b, what_if=False).to_json()
    bounded = {row.kind for row in rep.by_kind if row.bound_s > 0}
    assert {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "attention", "lm_head"} <= bounded
    assert set(plain.op_bounds) == {"step", "op", "resource", "seconds"}


def test_by_layer_groups_as_filtering_each_layer_would(run70b):
    # the report groups a step's events by (layer, resource) once; filtering them for every
    # layer and resource, in first-appearance order, is the obviously correct reference
    from pyaccel.report import _by_layer

    ev, step = run70b.events, int(run70b.events["step"][0])
    sel = ev["step"] == step
    layers, res = ev["layer"][sel], ev["resource"][sel]
    want: dict = {}
    for layer in dict.fromkeys(layers.tolist()):
        on = layers == layer
        want[str(layer)] = {
            str(r): union_cycles(ev["start"][sel][on & (res == r)],
                                 ev["duration"][sel][on & (res == r)]) / run70b.clock_hz
            for r in dict.fromkeys(res[on].tolist())
        }  # fmt: skip
    got = _by_layer(run70b, step)
    assert got == want and list(got) == list(want)
    assert all(list(got[k]) == list(want[k]) for k in want)


def test_unit_totals_share_a_row_only_between_alike_units():
    # units 0 and 1 are in the same sets with the same fixed totals: one row; unit 2 shares a
    # set with 3 but not its fixed totals, and 3 is also alone in a set. Hand sums per unit:
    # 0, 1: m 1 + 2 x [1, 2, 3] = [3, 5, 7]; 2: m 2 + [.5, .5, 4] = [2.5, 2.5, 6];
    # 3: m [.5, .5, 4], c .5 + [9, 0, 0] = [9.5, .5, .5] -> busiest [9.5, 5, 7]
    from pyaccel.sim.roofline import _UnitTotals

    fixed = {(0, "m"): 1.0, (1, "m"): 1.0, (2, "m"): 2.0, (3, "c"): 0.5}
    totals = _UnitTotals(fixed, [(0, 1), (2, 3), (0, 1), (3,)], (3,))
    totals.add((0, 1), {"m": np.array([1.0, 2.0, 3.0])}, 2)
    totals.add((2, 3), {"m": np.array([0.5, 0.5, 4.0])}, 1)
    totals.add((3,), {"c": np.array([9.0, 0.0, 0.0])}, 1)
    assert totals.shape == (3, 3)
    assert totals.busiest().tolist() == [9.5, 5.0, 7.0]
    assert sorted(totals.by_res["m"].tolist()) == [[0.5, 0.5, 4.0], [2.5, 2.5, 6.0], [3, 5, 7]]


@pytest.mark.parametrize(
    "items",
    [
        # a partition of the units (a stage's chips): sums per set, copied to its units
        [((0, 1), {"m": 0.1}), ((2, 3), {"m": 0.2, "c": 0.3}), ((0, 1), {"m": 0.7, "c": 1e-9}),
         ((2, 3), {"m": 0.05}), ((4,), {"c": 2.0})],
        # unit 1 in two different sets: one unit at a time
        [((0, 1), {"m": 0.1}), ((1, 2), {"m": 0.2, "c": 0.3}), ((0, 1), {"c": 0.7})],
    ],
)  # fmt: skip
def test_fixed_totals_are_each_ops_added_in_order(items):
    from pyaccel.sim.roofline import _add_times, _fixed_totals

    want: dict = {}
    for units, times in items:
        _add_times(want, units, times)
    got = _fixed_totals(items)
    assert list(got.items()) == list(want.items())  # same keys, order and sums to the bit


@pytest.mark.parametrize(
    "system, model", [("h100", "llama-3.1-8b"), ("wse3", "llama-3.1-8b"),
                      ("groq-tsp", "llama-3.1-8b"), ("taalas-hc1", "llama-3.1-8b"),
                      ("h100", "mixtral-8x7b")],
)  # fmt: skip
def test_step_bounds_kept_per_op_shape_are_each_ops_own(system, model):
    # alike layers' ops share one bound (and floor) computation; each op's bound is still the
    # one op_bound gives it where its own slot places it
    from dataclasses import fields

    from pyaccel.model.ops import shape_of
    from pyaccel.sim.roofline import StepBounds, op_bound

    cfg, sysm, work = pa.load_model(model), pa.load_system(system, "auto"), pa.Workload()
    graph = pa.build_graph(cfg, work, native_format=sysm.spec.native_format)
    plc = pa.place(cfg, sysm, work, graph=graph)
    bounds = StepBounds(graph, sysm, plc)
    slots = {s.layer: s for s in plc.layers}
    ops = [op for op in graph.ops if op.kind != "attention"]
    assert len(bounds._memo) < len(ops)  # shared
    shape = [f.name for f in fields(ops[1]) if f.name not in ("name", "layer")]
    assert shape_of(ops[1]) == tuple(getattr(ops[1], f) for f in shape)
    for op, got in zip(ops, bounds.fixed_ops, strict=True):
        slot = slots[op.layer]
        rates = bounds.rates
        floor = rates.latency_floor(op, slot)
        want = op_bound(op, len(slot.units), rates, graph.hidden, floor, work.batch,
                        rates.placed_rates(slot, plc), rates.own_seconds(op, slot))  # fmt: skip
        assert got == want


def test_codes_follow_first_appearance_and_text():
    from pyaccel.report import _codes

    codes, names = _codes(["b", 3, "b", "a", 3])
    assert codes.tolist() == [0, 1, 0, 2, 1] and names == ["b", 3, "a"]
    codes, names = _codes([0, "0", "x", 0], as_str=True)  # 0 and "0" read the same as text
    assert codes.tolist() == [0, 0, 1, 0] and names == ["0", "x"]
    codes, names = _codes([], as_str=True)
    assert codes.tolist() == [] and names == []


def test_shares_divide_by_the_step_the_tables_are_of(llama8b, h100):
    """The tables are of the first recorded step: their occupancy column divides by that step's
    time, as the headline's busiest share does, not by the run's mean step (which, the
    context growing over a long run, is far longer); the text, Markdown and JSON say which
    step it is."""
    from typer.testing import CliRunner

    from pyaccel.cli import app
    from pyaccel.units import fmt_seconds

    work = pa.Workload(batch=32, context=64, tokens=2048)
    trace = pa.emulate(llama8b, h100, pa.place(llama8b, h100, work), work)
    rep = pa.Report.from_trace(trace, what_if=False)
    first = trace.step_cycles[0] / trace.clock_hz
    assert trace.step_time_s > 1.2 * first  # the mean is far from the first step
    assert (rep.step, rep.step_context, rep.step_s) == (0, 64, pytest.approx(first))
    row = f"| hbm | {fmt_seconds(rep.by_resource['hbm'])} | {rep.busiest_share:.0%} |"
    md = rep.to_markdown()
    assert rep.busiest_resource == "hbm" and row in md
    assert f"Tables: step 0 (context 64): {fmt_seconds(first)}." in md
    assert json.loads(rep.to_json())["recorded_step"] == {
        "step": 0, "context": 64, "step_time_s": pytest.approx(first)}  # fmt: skip
    args = ["report", "--system", "h100", "--model", "llama-3.1-8b", "--batch", "32",
            "--context", "64", "--tokens", "2048"]  # fmt: skip
    text = " ".join(CliRunner().invoke(app, args).stdout.split())
    share = text.split("busiest hbm (")[1].split(" occupancy")[0]
    assert f"│ hbm │ {fmt_seconds(rep.by_resource['hbm'])} │ {share} │" in text
    assert f"step 0 (context 64): {fmt_seconds(first)}" in text


def test_every_op_bound_counts_under_the_kind_its_events_book(run70b):
    """A GPU residual's tensor-parallel all-reduce books events of kind ``allreduce`` while its
    bound (the collective's launch and start-up) is the residual op's: the bound counts on
    the ``allreduce`` row (which showed none, 'fixed_latency', while the residual rows holding
    it were left out), so the rows' bounds add up to every op's."""
    rep = pa.Report.from_trace(run70b, what_if=False)
    row = next(r for r in rep.by_kind if r.kind == "allreduce")
    assert row.bound_s > 0 and row.bound_resource == "sync" and row.ratio >= 1.0
    ob = run70b.op_bounds
    every = [report.op_bound_seconds(s, run70b.clock_hz) for s in ob["seconds"].tolist()]
    assert sum(r.bound_s for r in rep.by_kind) == pytest.approx(sum(every), rel=1e-12)


def test_kind_ratios_are_never_under_one_by_float_noise(run70b):
    """Emulated >= bound holds exactly per kind: the bounds add up in whole cycles, as the
    events are timed (summed in seconds, RoPE's 80 one-launch bounds came to 0.999999999999999
    of its 80 launches)."""
    rep = pa.Report.from_trace(run70b, what_if=False)
    ratios = {r.kind: r.ratio for r in rep.by_kind if r.ratio is not None}
    assert min(ratios.values()) >= 1.0 and ratios["rope"] == 1.0


def test_a_share_past_100_percent_comes_with_why(h100, llama8b):
    """An ASIC batch's users enter the pipeline one after another, so a step's events span more
    than the step and ROM reads fill more than 100 % of it: the report says why (it showed
    104 % under a note that only explained shares adding up past 100 %)."""
    asic = pa.load_system("taalas-hc1", units=1)
    work = pa.Workload(batch=8, context=64, tokens=2)
    rep = pa.Report.from_trace(pa.emulate(llama8b, asic, pa.place(llama8b, asic, work), work),
                               what_if=False)  # fmt: skip
    assert rep.busiest_share > 1.0 and rep.span_s > rep.step_s
    assert len(rep.notes()) == 3 and "pass 100 %" in rep.notes()[1]
    assert "over all 8 sequences" in rep.notes()[2]  # what the op-kind table's time is
    assert json.loads(rep.to_json())["notes"] == rep.notes()
    assert f"Note: {rep.notes()[1]}." in rep.to_markdown()
    one = pa.Workload(context=64, tokens=2)
    rep = pa.Report.from_trace(pa.emulate(llama8b, h100, pa.place(llama8b, h100, one), one),
                               what_if=False)  # fmt: skip
    assert rep.span_s == rep.step_s and rep.notes() == [report.OCCUPANCY_NOTE]


def test_op_kinds_of_a_batch_passing_one_after_another_add_up_as_their_bounds():
    """An ASIC batch's sequences pass one after another, each at another layer at once, so a
    union over an op kind merged different sequences' work: taalas mixtral-8x7b at batch 16
    showed every GEMV kind at 106 us (the whole step) against its 16.7 us bound, x6.36, a
    number no mechanism gives. Each op's time over all sequences, summed over the kind's ops,
    adds up as the bounds do: a GEMV's bound credits the whole batch with one pass of its row
    reads, and each sequence's token reads the ROM once, so its kind runs about batch x its
    bound (x15.7 at batch 16: the drains overlap the next sequence's reads)."""
    tiny = pa.load_model("tiny-llama")
    asic = pa.load_system("taalas-hc1", "auto", etch=True)
    work = pa.Workload(batch=4, context=16, tokens=1)
    plc = pa.place(tiny, asic, work)
    trace = pa.emulate(tiny, pa.load_system("taalas-hc1", plc.n_units, etch=True), plc, work)
    rep = pa.Report.from_trace(trace, what_if=False)
    rows = {r.kind: r for r in rep.by_kind}
    assert rep.pass_sequences == 4
    # by hand from the events: L0.qkv_proj[u0..u3] and their drains, one union per op
    ev = trace.events
    sel = (ev["step"] == rep.step) & (ev["kind"] == "qkv_proj")
    per_op: dict = {}
    for name, start, dur in zip(ev["op"][sel], ev["start"][sel], ev["duration"][sel],
                                strict=True):  # fmt: skip
        op = name.rsplit("[u", 1)[0].removesuffix(".latency")  # a block's drain is its op's
        per_op.setdefault(op, []).append((int(start), int(dur)))
    cycles = sum(union_cycles(np.array([a for a, _ in v]), np.array([d for _, d in v]))
                 for v in per_op.values())  # fmt: skip
    assert len(per_op) == len(tiny_layers(trace))
    assert cycles / trace.clock_hz == pytest.approx(rows["qkv_proj"].emulated_s, rel=1e-12)
    # each sequence's ROM pass, back to back, the last drain after them: under 4 bounds of one
    # pass (its busy cycles and drain), over 3 (tiny-llama: 4 x 128 + 5 cycles a layer)
    assert 3.0 < rows["qkv_proj"].ratio <= 4.0
    assert all(r.ratio >= 1.0 for r in rep.by_kind if r.ratio is not None)
    one = pa.Workload(batch=1, context=16, tokens=1)
    plc1 = pa.place(tiny, asic, one)
    solo = pa.emulate(tiny, pa.load_system("taalas-hc1", plc1.n_units, etch=True), plc1, one)
    rep1 = pa.Report.from_trace(solo, what_if=False)
    union = report.union_by(solo, "kind", rep1.step)  # one pass: the kind's union, as before
    assert rep1.pass_sequences == 1 and len(rep1.notes()) == 1
    assert {r.kind: r.emulated_s for r in rep1.by_kind} == pytest.approx(union)


def tiny_layers(trace) -> set:
    """The decoder layers a trace's qkv projections ran in."""
    ev = trace.events
    return {str(x) for x in ev["layer"][ev["kind"] == "qkv_proj"].tolist()}
