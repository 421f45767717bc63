"""The Python API (SPEC §8) given what a user's script may hand it: arguments of the wrong type,
NumPy integers, a placement reused with another system or workload. Each is refused with one
``ConfigError``/``PlacementError`` naming the function, the argument and what it got (never an
AttributeError from deep inside), or run as asked."""

import json

import numpy as np
import pytest

import pyaccel as pa

TINY = "tiny-llama"
WORK = pa.Workload(tokens=2)


@pytest.fixture(scope="module")
def case():
    """(model, system of 1 H100, its placement) of llama-3.1-8b."""
    model, system = pa.load_model("llama-3.1-8b"), pa.load_system("h100", units=1)
    return model, system, pa.place(model, system, WORK)


@pytest.mark.parametrize("field, value", [("kv", None), ("router", 3), ("spec_decode", 3),
                                          ("weights", 8), ("expert_weights", 4.5)])  # fmt: skip
def test_a_workload_text_field_of_another_type_is_refused_by_name(field, value):
    """``kv=None`` used to pass and fail at graph building ('NoneType' object has no attribute
    'tensor_bytes'); ``router=3`` and ``spec_decode=3`` raised AttributeError."""
    with pytest.raises(pa.ConfigError, match=rf"workload field '{field}' must be a string "
                       rf"\(e\.g\. .*\), got {value!r}"):  # fmt: skip
        pa.Workload(**{field: value})


def test_numpy_integers_are_counts_and_stay_plain_ints():
    """A batch from ``np.arange`` or a pandas column used to be refused: 'must be an integer
    >= 1, got np.int64(4)'."""
    work = pa.Workload(batch=np.int64(4), context=np.int32(512), tokens=np.uint8(3))
    assert (work.batch, work.context, work.tokens) == (4, 512, 3)
    assert all(type(x) is int for x in (work.batch, work.context, work.tokens))
    assert work == pa.Workload(batch=4, context=512, tokens=3)
    assert pa.load_system("h100", units=np.int64(2)).units == 2
    assert type(pa.load_system("h100", units=np.int64(2)).units) is int
    for bad in (np.float64(2.0), np.bool_(True), True):
        with pytest.raises(pa.ConfigError, match="units must be a positive integer or 'auto'"):
            pa.load_system("h100", units=bad)


def test_a_routing_trace_may_be_a_path(tmp_path):
    trace = tmp_path / "routes.npy"
    np.save(trace, np.zeros((4, 2, 2), dtype=np.int64))
    assert pa.Workload(router=trace) == pa.Workload(router=str(trace))


@pytest.mark.parametrize("loader, what", [(pa.load_model, {"hidden_size": 64}),
                                          (pa.load_model, None), (pa.load_system, None),
                                          (pa.load_system, 3)])  # fmt: skip
def test_loaders_refuse_what_is_not_a_name_or_path(loader, what):
    with pytest.raises(pa.ConfigError, match=rf"{loader.__name__}\(\): takes a preset name"):
        loader(what)


def test_load_model_of_a_loaded_model_is_that_model():
    model = pa.load_model(TINY)
    assert pa.load_model(model) is model


def _args(model, system, plc, work):
    return {"model": model, "system": system, "placement": plc, "workload": work}


WRONG = [
    ("model", "llama-3.1-8b"),
    ("model", {"n": 1}),
    ("system", "h100"),
    ("workload", {"batch": 1}),
    ("placement", None),
    ("placement", "plc.json"),
]


@pytest.mark.parametrize("arg, wrong", WRONG)
def test_place_and_emulate_name_an_argument_of_the_wrong_type(case, arg, wrong):
    model, system, plc = case
    given = {**_args(model, system, plc, WORK), arg: wrong}
    maker = {"model": "pa.load_model", "system": "pa.load_system", "workload": "pa.Workload",
             "placement": "pa.place"}[arg]  # fmt: skip
    calls = [("emulate", lambda: pa.emulate(**{k if k != "model" else "model_or_graph": v
                                                for k, v in given.items()}))]  # fmt: skip
    if arg != "placement":
        calls.append(("place", lambda: pa.place(given["model"], given["system"],
                                                given["workload"])))  # fmt: skip
    for name, call in calls:
        with pytest.raises(pa.ConfigError) as err:
            call()
        text = str(err.value)
        assert text.startswith(f"{name}(): {arg} must be a") and maker in text
        assert f"got {type(wrong).__name__}" in text


def test_place_takes_no_workload_as_the_default_one():
    model, system = pa.load_model(TINY), pa.load_system("h100")
    assert pa.place(model, system) == pa.place(model, system, pa.Workload())


def test_report_from_trace_refuses_what_is_not_a_trace(case):
    with pytest.raises(pa.ConfigError, match=r"Report.from_trace\(\): trace must be a Trace"):
        pa.Report.from_trace({"step_time_s": 1.0})


