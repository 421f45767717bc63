"""The Python API (SPEC §8) given what a user's script may hand it: arguments of the wrong type,
NumPy integers, a placement reused with another system or workload. Each is refused with one
``ConfigError``/``PlacementError`` naming the function, the argument and what it got (never an
AttributeError from deep inside), or run as asked."""

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
