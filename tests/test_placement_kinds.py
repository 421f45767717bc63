"""Typed placements (issue 13 item 4): every placer writes its kind's region and layout records
(pyaccel.place.kinds.<kind>), the file format reads them back field by field, and a malformed or
unknown field is refused naming the layer and the field."""

from __future__ import annotations

import ast
import copy
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import pyaccel as pa
from pyaccel.errors import ConfigError, EngineNotBuiltError
from pyaccel.place.kinds import capacity_of, kind_module
from pyaccel.place.kinds.gpu import GpuRegion
from pyaccel.place.kinds.wafer import WaferLayout, WaferRegion

DATA = Path(__file__).resolve().parent / "data" / "placements"


def _doc(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["wafer-layer_groups", "lpu", "gpu", "asic-etch"])
def test_regions_and_layout_are_the_kinds_records(name):
    plc = pa.Placement.from_json(DATA / f"{name}.json")
    kind = kind_module(plc.kind)
    assert isinstance(plc.layout, kind.LAYOUT)
    assert all(isinstance(s.region, kind.REGION) for s in plc.layers)
    hash(plc.layers[0].region)  # frozen: lists are kept as tuples


def test_record_fields_are_typed_values():
    plc = pa.Placement.from_json(DATA / "wafer-layer_groups.json")
    region = plc.layers[0].region
    assert region.strategy == "layer_groups" and region.wafer == 0
    assert len(region.rect) == 4 and all(isinstance(v, int) for v in region.rect)
    assert region.tiles == (4, 4) and region.grid is None and region.scale is None
    assert plc.layout == WaferLayout(
        strategy="layer_groups", wafers=1, tiles=(4, 4), tiles_per_wafer=((4, 4),)
    )


def test_to_dict_writes_only_what_is_set_in_field_order():
    region = WaferRegion(strategy="interleave", wafer=1, rect=(0, 0, 8, 4), grid=(8, 4))
    text = json.dumps(region.to_dict())
    assert text == '{"strategy": "interleave", "wafer": 1, "rect": [0, 0, 8, 4], "grid": [8, 4]}'
    assert WaferRegion.from_dict(json.loads(text), "r") == region


@pytest.mark.parametrize(
    "region, needles",
    [
        ({"stage": 0, "tp_rank": [0]}, ["layer 2: region field 'tp_rank'", "stage, tp_ranks"]),
        ({"stage": 0, "tp_ranks": [0, "1"]}, ["layer 2: region 'tp_ranks'", "[0, '1']"]),
        ({"stage": True}, ["layer 2: region 'stage'", "True"]),
    ],
)
def test_unknown_or_malformed_region_field_is_refused(region, needles):
    doc = _doc("gpu")
    next(s for s in doc["layers"] if s["layer"] == 2)["region"] = region
    with pytest.raises(ConfigError) as exc:
        pa.Placement.from_json(json.dumps(doc))
    assert all(n in str(exc.value) for n in needles), str(exc.value)


def test_unknown_layout_field_is_refused():
    doc = copy.deepcopy(_doc("lpu"))
    doc["layout"]["tensor_parallel"] = 8
    with pytest.raises(ConfigError, match="layout field 'tensor_parallel' is not one of tp, pp"):
        pa.Placement.from_json(json.dumps(doc))


def test_a_region_of_another_kind_is_refused():
    plc = pa.Placement.from_json(DATA / "gpu.json")
    wrong = plc.layers[0].__class__(**{**plc.layers[0].__dict__, "region": WaferRegion()})
    bad = plc.__class__(**{**plc.__dict__, "layers": (wrong, *plc.layers[1:])})
    with pytest.raises(ConfigError, match="must be a GpuRegion"):
        bad.check()
    assert isinstance(plc.layers[0].region, GpuRegion)


def test_a_kind_without_a_module_is_not_built():
    with pytest.raises(EngineNotBuiltError, match="the tpu placer and engine are not built yet"):
        capacity_of(SimpleNamespace(kind="tpu"))


def test_workload_is_the_workload_the_placement_was_made_for():
    plc = pa.Placement.from_json(DATA / "gpu.json")
    assert plc.workload == pa.Workload(batch=8, weights="bf16", expert_weights="bf16")
    made = pa.place(
        pa.load_model("llama-3.1-70b"), pa.load_system("h100", "auto"), pa.Workload(batch=8)
    )
    assert made.workload == plc.workload and made.to_dict()["workload"] == _doc("gpu")["workload"]


def test_importing_pyaccel_and_the_spine_imports_no_placer():
    """``place/__init__`` and the spine types import no placer: engines and executors can read
    placements without one (a placer is imported when its kind is placed)."""
    code = (
        "import sys, pyaccel, pyaccel.place.files, pyaccel.emulation, pyaccel.numerics.execute\n"
        "print(sorted(m for m in sys.modules if m.startswith('pyaccel.place.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ast.literal_eval(out.stdout))
    assert "pyaccel.place.placement" in loaded
    assert not loaded & {f"pyaccel.place.{k}" for k in ("wafer", "lpu", "gpu", "asic")}


def test_a_layout_of_another_kind_or_a_dict_is_refused():
    plc = pa.Placement.from_json(DATA / "lpu.json")
    for wrong in (WaferLayout(strategy="interleave"), {"tp": 8, "pp": 1}):
        with pytest.raises(ConfigError, match="field 'layout' must be a LpuLayout"):
            plc.__class__(**{**plc.__dict__, "layout": wrong}).check()
