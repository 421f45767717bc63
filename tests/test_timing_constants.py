"""No timing constant hides in the code (issue 14, item 4).

How the scan works: every numeric literal in ``pyaccel/sim`` and ``pyaccel/place`` other than 0
and 1 is found by walking the modules' syntax trees. A literal is accounted for when it is

- the value of a module-level UPPER_CASE name, and that name is either written into an
  engine's ``ASSUMPTIONS`` (a modelling choice that sets time, with its reasoning) or listed in
  ``NOT_TIMING`` below with why it sets no time (a cache size, a search grid, a float slack); or
- an index or slice (``x[2]``), a cache size (``maxsize=``), or inside an error message; or
- counted in ``STRUCTURAL`` below: per module and value, how many such literals there are and
  why they are arithmetic of the model's structure, not a cost (link ids ``2i``/``2i+1``, bits
  per byte, binary-search midpoints).

Machine properties are not in code at all: they are preset parameters (with their source or
named assumption), which ``--sensitivity`` varies and the what-if doubles when they are timed
(tests/test_what_if_knobs.py). A new literal anywhere, or a new UPPER_CASE constant, fails this
test until it is named, and the count ledger keeps even a new ``2`` in a listed module from
slipping through.
"""

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

import pyaccel as pa
from pyaccel.hw.spec import PARAMS_BY_KIND
from pyaccel.sim.inputs import engine_module

PACKAGE = Path(pa.__file__).parent
SCANNED = ("sim", "place")

# module-level names whose numbers set no time, and why
NOT_TIMING = {
    "_FIXED": "index of the fixed_latency class in an LPU schedule's span classes",
    "_LINK_LATENCY": "index of the c2c_latency class in an LPU schedule's span classes",
    "KEPT_BUSIEST": "how many micro-batches' busiest chips a process keeps (a cache size)",
    "SCHEDULE_ROUNDS_PER_MICRO_BATCH": "rounds a simulated pipeline runs to settle (checked)",
    "SCHEDULE_EXTRA_ROUNDS": "rounds a simulated pipeline runs to settle (checked)",
    "_FRAGMENTS_MAX": "entries of a process-wide cache of compiled LPU op fragments",
    "_SCHEDULES_MAX": "entries of a process-wide cache of LPU transfer schedules",
    "_GEMV_BLOCKS_FIRST": "blocks of the first GEMV arrays an LPU fragment cache makes",
    "_GEMV_GROWTH": "the factor those cached GEMV arrays grow by",
    "_NONE": "the empty link windows of an LPU program without collectives",
    "INPUT": "a sentinel dependency index in an LPU fragment",
    "CYCLE_ROUNDING_SLACK": "float slack when rounding a bound up to whole cycles",
    "WHOLE_SLACK": "float slack under which a latency counts as a whole number of ticks",
    "SETUP_SLOT": "a slot id in the mesh kernels' parameter vector",
    "OVERHEAD_SLOT": "a slot id in the mesh kernels' parameter vector",
    "NWAV_SLOT": "a slot id in the mesh kernels' parameter vector",
    "FLOW_COLUMNS": "a flow array's two columns, source and destination PE",
    "FORMAT_VERSION": "the placement file format's version",
    "READS": "placement file format versions this code reads",
    "MAX_UNITS": "the largest system a placement search tries",
    "REGION_SCALES": "region sizes the wafer placement search tries",
    "GROUP_COUNTS": "tiles per wafer the layer_groups placement search tries",
    "EP_WAYS": "wafers a MoE layer's experts may be spread over, tried by the placement search",
    "ROUTER_BITS": "routers' stored bits (16, as the graph keeps them): a width, not a time",
    "LORA_TARGETS": "which tensors carry an adapter (PEFT's default for Llama), not a time",
}

