"""Models as they ship (SPEC §6): formats from a config's ``quantization_config``, their precedence
(flag > etched ASIC > quantization_config > system), ``formats_from`` and ``warnings``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import pyaccel as pa
from pyaccel.cli import app
from pyaccel.model.quant import module_matches
from pyaccel.workload import resolve_workload

from conftest import TINY_LLAMA, write_config

runner = CliRunner()

TINY_MOE = {
    **TINY_LLAMA,
    "model_type": "mixtral",
    "architectures": ["MixtralForCausalLM"],
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
}
GPT_OSS_NOT_CONVERTED = [
    "model.layers.*.self_attn",
    "model.layers.*.mlp.router",
    "model.embed_tokens",
    "lm_head",
]


def cli(*args):
    """``pyaccel ARGS``: (exit code, stdout, stderr)."""
    result = runner.invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def run_json(*args) -> dict:
    code, out, err = cli("run", *args, "--tokens", 1, "--json")
    assert code == 0, err
    assert err == ""  # warnings travel inside the JSON only
    return json.loads(out)


def resolve(model, system="h100", **work):
    cfg = model if isinstance(model, pa.ModelConfig) else pa.load_model(model)
    return resolve_workload(pa.Workload(**work), cfg, pa.load_spec(system))


def quantized(tmp_path, base: dict, quant: dict, name="q"):
    """A model folder: ``base`` config plus ``quantization_config``."""
    return write_config(tmp_path / name, {**base, "quantization_config": quant})


# ------------------------------------------------------------- the shipped presets


def test_deepseek_v3_on_h100_runs_its_fp8_checkpoint():
    rec = run_json("--system", "h100", "--model", "deepseek-v3")
    assert (rec["weights"], rec["expert_weights"]) == ("fp8", "fp8")
    assert rec["formats_from"] == {
        "weights": "quantization_config",
        "expert_weights": "quantization_config",
        "kv": "default",
    }
    text = " ".join(rec["warnings"])
    assert "quantization_config" in text and "fp8" in text
    assert "128x128" in text  # the block scales' approximation is said, not hidden


def test_explicit_weights_flag_wins_over_quantization_config():
    rec = run_json("--system", "h100", "--model", "deepseek-v3", "--weights", "bf16")
    assert (rec["weights"], rec["expert_weights"]) == ("bf16", "bf16")
    assert rec["formats_from"]["weights"] == rec["formats_from"]["expert_weights"] == "flag"
    assert rec["warnings"] == []


def test_expert_flag_alone_keeps_the_config_for_the_other_weights():
    r = resolve("deepseek-v3", expert_weights="int4")
    assert (r.workload.weights, r.workload.expert_weights) == ("fp8", "int4")
    assert r.formats_from["weights"] == "quantization_config"
    assert r.formats_from["expert_weights"] == "flag"


def test_gpt_oss_maps_to_bf16_with_mxfp4_experts():
    rec = run_json("--system", "h100", "--model", "gpt-oss-120b")
    assert (rec["weights"], rec["expert_weights"]) == ("bf16", "mxfp4")
    assert set(rec["formats_from"].values()) == {"quantization_config", "default"}


@pytest.mark.parametrize("model", ["deepseek-v3", "kimi-k2"])
def test_fp8_presets_on_every_linear_weight(model):
    cfg = pa.load_model(model)
    assert cfg.quantization.method == "fp8" and cfg.quantization.block == (128, 128)
    r = resolve(cfg)
    assert (r.workload.weights, r.workload.expert_weights) == ("fp8", "fp8")


def test_taalas_hc1_format_comes_from_its_etching():
    rec = run_json("--system", "taalas-hc1", "--model", "llama-3.1-8b")
    assert rec["weights"] == "hc1"
    assert rec["formats_from"]["weights"] == rec["formats_from"]["expert_weights"] == "etched"
    assert rec["warnings"] == []


def test_etched_format_wins_over_quantization_config_and_says_so():
    r = resolve("deepseek-v3", "taalas-hc1")
    assert (r.workload.weights, r.workload.expert_weights) == ("hc1", "hc1")
    assert r.formats_from["weights"] == "etched"
    assert any("etched at hc1" in w and "quantization_config" in w for w in r.warnings)


def test_models_without_quantization_config_keep_the_system_format():
    r = resolve("llama-3.1-8b", "groq-tsp")
    assert r.workload.weights == "int8"
    assert r.formats_from["weights"] == "system"
    assert r.warnings == ()


def test_a_router_on_a_dense_model_is_said_to_do_nothing():
    assert resolve("llama-3.1-8b", router="zipf:1.2").warnings == (
        "--router zipf:1.2 has no effect: llama-3.1-8b has no routed experts",)  # fmt: skip
    assert resolve("llama-3.1-8b").warnings == ()
    assert not resolve("mixtral-8x7b", router="zipf:1.2").warnings


def test_python_api_places_and_emulates_with_the_same_formats(tmp_path):
    folder = quantized(tmp_path, TINY_LLAMA, {"quant_method": "fp8"})
    cfg = pa.load_model(folder)
    system = pa.load_system("h100", units=1)
    work = pa.Workload(context=8, tokens=1)
    trace = pa.emulate(cfg, system, pa.place(cfg, system, work), work)
    assert trace.summary()["weights"] == "fp8"


# ------------------------------------------------------------- parsing a config


def test_fp8_honours_modules_to_not_convert(tmp_path):
    folder = quantized(
        tmp_path, TINY_MOE, {"quant_method": "fp8", "modules_to_not_convert": ["self_attn"]}
    )
    r = resolve(pa.load_model(folder))
    assert (r.workload.weights, r.workload.expert_weights) == ("bf16", "fp8")


def test_mxfp4_converts_routed_experts_only(tmp_path):
    cfg = pa.load_model(quantized(tmp_path, TINY_MOE, {"quant_method": "mxfp4"}))
    assert resolve(cfg).workload.weights == "bf16"
    assert resolve(cfg).workload.expert_weights == "mxfp4"
    blocked = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.*.block_sparse_moe"]}
    cfg = pa.load_model(quantized(tmp_path, TINY_MOE, blocked, "blocked"))
    assert resolve(cfg).workload.expert_weights == "bf16"


def test_unconverted_weights_keep_the_checkpoint_dtype(tmp_path):
    base = {**TINY_MOE, "torch_dtype": "float16"}
    cfg = pa.load_model(quantized(tmp_path, base, {"quant_method": "mxfp4"}))
    assert resolve(cfg).workload.weights == "fp16"


def test_partly_unconverted_group_is_counted_wide_and_said(tmp_path):
    quant = {"quant_method": "fp8", "modules_to_not_convert": ["model.layers.0.self_attn"]}
    r = resolve(pa.load_model(quantized(tmp_path, TINY_LLAMA, quant)))
    assert r.workload.weights == "bf16"
    assert any("converts only part of its linear weights" in w for w in r.warnings)


def test_unknown_quant_method_is_ignored_with_a_warning(tmp_path):
    cfg = pa.load_model(quantized(tmp_path, TINY_LLAMA, {"quant_method": "gptq", "bits": 4}))
    r = resolve(cfg, "groq-tsp", context=8)
    assert r.workload.weights == "int8"
    assert r.formats_from["weights"] == "system"
    (warning,) = r.warnings
    assert "'gptq'" in warning and "ignored" in warning and "int8" in warning
    assert resolve(cfg, context=8, weights="bf16").warnings == ()  # all flagged: nothing to say


def compressed(weights: dict, ignore=None) -> dict:
    """A compressed-tensors quantization_config with one scheme for every Linear layer."""
    group = {"targets": ["Linear"], "weights": weights, "input_activations": None}
    return {"quant_method": "compressed-tensors", "format": "pack-quantized",
            "config_groups": {"group_0": group}, "ignore": ignore or []}  # fmt: skip


INT4_G32 = {"type": "int", "num_bits": 4, "strategy": "group", "group_size": 32}
# Kimi K2 Thinking's ignore list: attention, shared experts, dense MLPs and the head stay bf16
KIMI_IGNORE = [
    "lm_head",
    "re:.*self_attn.*",
    "re:.*shared_experts.*",
    "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
]


def tiny_deepseek() -> dict:
    from importlib import resources

    text = (resources.files("pyaccel.model") / "presets" / "tiny-deepseek-v3.json").read_text()
    return {**json.loads(text), "torch_dtype": "bfloat16"}


def test_compressed_tensors_int4_experts_as_kimi_k2_thinking_ships(tmp_path):
    folder = quantized(tmp_path, tiny_deepseek(), compressed(INT4_G32, KIMI_IGNORE))
    r = resolve(pa.load_model(folder), context=8)
    assert (r.workload.weights, r.workload.expert_weights) == ("bf16", "int4-g32")
    assert r.formats_from["expert_weights"] == "quantization_config"
    assert len(r.warnings) == 1  # shared experts, dense MLP and head all kept: nothing approximated


def test_compressed_tensors_without_ignore_converts_the_head_too(tmp_path):
    scheme = {"type": "int", "num_bits": 8, "strategy": "channel"}
    r = resolve(pa.load_model(quantized(tmp_path, TINY_LLAMA, compressed(scheme))), context=8)
    assert r.workload.weights == "int8"
    assert not any("LM head" in w for w in r.warnings)
    r = resolve(pa.load_model(quantized(tmp_path, TINY_LLAMA, compressed(scheme, ["lm_head"]),
                                        "kept")), context=8)  # fmt: skip
    (head,) = [w for w in r.warnings if "LM head" in w]
    assert "bf16 in the checkpoint (32.77 KB), is counted at int8 (16.90 KB" in head


def test_compressed_tensors_scheme_without_a_pyaccel_format_is_ignored(tmp_path):
    scheme = {"type": "int", "num_bits": 3, "strategy": "group", "group_size": 64}
    r = resolve(pa.load_model(quantized(tmp_path, TINY_LLAMA, compressed(scheme))), context=8)
    assert r.formats_from["weights"] == "system"
    assert any("compressed-tensors" in w and "ignored" in w for w in r.warnings)


@pytest.mark.parametrize(
    "quant, field",
    [
        ("fp8", "'quantization_config'"),
        ({"bits": 4}, "'quantization_config.quant_method'"),
        ({"quant_method": "fp8", "modules_to_not_convert": "lm_head"}, "modules_to_not_convert"),
        ({"quant_method": "fp8", "weight_block_size": [128, 0]}, "weight_block_size"),
        ({"quant_method": "compressed-tensors", "config_groups": [1]}, "config_groups"),
        ({**compressed(INT4_G32), "ignore": "lm_head"}, "'quantization_config.ignore'"),
    ],
)
def test_malformed_quantization_config_is_one_error_line(tmp_path, quant, field):
    folder = quantized(tmp_path, TINY_LLAMA, quant)
    code, _, err = cli("run", "--system", "h100", "--model", folder, "--tokens", 1)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and field in err


@pytest.mark.parametrize(
    "pattern, name, hit",
    [
        ("model.layers.*.self_attn", "model.layers.7.self_attn.q_proj", True),
        ("model.layers.*.self_attn", "model.layers.7.mlp.experts.gate_up_proj", False),
        ("lm_head", "lm_head", True),
        ("self_attn.o_proj", "model.layers.3.self_attn.o_proj", True),
        ("model.layers.1.mlp", "model.layers.2.mlp.gate_proj", False),
        ("model.layers.[", "model.layers.[0", True),  # not a regex: read literally
    ],
)
def test_module_patterns_as_transformers_reads_them(pattern, name, hit):
    assert module_matches(name, pattern) is hit


# ------------------------------------------------------------- context and output channels


def test_context_beyond_max_position_embeddings_warns_with_both_numbers(tiny_llama_dir):
    rec = run_json("--system", "h100", "--model", tiny_llama_dir, "--context", 600)
    (warning,) = rec["warnings"]
    assert "601" in warning and "512" in warning and "max_position_embeddings" in warning
    inside = run_json("--system", "h100", "--model", tiny_llama_dir, "--context", 511)
    assert inside["warnings"] == []


def test_drafted_positions_past_the_trained_length_warn(tiny_llama_dir):
    """A speculative round verifies k drafted tokens past the kept ones, writing their K/V:
    context 507 + 1 token + 4 drafted = 512 positions fits 512; context 508 does not."""
    spec = ["--spec-decode", f"draft:{tiny_llama_dir},k=4", "--tokens", 1]
    fits = run_json("--system", "h100", "--model", tiny_llama_dir, "--context", 507, *spec)
    assert fits["warnings"] == []
    rec = run_json("--system", "h100", "--model", tiny_llama_dir, "--context", 508, *spec)
    (warning,) = rec["warnings"]
    assert "+ 4 drafted = 513 positions" in warning and "512" in warning


def test_text_mode_prints_warnings_on_stderr_only(tiny_llama_dir):
    code, out, err = cli("run", "--system", "h100", "--model", tiny_llama_dir,
                         "--context", 600, "--tokens", 1)  # fmt: skip
    assert code == 0
    assert err.startswith("warning: ") and "max_position_embeddings" in err
    assert "warning" not in out


def test_compare_rows_carry_formats_even_when_a_system_cannot_run():
    # kimi-k2's layers overfill even a rack-wide tensor-parallel group of groq-tsp chips
    code, out, err = cli("compare", "--model", "kimi-k2", "--systems", "h100,groq-tsp",
                         "--tokens", 1, "--json")  # fmt: skip
    assert code == 0 and err == ""
    rows = {r["system"]: r for r in json.loads(out)}
    assert "error" in rows["groq-tsp"]
    for row in rows.values():
        assert row["formats_from"]["weights"] == "quantization_config"
        assert any("quantization_config" in w for w in row["warnings"])


def test_report_json_carries_formats_and_warnings(tmp_path):
    folder = quantized(tmp_path, TINY_MOE, {"quant_method": "mxfp4"})
    code, out, err = cli("report", "--system", "h100", "--model", folder, "--context", 8,
                         "--tokens", 1, "--json")  # fmt: skip
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["formats_from"]["expert_weights"] == "quantization_config"
    assert data["summary"]["expert_weights"] == "mxfp4"
    assert data["warnings"]
