"""Fair GPU layouts (issue 17): ``--units auto`` widens tensor parallelism within a node before
it adds pipeline stages, so GPU presets are compared on the layouts serving engines deploy."""

import pytest

import pyaccel as pa
from pyaccel.compare import compare
from pyaccel.model.graph import build_graph
from pyaccel.place import gpu as gpu_place

GPUS = ("h100", "h200", "b200")


def _auto(model_name: str, system: str, **work):
    model = pa.load_model(model_name)
    return pa.place(model, pa.load_system(system, units="auto"), pa.Workload(tokens=2, **work))


@pytest.mark.parametrize("system", GPUS)
@pytest.mark.parametrize(
    ("model_name", "work"),
    [("deepseek-v3", {}), ("llama-3.1-70b", {"weights": "bf16"}), ("llama-3.1-405b", {}),
     ("mixtral-8x7b", {"batch": 32, "context": 8192}), ("llama-3.1-8b", {})],
)  # fmt: skip
def test_auto_uses_the_widest_tp_before_a_second_stage(system, model_name, work):
    plc = _auto(model_name, system, **work)
    graph = build_graph(pa.load_model(model_name), plc.workload)
    widest = gpu_place.tp_candidates(graph, pa.load_system(system).spec)[0]
    assert plc.layout.pp == 1 or plc.layout.tp == widest, plc.layout
    assert "TP widens within a node before a pipeline stage is added" in plc.reason


def test_auto_takes_the_fewest_gpus_of_such_layouts():
    """deepseek-v3 (fp8, about 700 GB resident) does not fit on 8 H100s (80 GB each), so auto
    takes two stages of TP 8 (16), not the 9 or 10 of a TP-narrow pipeline; on B200 and H200
    it fits one node."""
    assert (_auto("deepseek-v3", "h100").layout.tp, _auto("deepseek-v3", "h100").layout.pp) == (
        8,
        2,
    )
    for system in ("h200", "b200"):
        plc = _auto("deepseek-v3", system)
        assert (plc.layout.tp, plc.layout.pp, plc.n_units) == (8, 1, 8)


def test_compare_deepseek_v3_uses_tp_within_a_node_and_b200_is_not_slower():
    records = compare("deepseek-v3", list(GPUS), pa.Workload(tokens=2))
    by = {r.system: r for r in records}
    assert all(r.layout["tp"] == 8 for r in records), [r.layout for r in records]
    assert by["b200"].tokens_per_s_per_user >= by["h100"].tokens_per_s_per_user


def test_b200_is_not_slower_than_h100_per_user_at_equal_units():
    model, work = pa.load_model("deepseek-v3"), pa.Workload(tokens=2)
    speed = {}
    for system in ("h100", "b200"):
        sysm = pa.load_system(system, units=16)
        plc = pa.place(model, sysm, work)
        assert (plc.layout.tp, plc.layout.pp) == (8, 2)
        speed[system] = pa.emulate(model, sysm, plc, work).tokens_per_s_per_user
    assert speed["b200"] >= speed["h100"], speed
