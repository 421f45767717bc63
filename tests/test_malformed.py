"""Malformed TOML/JSON/config inputs and bad CLI values never give a traceback (SPEC §7).

Every case runs the CLI in-process and checks the contract for bad input: exit status 2, exactly
one line on stderr, starting with ``error:``, no traceback, and a message that names the file or
field at fault.
"""

from __future__ import annotations

import copy
import json
import math
import re
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import pyaccel as pa
from pyaccel.cli import app

MODEL = "llama-3.1-8b"
SYSTEM = "h100"

# click >= 8.2 always captures stderr apart from stdout (``mix_stderr`` was removed); typer's
# CliRunner has no such argument either, so result.stderr holds stderr alone.
runner = CliRunner()


# ---------------------------------------------------------------- helpers


def invoke(*args):
    """Run ``pyaccel ARGS`` in-process."""
    return runner.invoke(app, [str(a) for a in args])


def error_line(result) -> str:
    """Assert the bad-input contract and return the one ``error:`` line."""
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        pytest.fail(f"uncaught {type(exc).__name__}: {exc}\n{tb}")
    assert "Traceback" not in result.output, result.output
    assert "Traceback" not in result.stderr, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}:\n{result.stderr}"
    assert lines[0].startswith("error:"), lines[0]
    return lines[0]


def assert_error(result, *needles: str) -> str:
    """The bad-input contract, and every needle appears in the error line."""
    line = error_line(result)
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


def assert_ok_or_error(result) -> None:
    """A fuzzed input either works or is refused by the contract; never anything else."""
    if result.exit_code == 0 and result.exception is None:
        return
    error_line(result)


def base_toml() -> str:
    return (resources.files("pyaccel.hw") / "presets" / "h100.toml").read_text(encoding="utf-8")


def base_config() -> dict:
    text = (resources.files("pyaccel.model") / "presets" / f"{MODEL}.json").read_text(
        encoding="utf-8"
    )
    return json.loads(text)


def set_param_value(text: str, name: str, value: str) -> str:
    """Replace the ``value = ...`` of one ``[params]`` entry of a preset's TOML text."""
    new, n = re.subn(
        rf"^({re.escape(name)} = \{{ value = )[^,]+,", rf"\g<1>{value},", text, flags=re.MULTILINE
    )
    assert n == 1, name
    return new


def set_param_entry(text: str, name: str, entry: str) -> str:
    """Replace the whole right-hand side of one ``[params]`` line."""
    new, n = re.subn(rf"^{re.escape(name)} = .*$", f"{name} = {entry}", text, flags=re.MULTILINE)
    assert n == 1, name
    return new


def drop_line(text: str, prefix: str) -> str:
    lines = text.splitlines(keepends=True)
    kept = [ln for ln in lines if not ln.startswith(prefix)]
    assert len(kept) == len(lines) - 1, prefix
    return "".join(kept)


def set_preset_field(text: str, key: str, value: str) -> str:
    new, n = re.subn(rf'^{key} = ".*"$', f"{key} = {value}", text, flags=re.MULTILINE)
    assert n == 1, key
    return new


def run_system(path: Path):
    """``run`` on a system TOML file (all checks happen before any emulation)."""
    return invoke("run", "--system", path, "--model", MODEL, "--tokens", 4)


