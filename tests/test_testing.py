"""pyaccel.testing as a user's pytest file uses it (SPEC §8): placements on every kind of
machine, the helpers' failures naming the unit and the bytes, and arguments of the wrong type or
value refused instead of letting a mistyped test pass."""

import json
import math

import numpy as np
import pytest

import pyaccel as pa
from pyaccel.testing import assert_balanced, assert_fits, assert_layers_on

# (system, model, units, etch): one case per kind, and the big and MoE models where they run
CASES = [
    ("wse3", "llama-3.1-8b", 1, False),
    ("wse3", "mixtral-8x7b", "auto", False),
    ("groq-tsp", "llama-3.1-8b", "auto", False),
    ("groq-tsp", "tiny-mixtral", "auto", False),
    ("taalas-hc1", "llama-3.1-8b", 1, False),
    ("taalas-hc1", "llama-3.1-70b", "auto", True),
    ("h100", "llama-3.1-70b", "auto", False),
    ("h100", "mixtral-8x7b", 2, False),
    ("h100", "tiny-llama", 1, False),
]
WORK = pa.Workload(tokens=2)


def _placed(system, model, units=1, etch=False, work=WORK):
    cfg = pa.load_model(model)
    return pa.place(cfg, pa.load_system(system, units=units, etch=etch), work)


@pytest.fixture(scope="module")
def tp2():
    """llama-3.1-8b over 2 H100s, tensor parallel: every layer on both GPUs."""
    plc = _placed("h100", "llama-3.1-8b", 2)
    assert plc.layout.tp == 2
    return plc


@pytest.mark.parametrize("system, model, units, etch", CASES)
def test_a_placement_fits_holds_every_layer_and_its_file_fits_too(system, model, units, etch):
    plc = _placed(system, model, units, etch)
    assert_fits(plc)
    for unit in range(plc.n_units):
        assert_layers_on(plc, unit, plc.layers_on(unit))
    back = pa.Placement.from_json(plc.to_json())
    assert back == plc
    assert_fits(back)


def _overfilled(plc, unit: int, times: int) -> pa.Placement:
    """``plc`` reloaded from its file with ``unit``'s weight bytes of every layer multiplied."""
    doc = plc.to_dict()
    for row in doc["layers"]:
        pairs = zip(row["units"], row["weight_bytes"], strict=True)
        row["weight_bytes"] = [b * times if u == unit else b for u, b in pairs]
    return pa.Placement.from_json(doc)


@pytest.mark.parametrize("system, model, units", [("h100", "llama-3.1-70b", "auto"),
                                                  ("groq-tsp", "llama-3.1-8b", "auto"),
                                                  ("taalas-hc1", "llama-3.1-8b", 1)])  # fmt: skip
def test_an_overfilled_unit_fails_assert_fits_naming_it_and_the_bytes(system, model, units):
    plc = _placed(system, model, units)
    unit = plc.n_units - 1
    bad = _overfilled(plc, unit, 3)
    level, need, cap = next((lv, n, c) for u, lv, n, c in bad.shortfalls() if u == unit)
    with pytest.raises(AssertionError) as err:
        assert_fits(bad)
    text = str(err.value)
    assert f"unit {unit} " in text and f"needs {need:,} B" in text and f"has {cap:,} B" in text
    assert level in text


def test_assert_layers_on_takes_one_key_as_it_is(tp2):
    assert_layers_on(tp2, 1, "embed")
    assert_layers_on(tp2, 1, 7)
    assert_layers_on(tp2, np.int64(1), [np.int64(7), "head"])
    with pytest.raises(AssertionError, match=r"layer key\(s\) \['embe'\]"):
        assert_layers_on(tp2, 0, "embe")  # a typo is one unknown key, not four letters


def test_assert_layers_on_a_unit_the_placement_does_not_have_says_so(tp2):
    for unit in (2, -1):
        with pytest.raises(AssertionError, match=rf"unit {unit} is not one of the placement's "
                           r"2 GPU\(s\) of h100 \(0\.\.1\)"):  # fmt: skip
            assert_layers_on(tp2, unit, [0])
    with pytest.raises(pa.ConfigError, match=r"unit must be an integer index 0\.\.1, got '0'"):
        assert_layers_on(tp2, "0", [0])


def test_assert_layers_on_names_where_a_layer_is():
    plc = _placed("groq-tsp", "llama-3.1-8b", "auto")
    last = plc.n_units - 1
    with pytest.raises(AssertionError, match=rf"not on unit {last} of groq-tsp; they are on "):
        assert_layers_on(plc, last, [0])


@pytest.mark.parametrize("tolerance", [math.nan, -0.1, math.inf, "0.1", None, True])
def test_assert_balanced_refuses_a_tolerance_that_is_not_a_fraction(tp2, tolerance):
    """NaN used to pass every placement (``off > nan`` is never true): a test that could not
    fail; a string raised a TypeError."""
    with pytest.raises(pa.ConfigError, match="assert_balanced\\(\\): tolerance must be"):
        assert_balanced(tp2, tolerance)


def test_assert_balanced_names_the_unit_and_bytes_off_the_mean(tp2):
    assert_balanced(tp2, np.float32(0.0))
    bad = _overfilled(tp2, 1, 2)
    used = [sum(bad.unit_bytes(u).values()) for u in range(2)]
    off = abs(used[1] - sum(used) / 2)
    with pytest.raises(AssertionError) as err:
        assert_balanced(bad, 0.05)
    text = str(err.value)
    assert "unit 1 of h100 holds" in text and f"({used[1]:,} B)" in text  # the fuller of two
    assert f"{off:,.0f} B ({off / (sum(used) / 2):.1%}) above the mean" in text


@pytest.mark.parametrize("helper, args", [(assert_fits, ()), (assert_balanced, (0.1,)),
                                          (assert_layers_on, (0, [0]))])  # fmt: skip
@pytest.mark.parametrize("what", [None, "plc.json", {}])
def test_helpers_refuse_what_is_not_a_placement(helper, args, what):
    with pytest.raises(pa.ConfigError, match=rf"{helper.__name__}\(\): plc must be a Placement"):
        helper(what, *args)


def test_assert_fits_refuses_a_system_name_or_a_model_for_the_graph(tp2):
    with pytest.raises(pa.ConfigError, match="system must be a System .*got str"):
        assert_fits(tp2, system="h100")
    with pytest.raises(pa.ConfigError, match="graph must be a DecodeGraph .*got ModelConfig"):
        assert_fits(tp2, graph=pa.load_model("llama-3.1-8b"))


def test_a_placement_checked_against_another_model_says_which_it_was_made_for(tp2):
    graph = pa.build_graph(pa.load_model("llama-3.1-70b"), pa.Workload().resolved("bf16"))
    with pytest.raises(AssertionError, match=r"placement \(made for llama-3.1-8b\) does not "
                       "match model llama-3.1-70b: missing layers"):  # fmt: skip
        assert_fits(tp2, graph)


def test_a_placement_reads_from_its_dict_bytes_or_text(tp2):
    text = tp2.to_json()
    assert pa.Placement.from_json(json.loads(text)) == tp2
    assert pa.Placement.from_json(text.encode()) == tp2
    for bad, what in (("", "not valid JSON"), ("  ", "not valid JSON"),
                      ("[1]", "expected a JSON object")):  # fmt: skip
        with pytest.raises(pa.ConfigError, match=f"placement JSON: {what}"):
            pa.Placement.from_json(bad)
    with pytest.raises(pa.ConfigError, match="takes JSON text, a file's path or a dict"):
        pa.Placement.from_json(3)
