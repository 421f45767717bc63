"""Placement files written by pyaccel before the typed placements (tests/data/placements, one per
kind and wafer strategy, from ``place --json``): each still loads, passes every check against its
recorded system, and is written back the same but for the format version (a version-2 file
is a version-3 file without expert placements) and the model's source, recorded since."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pyaccel as pa
from pyaccel.place.files import FORMAT_VERSION
from pyaccel.testing import assert_fits

DATA = Path(__file__).resolve().parent / "data" / "placements"
FILES = sorted(p.name for p in DATA.glob("*.json"))


def test_every_kind_has_a_file():
    kinds = {json.loads((DATA / name).read_text(encoding="utf-8"))["kind"] for name in FILES}
    assert kinds == {"wafer", "lpu", "gpu", "asic"}


@pytest.mark.parametrize("name", FILES)
def test_file_written_before_loads_checks_and_writes_back_the_same(name):
    text = (DATA / name).read_text(encoding="utf-8")
    plc = pa.Placement.from_json(DATA / name)
    assert_fits(plc)
    now = f'"format_version": {FORMAT_VERSION}'
    want = text.rstrip("\n").replace('"format_version": 2', now, 1)
    # written back the same, but for the model's source, which files record since
    got = json.loads(plc.to_json())
    assert got.pop("model_source") == {"preset": got["model"]}
    assert json.dumps(got, indent=2) == json.dumps(json.loads(want), indent=2)
    assert pa.Placement.from_json(plc.to_json()) == plc
