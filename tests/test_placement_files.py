"""Placement files (SPEC §7, §8): one versioned format from ``place --json`` and ``to_json`` to
``place --check`` and ``from_json`` on every kind; capacities from the system; checks at every
level a layer can overflow (wafer PEs, LPU MEM slices, ASIC dies, GPUs); the error hints."""

from __future__ import annotations

import copy
import json
from importlib import resources

import pytest
from typer.testing import CliRunner

import pyaccel as pa
from pyaccel.cli import app
from pyaccel.errors import as_flags
from pyaccel.testing import assert_fits, assert_layers_on

runner = CliRunner()

# (label, place arguments): every kind, the ASIC both as etched and with --etch
KINDS = {
    "wse3": ("--system", "wse3", "--model", "llama-3.1-8b"),
    "wse2": ("--system", "wse2", "--model", "llama-3.1-8b"),
    "groq-tsp": ("--system", "groq-tsp", "--model", "llama-3.1-8b"),
    "taalas-hc1": ("--system", "taalas-hc1", "--model", "llama-3.1-8b"),
    "taalas-hc1 --etch": ("--system", "taalas-hc1", "--model", "qwen3-32b", "--etch"),
    "h100": ("--system", "h100", "--model", "llama-3.1-8b"),
}


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def ok_json(*args) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, (result.output, result.stderr)
    return json.loads(result.output)


