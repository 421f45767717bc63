"""A fifth machine kind, defined here and nowhere else, runs through the whole spine.

It touches exactly what ARCHITECTURE.md says a new kind touches: a spec dataclass and a preset,
its placement records (region and layout types, capacity, checks), a placer, an engine, a
functional executor and one registry entry. Nothing in the driver, the CLI, the report or the
orchestration is edited or patched: ``place``, ``emulate``, ``Report.from_trace`` (with its
re-emulated what-if), the functional decode and ``pyaccel run`` all work on it.

The toy kind ("tile"): each unit keeps its layers' weights and KV cache in one SRAM read at
``sram_bytes_per_s``; every op costs a fixed issue latency plus its bytes over that SRAM; units
hold contiguous blocks of layers and pass the hidden vector on over a link.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

import pyaccel as pa
from pyaccel.cli import app
from pyaccel.hw.fields import _f, _i
from pyaccel.hw.kinds import MACHINE_KINDS, MachineKind
from pyaccel.numerics.executor import Executor
from pyaccel.place.common import contiguous_partition
from pyaccel.place.kinds import Record, check_stages, is_int, jfield
from pyaccel.place.placement import LayerSlot, Placement
from pyaccel.sim.contract import MICRO_BATCHES, BoundRates, PassTiming, Span
from pyaccel.units import cycles

# -- spec module and preset ----------------------------------------------------------------------


@dataclass(frozen=True)
class TileParams:
    """A tile: one SRAM per unit, a fixed issue latency per op, a link to the next tile."""

    clock_hz: float = _f("clock (Hz)")
    power_w: float = _f("power per tile (W)")
    sram_bytes: int = _i("SRAM per tile (bytes)")
    sram_bytes_per_s: float = _f("SRAM read bandwidth per tile (bytes/s)")
    link_bytes_per_s: float = _f("link to the next tile (bytes/s)")
    issue_latency_s: float = _f("fixed cost of issuing one op (s)")

    def relations(self) -> list:
        """No cross-field checks."""
        return []


PRESET = """
[preset]
name = "tile-1"
kind = "tile"
description = "a toy SRAM tile (test kind)"
native_format = "bf16"

