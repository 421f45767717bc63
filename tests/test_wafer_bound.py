"""The wafer bound binds and is still a bound: it counts the hops each full-line all-reduce must
cross (the farthest PE's data over ``min(w, h) - 1`` hops of its region), and every emulated
step stays at or above it on every wafer preset x model preset that fits."""

import pytest

from pyaccel.model.config import preset_names

from conftest import bound_ratio

WAFERS = ("wse3", "wse2")
FAST_MODELS = ("tiny", "llama-2-7b", "llama-3.1-8b", "waferllm")  # the default suite's share


def _ratio(system, model, strategy="interleave", batch=1, context=64) -> float | None:
    return bound_ratio(system, model, "auto", batch, context, [f"placement_strategy={strategy}"])


@pytest.mark.parametrize("system", WAFERS)
@pytest.mark.parametrize("model", [m for m in preset_names() if m.startswith(FAST_MODELS)])
def test_emulated_at_or_above_the_bound(system, model):
    ratio = _ratio(system, model)
    assert ratio is None or ratio >= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("system", WAFERS)
@pytest.mark.parametrize("model", preset_names())
def test_emulated_at_or_above_the_bound_everywhere(system, model):
    for strategy in ("interleave", "layer_regions", "layer_groups"):
        for batch, context in ((1, 64), (8, 4096)):
            ratio = _ratio(system, model, strategy, batch, context)
            assert ratio is None or ratio >= 1.0, (strategy, batch, context)


def test_the_bound_binds_on_llama_8b():
    assert _ratio("wse3", "llama-3.1-8b") < 10  # x255 before it counted hops