def error_line(result) -> str:
    """The bad-input contract: exit 2, one ``error:`` line on stderr, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert "Traceback" not in result.stderr + result.output
    return lines[0]


def write(tmp_path, doc: dict, name: str = "plc.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def place_api(system: str, model: str, units="auto", sets=None, etch=False, **work):
    cfg = pa.load_model(model)
    return pa.place(cfg, pa.load_system(system, units, sets, etch), pa.Workload(**work))


@pytest.fixture(scope="module")
def written() -> dict:
    """``place --json`` output of every kind."""
    return {label: ok_json("place", *args) for label, args in KINDS.items()}


# ----------------------------------------------------------------------------- the format


@pytest.mark.parametrize("label", list(KINDS))
def test_place_json_checks_and_checks_the_same(tmp_path, written, label):
    doc = written[label]
    assert doc["format_version"] == 3
    for key in ("system", "model", "units", "per_unit", "layers", "system_source", "sets"):
        assert key in doc
    row_keys = {"unit", "layers", "weight_bytes", "kv_bytes", "buffer_bytes", "capacity_bytes"}
    assert all(row_keys <= set(row) for row in doc["per_unit"])
    assert all({"layer", "units"} <= set(s) for s in doc["layers"])
    again = ok_json("place", "--check", write(tmp_path, doc))
    assert again == doc  # what --check prints is the same placement, byte for byte in JSON


@pytest.mark.parametrize("label", list(KINDS))
def test_to_json_from_json_round_trip(written, label):
    # option/value pairs; a trailing flag (--etch) has no value and is read below
    args = dict(zip(KINDS[label][::2], KINDS[label][1::2], strict=False))
    plc = place_api(args["--system"], args["--model"], etch="--etch" in KINDS[label])
    back = pa.Placement.from_json(plc.to_json())
    assert back == plc
    assert back.to_dict() == plc.to_dict()
    # the command line writes the same document, its reason naming settings as flags
    assert {**plc.to_dict(), "reason": as_flags(plc.reason)} == written[label]
    assert_fits(back)


def test_etch_is_recorded_and_reapplied(written):
    doc = written["taalas-hc1 --etch"]
    assert doc["etch"] is True and doc["units"] > 1
    assert written["taalas-hc1"]["etch"] is False


def test_set_overrides_are_recorded_and_reapplied(tmp_path):
    doc = ok_json("place", "--system", "h100", "--model", "llama-3.1-8b",
                  "--set", "hbm_capacity_bytes=30000000000")  # fmt: skip
    assert doc["sets"] == {"hbm_capacity_bytes": 30_000_000_000}
    assert doc["per_unit"][0]["capacity_bytes"] == 30_000_000_000
    assert ok_json("place", "--check", write(tmp_path, doc)) == doc
    # --check reapplies the file's overrides: a smaller HBM there is what the check uses
    doc["sets"]["hbm_capacity_bytes"] = 20_000_000_000
    line = error_line(invoke("place", "--check", write(tmp_path, doc)))
    assert "20,000,000,000" in line and "GPU 0" in line


def test_set_is_refused_with_check(tmp_path, written):
    path = write(tmp_path, written["h100"])
    assert "--set" in error_line(invoke("place", "--check", path, "--set", "clock_hz=1e9"))
    # so is every option the check would otherwise ignore: it checks the recorded workload
    line = error_line(invoke("place", "--check", path, "--batch", 64, "--units", 2))
    assert "--units, --batch not taken with --check" in line
    assert ok_json("place", "--check", path, "--system", "h200")["system"] == "h200"


def test_toml_system_recorded_by_content_hash(tmp_path, monkeypatch):
    text = (resources.files("pyaccel.hw") / "presets" / "h100.toml").read_text(encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.toml").write_text(text, encoding="utf-8")
    doc = ok_json("place", "--system", "mine.toml", "--model", "llama-3.1-8b")
    assert doc["system_source"]["file"] == "mine.toml" and len(doc["system_source"]["sha256"]) == 64
    path = write(tmp_path, doc)
    assert ok_json("place", "--check", path) == doc
    # a changed file is not silently the same system
    (tmp_path / "mine.toml").write_text(text.replace("H100", "H100 edited"), encoding="utf-8")
    line = error_line(invoke("place", "--check", path))
    assert "mine.toml" in line and "changed" in line and "sha256" in line
    # naming the system explicitly checks against it as it is now
    assert ok_json("place", "--check", path, "--system", "mine.toml")["units"] == 1


def test_toml_system_found_beside_the_placement(tmp_path, monkeypatch):
    text = (resources.files("pyaccel.hw") / "presets" / "h100.toml").read_text(encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    (work / "mine.toml").write_text(text, encoding="utf-8")
    monkeypatch.chdir(work)
    doc = ok_json("place", "--system", "mine.toml", "--model", "llama-3.1-8b")
    path = write(work, doc)
    monkeypatch.chdir(tmp_path)  # the recorded relative path no longer resolves from here
    assert ok_json("place", "--check", path)["units"] == 1
    (work / "mine.toml").unlink()
    assert "mine.toml" in error_line(invoke("place", "--check", path))


def test_model_folder_recorded_by_path_and_content_hash(tmp_path, monkeypatch):
    from conftest import TINY_LLAMA, write_config

    assert ok_json("place", "--system", "h100", "--model", "llama-3.1-8b")["model_source"] == {
        "preset": "llama-3.1-8b"}  # fmt: skip
    folder = write_config(tmp_path / "models" / "m1", TINY_LLAMA)
    monkeypatch.chdir(tmp_path / "models")
    doc = ok_json("place", "--system", "h100", "--model", "./m1")
    src = doc["model_source"]
    assert doc["model"] == "m1" and src["file"] == str((folder / "config.json").resolve())
    path = write(tmp_path, doc)
    monkeypatch.chdir(tmp_path)  # 'm1' names nothing from here: the recorded file is found
    assert ok_json("place", "--check", path) == doc
    (folder / "config.json").write_text(json.dumps({**TINY_LLAMA, "num_hidden_layers": 3}))
    line = error_line(invoke("place", "--check", path))
    assert "changed since the placement was written" in line and "--model" in line


def test_capacity_in_the_file_is_never_trusted(tmp_path, written):
    """10,000 TB written in the file: the h100's 85 GB is what the check uses."""
    doc = copy.deepcopy(written["h100"])
    doc["capacity_bytes"] = {"hbm": 10**16}
    for row in doc["per_unit"]:
        row["capacity_bytes"] = 10**16
    slot = next(s for s in doc["layers"] if s["layer"] == 0)
    slot["weight_bytes"][0] += 100 * 10**9
    line = error_line(invoke("place", "--check", write(tmp_path, doc)))
    assert "85,045,477,376" in line and "GPU 0" in line and "hbm" in line
    with pytest.raises(pa.PlacementError, match="85,045,477,376"):
        pa.Placement.from_json(json.dumps(doc)).check()