[params]
clock_hz = { value = 1e9, assumption = "test: 1 GHz" }
power_w = { value = 100, assumption = "test: 100 W" }
sram_bytes = { value = 4e9, assumption = "test: 4 GB" }
sram_bytes_per_s = { value = 2e12, assumption = "test: 2 TB/s" }
link_bytes_per_s = { value = 1e11, assumption = "test: 100 GB/s" }
issue_latency_s = { value = 1e-7, assumption = "test: 100 ns" }
"""

# -- placement records (spine types engines may read) --------------------------------------------


@dataclass(frozen=True)
class TileRegion(Record):
    """The stage (unit) a layer lives on."""

    stage: int | None = jfield(is_int, "a stage (integer)")


@dataclass(frozen=True)
class TileLayout(Record):
    """How many stages hold layers."""

    stages: int | None = jfield(is_int, "a stage count (integer)")


def _capacity(system, graph=None):
    return ({"sram": int(system.spec.params.sram_bytes)},
            dict.fromkeys(("weights", "kv", "buffers"), "sram"), {"sram": 0})  # fmt: skip


records = SimpleNamespace(
    REGION=TileRegion,
    LAYOUT=TileLayout,
    capacity=_capacity,
    check=lambda plc, graph, system: check_stages(plc, required=True),
)

# -- placer ------------------------------------------------------------------------------------


def _build(graph, system, units: int) -> Placement:
    keys = graph.layer_keys
    sizes = [sum(graph.resident_bytes(k)) for k in keys]
    stages = contiguous_partition(sizes, units)
    slots = tuple(
        LayerSlot(k, (s,), (graph.resident_bytes(k)[0],), (graph.resident_bytes(k)[1],), (0,),
                  *graph.resident_bytes(k), TileRegion(stage=s))
        for k, s in zip(keys, stages, strict=True)
    )  # fmt: skip
    cap, level_of, reserved = _capacity(system)
    return Placement(system.name, "tile", graph.model_name, units, cap, level_of, reserved, slots,
                     TileLayout(stages=max(stages) + 1), graph.workload,
                     f"{units} tile(s)")  # fmt: skip


def _place_auto(graph, system):
    for units in range(1, 65):
        plc = _build(graph, system, units)
        if not plc.shortfalls():
            return plc
    raise pa.PlacementError("does not fit on 64 tiles")


placer = SimpleNamespace(
    place_auto=_place_auto,
    place_units=lambda graph, system, units: _build(graph, system, units),
)

# -- engine ------------------------------------------------------------------------------------


class TilePass:
    """One micro-batch's pass: each op on its layer's tile, one after another; a hand-off to the
    next tile after its last layer."""

    def __init__(self, graph, system, placement):
        self.graph, self.p, self.clock = graph, system.spec.params, system.spec.clock_hz
        self.stage_of = {s.layer: s.region.stage for s in placement.layers}
        self.n_stages = placement.layout.stages

    def group_key(self, layer: int) -> int:
        return self.stage_of[layer]

    def _op(self, op) -> tuple[int, int]:
        issue = cycles(self.p.issue_latency_s, self.clock)
        n = op.weight_bytes + op.kv_read_bytes + op.kv_write_bytes
        return issue, cycles(n / self.p.sram_bytes_per_s, self.clock)

    def time(self, step, events: bool) -> PassTiming:
        at = {layer: op for layer, op, _ in step.attention()}
        stage_c, spans, t = [0] * self.n_stages, [], 0
        for op in self.graph.ops:
            op = at.get(op.layer, op) if op.kind == "attention" else op
            stage = self.stage_of[op.layer]
            issue, body = self._op(op)
            spans += [Span(op.layer, f"{op.name}.issue", op.kind, stage, "fixed_latency", t,
                           issue),
                      Span(op.layer, op.name, op.kind, stage, "tile_sram", t + issue, body,
                           op.mem_bytes, op.flops)]  # fmt: skip
            stage_c[stage] += issue + body
            t += issue + body
        return PassTiming(tuple(stage_c), spans if events else ())

    def notes(self) -> dict:
        return {"stages": self.n_stages}


engine = SimpleNamespace(
    RESOURCES=("tile_sram", "fixed_latency"),
    WHAT_IF={
        "tile_sram": (("sram_bytes_per_s",), 2.0),
        "fixed_latency": (("issue_latency_s",), 0.5),
    },  # fmt: skip
    ASSUMPTIONS=("tile.in_order: a tile runs its ops one after another",),
    PIPELINE=MICRO_BATCHES,
    rates=lambda spec, work: BoundRates(
        spec.params.sram_bytes_per_s,
        "tile_sram",
        lambda op: 0.0,
        "tile_sram",
        spec.params.link_bytes_per_s,
        "tile_link",
    ),  # fmt: skip
    n_stages=lambda placement: placement.layout.stages,
    pass_model=TilePass,
)

# -- functional executor -------------------------------------------------------------------------


class TileExecutor(Executor):
    """A tile adds partial sums in fp32 in chain order and does not split a layer."""

    def describe(self) -> str:
        return f"tile: {self.placement.n_units} tile(s), layers whole"


# -- the one registry entry ------------------------------------------------------------------------


@pytest.fixture
def tile(monkeypatch, tmp_path):
    kind = MachineKind("tile", TileParams, "tile", records, placer, engine, TileExecutor)
    monkeypatch.setitem(MACHINE_KINDS, "tile", kind)
    path = tmp_path / "tile-1.toml"
    path.write_text(PRESET)
    return path


MODEL = "tiny-llama"
WORK = pa.Workload(batch=4, context=64, tokens=6)


def test_place_emulate_and_report_a_fifth_kind(tile):
    model = pa.load_model(MODEL)
    system = pa.load_system(tile, units=2)
    plc = pa.place(model, system, WORK)
    assert plc.kind == "tile" and plc.n_units == 2 and plc.unit_noun == "tile"
    assert {s.region.stage for s in plc.layers} == {0, 1}
    trace = pa.emulate(model, system, plc, WORK)
    assert trace.kind == "tile" and len(trace.step_cycles) == WORK.tokens
    assert (trace.step_cycles >= trace.lower_bound_cycles).all()
    assert np.all(np.diff(trace.step_cycles) >= 0)  # attention grows with the context
    assert trace.meta["micro_batches"] == 2  # the driver split the batch over the two tiles
    assert set(trace.events["resource"]) == {"tile_sram", "fixed_latency"}
    report = pa.Report.from_trace(trace)
    gains = {row.resource: row.gain for row in report.what_if}
    assert set(gains) == {"tile_sram", "fixed_latency"}
    assert all(g > 1.0 for g in gains.values())  # both re-emulated, both faster
    assert "tile.in_order: a tile runs its ops one after another" in report.assumptions


def test_placement_file_of_a_fifth_kind_round_trips(tile, tmp_path):
    model = pa.load_model(MODEL)
    system = pa.load_system(tile, units="auto")
    plc = pa.place(model, system, WORK)
    out = tmp_path / "plc.json"
    plc.to_json(out)
    back = pa.Placement.from_json(out, system=system, model=model)
    assert back.layers == plc.layers and back.layout == plc.layout


def test_functional_decode_of_a_fifth_kind(tile):
    model = pa.load_model(MODEL)
    system = pa.load_system(tile, units=2)
    plc = pa.place(model, system, WORK)
    trace = pa.emulate(model, system, plc, WORK, functional=True)
    assert trace.functional["functional_partition"] == "tile: 2 tile(s), layers whole"
    assert trace.functional["top1_agreement"] >= 0.9


def test_the_cli_runs_a_fifth_kind(tile):
    args = ["run", "--system", str(tile), "--model", MODEL, "--units", "2", "--batch", "4",
            "--tokens", "3", "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rec = json.loads(result.stdout)
    assert rec["system"] == "tile-1" and rec["units"] == 2 and rec["tokens_per_s_per_user"] > 0


def test_a_kind_without_a_registry_entry_is_refused(tmp_path):
    path = tmp_path / "tile-1.toml"
    path.write_text(PRESET)
    with pytest.raises(pa.ConfigError, match="kind 'tile' is not one of wafer, lpu, asic, gpu"):
        pa.load_system(path)