def write_toml(tmp_path: Path, text: str | bytes, name: str = "bad.toml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def write_config(tmp_path: Path, cfg, name: str = "model") -> Path:
    """A model folder holding ``config.json`` (a dict/list is dumped; str/bytes written as is)."""
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    path = folder / "config.json"
    if isinstance(cfg, bytes):
        path.write_bytes(cfg)
    elif isinstance(cfg, str):
        path.write_text(cfg, encoding="utf-8")
    else:
        path.write_text(json.dumps(cfg), encoding="utf-8")
    return folder


def place_model(folder: Path):
    return invoke("place", "--system", SYSTEM, "--model", folder, "--units", 1)


# ---------------------------------------------------------------- hardware TOML


def test_valid_toml_copy_runs(tmp_path):
    """The base used by the mutations below is itself accepted (so each mutation is the fault)."""
    result = run_system(write_toml(tmp_path, base_toml(), "good.toml"))
    assert result.exit_code == 0, result.output


def test_toml_syntax_error_names_file(tmp_path):
    path = write_toml(tmp_path, base_toml().replace('kind = "gpu"', "kind = "))
    assert_error(run_system(path), str(path), "TOML")


def test_toml_unclosed_inline_table(tmp_path):
    path = write_toml(tmp_path, set_param_entry(base_toml(), "sm_count", "{ value = 132"))
    assert_error(run_system(path), str(path), "TOML")


def test_toml_duplicate_key(tmp_path):
    text = base_toml() + 'sm_count = { value = 1, source = "again" }\n'
    assert_error(run_system(write_toml(tmp_path, text)), "bad.toml")


def test_toml_missing_preset_table(tmp_path):
    text = base_toml().replace("[preset]\n", "[header]\n")
    path = write_toml(tmp_path, text)
    assert_error(run_system(path), str(path), "[preset]")


def test_toml_preset_is_not_a_table(tmp_path):
    text = 'preset = "h100"\n[params]' + base_toml().split("[params]", 1)[1]
    path = write_toml(tmp_path, text)
    assert_error(run_system(path), str(path), "[preset]")


@pytest.mark.parametrize("key", ["name", "kind", "description", "native_format"])
def test_toml_preset_field_missing(tmp_path, key):
    path = write_toml(tmp_path, drop_line(base_toml(), f"{key} = "))
    assert_error(run_system(path), str(path), f"[preset] field '{key}' must be a non-empty string")


@pytest.mark.parametrize("value", ['""', "7", "true", "[1]"])
def test_toml_preset_name_not_a_string(tmp_path, value):
    # the field's own words: this test's folder name already contains "name"
    path = write_toml(tmp_path, set_preset_field(base_toml(), "name", value))
    assert_error(run_system(path), str(path), "[preset] field 'name' must be a non-empty string")


@pytest.mark.parametrize("kind", ['"tpu"', '"GPU"', "3"])
def test_toml_unknown_kind(tmp_path, kind):
    path = write_toml(tmp_path, set_preset_field(base_toml(), "kind", kind))
    assert_error(run_system(path), str(path), "kind")


def test_toml_unknown_kind_lists_known_kinds(tmp_path):
    path = write_toml(tmp_path, set_preset_field(base_toml(), "kind", '"tpu"'))
    assert_error(run_system(path), "tpu", "gpu", "wafer", "lpu", "asic")


@pytest.mark.parametrize("fmt", ['"int3"', '"bfloat"', '"nonsense"'])
def test_toml_bad_native_format(tmp_path, fmt):
    path = write_toml(tmp_path, set_preset_field(base_toml(), "native_format", fmt))
    assert_error(run_system(path), str(path), "native_format", fmt.strip('"'))


def test_toml_missing_params_table(tmp_path):
    text = base_toml().split("[params]")[0]
    path = write_toml(tmp_path, text)
    assert_error(run_system(path), str(path), "[params]")


def test_toml_params_not_a_table(tmp_path):
    head = base_toml().split("[params]")[0]
    text = "params = 5\n" + head
    path = write_toml(tmp_path, text)
    assert_error(run_system(path), str(path), "params")


@pytest.mark.parametrize(
    "name", ["sm_count", "clock_hz", "hbm_capacity_bytes", "runtime_reserved_bytes"]
)
def test_toml_missing_parameter(tmp_path, name):
    path = write_toml(tmp_path, drop_line(base_toml(), f"{name} = "))
    assert_error(run_system(path), str(path), name)


def test_toml_parameter_without_source_or_assumption(tmp_path):
    path = write_toml(tmp_path, set_param_entry(base_toml(), "sm_count", "{ value = 132 }"))
    assert_error(run_system(path), str(path), "sm_count", "source", "assumption")


def test_toml_parameter_with_empty_source(tmp_path):
    path = write_toml(
        tmp_path, set_param_entry(base_toml(), "sm_count", '{ value = 132, source = "" }')
    )
    assert_error(run_system(path), str(path), "sm_count")


def test_toml_parameter_with_both_source_and_assumption(tmp_path):
    entry = '{ value = 132, source = "datasheet", assumption = "guess: because" }'
    path = write_toml(tmp_path, set_param_entry(base_toml(), "sm_count", entry))
    assert_error(run_system(path), str(path), "sm_count", "source", "assumption")


@pytest.mark.parametrize("entry", ["132", '"132"', "[132]", '{ source = "datasheet" }'])
def test_toml_parameter_not_an_inline_table_with_value(tmp_path, entry):
    path = write_toml(tmp_path, set_param_entry(base_toml(), "sm_count", entry))
    assert_error(run_system(path), str(path), "sm_count")


@pytest.mark.parametrize(
    "name, value",
    [
        ("hbm_capacity_bytes", "-85045477376"),  # negative
        ("clock_hz", "-1.98e9"),  # negative
        ("clock_hz", "0"),  # zero where > 0 is required
        ("hbm_achievable_bytes_per_s", "0.0"),
        ("sm_count", "0"),
        ("power_w", '"700"'),  # non-numeric
        ("power_w", '"fast"'),
        ("nvlink_bytes_per_s", "[450e9]"),
        ("hbm_peak_bytes_per_s", "{ x = 1 }"),
        ("power_w", "true"),  # bool
        ("gpus_per_node", "false"),
        ("hbm_peak_bytes_per_s", "inf"),  # non-finite
        ("hbm_peak_bytes_per_s", "-inf"),
        ("clock_hz", "nan"),
        ("kernel_launch_s", "-1e-6"),  # negative where >= 0 is allowed
        ("sm_count", "132.5"),  # non-integer count
        ("gpus_per_node", "8.5"),
        ("hbm_capacity_bytes", "85045477376.5"),
        ("l2_bytes", "1.5"),
    ],
)
def test_toml_bad_parameter_value(tmp_path, name, value):
    path = write_toml(tmp_path, set_param_value(base_toml(), name, value))
    assert_error(run_system(path), str(path), name)


def test_toml_unknown_parameter(tmp_path):
    text = base_toml() + 'warp_drive_hz = { value = 1, source = "fiction" }\n'
    path = write_toml(tmp_path, text)
    line = assert_error(run_system(path), str(path), "warp_drive_hz")
    assert "sm_count" in line  # lists the known parameters


def test_toml_parameter_of_another_kind(tmp_path):
    text = base_toml() + 'pe_sram_bytes = { value = 49152, source = "wafer" }\n'
    path = write_toml(tmp_path, text)
    assert_error(run_system(path), str(path), "pe_sram_bytes", "gpu")


def test_toml_empty_file(tmp_path):
    path = write_toml(tmp_path, "")
    assert_error(run_system(path), str(path))


def test_toml_whitespace_and_comments_only(tmp_path):
    path = write_toml(tmp_path, "# nothing here\n\n   \n")
    assert_error(run_system(path), str(path), "[preset]")


def test_toml_binary_garbage(tmp_path):
    path = write_toml(tmp_path, bytes(range(256)) * 4)
    assert_error(run_system(path), str(path))


def test_toml_invalid_utf8(tmp_path):
    path = write_toml(tmp_path, base_toml().encode() + b"\n# \xff\xfe\xc3\x28\n")
    assert_error(run_system(path), str(path))


def test_toml_utf16_with_bom(tmp_path):
    path = write_toml(tmp_path, base_toml().encode("utf-16"))
    assert_error(run_system(path), str(path))


def test_toml_path_is_a_directory(tmp_path):
    folder = tmp_path / "preset.toml"
    folder.mkdir()
    assert_error(run_system(folder), str(folder))


def test_toml_path_is_a_directory_without_suffix(tmp_path):
    folder = tmp_path / "hwdir"
    folder.mkdir()
    assert_error(run_system(folder), str(folder))


def test_toml_file_does_not_exist(tmp_path):
    path = tmp_path / "missing.toml"
    assert_error(run_system(path), str(path))


def test_toml_json_file_given_as_system(tmp_path):
    path = tmp_path / "system.json"
    path.write_text(json.dumps({"preset": {"name": "x"}}), encoding="utf-8")
    assert_error(run_system(path), str(path))


@pytest.mark.parametrize("command", ["run", "report", "place"])
def test_bad_toml_same_error_in_every_command(tmp_path, command):
    path = write_toml(tmp_path, set_param_value(base_toml(), "sm_count", "-1"))
    extra = ["--tokens", 4] if command != "place" else []
    assert_error(invoke(command, "--system", path, "--model", MODEL, *extra), str(path), "sm_count")


def test_bad_toml_in_compare_systems(tmp_path):
    path = write_toml(tmp_path, set_param_value(base_toml(), "sm_count", "-1"))
    assert_error(
        invoke("compare", "--model", MODEL, "--systems", f"h100,{path}", "--tokens", 4),
        str(path),
        "sm_count",
    )


# ---------------------------------------------------------------- model config.json


def test_valid_config_copy_places(tmp_path):
    result = place_model(write_config(tmp_path, base_config()))
    assert result.exit_code == 0, result.output


def test_config_invalid_json(tmp_path):
    folder = write_config(tmp_path, json.dumps(base_config())[:-40])
    assert_error(place_model(folder), str(folder / "config.json"), "JSON")


def test_config_trailing_comma(tmp_path):
    folder = write_config(tmp_path, '{"model_type": "llama", "hidden_size": 4096,}')
    assert_error(place_model(folder), str(folder / "config.json"), "JSON")


def test_config_empty_file(tmp_path):
    folder = write_config(tmp_path, "")
    assert_error(place_model(folder), str(folder / "config.json"))


def test_config_binary_garbage(tmp_path):
    folder = write_config(tmp_path, bytes(range(256)) * 4)
    assert_error(place_model(folder), str(folder / "config.json"))


@pytest.mark.parametrize("doc", [[base_config()], [], "llama", 42, None])
def test_config_not_an_object(tmp_path, doc):
    folder = write_config(tmp_path, json.dumps(doc))
    assert_error(place_model(folder), str(folder / "config.json"), "object")


@pytest.mark.parametrize("model_type", ["gpt2", "Llama", "", 7, None, [], ["llama"], {"x": 1}])
def test_config_unknown_model_type(tmp_path, model_type):
    cfg = base_config()
    cfg["model_type"] = model_type
    folder = write_config(tmp_path, cfg)
    assert_error(place_model(folder), str(folder / "config.json"), "model_type")


def test_config_unknown_model_type_lists_supported(tmp_path):
    cfg = base_config()
    cfg["model_type"] = "gpt2"
    assert_error(place_model(write_config(tmp_path, cfg)), "gpt2", "llama", "mixtral")


@pytest.mark.parametrize(
    "key",
    [
        "model_type",
        "num_hidden_layers",
        "hidden_size",
        "vocab_size",
        "intermediate_size",
        "num_attention_heads",
    ],
)
def test_config_missing_field(tmp_path, key):
    cfg = base_config()
    del cfg[key]
    folder = write_config(tmp_path, cfg)
    assert_error(place_model(folder), str(folder / "config.json"), key)


@pytest.mark.parametrize("key", ["num_hidden_layers", "hidden_size", "vocab_size"])
def test_config_null_field(tmp_path, key):
    cfg = base_config()
    cfg[key] = None
    folder = write_config(tmp_path, cfg)
    assert_error(place_model(folder), str(folder / "config.json"), key)


@pytest.mark.parametrize(
    "key, value",
    [
        ("num_hidden_layers", -32),
        ("hidden_size", -4096),
        ("vocab_size", -1),
        ("intermediate_size", -14336),
        ("num_key_value_heads", -8),
        ("num_hidden_layers", 0),
        ("hidden_size", 0),
        ("num_attention_heads", 0),
        ("vocab_size", 0),
        ("num_hidden_layers", "32"),
        ("hidden_size", "4096"),
        ("vocab_size", "lots"),
        ("intermediate_size", "14336"),
        ("num_attention_heads", 32.0),
        ("num_hidden_layers", 31.5),
        ("hidden_size", True),
        ("num_key_value_heads", [8]),
        ("vocab_size", {"n": 128256}),
        ("head_dim", -128),
        ("max_position_embeddings", -1),
    ],
)
def test_config_bad_field_value(tmp_path, key, value):
    cfg = base_config()
    cfg[key] = value
    folder = write_config(tmp_path, cfg)
    assert_error(place_model(folder), str(folder / "config.json"), key)


@pytest.mark.parametrize(
    "key, value",
    [
        ("rope_theta", "fast"),
        ("rope_theta", [500000.0]),
        ("rms_norm_eps", "tiny"),
        ("rms_norm_eps", {"eps": 1e-5}),
    ],
)
def test_config_bad_float_field(tmp_path, key, value):
    cfg = base_config()
    cfg[key] = value
    folder = write_config(tmp_path, cfg)
    assert_error(place_model(folder), str(folder / "config.json"), key)


@pytest.mark.parametrize("heads, kv_heads", [(32, 5), (32, 3), (30, 8)])
def test_config_heads_not_divisible_by_kv_heads(tmp_path, heads, kv_heads):
    cfg = base_config()
    cfg["num_attention_heads"], cfg["num_key_value_heads"] = heads, kv_heads
    folder = write_config(tmp_path, cfg)
    assert_error(
        place_model(folder),
        str(folder / "config.json"),
        "num_attention_heads",
        "num_key_value_heads",
        str(heads),
        str(kv_heads),
    )


@pytest.mark.parametrize(
    "layer_types",
    [
        ["full_attention"] * 31,
        ["full_attention"] * 33,
        [],
        ["full_attention"] * 31 + ["global"],
        "full_attention",
        {"0": "full_attention"},
    ],
)
def test_config_bad_layer_types(tmp_path, layer_types):
    cfg = base_config()
    cfg["layer_types"] = layer_types
    folder = write_config(tmp_path, cfg)
    assert_error(place_model(folder), str(folder / "config.json"), "layer_types", "32")


def test_config_sliding_layer_types_without_window(tmp_path):
    cfg = base_config()
    cfg["layer_types"] = ["sliding_attention", "full_attention"] * 16
    folder = write_config(tmp_path, cfg)
    assert_error(place_model(folder), str(folder / "config.json"), "sliding_window")


def test_config_moe_missing_expert_fields(tmp_path):
    cfg = base_config()
    cfg["model_type"] = "mixtral"
    folder = write_config(tmp_path, cfg)
    assert_error(place_model(folder), str(folder / "config.json"), "num_local_experts")


def test_config_mla_missing_lora_rank(tmp_path):
    text = (resources.files("pyaccel.model") / "presets" / "deepseek-v3.json").read_text()
    cfg = json.loads(text)
    del cfg["kv_lora_rank"]
    folder = write_config(tmp_path, cfg)
    assert_error(place_model(folder), str(folder / "config.json"), "kv_lora_rank")


@pytest.mark.parametrize("value", [True, 5, [[1]], {"a": [2]}])
def test_config_bad_mlp_only_layers(tmp_path, value):
    cfg = base_config()
    cfg.update(
        model_type="qwen3_moe",
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=1024,
        mlp_only_layers=value,
    )
    folder = write_config(tmp_path, cfg)
    assert_error(place_model(folder), str(folder / "config.json"), "mlp_only_layers")


def test_config_folder_without_config_json(tmp_path):
    folder = tmp_path / "empty-model"
    folder.mkdir()
    (folder / "model.safetensors.index.json").write_text("{}")
    assert_error(place_model(folder), str(folder), "config.json")


def test_config_json_is_a_directory(tmp_path):
    folder = tmp_path / "odd-model"
    (folder / "config.json").mkdir(parents=True)
    assert_error(place_model(folder), str(folder), "config.json")


def test_config_json_file_given_directly(tmp_path):
    path = tmp_path / "my-config.json"
    path.write_text("{not json", encoding="utf-8")
    assert_error(place_model(path), str(path), "JSON")


@pytest.mark.parametrize("command", ["run", "report", "compare"])
def test_bad_config_same_error_in_every_command(tmp_path, command):
    cfg = base_config()
    del cfg["hidden_size"]
    folder = write_config(tmp_path, cfg)
    args = ["--model", folder, "--tokens", 4]
    if command != "compare":
        args += ["--system", SYSTEM]
    else:
        args += ["--systems", SYSTEM]
    assert_error(invoke(command, *args), str(folder / "config.json"), "hidden_size")


# ---------------------------------------------------------------- placement JSON (place --check)


@pytest.fixture(scope="module")
def placement_doc() -> dict:
    plc = pa.place(pa.load_model(MODEL), pa.load_system(SYSTEM, units=1), pa.Workload())
    return json.loads(plc.to_json())


def check_doc(tmp_path: Path, doc, name: str = "placement.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return path, invoke("place", "--check", path)


def layer_index(doc: dict, key) -> int:
    return next(i for i, s in enumerate(doc["layers"]) if s["layer"] == key)


def test_placement_valid_file_checks(tmp_path, placement_doc):
    _path, result = check_doc(tmp_path, placement_doc)
    assert result.exit_code == 0, result.output


def test_placement_invalid_json(tmp_path, placement_doc):
    path, result = check_doc(tmp_path, json.dumps(placement_doc)[:-10])
    assert_error(result, str(path), "JSON")


def test_placement_empty_file(tmp_path):
    path, result = check_doc(tmp_path, "")
    assert_error(result, str(path))


def test_placement_binary_garbage(tmp_path):
    path = tmp_path / "placement.json"
    path.write_bytes(b"{\xff\xfe\x00garbage")
    assert_error(invoke("place", "--check", path), str(path))


@pytest.mark.parametrize("doc", ["[1, 2, 3]", "null", "42", '"placement"'])
def test_placement_not_an_object(tmp_path, doc):
    path, result = check_doc(tmp_path, doc)
    assert_error(result, str(path), "object")


def test_placement_file_missing(tmp_path):
    path = tmp_path / "nope.json"
    assert_error(invoke("place", "--check", path), str(path))


def test_placement_path_is_a_directory(tmp_path):
    assert_error(invoke("place", "--check", tmp_path), str(tmp_path))


@pytest.mark.parametrize("key", ["units", "layers", "system", "model", "kind"])
def test_placement_missing_top_level_field(tmp_path, placement_doc, key):
    doc = copy.deepcopy(placement_doc)
    del doc[key]
    path, result = check_doc(tmp_path, doc)
    assert_error(result, str(path), key)


@pytest.mark.parametrize(
    "key",
    [
        "layer",
        "units",
        "weight_bytes",
        "kv_bytes",
        "buffer_bytes",
        "need_weight_bytes",
        "need_kv_bytes",
    ],
)
def test_placement_missing_layer_field(tmp_path, placement_doc, key):
    doc = copy.deepcopy(placement_doc)
    del doc["layers"][3][key]
    path, result = check_doc(tmp_path, doc)
    assert_error(result, str(path), key)


@pytest.mark.parametrize("n_units", [0, -1, "one", 1.5, None, True])
def test_placement_bad_n_units(tmp_path, placement_doc, n_units):
    doc = copy.deepcopy(placement_doc)
    doc["units"] = n_units
    path, result = check_doc(tmp_path, doc)
    assert_error(result, str(path), "units")


@pytest.mark.parametrize("units", [[1], [0, 7], [-1], ["0"]])
def test_placement_unit_index_out_of_range(tmp_path, placement_doc, units):
    doc = copy.deepcopy(placement_doc)
    i = layer_index(doc, 5)
    doc["layers"][i]["units"] = units
    for name in ("weight_bytes", "kv_bytes", "buffer_bytes"):
        doc["layers"][i][name] = [0] * len(units)
    path, result = check_doc(tmp_path, doc)
    assert_error(result, str(path), "layer 5", "unit", "0..0")


def test_placement_layer_with_no_units(tmp_path, placement_doc):
    doc = copy.deepcopy(placement_doc)
    slot = doc["layers"][layer_index(doc, 2)]
    slot["units"], slot["weight_bytes"], slot["kv_bytes"], slot["buffer_bytes"] = [], [], [], []
    path, result = check_doc(tmp_path, doc)
    assert_error(result, str(path), "layer 2")


@pytest.mark.parametrize("field", ["weight_bytes", "kv_bytes", "buffer_bytes"])
@pytest.mark.parametrize("values", [[], [1, 2]])
def test_placement_wrong_length_byte_list(tmp_path, placement_doc, field, values):
    doc = copy.deepcopy(placement_doc)
    doc["layers"][layer_index(doc, 7)][field] = values
    path, result = check_doc(tmp_path, doc)
    assert_error(result, str(path), "layer 7", field)


@pytest.mark.parametrize("field", ["weight_bytes", "kv_bytes", "buffer_bytes"])
@pytest.mark.parametrize("value", [-1, 1.5, "100", None, True])
def test_placement_bad_bytes(tmp_path, placement_doc, field, value):
    doc = copy.deepcopy(placement_doc)
    doc["layers"][layer_index(doc, 7)][field] = [value]
    path, result = check_doc(tmp_path, doc)
    assert_error(result, str(path), "layer 7", field)


@pytest.mark.parametrize(
    "key, value",
    [("capacity_bytes", {"hbm": 10**16}), ("capacity_bytes", -1), ("capacity_bytes", [1]),
     ("level_of", {"kv": "sram"}), ("level_of", "hbm"), ("reserved_bytes", None)],
)  # fmt: skip
def test_placement_capacities_in_the_file_are_not_read(tmp_path, placement_doc, key, value):
    """Capacities, levels and the reserve come from the system (SPEC §7): the file's copies,
    whatever they say, change nothing."""
    doc = copy.deepcopy(placement_doc)
    doc[key] = value
    path, _result = check_doc(tmp_path, doc)
    result = invoke("place", "--check", path, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["capacity_bytes"] == {"hbm": 85_045_477_376}  # the h100's


@pytest.mark.parametrize(
    "key, value",
    [
        ("layers", None),
        ("layers", 5),
        ("layers", [1, 2]),
        ("workload", "batch=1"),
        ("sets", ["hbm_capacity_bytes=1"]),
        ("etch", "yes"),
        ("system_source", "h100"),
    ],
)
def test_placement_field_of_wrong_type(tmp_path, placement_doc, key, value):
    doc = copy.deepcopy(placement_doc)
    doc[key] = value
    path, result = check_doc(tmp_path, doc)
    assert_error(result, str(path))


@pytest.mark.parametrize("layer", [5, "embed", "head"])
def test_placement_layer_missing_vs_model(tmp_path, placement_doc, layer):
    doc = copy.deepcopy(placement_doc)
    del doc["layers"][layer_index(doc, layer)]
    _path, result = check_doc(tmp_path, doc)
    line = assert_error(result, MODEL, "missing")
    assert repr(layer) in line or str(layer) in line


def test_placement_unknown_layer(tmp_path, placement_doc):
    doc = copy.deepcopy(placement_doc)
    extra = copy.deepcopy(doc["layers"][layer_index(doc, 5)])
    extra["layer"] = 99
    doc["layers"].append(extra)
    _path, result = check_doc(tmp_path, doc)
    assert_error(result, "99")


def test_placement_layer_placed_twice(tmp_path, placement_doc):
    doc = copy.deepcopy(placement_doc)
    doc["layers"].append(copy.deepcopy(doc["layers"][layer_index(doc, 5)]))
    _path, result = check_doc(tmp_path, doc)
    assert_error(result, "5", "more than once")


def test_placement_weight_bytes_below_need(tmp_path, placement_doc):
    doc = copy.deepcopy(placement_doc)
    slot = doc["layers"][layer_index(doc, 4)]
    slot["weight_bytes"] = [slot["need_weight_bytes"] // 2]
    _path, result = check_doc(tmp_path, doc)
    assert_error(result, "layer 4", f"{slot['need_weight_bytes']:,}")


def test_placement_need_bytes_disagree_with_model(tmp_path, placement_doc):
    doc = copy.deepcopy(placement_doc)
    slot = doc["layers"][layer_index(doc, 4)]
    slot["need_weight_bytes"] += 1
    _path, result = check_doc(tmp_path, doc)
    assert_error(result, "layer 4")


def test_placement_capacity_exceeded_names_unit_and_bytes(tmp_path, placement_doc):
    """Bytes over the h100's HBM are refused even when the file claims 10,000 TB."""
    doc = copy.deepcopy(placement_doc)
    doc["capacity_bytes"]["hbm"] = 10**16
    doc["layers"][layer_index(doc, 4)]["weight_bytes"][0] += 80 * 10**9
    _path, result = check_doc(tmp_path, doc)
    assert_error(result, "unit 0", "85,045,477,376", "hbm", "GPU 0")


def test_placement_capacity_exceeded_on_second_unit(tmp_path, placement_doc):
    """Two units, everything on unit 1: only unit 1 is over-full and the message says so."""
    doc = copy.deepcopy(placement_doc)
    doc["units"] = 2
    for slot in doc["layers"]:
        slot["units"] = [1]
    doc["layers"][layer_index(doc, 4)]["weight_bytes"][0] += 60 * 10**9
    reserved = doc["reserved_bytes"]["hbm"]
    used = reserved + sum(
        s["weight_bytes"][0] + s["kv_bytes"][0] + s["buffer_bytes"][0] for s in doc["layers"]
    )
    _path, result = check_doc(tmp_path, doc)
    line = assert_error(result, "unit 1", "85,045,477,376", f"{used:,}")
    assert "unit 0" not in line


def test_placement_unknown_model(tmp_path, placement_doc):
    doc = copy.deepcopy(placement_doc)
    doc["model"] = "llama-9-1t"
    _path, result = check_doc(tmp_path, doc)
    assert_error(result, "llama-9-1t", MODEL)


@pytest.mark.parametrize(
    "workload, needle",
    [({"batch": 0}, "batch"), ({"context": -5}, "context"), ({"weights": "int3"}, "int3")],
)
def test_placement_bad_workload(tmp_path, placement_doc, workload, needle):
    doc = copy.deepcopy(placement_doc)
    doc["workload"].update(workload)
    _path, result = check_doc(tmp_path, doc)
    assert_error(result, needle)


def test_placement_file_name_starting_with_brace(tmp_path, placement_doc, monkeypatch):
    """A file is read as a file whatever its name (the API also takes JSON text)."""
    monkeypatch.chdir(tmp_path)
    Path("{placement}.json").write_text(json.dumps(placement_doc), encoding="utf-8")
    result = invoke("place", "--check", "{placement}.json")
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------- CLI values


def run_args(*extra):
    return invoke("run", "--system", SYSTEM, "--model", MODEL, "--tokens", 4, *extra)


def test_unknown_system_lists_known_presets():
    line = assert_error(invoke("run", "--system", "h900", "--model", MODEL), "h900")
    for name in ("h100", "h200", "b200", "wse2", "wse3", "groq-tsp", "taalas-hc1"):
        assert name in line


def test_unknown_model_lists_known_presets():
    line = assert_error(invoke("run", "--system", SYSTEM, "--model", "llama-4-8b"), "llama-4-8b")
    for name in ("llama-3.1-8b", "llama-3.1-70b", "deepseek-v3", "mixtral-8x7b"):
        assert name in line


def test_unknown_system_in_compare_lists_known_presets():
    line = assert_error(invoke("compare", "--model", MODEL, "--systems", "h100,nope"), "nope")
    assert "b200" in line


def test_user_text_is_not_rendered_as_emoji():
    """Names and paths are echoed as given (no ``:code:`` emoji substitution)."""
    assert_error(invoke("run", "--system", ":smile:", "--model", MODEL), ":smile:")


@pytest.mark.parametrize("units", ["0", "-3", "abc", "1.5", ""])
def test_bad_units(units):
    assert_error(run_args("--units", units), "--units")


@pytest.mark.parametrize(
    "option, value, needle",
    [
        ("--batch", "0", "batch"),
        ("--batch", "-2", "batch"),
        ("--context", "-1", "context"),
        ("--tokens", "0", "tokens"),
    ],
)
def test_bad_workload_numbers(option, value, needle):
    assert_error(run_args(option, value), needle)


@pytest.mark.parametrize(
    "option, value",
    [
        ("--weights", "int3"),
        ("--weights", "bf17"),
        ("--kv", "nonsense"),
        ("--kv", ""),
        ("--expert-weights", "int2"),
    ],
)
def test_bad_formats(option, value):
    line = assert_error(run_args(option, value), option)
    assert "bf16" in line and "int4" in line  # lists the known formats


@pytest.mark.parametrize(
    "item, needle",
    [
        ("unknown_param=1", "unknown_param"),
        ("hbm_capacity_bytes=abc", "hbm_capacity_bytes"),
        ("hbm_capacity_bytes=-5", "hbm_capacity_bytes"),
        ("hbm_capacity_bytes=", "hbm_capacity_bytes"),
        ("sm_count=1.5", "sm_count"),
        ("clock_hz=inf", "clock_hz"),
        ("clock_hz=nan", "clock_hz"),
        ("clock_hz=0", "clock_hz"),
        ("hbm_achievable_bytes_per_s", "--set"),
        ("=5", "--set"),
        ("pe_sram_bytes=1", "pe_sram_bytes"),
    ],
)
def test_bad_set(item, needle):
    assert_error(run_args("--set", item), needle)


@pytest.mark.parametrize(
    "item", ["hbm_achievable_bytes_per_s=1e-3", "kernel_launch_s=1e7", "clock_hz=1e-3"]
)
def test_extreme_but_valid_set_values_do_not_crash(item):
    """Values that pass validation either run or are refused by one error line."""
    assert_ok_or_error(run_args("--units", 1, "--tokens", 2, "--set", item, "--json"))


def test_bad_set_in_place_and_report():
    assert_error(invoke("place", "--system", SYSTEM, "--model", MODEL, "--set", "nope=1"), "nope")
    assert_error(
        invoke("report", "--system", SYSTEM, "--model", MODEL, "--tokens", 4, "--set", "nope=1"),
        "nope",
    )


def test_bad_spec_decode():
    assert_error(run_args("--spec-decode", "x"), "--spec-decode")


def test_etch_on_a_gpu():
    line = assert_error(run_args("--etch"), "--etch")
    assert "gpu" in line


def test_etch_on_a_gpu_in_place():
    assert_error(invoke("place", "--system", SYSTEM, "--model", MODEL, "--etch"), "--etch")


@pytest.mark.parametrize("batches", ["0", "1,abc", "-1,2", ","])
def test_bad_compare_batches(batches):
    assert_error(
        invoke("compare", "--model", MODEL, "--systems", SYSTEM, "--batches", batches), "--batches"
    )


def test_place_without_system_or_check():
    assert_error(invoke("place", "--model", MODEL), "--system")


def test_engine_not_built_is_an_error_line(monkeypatch):
    """A kind whose placer/engine module is missing (e.g. a plug-in not installed) is an error
    line naming the kind, not a traceback."""
    import importlib.util

    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name in ("pyaccel.place.wafer", "pyaccel.sim.wafer"):
            return None
        return real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert_error(invoke("run", "--system", "wse3", "--model", MODEL, "--tokens", 4), "wafer")


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--system", SYSTEM, "--model", MODEL, "--batch", "abc"],
        ["run", "--system", SYSTEM, "--model", MODEL, "--context", "1k"],
        ["run", "--model", MODEL],
        ["run", "--system", SYSTEM, "--model", MODEL, "--no-such-option"],
    ],
)
def test_usage_errors_are_one_error_line(args):
    """Values click itself rejects (type errors, missing or unknown options) follow the same
    bad-input contract: exit 2 and one ``error:`` line."""
    error_line(invoke(*args))


# ---------------------------------------------------------------- fuzz


FUZZ = settings(
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(data=st.one_of(st.binary(max_size=400), st.text(max_size=400)))
def test_fuzz_random_preset_file(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "fuzz.toml"
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8", errors="surrogatepass")
    assert_error(run_system(path), str(path))


@FUZZ
@given(data=st.one_of(st.binary(max_size=400), st.text(max_size=400)))
def test_fuzz_random_config_json(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / "config.json"
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8", errors="surrogatepass")
    assert_error(place_model(folder), str(path))


_SAFE_TEXT = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=126, blacklist_characters='"\\'),
    max_size=12,
)


def _toml_value() -> st.SearchStrategy[str]:
    """Random TOML values as source text."""
    scalars = st.one_of(
        st.integers(-(10**12), 10**12).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(
            lambda x: (
                "nan"
                if math.isnan(x)
                else ("inf" if x == float("inf") else "-inf" if x == float("-inf") else repr(x))
            )
        ),
        st.booleans().map(lambda b: "true" if b else "false"),
        _SAFE_TEXT.map(lambda s: f'"{s}"'),
    )
    return st.one_of(
        scalars,
        st.lists(scalars, max_size=3).map(lambda xs: f"[{', '.join(xs)}]"),
        scalars.map(lambda v: f"{{ value = {v} }}"),
    )


_GPU_PARAMS = [ln.split(" = ", 1)[0] for ln in base_toml().splitlines() if " = { value = " in ln]


@FUZZ
@given(name=st.sampled_from(_GPU_PARAMS), value=_toml_value())
def test_fuzz_preset_parameter_values(tmp_path_factory, name, value):
    """One parameter of a valid preset set to a random TOML value: accepted or refused cleanly."""
    path = tmp_path_factory.mktemp("fuzz") / "mutant.toml"
    path.write_text(set_param_value(base_toml(), name, value), encoding="utf-8")
    assert_ok_or_error(invoke("place", "--system", path, "--model", MODEL, "--units", 1))


@FUZZ
@given(key=st.sampled_from(["name", "kind", "description", "native_format"]), value=_toml_value())
def test_fuzz_preset_header_values(tmp_path_factory, key, value):
    path = tmp_path_factory.mktemp("fuzz") / "mutant.toml"
    path.write_text(set_preset_field(base_toml(), key, value), encoding="utf-8")
    assert_ok_or_error(invoke("place", "--system", path, "--model", MODEL, "--units", 1))


_JSON_VALUE = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 200),
        st.floats(-1e6, 1e6, allow_nan=False),
        st.text(max_size=10),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)

_CONFIG_KEYS = sorted(
    set(base_config())
    | {
        "head_dim",
        "layer_types",
        "sliding_window",
        "use_sliding_window",
        "max_window_layers",
        "text_config",
        "num_local_experts",
        "num_experts_per_tok",
    }
)


@FUZZ
@given(key=st.sampled_from(_CONFIG_KEYS), value=_JSON_VALUE)
def test_fuzz_config_field_values(tmp_path_factory, key, value):
    """One field of a valid config.json set to a random JSON value: accepted or refused cleanly."""
    cfg = base_config()
    cfg[key] = value
    folder = write_config(tmp_path_factory.mktemp("fuzz"), cfg)
    assert_ok_or_error(place_model(folder))


@FUZZ
@given(
    model_type=st.sampled_from(
        ["mixtral", "qwen3_moe", "glm4_moe", "deepseek_v3", "gpt_oss", "qwen2", "mistral"]
    ),
    key=st.sampled_from(
        [
            "num_local_experts",
            "num_experts",
            "n_routed_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "mlp_only_layers",
            "decoder_sparse_step",
            "first_k_dense_replace",
            "moe_layer_freq",
            "kv_lora_rank",
            "sliding_window",
            "use_sliding_window",
            "max_window_layers",
            "text_config",
        ]
    ),
    value=_JSON_VALUE,
)
def test_fuzz_family_specific_fields(tmp_path_factory, model_type, key, value):
    """Family-specific fields (experts, MLA, sliding windows) with random values."""
    cfg = base_config()
    cfg.update(
        model_type=model_type,
        num_local_experts=8,
        num_experts=8,
        n_routed_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=1024,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
    )
    cfg[key] = value
    folder = write_config(tmp_path_factory.mktemp("fuzz"), cfg)
    assert_ok_or_error(place_model(folder))


# ----------------------------------------------------------- quantization_config (issue 12 item 10)


@pytest.mark.parametrize(
    "quant, needles",
    [
        ("fp8", ["'quantization_config'", "'fp8'"]),
        ([], ["'quantization_config'", "[]"]),
        ({}, ["'quantization_config.quant_method'", "None"]),
        ({"quant_method": 8}, ["'quantization_config.quant_method'", "8"]),
        ({"quant_method": "fp8", "modules_to_not_convert": "lm_head"},
         ["modules_to_not_convert", "'lm_head'"]),
        ({"quant_method": "fp8", "modules_to_not_convert": [1]}, ["modules_to_not_convert", "[1]"]),
        ({"quant_method": "fp8", "modules_to_not_convert": ["(.*)*x"]},
         ["modules_to_not_convert", "'(.*)*x'", "explode"]),
        ({"quant_method": "fp8", "modules_to_not_convert": [".*.*.*.*x"]},
         ["modules_to_not_convert", "more than 3 repeats"]),
        ({"quant_method": "fp8", "weight_block_size": [128, -1]}, ["weight_block_size", "-1"]),
        ({"quant_method": "fp8", "weight_block_size": [1, 2, 3]},
         ["weight_block_size", "[1, 2, 3]"]),
        ({"quant_method": "compressed-tensors", "config_groups": "x"}, ["config_groups", "'x'"]),
        ({"quant_method": "compressed-tensors", "config_groups": {}, "ignore": ["re:(x+)+y"]},
         ["'quantization_config.ignore'", "(x+)+y", "explode"]),
    ],
)  # fmt: skip
def test_bad_quantization_config(tmp_path, quant, needles):
    """A malformed quantization_config names the field and value; a regex that could backtrack
    for hours is refused instead of hanging."""
    cfg = {**base_config(), "quantization_config": quant}
    assert_error(place_model(write_config(tmp_path, cfg)), *needles)


_PATTERNS = st.lists(st.text(max_size=12), max_size=4)


@FUZZ
@given(
    key=st.sampled_from(
        ["quant_method", "modules_to_not_convert", "weight_block_size", "fmt", "config_groups",
         "ignore", "torch_dtype"]
    ),
    value=st.one_of(_JSON_VALUE, _PATTERNS, _PATTERNS.map(lambda ps: [f"re:{p}" for p in ps])),
    method=st.sampled_from(["fp8", "mxfp4", "compressed-tensors", "gptq"]),
)  # fmt: skip
def test_fuzz_quantization_config(tmp_path_factory, key, value, method):
    """Random fields (and random exclusion regexes) in a quantization_config: accepted, with any
    warnings, or refused cleanly; never a traceback or a hang."""
    group = {"targets": ["Linear"], "weights": {"type": "int", "num_bits": 4,
                                                "strategy": "group", "group_size": 32}}  # fmt: skip
    quant = {"quant_method": method, "config_groups": {"group_0": group}}
    cfg = {**base_config(), "quantization_config": quant}
    (cfg if key == "torch_dtype" else quant)[key] = value
    folder = write_config(tmp_path_factory.mktemp("fuzz"), cfg)
    assert_ok_or_error(invoke("run", "--system", SYSTEM, "--model", folder, "--units", 1,
                              "--tokens", 1, "--json"))  # fmt: skip


# ---------------------------------------------------------------- placement files (issue 12 item 5)
# A placement file names its system (preset or TOML hash), its --set overrides and etch; every
# field a hand-edit can break is refused with the file, the field and the value or limit.


@pytest.mark.parametrize(
    "edit, needles",
    [
        ({"format_version": 4}, ["format_version", "4"]),
        ({"format_version": "2"}, ["format_version"]),
        ({"sets": {"nope": 1}}, ["nope", "no such parameter"]),
        ({"sets": {"clock_hz": None}}, ["clock_hz", "number"]),
        ({"sets": {"clock_hz": 0}}, ["clock_hz", "> 0"]),
        ({"sets": ["clock_hz=1"]}, ["sets", "object"]),
        ({"system_source": {"preset": "h900"}}, ["h900", "known presets"]),
        ({"system_source": {"file": "/nonexistent/x.toml", "sha256": "0" * 64}}, ["x.toml"]),
        ({"system_source": "h100"}, ["system_source", "object"]),
        ({"etch": True}, ["--etch", "h100"]),
        ({"etch": "yes"}, ["etch", "boolean"]),
        ({"units": 10**12}, ["units", "65,536"]),
        ({"kind": "tpu"}, ["tpu", "gpu"]),
        ({"model": 5}, ["model", "string"]),
    ],
)
def test_placement_file_provenance_fields(tmp_path, placement_doc, edit, needles):
    doc = {**copy.deepcopy(placement_doc), **edit}
    path, result = check_doc(tmp_path, doc)
    assert_error(result, str(path), *needles)


@pytest.mark.parametrize(
    "field, value, needles",
    [
        ("layer", 2.0, ["layer key 2.0", "integer"]),
        ("layer", [2], ["layer key [2]"]),
        ("layer", None, ["layer key None"]),
        ("region", [1, 2], ["region", "object"]),
        ("region", "abc", ["region", "object"]),
        ("region", {"stage": "x"}, ["stage", "'x'"]),
        ("region", {"stage": 5}, ["stage", "0..0"]),
    ],
)
def test_placement_file_layer_fields(tmp_path, placement_doc, field, value, needles):
    doc = copy.deepcopy(placement_doc)
    doc["layers"][layer_index(doc, 2)][field] = value
    _path, result = check_doc(tmp_path, doc)
    assert_error(result, *needles)


def test_placement_file_unit_named_twice(tmp_path, placement_doc):
    doc = copy.deepcopy(placement_doc)
    doc["units"] = 2
    doc["layers"][layer_index(doc, 2)].update(units=[1, 1], weight_bytes=[1, 1], kv_bytes=[0, 0],
                                              buffer_bytes=[0, 0])  # fmt: skip
    path, result = check_doc(tmp_path, doc)
    assert_error(result, str(path), "layer 2", "twice")


def test_placement_file_unknown_workload_field(tmp_path, placement_doc):
    doc = copy.deepcopy(placement_doc)
    doc["workload"]["batchsize"] = 4
    path, result = check_doc(tmp_path, doc)
    assert_error(result, str(path), "batchsize")


def test_placement_file_changed_toml_system(tmp_path):
    text = (resources.files("pyaccel.hw") / "presets" / "h100.toml").read_text(encoding="utf-8")
    toml = tmp_path / "mine.toml"
    toml.write_text(text, encoding="utf-8")
    result = invoke("place", "--system", toml, "--model", MODEL, "--json")
    assert result.exit_code == 0, result.output
    toml.write_text(text + "\n# edited\n", encoding="utf-8")
    path, result = check_doc(tmp_path, json.loads(result.output))
    assert_error(result, str(path), str(toml), "changed", "sha256")


@pytest.mark.parametrize(
    "args, needles, absent",
    [
        (["--system", "groq-tsp", "--model", "deepseek-v3", "--set", "tp_max_chips=8"],
         ["routed experts", "230,686,720 B"], ["reduce the batch"]),
        (["--system", "wse3", "--model", MODEL, "--batch", 256, "--context", 100000],
         ["KV cache", "user(s) fit", "45,875 B"], ["--expert-weights"]),
        (["--system", "groq-tsp", "--model", "llama-3.1-70b", "--units", 576, "--set",
          "tp_max_chips=8"],
         ["576 groq-tsp chips", "'embed'", "no chip count fits"], ["656"]),
    ],
)  # fmt: skip
def test_placement_error_hints_name_the_real_cause(args, needles, absent):
    line = assert_error(invoke("place", *args), *needles)
    for text in absent:
        assert text not in line


# ================================================================ silently wrong results
# (issue 12, item 7): inputs that used to give exit 0 with a wrong number, a traceback or a hang.
# Each is refused with one ``error:`` line naming the field, the value and the limit; the Python
# API raises the same error type with the same text.

TINY = "tiny-llama"


def tiny_run(system: str, *extra):
    return invoke("run", "--system", system, "--model", TINY, "--units", 1, "--tokens", 2,
                  *extra)  # fmt: skip


def set_args(*items: str) -> list[str]:
    return [a for item in items for a in ("--set", item)]


def tiny_config(base: str = TINY, drop: tuple[str, ...] = (), **changes) -> dict:
    text = (resources.files("pyaccel.model") / "presets" / f"{base}.json").read_text("utf-8")
    cfg = json.loads(text)
    for key in drop:
        cfg.pop(key)
    cfg.update(changes)
    return cfg


# ---------------------------------------------------------------- hardware cross-field checks


@pytest.mark.parametrize(
    "system, sets, needles",
    [
        ("h100", ["hbm_achievable_bytes_per_s=1e13"],
         ["hbm_achievable_bytes_per_s (1e+13)", "<= hbm_peak_bytes_per_s (3.35e+12)"]),
        ("h100", ["hbm_peak_bytes_per_s=1e9"],
         ["--set hbm_peak_bytes_per_s=1e9", "hbm_achievable_bytes_per_s (2.97e+12)",
          "hbm_peak_bytes_per_s (1e+09)"]),
        ("h100", ["runtime_reserved_bytes=1e12"],
         ["runtime_reserved_bytes (1e+12)", "< hbm_capacity_bytes"]),
        ("h100", ["l2_bytes=1e12"], ["l2_bytes (1e+12)", "< hbm_capacity_bytes"]),
        ("wse3", ["pe_code_bytes=48000"],
         ["pe_code_bytes (48,000) + pe_buffer_bytes (1,229) = 49,229", "< pe_sram_bytes (49,152)"]),
        ("wse3", ["usable_width_pes=5000"],
         ["usable_width_pes (5,000)", "<= fabric_width_pes (762)"]),
        ("wse3", ["usable_height_pes=5000"],
         ["usable_height_pes (5,000)", "<= fabric_height_pes (1,172)"]),
        ("wse3", ["fabric_bytes_per_elem=1"], ["fabric_bytes_per_elem (1)", ">= 2"]),
        ("groq-tsp", ["local_links_per_peer=3"],
         ["local_links_per_peer (3) x (chips_per_node (8) - 1)", "< c2c_links (16)"]),
        ("groq-tsp", ["chips_per_rack=2"], ["chips_per_node (8)", "<= chips_per_rack (2)"]),
        ("groq-tsp", ["mem_slices=1e9"],
         ["mem_slices (1,000,000,000) x vector_bytes (320)", "<= sram_bytes (230,686,720)"]),
        ("groq-tsp", ["weight_install_streams=100"],
         ["weight_install_streams (100)", "<= 2 x streams_per_direction (32)"]),
        ("taalas-hc1", ["lane_logic_share=3"], ["lane_logic_share (3)", "<= 1"]),
        ("taalas-hc1", ["kv_sram_bytes=1000000", "lora_sram_bytes=2000000"],
         ["lora_sram_bytes (2e+06)", "< kv_sram_bytes (1e+06)"]),
        ("taalas-hc1", ["kv_sram_bytes=100000", "lora_sram_bytes=0", "kv_sram_bank_bytes=200000"],
         ["kv_sram_bank_bytes (200,000)", "<= kv_sram_bytes (100,000)"]),
        ("taalas-hc1", ["kv_sram_port_bytes=1e6"],
         ["kv_sram_port_bytes (1e+06)", "<= kv_sram_bank_bytes (16,384)"]),
        ("taalas-hc1", ["rom_rows_per_cycle=1e4"],
         ["rom_rows_per_cycle (10,000)", "<= rom_rows_per_bitline (512)"]),
    ],
)  # fmt: skip
def test_set_breaking_a_cross_field_relation(system, sets, needles):
    """Each relation between a spec's fields, broken by ``--set``: the error names the --set
    item, both fields with their values, and the relation (today: exit 0, a step faster than
    its own bound, or a negative capacity in a 'does not fit' message)."""
    etch = ["--etch"] if system == "taalas-hc1" else []
    line = assert_error(tiny_run(system, *etch, *set_args(*sets)), "--set", *needles)
    with pytest.raises(pa.ConfigError) as exc:
        pa.load_system(system, overrides=sets)
    assert str(exc.value) == line.removeprefix("error: ")


def test_relations_are_checked_after_all_sets():
    """Raising the peak and the achievable bandwidth together is fine, in either order."""
    for sets in (["hbm_peak_bytes_per_s=1e13", "hbm_achievable_bytes_per_s=9e12"],
                 ["hbm_achievable_bytes_per_s=9e12", "hbm_peak_bytes_per_s=1e13"]):  # fmt: skip
        result = tiny_run("h100", *set_args(*sets), "--json")
        assert result.exit_code == 0, result.stderr
        rec = json.loads(result.stdout)
        assert rec["step_time_s"] >= rec["lower_bound_step_time_s"] > 0


def test_toml_breaking_a_cross_field_relation_names_the_file(tmp_path):
    path = write_toml(tmp_path, set_param_value(base_toml(), "hbm_achievable_bytes_per_s", "9e12"))
    assert_error(run_system(path), str(path), "hbm_achievable_bytes_per_s (9e+12)",
                 "hbm_peak_bytes_per_s (3.35e+12)")  # fmt: skip


@pytest.mark.parametrize("name", pa.hw.io.preset_names())
def test_every_preset_keeps_its_relations(name):
    spec = pa.load_spec(name)
    assert [r for r in spec.params.relations() if r is not None] == []


@pytest.mark.parametrize(
    "system, key",
    [("wse3", "fabric_width_pes"), ("wse3", "fabric_height_pes"), ("h100", "sm_count")],
)
def test_set_of_a_parameter_no_engine_reads(system, key):
    """A --set that would change nothing is refused, not silently ignored."""
    assert_error(tiny_run(system, "--set", f"{key}=5000"), f"--set {key}=5000", "no effect")


def _package_source_outside_hw() -> str:
    root = Path(pa.__file__).parent
    return "\n".join(
        p.read_text("utf-8") for p in sorted(root.rglob("*.py")) if p.parent.name != "hw"
    )


@pytest.mark.parametrize("kind", ["gpu", "wafer", "lpu", "asic"])
def test_every_settable_parameter_is_read_by_the_package(kind):
    """Only parameters marked informational may go unread (they are refused by --set)."""
    from dataclasses import fields

    from pyaccel.hw.spec import PARAMS_BY_KIND

    source = _package_source_outside_hw()
    unread = [f.name for f in fields(PARAMS_BY_KIND[kind])
              if not f.metadata.get("informational")
              and not re.search(rf"\b{f.name}\b", source)]  # fmt: skip
    assert unread == []


@pytest.mark.parametrize(
    "item, needle",
    [("hbm_capacity_bytes=1e30", "hbm_capacity_bytes"), ("gpus_per_node=1e20", "gpus_per_node")],
)
def test_set_of_an_integer_beyond_2_53(item, needle):
    assert_error(tiny_run("h100", "--set", item), needle, "2**53")


def test_toml_integer_beyond_2_53(tmp_path):
    path = write_toml(tmp_path, set_param_value(base_toml(), "hbm_capacity_bytes", str(2**70)))
    assert_error(run_system(path), str(path), "hbm_capacity_bytes", "2**53")


@pytest.mark.parametrize(
    "system, item",
    [
        ("h100", "kernel_launch_s=1e300"),
        ("h100", "clock_hz=1e300"),
        ("taalas-hc1", "matmul_latency_cycles=1e300"),
        ("groq-tsp", "c2c_latency_s=1e300"),
        ("wse3", "system_io_latency_s=1e300"),
    ],
)
def test_set_times_beyond_the_cycle_range(system, item):
    """A time parameter beyond 2**53 cycles of the clock is refused on load (a traceback from
    deep inside the engines before)."""
    etch = ["--etch"] if system == "taalas-hc1" else []
    assert_error(tiny_run(system, *etch, "--set", item), f"--set {item}", "must be <= 2**53 cycles")


@pytest.mark.parametrize(
    "system, units, item",
    [("h100", 1, "bf16_flops_per_s=1e-300"), ("h100", 1, "hbm_achievable_bytes_per_s=1e-300"),
     ("groq-tsp", 2, "c2c_bytes_per_s=1e-300"), ("wse3", 2, "system_io_bytes_per_s=1e-300")],
)  # fmt: skip
def test_set_rates_so_low_that_times_leave_the_cycle_range(system, units, item):
    """Rates of 1e-300 make op times of ~1e300 s: one error line with the limit (and, from the
    engines, the --set values), never an OverflowError traceback."""
    result = invoke("run", "--system", system, "--model", TINY, "--units", units, "--tokens", 2,
                    "--set", item)  # fmt: skip
    line = assert_error(result, "beyond the limit of 2**62 cycles", "--set")
    assert item in line or "a time of" in line, line


def test_lpu_clock_too_slow_for_its_links_is_one_error_line():
    """A clock of 1e-300 Hz makes a C2C link carry infinitely many bytes per cycle: one error
    naming the rate and the clock, not a kernel's ValueError traceback."""
    line = assert_error(tiny_run("groq-tsp", "--set", "clock_hz=1e-300"),
                        "c2c_bytes_per_s", "clock_hz=1e-300", "--set")  # fmt: skip
    assert "Traceback" not in line


# ---------------------------------------------------------------- --set, --systems, --tokens


def test_repeated_set_key():
    assert_error(tiny_run("h100", "--set", "clock_hz=1e9", "--set", "clock_hz=2e9"),
                 "--set clock_hz", "given twice", "clock_hz=1e9", "clock_hz=2e9")  # fmt: skip


@pytest.mark.parametrize("systems, needle", [("", "system 1 of 1 is empty"),
                                             (",", "is empty"),
                                             (" h100 , ", "system 2 of 2 is empty"),
                                             ("h100,,wse3", "system 2 of 3 is empty"),
                                             ("h100,h100", "'h100' is listed twice")])  # fmt: skip
def test_compare_bad_system_list(systems, needle):
    """``--systems ""`` used to run every preset as if the option were absent."""
    assert_error(invoke("compare", "--model", TINY, "--tokens", 2, "--systems", systems),
                 "--systems", needle)  # fmt: skip


def test_tokens_above_the_limit():
    """10^7 tokens used to run for minutes; the limit is 10^6 decode steps."""
    line = assert_error(tiny_run("h100", "--tokens", 1_000_001), "'tokens'", "1,000,001",
                        "1,000,000")  # fmt: skip
    with pytest.raises(pa.ConfigError) as exc:
        pa.Workload(tokens=1_000_001)
    assert str(exc.value) == line.removeprefix("error: ")


def test_expert_weights_on_a_dense_model():
    assert_error(tiny_run("h100", "--expert-weights", "int4"), "--expert-weights int4",
                 "dense", "0 routed experts")  # fmt: skip


def test_expert_weights_on_a_moe_model_still_run():
    result = invoke("run", "--system", "h100", "--model", "tiny-mixtral", "--units", 1,
                    "--tokens", 2, "--expert-weights", "int4", "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr


# ---------------------------------------------------------------- model config relations


@pytest.mark.parametrize(
    "base, changes, drop, needles",
    [
        ("tiny-mixtral", {"num_experts_per_tok": 9}, (),
         ["'num_experts_per_tok' = 9", "4 routed experts"]),
        (TINY, {"hidden_size": 100, "num_attention_heads": 14, "num_key_value_heads": 2},
         ("head_dim",), ["'hidden_size' = 100", "'num_attention_heads' = 14", "head_dim"]),
        (TINY, {"hidden_act": "gelu_new"}, (), ["'hidden_act' = 'gelu_new'", "known: silu"]),
        (TINY, {"hidden_act": 5}, (), ["'hidden_act' = 5", "known: silu"]),
        (TINY, {"tie_word_embeddings": "no"}, (), ["'tie_word_embeddings'", "'no'"]),
        (TINY, {"rms_norm_eps": 1e300}, (), ["'rms_norm_eps' = 1e+300", "< 1"]),
        (TINY, {"head_dim": 15}, (), ["'head_dim' = 15", "even"]),
        ("tiny-deepseek-v3", {"qk_rope_head_dim": 7}, (), ["'qk_rope_head_dim' = 7", "even"]),
        ("tiny-deepseek-v3", {"n_group": 3}, (), ["'n_group' = 3", "8 routed experts"]),
        ("tiny-deepseek-v3", {"n_group": 2, "topk_group": 4}, (),
         ["'topk_group' = 4", "'n_group' = 2"]),
        ("tiny-deepseek-v3", {"n_group": 4, "topk_group": 1, "num_experts_per_tok": 3}, (),
         ["'num_experts_per_tok' = 3", "2 experts"]),
        (TINY, {"num_hidden_layers": 10_000_001}, (), ["'num_hidden_layers' = 10,000,001",
                                                       "10,000"]),
        (TINY, {"text_config": 5}, (), ["'text_config'", "object", "got 5"]),
    ],
)  # fmt: skip
@pytest.mark.parametrize("functional", [False, True])
def test_config_relations(tmp_path, base, changes, drop, needles, functional):
    """Configs whose fields contradict each other (or exceed a limit) are refused on load, with
    and without --functional (a traceback or silent nonsense before; 10^7 layers ran 300 s)."""
    folder = write_config(tmp_path, tiny_config(base, drop, **changes))
    extra = ["--functional"] if functional else []
    line = assert_error(invoke("run", "--system", "h100", "--model", folder, "--units", 1,
                               "--tokens", 2, *extra), str(folder), *needles)  # fmt: skip
    with pytest.raises(pa.ConfigError) as exc:
        pa.load_model(folder)
    assert str(exc.value) == line.removeprefix("error: ")


def test_hidden_size_divisible_by_heads_needs_no_head_dim(tmp_path):
    folder = write_config(tmp_path, tiny_config(drop=("head_dim",)))
    assert pa.load_model(folder).head_dim == 16


def test_graph_estimated_above_1_gib_is_refused_before_building():
    """A ModelConfig made in Python skips the loader's layer limit; build_graph still refuses
    a graph it estimates above 1 GiB, before building it."""
    from dataclasses import replace

    deep = replace(pa.load_model(TINY), n_layers=10**7)
    with pytest.raises(pa.ConfigError, match=r"10,000,000 layers .* GiB, above the limit of 1 GiB"):
        pa.build_graph(deep, pa.Workload(tokens=1))


# ---------------------------------------------------------------- non-finite numerics


def _weights_folder(tmp_path: Path, poison) -> Path:
    """tiny-llama's config beside a safetensors file of its seeded weights, changed by
    ``poison``."""
    from pyaccel.numerics.weights import random_weights, write_safetensors

    folder = write_config(tmp_path, tiny_config())
    weights = random_weights(pa.load_model(folder), 0)
    poison(weights)
    write_safetensors(folder / "model.safetensors", weights)
    return folder


def functional_run(folder: Path):
    return invoke("run", "--system", "h100", "--model", folder, "--units", 1, "--tokens", 2,
                  "--functional", "--json")  # fmt: skip


@pytest.mark.parametrize("value, needle", [(math.nan, "1 NaN and 0 infinite"),
                                           (math.inf, "0 NaN and 1 infinite"),
                                           (-math.inf, "0 NaN and 1 infinite")])  # fmt: skip
def test_non_finite_weight_names_the_tensor(tmp_path, value, needle):
    name = "model.layers.1.mlp.up_proj.weight"
    folder = _weights_folder(tmp_path, lambda w: w[name].__setitem__((3, 5), value))
    assert_error(functional_run(folder), "model.safetensors", f"tensor '{name}'", needle,
                 "must be finite")  # fmt: skip


def test_overflowing_activations_name_layer_and_op(tmp_path):
    """1e38-scale weights used to give top1_agreement 1.0 over NaN logits."""

    import numpy as np

    def scale(weights):
        for key, w in weights.items():
            if key.endswith("proj.weight"):
                w *= np.float32(1e37)

    result = functional_run(_weights_folder(tmp_path, scale))
    line = assert_error(result, "functional run", "layer 0 op self_attn.", "NaN", "finite")
    assert "top1_agreement" not in result.stdout, line


def test_finite_check_passes_ordinary_weights(tmp_path):
    result = functional_run(_weights_folder(tmp_path, lambda w: None))
    assert result.exit_code == 0, result.stderr
    assert math.isfinite(json.loads(result.stdout)["max_abs_logit_error"])


# ---------------------------------------------------------------- bounds in whole cycles


def test_bound_cycles_round_up_never_down():
    from pyaccel.sim.roofline import bound_cycles

    assert bound_cycles([1e-9], 1e3).tolist() == [1]  # 1e-6 cycles: one whole cycle, not 0
    assert bound_cycles([100 / 1.1e9], 1.1e9).tolist() == [100]  # exact stays exact
    assert bound_cycles([100.5 / 1e9, 0.0], 1e9).tolist() == [101, 0]


def test_emulate_and_roofline_refuse_what_is_neither_a_model_nor_a_graph():
    from pyaccel.results import prepare

    case = prepare(TINY, "h100", 1, pa.Workload(tokens=2))
    for call in (pa.emulate, pa.roofline):
        with pytest.raises(
            pa.ConfigError,
            match=rf"{call.__name__}\(\): model must be a ModelConfig or DecodeGraph.*got str",
        ):
            call(TINY, case.system, case.placement, case.workload)


@pytest.mark.parametrize("system, clock", [("h100", "1e4"), ("wse3", "1e3"), ("wse3", "1.1e9"),
                                           ("groq-tsp", "1")])  # fmt: skip
def test_bound_never_below_the_byte_flop_bound(system, clock):
    """With a slow clock (or a tiny model on a wafer) the step bound used to floor to 0
    cycles; it is now the whole cycles covering the roofline's time, and emulated >= it."""
    from pyaccel.results import run
    from pyaccel.sim.roofline import CYCLE_ROUNDING_SLACK, roofline

    r = run(TINY, system, 1, pa.Workload(tokens=2), [f"clock_hz={clock}"])
    trace = r.trace
    true_s = roofline(r.model, r.system, r.placement, trace.workload).step_s
    bound_s = trace.lower_bound_cycles[0] / trace.clock_hz
    # whole cycles covering the bound, up to the float noise of summing exact cycle counts in
    # seconds (CYCLE_ROUNDING_SLACK: 1156 cycles must not come out as 1157)
    assert bound_s >= true_s * (1 - CYCLE_ROUNDING_SLACK) and true_s > 0
    assert (trace.step_cycles >= trace.lower_bound_cycles).all()


@pytest.mark.parametrize(
    "rope, needles",
    [
        ({"rope_type": "linear", "factor": 0}, ["'factor'", "> 0", "got 0"]),
        ({"rope_type": "yarn", "factor": -1, "original_max_position_embeddings": 64},
         ["'factor'", "got -1"]),
        ({"rope_type": "llama3", "factor": "x", "low_freq_factor": 1, "high_freq_factor": 4},
         ["'factor'", "got 'x'"]),
        ({"rope_type": "llama3", "factor": 8, "low_freq_factor": 1}, ["needs 'high_freq_factor'"]),
        ({"rope_type": "llama3", "factor": 8, "low_freq_factor": 2, "high_freq_factor": 2},
         ["'high_freq_factor' = 2", "> 'low_freq_factor' = 2"]),
    ],
)  # fmt: skip
def test_functional_rope_scaling_numbers(tmp_path, rope, needles):
    """A rope factor of 0 or an empty llama3 band made every activation NaN (a KeyError or a
    ValueError traceback for missing or text values)."""
    folder = write_config(tmp_path, tiny_config(rope_scaling=rope))
    assert_error(functional_run(folder), str(folder), "rope_scaling", *needles)


def test_overflow_from_a_config_scale_names_layer_and_op(tmp_path):
    """DeepSeek's routed_scaling_factor of 1e300 overflows the MoE output: named, not NaN
    metrics."""
    folder = write_config(tmp_path, tiny_config("tiny-deepseek-v3", routed_scaling_factor=1e300))
    assert_error(functional_run(folder), "functional run", "layer 1 op", "infinite")
