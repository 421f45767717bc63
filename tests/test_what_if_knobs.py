"""Every named rate or latency of a preset can be doubled by the what-if (issue 14, item 1).

A preset assumption whose name says it is a rate (``_per_s``, ``_per_cycle``, ``_hz``) or a time
(``_s``, ``_cycles``, ``_cycles_per_...``) must be a knob of exactly one resource class in its
kind's ``WHAT_IF``, or be listed in ``NOT_A_CLASS`` with the reason no single class owns it.
``--sensitivity`` varies every assumption either way (tests/test_sensitivity.py)."""

import re
from dataclasses import fields

import pytest

import pyaccel as pa
from pyaccel.emulation import engine_module, what_if_system
from pyaccel.hw.io import preset_names
from pyaccel.hw.spec import PARAMS_BY_KIND

TIMED = re.compile(r"(_per_s|_per_cycle|_hz|_s|_cycles|_cycles_per_\w+)$")

NOT_A_CLASS = {
    # every cycle-timed class of the machine at once; --sensitivity varies it
    "clock_hz": "the clock scales every class timed in cycles at once",
}


def _knobs(kind: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for resource, (names, _) in engine_module(kind).WHAT_IF.items():
        for name in names:
            out.setdefault(name, []).append(resource)
    return out


@pytest.mark.parametrize("preset", preset_names())
def test_every_timed_assumption_is_a_what_if_knob(preset):
    spec = pa.load_system(preset, 1).spec
    knobs = _knobs(spec.kind)
    timed = [a for a in spec.assumptions if TIMED.search(a) and a not in NOT_A_CLASS]
    missing = [a for a in timed if a not in knobs]
    assert not missing, f"{preset}: rate/latency assumptions no what-if class doubles: {missing}"
    shared = {a: knobs[a] for a in timed if len(knobs[a]) > 1}
    assert not shared, f"{preset}: a knob must belong to one class: {shared}"


@pytest.mark.parametrize("kind", sorted(PARAMS_BY_KIND))
def test_what_if_classes_are_the_engines_classes_and_knobs_exist(kind):
    engine = engine_module(kind)
    assert set(engine.WHAT_IF) == set(engine.RESOURCES)
    params = {f.name for f in fields(PARAMS_BY_KIND[kind])}
    for resource, (names, factor) in engine.WHAT_IF.items():
        assert set(names) <= params, resource
        factors = factor if isinstance(factor, tuple) else (factor,) * len(names)
        assert len(factors) == len(names), resource
        for name, f in zip(names, factors, strict=True):
            # "twice as fast": a rate doubles, a time or cycle cost halves
            assert f == (0.5 if TIMED.search(name) and not _is_rate(name) else 2), (resource, name)


def _is_rate(name: str) -> bool:
    return bool(re.search(r"(_per_s|_per_cycle|_hz)$", name)) or name in RATE_COUNTS


# knobs that are counts of parallel units (a rate in disguise: twice the units, twice the rate)
RATE_COUNTS = {
    "weight_install_streams",
    "streams_per_direction",
    "mxm_planes",
    "vxm_alus_per_lane",
    "rom_rows_per_cycle",
    "attn_mac_factor",
    "kv_sram_port_bytes",
}


def test_what_if_doubles_the_exp_cost_with_the_lanes():
    """pe_compute doubles the FMAC lanes and halves the exp() cycles (both run on the FMAC
    datapath), each parameter by its own factor."""
    base = pa.load_system("wse3", 1)
    fast = what_if_system(base, "pe_compute")
    assert fast.spec.params.fmac_fp16_per_cycle == 2 * base.spec.params.fmac_fp16_per_cycle
    assert fast.spec.params.exp_cycles_per_elem == base.spec.params.exp_cycles_per_elem / 2


# counts that read like a rate but split a fixed bandwidth: twice the count is not twice as fast
PORT_COUNTS = {
    ("lpu", "global_links"): "the C2C links a chip keeps after its node peers are split over "
    "these ports: more ports, each narrower",
}


@pytest.mark.parametrize(("kind", "name"), sorted(PORT_COUNTS))
def test_a_port_count_is_no_what_if_knob_and_its_doc_says_what_it_is(kind, name):
    from pyaccel.sim.lpu.net import Network

    assert name not in _knobs(kind) and name not in RATE_COUNTS
    (doc,) = [f.metadata["doc"] for f in fields(PARAMS_BY_KIND[kind]) if f.name == name]
    assert "port count, not a rate" in doc  # it read "links per chip leaving its node"
    # the mechanism the doc states: the same spare links over twice the ports, each half as wide
    spec = pa.load_system("groq-tsp", 1).spec
    wide = pa.load_system("groq-tsp", 1, overrides=[f"{name}={2 * spec.params.global_links}"])
    one, two = (Network(s.params, s.clock_hz) for s in (spec, wide.spec))
    assert two.global_bpc == pytest.approx(one.global_bpc / 2)
    assert two.hop_ports > one.hop_ports  # and more of them join two nodes


# What-ifs a user cannot set by hand, and why: the engine rounds the value back
NOT_SETTABLE = {
    ("groq-tsp", "lpu_sxm"): "an SXM pass occupies at least one whole cycle (gains nothing)",
}


@pytest.mark.parametrize("preset", preset_names())
def test_every_what_if_is_a_system_the_user_can_set(preset):
    """A what-if row's machine is the preset with its class's knobs scaled; ``--set`` of those
    values gives the same parameters, so a user can re-run any row by hand (a mesh latency
    halved to half a cycle included: it is kept in quarter-cycle ticks)."""
    system = pa.load_system(preset, 1)
    for resource, (names, _) in engine_module(system.kind).WHAT_IF.items():
        scaled = what_if_system(system, resource).spec.params
        sets = [f"{n}={getattr(scaled, n)!r}" for n in names]
        if (preset, resource) in NOT_SETTABLE:
            with pytest.raises(pa.ConfigError, match="whole number"):
                pa.load_system(preset, 1, overrides=sets)
            continue
        by_hand = pa.load_system(preset, 1, overrides=sets).spec.params
        assert [getattr(by_hand, n) for n in names] == [getattr(scaled, n) for n in names]


def test_a_mesh_latency_by_hand_is_the_what_if_and_off_tick_values_are_refused():
    model, work = pa.load_model("llama-3.2-1b"), pa.Workload(tokens=2)
    system = pa.load_system("wse3", 1)
    plc = pa.place(model, system, work)
    base = pa.emulate(model, system, plc, work).step_time_s
    rows = pa.what_if_gains(model, system, plc, work, base)
    row = next(r for r in rows if r.resource == "mesh_hop")
    halves = ["hop_latency_cycles=0.5", "ramp_latency_cycles=1", "stream_add_latency_cycles=0.5"]
    by_hand = pa.load_system("wse3", 1, overrides=halves)
    assert pa.emulate(model, by_hand, plc, work).step_time_s == row.step_time_s < base
    with pytest.raises(pa.ConfigError, match=r"multiple of 1/4 cycle .* got 0\.3"):
        pa.load_system("wse3", 1, overrides=["hop_latency_cycles=0.3"])