# per module and value: how many literals are arithmetic of the model's structure, and what
STRUCTURAL = {
    ("sim/driver.py", 2): (1, "array axis: a verify step's rows of one sequence"),
    ("sim/lpu/plans.py", 2): (2, "K and V: the two halves of the cache's K+V elements"),
    ("place/lpu.py", 2): (1, "bisection's midpoint over stage counts"),
    ("sim/lpu/program.py", 2): (6, "resource ids: install[P], mxm[P], then vxm, sxm, memio"),
    ("sim/lpu/program.py", 3): (1, "resource ids: the three shared slices (vxm, sxm, memio)"),
    ("sim/lpu/program.py", 1e-9): (1, "float slack when rounding a time up to cycles"),
    ("sim/wafer/cost.py", 2): (1, "the embedding row at the middle of B (wafer.embed_row_middle)"),
    ("sim/wafer/attention.py", 2): (1, "K and V halves of the cache"),
    ("sim/wafer/cost.py", 1e-9): (1, "a guard against dividing by zero"),
    ("sim/wafer/mesh.py", 2): (
        7,
        "link ids (a line's two directed links per edge, 2i and 2i+1; ramps after them); "
        "a group's root at its middle (wafer.tree_groups)",
    ),
    ("sim/wafer/mesh.py", 3): (1, "link ids: a line's ramps out come after 3n other links"),
    ("sim/wafer/flows.py", 2): (
        6,
        "link ids (a line's two directed links per edge, 2i and 2i+1, so a hop east or west "
        "moves the id by 2; ramps after them); a flow's path has its two ramps besides its hops",
    ),
    ("sim/wafer/flows.py", 3): (1, "link ids: a line's ramps out come after 3n other links"),
    ("sim/wafer/mesh.py", 6): (1, "router ports E, W, N, S, ramp in, ramp out: port ids"),
    ("sim/pipeline.py", 2): (1, "a link is a (busy, latency) pair in the schedule's arrays"),
    ("sim/pipeline.py", 4): (1, "a crossing is (busy, latency, relay offset, relay busy)"),
    ("sim/wafer/grid.py", 4): (1, "a line's four links per PE in its link ids (2 ways, 2 ramps)"),
    ("sim/wafer/grid.py", 3): (1, "link ids: a line's ramps out come after 3n other links"),
    ("place/asic.py", 2): (2, "binary-search midpoints"),
    ("place/common.py", 2): (2, "binary-search midpoints"),
    ("place/common.py", 4096): (4, "a 4096 x 4096 tensor to compare formats' bytes per weight"),
    ("place/files.py", 2): (1, "placement file format version 2 renamed a key"),
    ("place/kinds/lpu.py", 2): (2, "[first, last] pairs in the placement JSON schema"),
    ("place/kinds/wafer.py", 2): (
        6,
        "[w, h] / [gx, gy] pairs in the placement JSON schema; "
        "a slot on at least 2 wafers spreads its experts",
    ),
    ("place/kinds/wafer.py", 4): (2, "[x0, y0, w, h] in the JSON schema; keys listed in full"),
    ("place/kinds/wafer.py", 3): (1, "[w, h, columns] of expert bands in the JSON schema"),
    ("place/kinds/wafer_tiles.py", 2): (1, "embedding rows held as 16-bit values (capacity)"),
    ("place/kinds/wafer_tiles.py", 4096): (2, "a 4096-token probe of the KV format's bytes"),
    ("place/kinds/wafer_tiles.py", 1e-9): (1, "a guard against dividing by zero"),
    ("place/wafer.py", 2): (2, "serpentine order: every other strip reversed"),
    ("place/wafer.py", 16): (1, "the placement search grows a region by 1/16 a try"),
    ("place/wafer_fit.py", 2): (1, "binary-search midpoint"),
}


def _parents(tree) -> dict:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _is_constant_name(name: str) -> bool:
    return name.lstrip("_").isupper()