def test_capacity_recomputed_for_a_python_placement_given_the_system():
    from dataclasses import replace

    plc = place_api("h100", "llama-3.1-8b")
    fake = replace(plc, capacity_bytes={"hbm": 10**16}, basis=None)
    slot = fake.layers[3]
    fat = replace(slot, weight_bytes=(slot.weight_bytes[0] + 100 * 10**9,))
    fake = replace(fake, layers=fake.layers[:3] + (fat,) + fake.layers[4:])
    fake.check()  # without a system, the object's own numbers are all there is
    with pytest.raises(pa.PlacementError, match="85,045,477,376"):
        fake.check(system=pa.load_system("h100"))


@pytest.mark.parametrize("version", [0, 4, "2", None, True])
def test_unknown_format_version_is_refused(tmp_path, written, version):
    doc = dict(written["h100"], format_version=version)
    path = write(tmp_path, doc)
    line = error_line(invoke("place", "--check", path))
    assert "format_version" in line and str(path) in line


def test_unversioned_files_of_earlier_pyaccel_still_load(written):
    """Version 1: ``n_units``, the system as a preset name, capacities in the file (ignored)."""
    for label in ("wse3", "groq-tsp", "taalas-hc1", "h100"):
        doc = copy.deepcopy(written[label])
        old = {k: v for k, v in doc.items()
               if k not in ("format_version", "system_source", "sets", "etch", "units",
                            "per_unit", "model_source")}  # fmt: skip
        old["n_units"] = doc["units"]
        back = pa.Placement.from_json(json.dumps(old))
        assert back.to_dict() == doc
        assert_fits(back)


def test_check_against_another_system(tmp_path, written):
    """--system checks a placement against another system of its kind (capacities from it)."""
    path = write(tmp_path, written["h100"])
    doc = ok_json("place", "--check", path, "--system", "h200")
    assert doc["system"] == "h200"
    # the file's reason is its own case's: said so, not passed off as the h200's
    assert doc["reason"] == "when placed for llama-3.1-8b on h100: " + written["h100"]["reason"]
    assert "kind" in error_line(invoke("place", "--check", path, "--system", "wse3"))


def test_place_text_shows_the_runtime_reserve_as_a_column():
    doc = ok_json("place", "--system", "h100", "--model", "llama-3.1-70b", "--units", 2)
    assert doc["reserved_bytes"]["hbm"] > 0
    for row in doc["per_unit"]:
        parts = row["weight_bytes"] + row["kv_bytes"] + row["buffer_bytes"]
        assert row["used_bytes"] == parts + row["reserved_bytes"]
    result = runner.invoke(app, ["place", "--system", "h100", "--model", "llama-3.1-70b",
                                 "--units", "2"], env={"COLUMNS": "200"})  # fmt: skip
    assert result.exit_code == 0
    header = next(ln for ln in result.output.splitlines() if "weights" in ln)
    assert "reserved" in header and "used" in header
    assert "11.78 GB" in result.output  # the reserve, shown, so the columns add up to used


# ----------------------------------------------------------------------------- wafer PEs


@pytest.fixture(scope="module")
def regions_doc() -> dict:
    """llama-3.1-8b on one wse3 with a PE rectangle per layer."""
    plc = place_api("wse3", "llama-3.1-8b", 1, ["placement_strategy=layer_regions"])
    return plc.to_dict()


