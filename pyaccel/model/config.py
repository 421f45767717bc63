"""ModelConfig: the shapes of a decoder-only transformer, read from a Hugging Face ``config.json``.

Supported ``model_type`` families (what each one's fields mean: :mod:`pyaccel.model.families`;
llama4_text / llama4: MoE with a shared expert, chunked attention, no-rope layers):
llama, mistral, qwen2, qwen3, phi3 (dense; Phi-3 fuses q/k/v and gate/up in its checkpoint);
gemma2, gemma3_text / gemma3 (dense; scaled embeddings, ``1 + w`` norms before and after
attention and MLP, GeGLU, soft-capping, sliding layers); mixtral, qwen3_moe, glm4_moe (MoE);
deepseek_v2, deepseek_v3 / kimi_k2 (MLA + MoE; Kimi K2.5/K2.6 nest these under
``text_config``); gpt_oss (MoE, sliding-window layers, attention sinks, biases).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from os import PathLike
from pathlib import Path
from typing import Any

from ..errors import ConfigError, PresetError
from .families import (
    DEFAULT_NORM_EPS,
    DEFAULT_ROPE_THETA,
    GEMMA_TYPES,
    LLAMA4_TYPES,
    MLA_TYPES,
    MOE_TYPES,
    SUPPORTED_TYPES,
    check_groups,
    gemma_fields,
    hidden_act,
    layer_types,
    llama4_attention_fields,
    mla_fields,
    moe_fields,
    sliding,
)
from .fields import flag, integer, need, positive, real
from .quant import QuantConfig, parse_quantization_config

# Deeper configs are refused before anything is built (the largest released models have < 200
# layers; a 10^7-layer config once ran 300 s to 11 GB before failing).
MAX_LAYERS = 10_000


@dataclass(frozen=True)
class DraftHead:
    """What a speculative drafter built on the target's own states (EAGLE-3 head, MTP module,
    block drafter; SPEC §7) adds to a plain decoder, whose layers the rest of
    :class:`ModelConfig` describes.

    ``fused_states``: hidden-wide vectors (the target's hidden states, and for MTP the token's
    embedding) an ``fc`` projection concatenates into the drafter's ``hidden``-wide input before
    its first layer (0: none). ``attn_input``: how many hidden widths layer 0's q/k/v
    projections read (EAGLE-3: 2, the embedding beside the fused state). ``shares_embedding`` /
    ``shares_head``: the table is the target's (read every step, stored once, by the target).
    """

    fused_states: int = 0
    attn_input: int = 1
    shares_embedding: bool = False
    shares_head: bool = False


@dataclass(frozen=True)
class ModelConfig:
    """Shapes of a decoder-only transformer (all sizes in elements, not bytes).

    ``dense_layers`` lists the layers whose MLP is dense in an MoE model (all layers of a dense
    model). Attention is ``gqa`` (grouped-query, MHA when ``n_kv_heads == n_heads``) or ``mla``
    (DeepSeek multi-head latent attention, cached as ``kv_lora_rank + qk_rope_dim`` per token).
    """

    name: str
    model_type: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    tied_embeddings: bool = False
    attention: str = "gqa"
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_dim: int = 0
    qk_rope_dim: int = 0
    v_head_dim: int = 0
    n_experts: int = 0
    top_k: int = 0
    n_shared_experts: int = 0
    expert_ffn: int = 0
    dense_layers: tuple[int, ...] = ()
    qkv_bias: bool = False
    o_bias: bool = False
    expert_bias: bool = False
    router_bias: bool = False
    qk_norm: bool = False
    attn_sinks: bool = False
    sliding_window: int = 0
    layer_types: tuple[str, ...] = ()
    mtp_layers: int = 0
    draft_head: DraftHead | None = None
    # Gemma: embeddings times sqrt(hidden); RMSNorm weight applied as norm_offset + w; norms
    # after attention and after the MLP too (sandwich); tanh soft-capping of attention scores
    # and of the logits (0: none); the attention scale (0: head_dim ** -0.5); the rope base of
    # sliding-window layers when it differs from rope_theta's (0: the same)
    # Llama 4: layers without rope, chunked attention (tokens a chunk, 0: none) on the others,
    # a weightless L2 norm of q and k on them, and the temperature tuning of the no-rope layers'
    # queries (floor_scale, attn_scale; 0: off)
    nope_layers: tuple[int, ...] = ()
    attention_chunk: int = 0
    qk_l2_norm: bool = False
    temp_floor: float = 0.0
    temp_scale: float = 0.0
    embed_scale: bool = False
    norm_offset: float = 0.0
    sandwich_norms: bool = False
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    attn_scale: float = 0.0
    local_rope_theta: float = 0.0
    max_position: int = 0
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    hidden_act: str = "silu"
    # the config's quantization_config (formats the checkpoint ships in), see model/quant.py
    quantization: QuantConfig | None = None
    source: str = ""
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_moe(self) -> bool:
        """True when some layers route tokens to experts."""
        return self.n_experts > 0

    def is_dense_layer(self, layer: int) -> bool:
        """True when ``layer``'s MLP is a dense SwiGLU block (no routed experts)."""
        return not self.is_moe or layer in self.dense_layers

    def chunk(self, layer: int) -> int:
        """Tokens of ``layer``'s attention chunk (each token attends from its chunk's start;
        Llama 4's rope layers), 0 when it is not chunked."""
        return self.attention_chunk if self.attention_chunk and layer not in self.nope_layers else 0

    def is_sliding(self, layer: int) -> bool:
        """True when ``layer`` attends only to the last ``sliding_window`` tokens."""
        return bool(self.layer_types) and self.layer_types[layer] == "sliding_attention"

    @property
    def kv_elems_per_token_layer(self) -> int:
        """KV-cache elements stored per token per layer (K and V, or MLA's latent + rope key)."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_dim
        return 2 * self.n_kv_heads * self.head_dim


def _rope_theta(cfg: dict, model_type: str, where: str) -> float:
    """``rope_theta``, or (transformers 5 configs) ``rope_parameters.rope_theta``, or the family's
    default."""
    default = DEFAULT_ROPE_THETA.get(model_type, 10000.0)
    params = cfg.get("rope_parameters")
    if cfg.get("rope_theta") is None and isinstance(params, dict):
        return real(params, "rope_theta", f"{where} rope_parameters", default)
    return real(cfg, "rope_theta", where, default)


def config_from_dict(cfg: dict, name: str, where: str) -> ModelConfig:
    """Build a :class:`ModelConfig` from a parsed HF ``config.json``; ``where`` names the file."""
    cfg, mt = _text_config_and_type(cfg, where)
    n_layers = _layer_count(cfg, where)
    hidden = positive(cfg, "hidden_size", where)
    n_heads = positive(cfg, "num_attention_heads", where)
    fields: dict[str, Any] = dict(
        name=name,
        model_type=mt,
        n_layers=n_layers,
        hidden=hidden,
        n_heads=n_heads,
        n_kv_heads=positive(cfg, "num_key_value_heads", where, n_heads),
        head_dim=0,  # set below, once the head counts are known to agree
        ffn=integer(cfg, "intermediate_size", where, 0),
        vocab=positive(cfg, "vocab_size", where),
        tied_embeddings=flag(cfg, "tie_word_embeddings", where, mt in GEMMA_TYPES),
        max_position=integer(cfg, "max_position_embeddings", where, 0),
        rope_theta=_rope_theta(cfg, mt, where),
        norm_eps=real(cfg, "rms_norm_eps", where, DEFAULT_NORM_EPS.get(mt, 1e-5)),
        hidden_act=hidden_act(cfg, mt, where),
        layer_types=layer_types(cfg, mt, n_layers, where),
        quantization=parse_quantization_config(cfg, where),
        source=where,
        raw=cfg,
    )
    if mt not in MLA_TYPES and n_heads % fields["n_kv_heads"]:
        raise ConfigError(
            f"{where}: num_attention_heads {n_heads} is not a multiple of "
            f"num_key_value_heads {fields['n_kv_heads']}"
        )
    fields["head_dim"] = _head_dim(cfg, hidden, n_heads, mt in MLA_TYPES, where)
    if mt in MOE_TYPES | MLA_TYPES:
        fields.update(moe_fields(cfg, mt, n_layers, where))
    if mt in MLA_TYPES:
        fields.update(mla_fields(cfg, n_heads, where))
    if mt in MLA_TYPES | {"glm4_moe"}:
        fields["mtp_layers"] = integer(cfg, "num_nextn_predict_layers", where, 0)
    if fields["ffn"] == 0 and (not fields.get("n_experts") or fields.get("dense_layers")):
        raise ConfigError(f"{where}: missing field 'intermediate_size' (dense MLP width)")
    bias = bool(cfg.get("attention_bias", mt == "qwen2"))
    fields.update(
        qkv_bias=bias,
        o_bias=bias and mt != "qwen2",
        qk_norm=mt in ("qwen3", "qwen3_moe") or bool(cfg.get("use_qk_norm")),
        attn_sinks=mt == "gpt_oss",
    )
    fields.update(sliding(cfg, mt, n_layers, fields["layer_types"], where))
    if mt in GEMMA_TYPES:
        fields.update(gemma_fields(cfg, mt, where))
    if mt in LLAMA4_TYPES:
        fields.update(llama4_attention_fields(cfg, n_layers, where))
    _check_consistency(fields, cfg, where)
    return ModelConfig(**fields)


def _text_config_and_type(cfg, where: str) -> tuple[dict, str]:
    """The config with a multimodal wrapper's ``text_config`` merged in (Kimi K2.5/K2.6), and
    its supported ``model_type``."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(cfg).__name__}")
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    elif cfg.get("text_config") is not None:
        raise ConfigError(f"{where}: field 'text_config' must be an object, got "
                          f"{cfg['text_config']!r}")  # fmt: skip
    mt = need(cfg, "model_type", where)
    if not isinstance(mt, str) or mt not in SUPPORTED_TYPES:
        raise ConfigError(
            f"{where}: unsupported model_type '{mt}'; supported: "
            f"{', '.join(sorted(SUPPORTED_TYPES))}"
        )
    return cfg, mt