def test_roofline_names_a_missing_placement_and_a_bad_context(case):
    model, system, plc = case
    with pytest.raises(pa.ConfigError, match=r"roofline\(\): placement must be a Placement"):
        pa.roofline(model, system, None, WORK)
    for context in (-1, "1024"):
        with pytest.raises(pa.ConfigError, match=r"roofline\(\): context must be an integer"):
            pa.roofline(model, system, plc, WORK, context=context)
    assert pa.roofline(model, system, plc, WORK, context=np.int64(2048)).step_s > 0


@pytest.mark.parametrize("units", [2, 8])
def test_emulate_refuses_a_system_loaded_for_other_units_than_the_placement(case, units):
    """The trace used to report the placement's units and ignore the system's ``units=``."""
    model, _, plc = case
    other = pa.load_system("h100", units=units)
    with pytest.raises(pa.ConfigError, match=rf"placement is on 1 GPU\(s\) but system h100 was "
                       rf"loaded with units={units}; load it with units=1"):  # fmt: skip
        pa.emulate(model, other, plc, WORK)
    assert pa.emulate(model, pa.load_system("h100", units="auto"), plc, WORK).units == 1


def test_emulate_refuses_a_speculative_workload_it_would_not_speculate(case):
    """``Workload(spec_decode=...)`` used to be emulated as plain decode, silently (179.7
    tokens/s where ``pyaccel run --spec-decode`` gives 206.4)."""
    model, system, plc = case
    work = pa.Workload(tokens=2, spec_decode="draft:llama-3.2-1b,k=4")
    with pytest.raises(pa.ConfigError, match=r"emulate\(\): Workload\(spec_decode="
                       r"'draft:llama-3.2-1b,k=4'\) is not run by emulate\(\)"):  # fmt: skip
        pa.emulate(model, system, plc, work)


@pytest.mark.parametrize("steps", [[2], [-1], [0, 5], ["0"]])
def test_emulate_refuses_event_steps_outside_the_run(case, steps):
    """Steps outside 0..tokens-1 used to record nothing, silently."""
    model, system, plc = case
    with pytest.raises(pa.ConfigError, match=r"event_steps names step .* not one of the run's "
                       r"steps 0\.\.1"):  # fmt: skip
        pa.emulate(model, system, plc, WORK, event_steps=steps)
    trace = pa.emulate(model, system, plc, WORK, event_steps=[np.int64(1)])
    assert set(trace.events["step"].tolist()) == {1}


@pytest.mark.parametrize("work, made_for", [
    (pa.Workload(batch=64, tokens=2), "batch 1 (now 64)"),
    (pa.Workload(context=100_000, tokens=2), "context 1024 (now 100000)"),
    (pa.Workload(weights="fp32", tokens=2), "weights bf16 (now fp32)"),
])  # fmt: skip
def test_a_placement_reused_for_a_bigger_workload_says_what_it_was_made_for(case, work, made_for):
    model, system, plc = case
    with pytest.raises(pa.PlacementError) as err:
        pa.emulate(model, system, plc, work)
    text = str(err.value)
    assert text.startswith("layer 0: units [0] hold ") and " B KV, fewer than the " in text
    assert text.endswith(f"the placement was made for {made_for}: place again for this workload")


def test_a_placement_reused_for_fewer_users_or_smaller_weights_runs(case):
    model, system, plc = case
    small = pa.Workload(weights="fp8", tokens=2)
    fresh = pa.emulate(model, system, pa.place(model, system, small), small)
    assert pa.emulate(model, system, plc, small).step_time_s == fresh.step_time_s


def test_the_dataframe_columns_are_the_units_its_docstring_says(case):
    model, system, plc = case
    trace = pa.emulate(model, system, plc, WORK)
    df = trace.to_dataframe()
    assert np.allclose(df["duration_s"], df["duration"] / system.spec.clock_hz)
    last = df[df["step"] == 1]["start"].min()  # cycles from the run's first step
    assert last >= trace.step_cycles[0]
    assert (df["bytes"] >= 0).all() and df["bytes"].sum() > 0


def test_a_report_of_a_trace_without_events_says_so():
    """It used to print 'busiest resource:  (0% occupancy)' and empty tables, unexplained."""
    model, system = pa.load_model(TINY), pa.load_system("wse3")
    plc = pa.place(model, system, WORK)
    bare = pa.Report.from_trace(pa.emulate(model, system, plc, WORK, event_steps=()), False)
    assert "busiest resource: - (the trace recorded no events" in str(bare)
    assert any("recorded no events" in n for n in json.loads(bare.to_json())["notes"])
    full = pa.Report.from_trace(pa.emulate(model, system, plc, WORK), False)
    assert full.busiest_resource and "recorded no events" not in str(full)