def _slot(doc: dict, layer):
    return next(s for s in doc["layers"] if s["layer"] == layer)


def test_layer_on_one_pe_is_refused_naming_the_pe(regions_doc):
    """~40 MB of layer 5 on 10 PEs (the unit total still fits the wafer)."""
    doc = copy.deepcopy(regions_doc)
    x0, y0, _w, _h = _slot(doc, 5)["region"]["rect"]
    _slot(doc, 5)["region"]["rect"] = [x0, y0, 1, 10]
    plc = pa.Placement.from_json(json.dumps(doc))
    with pytest.raises(pa.PlacementError) as exc:
        plc.check()
    msg = str(exc.value)
    assert f"PE ({x0}, {y0})" in msg and "49,152 B" in msg and "layer 5" in msg
    with pytest.raises(AssertionError, match=rf"PE \({x0}, {y0}\)"):
        assert_fits(plc)
    # and it is not emulated either
    with pytest.raises(pa.PlacementError, match="PE"):
        pa.emulate(pa.load_model("llama-3.1-8b"), plc.basis[1], plc, pa.Workload(tokens=1))


def test_average_fits_but_largest_tile_does_not(regions_doc):
    """The narrowest rectangle on which layer 5's bytes fit on average per PE: the placer's
    tiling rounds tiles up, so its fullest PE overflows, and the check says which PE."""
    doc = copy.deepcopy(regions_doc)
    x0, y0, w, h = _slot(doc, 5)["region"]["rect"]
    wafer = pa.load_system("wse3").spec.params
    reserve = wafer.pe_code_bytes + wafer.pe_buffer_bytes
    need = _slot(doc, 5)["need_weight_bytes"] + _slot(doc, 5)["need_kv_bytes"]
    narrow = next(n for n in range(1, w + 1)
                  if -(-need // (n * h)) + reserve <= wafer.pe_sram_bytes)  # fmt: skip
    assert narrow < w
    _slot(doc, 5)["region"]["rect"] = [x0, y0, narrow, h]  # inside its own, overlapping none
    with pytest.raises(pa.PlacementError) as exc:
        pa.Placement.from_json(json.dumps(doc)).check()
    msg = str(exc.value)
    assert f"wafer 0 PE ({x0}, {y0})" in msg and "largest weight tiles" in msg
    assert "49,152 B" in msg


def test_overlapping_pe_rectangles_are_refused(regions_doc):
    doc = copy.deepcopy(regions_doc)
    _slot(doc, 6)["region"]["rect"] = list(_slot(doc, 5)["region"]["rect"][:2]) + [
        *_slot(doc, 6)["region"]["rect"][2:]
    ]
    moved = _slot(doc, 6)["region"]["rect"]
    if moved == _slot(doc, 5)["region"]["rect"]:  # same rectangle would be interleaving
        moved[2] -= 1
    with pytest.raises(pa.PlacementError, match="overlap"):
        pa.Placement.from_json(json.dumps(doc)).check()


@pytest.mark.parametrize("rect", [[0, 0, 0, 5], [-1, 0, 5, 5], [0, 0, 10**6, 5], "0,0,5,5",
                                  [0, 0, 5], None])  # fmt: skip
def test_pe_rectangle_outside_the_grid_or_malformed(tmp_path, regions_doc, rect):
    doc = copy.deepcopy(regions_doc)
    _slot(doc, 5)["region"]["rect"] = rect
    line = error_line(invoke("place", "--check", write(tmp_path, doc)))
    assert "layer 5" in line and "rect" in line


def test_placer_layouts_pass_the_per_pe_check():
    for strategy in ("interleave", "layer_regions", "layer_groups"):
        plc = place_api("wse3", "llama-3.1-8b", 1, [f"placement_strategy={strategy}"])
        assert_fits(plc)


# ----------------------------------------------------------------------------- LPU slices


def test_lpu_layer_squeezed_into_one_mem_slice_is_refused(written):
    doc = copy.deepcopy(written["groq-tsp"])
    slot = next(
        s for s in doc["layers"] if s["region"]["mem_slices"][1] > s["region"]["mem_slices"][0]
    )
    first = slot["region"]["mem_slices"][0]
    slot["region"]["mem_slices"] = [first, first]
    with pytest.raises(pa.PlacementError) as exc:
        pa.Placement.from_json(json.dumps(doc)).check()
    msg = str(exc.value)
    chip = slot["units"][0]
    assert f"chip {chip} MEM slices {first}..{first}" in msg and f"layer {slot['layer']!r}" in msg


@pytest.mark.parametrize("rng", [[5, 4], [0, 88], [-1, 3], "0..3", [1]])
def test_lpu_mem_slices_out_of_range(tmp_path, written, rng):
    doc = copy.deepcopy(written["groq-tsp"])
    doc["layers"][3]["region"]["mem_slices"] = rng
    line = error_line(invoke("place", "--check", write(tmp_path, doc)))
    assert "mem_slices" in line


# ----------------------------------------------------------------------------- ASIC dies


@pytest.mark.parametrize("field, level", [("weight_bytes", "rom"), ("kv_bytes", "kv_sram")])
def test_asic_die_rom_and_sram_are_checked_per_die(written, field, level):
    doc = copy.deepcopy(written["taalas-hc1 --etch"])
    last_die = doc["units"] - 1
    slot = next(s for s in doc["layers"] if s["units"] == [last_die])
    slot[field][0] += 10**10
    with pytest.raises(pa.PlacementError) as exc:
        pa.Placement.from_json(json.dumps(doc)).check()
    assert f"in {level} of die {last_die}" in str(exc.value)


def test_asic_placement_of_another_model_without_etch(tmp_path, written):
    doc = copy.deepcopy(written["taalas-hc1 --etch"])
    doc["etch"] = False
    line = error_line(invoke("place", "--check", write(tmp_path, doc)))
    assert "etched" in line


@pytest.mark.parametrize("field, value", [("kv", None), ("router", 3), ("spec_decode", ["x"])])
def test_a_hand_edited_workload_field_of_another_type_is_one_error_line(
    tmp_path, written, field, value
):
    """These used to end in a traceback ('NoneType' object has no attribute 'tensor_bytes',
    'int' object has no attribute 'startswith', 'list' object has no attribute 'split')."""
    doc = copy.deepcopy(written["h100"])
    doc["workload"][field] = value
    path = write(tmp_path, doc)
    line = error_line(invoke("place", "--check", path))
    assert line.startswith(f"error: {path}: workload field '{field}' must be a string")


@pytest.mark.parametrize("edit, says", [
    (lambda d: d["layers"].pop(3), "does not match model llama-3.1-8b: missing layers [2]"),
    (lambda d: d["layers"][3].update(layer="2"), "decoder layer keys are integers (2, not '2')"),
    (lambda d: d["layers"][3].update(weight_bytes=[10**11]), "h100 unit 0 is short of "),
])  # fmt: skip
def test_check_errors_of_a_file_name_the_file(tmp_path, written, edit, says):
    """A layer missing from the file, or a unit it overfills, used to be said without the
    file's path (SPEC §7: a malformed file names its path)."""
    doc = copy.deepcopy(written["h100"])
    edit(doc)
    path = write(tmp_path, doc)
    line = error_line(invoke("place", "--check", path))
    assert line.startswith(f"error: {path}: ") and says in line


# ----------------------------------------------------------------------------- helpers, trace


def test_assert_layers_on_is_an_assertion_listing_valid_keys():
    plc = place_api("h100", "llama-3.1-8b")
    assert_layers_on(plc, 0, ["embed", 0, 31, "head"])
    with pytest.raises(AssertionError) as exc:
        assert_layers_on(plc, 0, ["5", 99])
    msg = str(exc.value)
    assert "'5'" in msg and "99" in msg and "'embed', 0..31, 'head'" in msg
    with pytest.raises(pa.PlacementError, match="'embed', 0..31, 'head'"):
        plc.units_of("layer5")


def test_trace_layer_keys_are_the_placement_keys(tmp_path):
    cfg, system = pa.load_model("tiny-llama"), pa.load_system("h100")
    work = pa.Workload(tokens=2)
    plc = pa.place(cfg, system, work)
    trace = pa.emulate(cfg, system, plc, work)
    keys = set(trace.events["layer"].tolist())
    assert keys <= set(plc.layer_keys()) and 0 in keys and "head" in keys
    for key in keys:  # each event's layer is a key placement lookups accept as is
        plc.units_of(key)
    events = json.loads(trace.to_perfetto(tmp_path / "t.json").read_text())["traceEvents"]
    layers = {e["args"]["layer"] for e in events if e.get("ph") == "X"}
    assert layers == keys


# ----------------------------------------------------------------------------- error hints


def test_groq_deepseek_names_the_experts_not_the_batch():
    # one node's tensor parallelism at most (lpu.tp_width's low end): the experts overfill it
    line = error_line(invoke("place", "--system", "groq-tsp", "--model", "deepseek-v3",
                             "--set", "tp_max_chips=8"))  # fmt: skip
    assert "routed experts" in line and "reduce the batch" not in line
    assert "230,686,720 B" in line and "chip" in line  # bytes needed vs the chip's SRAM
    assert "--expert-weights" in line


def test_groq_moe_hint_gives_the_units_that_fit():
    narrow = ("--set", "tp_max_chips=8")  # one node's tensor parallelism at most
    line = error_line(invoke("place", "--system", "groq-tsp", "--model", "qwen3-235b-a22b",
                             *narrow))  # fmt: skip
    assert "--expert-weights int4 would fit on --units" in line
    units = int(line.split("--units ")[-1].split()[0].rstrip(";,"))
    ok = ok_json("place", "--system", "groq-tsp", "--model", "qwen3-235b-a22b",
                 "--expert-weights", "int4", "--units", units, *narrow)  # fmt: skip
    assert ok["units"] == units


def test_groq_units_error_describes_the_units_asked_for():
    line = error_line(invoke("place", "--system", "groq-tsp", "--model", "llama-3.1-70b",
                             "--units", 576, "--set", "tp_max_chips=8"))  # fmt: skip
    assert "576" in line and "656" not in line
    assert "'embed'" in line and "no format setting" in line  # the 16-bit embedding is the cause


@pytest.mark.parametrize("system, batch", [("wse3", 256), ("groq-tsp", 64)])
def test_dense_model_is_not_told_about_expert_weights(system, batch):
    line = error_line(invoke("place", "--system", system, "--model", "llama-3.1-8b",
                             "--batch", batch, "--context", 100000))  # fmt: skip
    assert "--expert-weights" not in line
    assert "KV cache" in line and "user(s) fit" in line


def test_wafer_weight_hint_names_weights_for_a_dense_model():
    line = error_line(invoke("place", "--system", "wse3", "--model", "llama-3.1-405b",
                             "--weights", "fp32", "--set", "pe_sram_bytes=16384"))  # fmt: skip
    assert "--expert-weights" not in line
    assert "linear weights" in line and "--weights int4 would fit on --units" in line


def test_gpu_units_error_describes_the_units_asked_for_when_nothing_fits():
    line = error_line(invoke("place", "--system", "h100", "--model", "llama-3.1-8b",
                             "--batch", 4096, "--context", 1_000_000, "--units", 2))  # fmt: skip
    assert "on 2 h100" in line and "4096 h100" not in line
    assert "no GPU count fits" in line and "KV cache" in line and "user(s) fit" in line
    assert line.count("the KV cache of") == 1