def _named(node, parents, tree) -> bool:
    """Whether a literal is a module-level UPPER_CASE constant's value, an index or slice, a
    cache size, or part of an error message."""
    p = node
    while p in parents:
        q = parents[p]
        if isinstance(q, ast.Subscript) and p is q.slice:
            return True
        if isinstance(q, ast.keyword) and q.arg == "maxsize":
            return True
        if isinstance(q, (ast.JoinedStr, ast.Raise)):
            return True
        if isinstance(q, (ast.Assign, ast.AnnAssign)) and q in tree.body:
            targets = q.targets if isinstance(q, ast.Assign) else [q.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            return bool(names) and all(_is_constant_name(n) for n in names)
        p = q
    return False


def unnamed_literals(source: str) -> Counter:
    """Numeric literals other than 0 and 1 that no name, index or message accounts for:
    ``Counter`` of their values."""
    tree = ast.parse(source)
    parents = _parents(tree)
    out: Counter = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            if node.value not in (0, 1) and not _named(node, parents, tree):
                out[node.value] += 1
    return out


def numeric_constants(source: str) -> list[str]:
    """Module-level UPPER_CASE names whose value holds a number (WHAT_IF tables aside)."""
    out = []
    for node in ast.parse(source).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        numbers = [c for c in ast.walk(node.value)
                   if isinstance(c, ast.Constant) and type(c.value) in (int, float)]  # fmt: skip
        if names and numbers and all(_is_constant_name(n) for n in names):
            out += [n for n in names if n != "WHAT_IF"]
    return out


def _modules():
    for part in SCANNED:
        for path in sorted((PACKAGE / part).rglob("*.py")):
            yield path.relative_to(PACKAGE).as_posix(), path.read_text()


def _assumed_names() -> set[str]:
    """UPPER_CASE names written into any engine's ASSUMPTIONS."""
    text = " ".join(a for kind in PARAMS_BY_KIND for a in engine_module(kind).ASSUMPTIONS)
    return set(re.findall(r"\b_?[A-Z][A-Z0-9_]+\b", text))


def test_no_unnamed_literal_in_sim_or_place():
    found = {(mod, v): n for mod, src in _modules() for v, n in unnamed_literals(src).items()}
    ledger = {key: count for key, (count, _) in STRUCTURAL.items()}
    new = {k: n for k, n in found.items() if n != ledger.get(k, 0)}
    gone = {k: c for k, c in ledger.items() if k not in found}
    assert not new and not gone, (
        f"numeric literals that are not accounted for (module, value): count {new}; give a "
        "timing constant a name in an engine's ASSUMPTIONS (or a preset parameter when it is a "
        "machine property), or, if it sets no time, count it in STRUCTURAL with why; "
        f"ledger entries no longer found: {gone}"
    )


def test_every_named_constant_is_an_assumption_or_sets_no_time():
    assumed = _assumed_names()
    names = {name for _, src in _modules() for name in numeric_constants(src)}
    unlisted = sorted(names - assumed - set(NOT_TIMING))
    assert not unlisted, f"constants in no engine's ASSUMPTIONS nor in NOT_TIMING: {unlisted}"
    stale = sorted(set(NOT_TIMING) - names)
    assert not stale, f"NOT_TIMING names no module defines: {stale}"


def test_the_scan_catches_a_new_literal_and_a_new_constant():
    src = (
        "LIMIT = 7\n"
        "def cost(x, parts):\n"
        "    y = parts[2] + x * 1\n"
        "    if y < 0:\n"
        "        raise ValueError(f'{y:.3g} below 0')\n"
        "    return 3 * y + 0.5\n"
    )
    assert unnamed_literals(src) == Counter({3: 1, 0.5: 1})  # not 7, [2], 1, 0, the message
    assert numeric_constants(src) == ["LIMIT"]
    assert "LIMIT" not in _assumed_names() | set(NOT_TIMING)  # so the test above would fail


@pytest.mark.parametrize(
    "kind, name",
    [("wafer", n) for n in ("ONE_LEVEL_COLOURS", "TWO_LEVEL_COLOURS", "ACC_BYTES")]
    + [
        ("lpu", n)
        for n in ("TRANSITS_PER_C2C", "ARGMAX_PAIR_BYTES", "TOKEN_ID_BYTES", "SOFTMAX_STATS_BYTES")
    ]
    + [("gpu", "RING_ALLREDUCE_PHASES")],
)
def test_timing_constants_are_in_their_engines_assumptions(kind, name):
    assert any(name in a for a in engine_module(kind).ASSUMPTIONS)


def _step_s(system, model, sets=(), units="auto") -> float:
    work = pa.Workload(context=64, tokens=2)
    sysm, cfg = pa.load_system(system, units, overrides=list(sets)), pa.load_model(model)
    tr = pa.emulate(cfg, sysm, pa.place(cfg, sysm, work), work, event_steps=())
    return float(tr.step_time_s)


@pytest.mark.parametrize(
    "system, model, param, value, slower",
    [
        ("groq-tsp", "tiny-llama", "norm_vxm_ops_per_elem", 64, True),
        ("groq-tsp", "tiny-llama", "softmax_exp_vxm_ops_per_elem", 64, True),
        ("groq-tsp", "tiny-llama", "softmax_scale_vxm_ops_per_elem", 64, True),
        ("groq-tsp", "tiny-llama", "stream_hop_cycles", 2, True),
        ("groq-tsp", "tiny-llama", "hemispheres", 4, False),  # shorter hops across a quarter
        ("groq-tsp", "llama-3.1-8b", "weight_buffers_per_plane", 1, True),
        ("wse3", "llama-3.1-8b", "norm_scale_lane_ops_per_elem", 64, True),
        ("wse3", "llama-3.1-8b", "norm_scale_dsds_per_token", 64, True),
        ("wse3", "llama-3.1-8b", "elementwise_task_messages", 0, False),
        ("taalas-hc1", "llama-3.1-8b", "fused_op_busy_cycles", 64, True),
    ],
)
def test_each_named_cost_moves_the_step(system, model, param, value, slower):
    """The costs moved out of the code into presets are read where they apply: changing one
    moves the emulated step the way its mechanism says (so --sensitivity can vary it)."""
    base = _step_s(system, model, units=1 if system == "wse3" else "auto")
    moved = _step_s(system, model, [f"{param}={value}"], units=1 if system == "wse3" else "auto")
    assert (moved > base) if slower else (moved < base)


def test_activation_buffers_take_lpu_sram():
    cfg = pa.load_model("llama-3.1-8b")
    work = pa.Workload(context=64, tokens=2)
    used = []
    for n in (4, 8):
        sysm = pa.load_system("groq-tsp", 64, overrides=[f"activation_buffers={n}"])
        used.append(pa.place(cfg, sysm, work).unit_bytes(0))
    assert sum(used[1].values()) > sum(used[0].values())