# ---- validation beyond one field's type (cross-field relations, limits) ----


def _layer_count(cfg: dict, where: str) -> int:
    """``num_hidden_layers``, refused above :data:`MAX_LAYERS` before anything is built."""
    n = positive(cfg, "num_hidden_layers", where)
    if n > MAX_LAYERS:
        raise ConfigError(f"{where}: field 'num_hidden_layers' = {n:,} is above the limit of "
                          f"{MAX_LAYERS:,} layers")  # fmt: skip
    return n


def _head_dim(cfg: dict, hidden: int, n_heads: int, mla: bool, where: str) -> int:
    """``head_dim``, or ``hidden_size / num_attention_heads`` when that divides exactly (MLA
    models take their head widths from the ``qk_*``/``v_head_dim`` fields instead)."""
    if cfg.get("head_dim") is not None:
        return positive(cfg, "head_dim", where)
    if hidden % n_heads and not mla:
        raise ConfigError(
            f"{where}: field 'hidden_size' = {hidden} is not a multiple of "
            f"'num_attention_heads' = {n_heads} and there is no 'head_dim' to say the head width"
        )
    return hidden // n_heads


def _check_consistency(f: dict, cfg: dict, where: str) -> None:
    """Relations between fields: experts per token within the experts (and DeepSeek's groups),
    rotary dimensions even, a norm epsilon below 1."""
    if f.get("n_experts") and f["top_k"] > f["n_experts"]:
        raise ConfigError(f"{where}: field 'num_experts_per_tok' = {f['top_k']} is above the "
                          f"{f['n_experts']} routed experts")  # fmt: skip
    if f["model_type"] in MLA_TYPES:
        check_groups(f, cfg, where)
    rot, rot_key = (f["qk_rope_dim"], "qk_rope_head_dim") if f.get("attention") == "mla" else (
        f["head_dim"], "head_dim")  # fmt: skip
    if rot % 2:
        raise ConfigError(f"{where}: field '{rot_key}' = {rot} must be even (RoPE rotates "
                          "pairs of dimensions)")  # fmt: skip
    if f["norm_eps"] >= 1:
        raise ConfigError(f"{where}: field 'rms_norm_eps' = {f['norm_eps']:g} must be < 1 (it "
                          "guards a division; released models use 1e-6 to 1e-5)")  # fmt: skip


def preset_names() -> list[str]:
    """Names of the model presets shipped with pyaccel (``config.json`` files)."""
    folder = resources.files("pyaccel.model") / "presets"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def _read_json(path: Path | Any, where: str) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read ({exc.__class__.__name__}: {exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None


def load_model(name_or_path: str | Path) -> ModelConfig:
    """Load a model preset by name, a folder holding ``config.json``, or a ``config.json`` path
    (a :class:`ModelConfig` is returned as it is)."""
    if isinstance(name_or_path, ModelConfig):
        return name_or_path
    if not isinstance(name_or_path, (str, PathLike)):
        hint = " (write the dict to FOLDER/config.json)" if isinstance(name_or_path, dict) else ""
        raise ConfigError(
            "load_model(): takes a preset name, a folder holding config.json or a config.json "
            f"path; got {type(name_or_path).__name__}{hint}"
        )
    text = str(name_or_path)
    path = Path(text)
    if text in preset_names() and path.exists():  # a bare name: which one is meant?
        raise ConfigError(
            f"model '{text}' names both a preset and {path.resolve()} in this folder: pass "
            f"./{text} for the folder, or run from another folder for the preset"
        )
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise ConfigError(f"{name_or_path}: folder has no config.json")
    if path.is_file():
        return config_from_dict(
            _read_json(path, str(path)),
            path.parent.name if path.name == "config.json" else path.stem,
            str(path),
        )
    if text in preset_names():
        res = resources.files("pyaccel.model") / "presets" / f"{text}.json"
        return config_from_dict(_read_json(res, f"preset {text}"), text, f"preset {text}")
    raise PresetError(
        f"unknown model '{text}' (not a preset, folder or file); known presets: "
        f"{', '.join(preset_names())}"
    )
