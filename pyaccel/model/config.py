"""ModelConfig: the shapes of a decoder-only transformer, read from a Hugging Face ``config.json``.

Supported ``model_type`` families: llama, mistral, qwen2, qwen3, phi3 (dense; Phi-3 fuses
q/k/v and gate/up in its checkpoint); mixtral, qwen3_moe, glm4_moe (MoE); deepseek_v2,
deepseek_v3 / kimi_k2 (MLA + MoE; Kimi K2.5/K2.6 nest these under ``text_config``); gpt_oss
(MoE, sliding-window layers, attention sinks, biases).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import ConfigError, PresetError
from .quant import QuantConfig, parse_quantization_config

DENSE_TYPES = {"llama", "mistral", "qwen2", "qwen3", "phi3"}
MOE_TYPES = {"mixtral", "qwen3_moe", "glm4_moe", "gpt_oss"}
MLA_TYPES = {"deepseek_v2", "deepseek_v3", "kimi_k2"}
SUPPORTED_TYPES = DENSE_TYPES | MOE_TYPES | MLA_TYPES
# What Hugging Face transformers (5.x config classes) assumes when a config.json leaves the field
# out (kimi_k2 ships DeepSeek-V3's config class); the others default to rms_norm_eps 1e-5 and
# rope_theta 10000.
DEFAULT_NORM_EPS = {t: 1e-6 for t in ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe",
                                       "deepseek_v2", "deepseek_v3", "kimi_k2")}  # fmt: skip
DEFAULT_ROPE_THETA = {"mixtral": 1e6, "gpt_oss": 150000.0}
# Activations of the gated MLP the graph and the functional reference implement (Hugging Face
# ACT2FN names; "swish" is transformers' alias of SiLU).
SUPPORTED_ACTS = ("silu", "swish")
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

    def is_sliding(self, layer: int) -> bool:
        """True when ``layer`` attends only to the last ``sliding_window`` tokens."""
        return bool(self.layer_types) and self.layer_types[layer] == "sliding_attention"

    @property
    def kv_elems_per_token_layer(self) -> int:
        """KV-cache elements stored per token per layer (K and V, or MLA's latent + rope key)."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_dim
        return 2 * self.n_kv_heads * self.head_dim


def _need(cfg: dict, key: str, where: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise ConfigError(f"{where}: missing field '{key}'")
    return cfg[key]


def _int(cfg: dict, key: str, where: str, default: int | None = None) -> int:
    value = cfg.get(key, default) if default is not None else _need(cfg, key, where)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where}: field '{key}' must be a non-negative integer, got {value!r}")
    return value


def _positive(cfg: dict, key: str, where: str, default: int | None = None) -> int:
    value = _int(cfg, key, where, default)
    if value == 0:
        raise ConfigError(f"{where}: field '{key}' must be positive, got 0")
    return value


def _rope_theta(cfg: dict, model_type: str, where: str) -> float:
    """``rope_theta``, or (transformers 5 configs) ``rope_parameters.rope_theta``, or the family's
    default."""
    default = DEFAULT_ROPE_THETA.get(model_type, 10000.0)
    params = cfg.get("rope_parameters")
    if cfg.get("rope_theta") is None and isinstance(params, dict):
        return _real(params, "rope_theta", f"{where} rope_parameters", default)
    return _real(cfg, "rope_theta", where, default)


def _real(cfg: dict, key: str, where: str, default: float) -> float:
    """A positive finite real field (``rope_theta``, ``rms_norm_eps``); absent or null: default."""
    value = cfg.get(key)
    if value is None:
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (0 < value < float("inf"))
    ):
        raise ConfigError(f"{where}: field '{key}' must be a positive number, got {value!r}")
    return float(value)


def _layer_list(cfg: dict, key: str, n_layers: int, where: str) -> set[int]:
    """A list of layer indices (e.g. ``mlp_only_layers``); absent or null: empty."""
    value = cfg.get(key)
    if value is None:
        return set()
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n_layers for i in value
    ):
        raise ConfigError(
            f"{where}: field '{key}' must be a list of layer indices 0..{n_layers - 1}, "
            f"got {value!r}"
        )
    return set(value)


def _layer_types(cfg: dict, n_layers: int, where: str) -> tuple[str, ...]:
    types = cfg.get("layer_types")
    if types is None:
        return ()
    allowed = {"full_attention", "sliding_attention"}
    if not isinstance(types, list) or len(types) != n_layers or not set(types) <= allowed:
        raise ConfigError(
            f"{where}: field 'layer_types' must list {n_layers} entries from {sorted(allowed)}"
        )
    return tuple(types)


def _moe_fields(cfg: dict, mt: str, n_layers: int, where: str) -> dict:
    """Expert counts and which layers stay dense, per family's field names."""
    if mt == "mixtral":
        return dict(
            n_experts=_positive(cfg, "num_local_experts", where),
            top_k=_positive(cfg, "num_experts_per_tok", where),
            expert_ffn=_positive(cfg, "intermediate_size", where),
            dense_layers=(),
        )
    if mt == "gpt_oss":
        top_key = "num_experts_per_tok" if "num_experts_per_tok" in cfg else "experts_per_token"
        return dict(
            n_experts=_positive(cfg, "num_local_experts", where),
            top_k=_positive(cfg, top_key, where),
            expert_ffn=_positive(cfg, "intermediate_size", where),
            dense_layers=(),
            expert_bias=True,
            router_bias=True,
        )
    if mt == "qwen3_moe":
        step = _positive(cfg, "decoder_sparse_step", where, 1)
        only = _layer_list(cfg, "mlp_only_layers", n_layers, where)
        dense = tuple(i for i in range(n_layers) if i in only or (i + 1) % step != 0)
        return dict(
            n_experts=_positive(cfg, "num_experts", where),
            top_k=_positive(cfg, "num_experts_per_tok", where),
            expert_ffn=_positive(cfg, "moe_intermediate_size", where),
            dense_layers=dense,
        )
    # glm4_moe, deepseek_v2, deepseek_v3, kimi_k2
    first_dense = _int(cfg, "first_k_dense_replace", where, 0)
    freq = _positive(cfg, "moe_layer_freq", where, 1)
    dense = tuple(i for i in range(n_layers) if i < first_dense or i % freq != 0)
    return dict(
        n_experts=_positive(cfg, "n_routed_experts", where),
        top_k=_positive(cfg, "num_experts_per_tok", where),
        n_shared_experts=_int(cfg, "n_shared_experts", where, 0),
        expert_ffn=_positive(cfg, "moe_intermediate_size", where),
        dense_layers=dense,
    )


def _sliding(cfg: dict, mt: str, n_layers: int, types: tuple[str, ...], where: str) -> dict:
    """Sliding-window attention: per ``layer_types`` (gpt-oss), all layers (Mistral/Mixtral), or
    layers from ``max_window_layers`` on when ``use_sliding_window`` is set (Qwen2/Qwen3)."""
    window = cfg.get("sliding_window") or 0
    if types:
        if "sliding_attention" in types:
            return dict(sliding_window=_positive(cfg, "sliding_window", where))
        return {}
    if not window:
        return {}
    if mt in ("mistral", "mixtral", "phi3"):  # every layer (Phi-3: HF's mask for all layers)
        return dict(
            sliding_window=_positive(cfg, "sliding_window", where),
            layer_types=("sliding_attention",) * n_layers,
        )
    if cfg.get("use_sliding_window"):
        first = _int(cfg, "max_window_layers", where, 0)
        return dict(
            sliding_window=_positive(cfg, "sliding_window", where),
            layer_types=tuple(
                "sliding_attention" if i >= first else "full_attention" for i in range(n_layers)
            ),
        )
    return {}


def config_from_dict(cfg: dict, name: str, where: str) -> ModelConfig:
    """Build a :class:`ModelConfig` from a parsed HF ``config.json``; ``where`` names the file."""
    cfg, mt = _text_config_and_type(cfg, where)
    n_layers = _layer_count(cfg, where)
    hidden = _positive(cfg, "hidden_size", where)
    n_heads = _positive(cfg, "num_attention_heads", where)
    fields: dict[str, Any] = dict(
        name=name,
        model_type=mt,
        n_layers=n_layers,
        hidden=hidden,
        n_heads=n_heads,
        n_kv_heads=_positive(cfg, "num_key_value_heads", where, n_heads),
        head_dim=0,  # set below, once the head counts are known to agree
        ffn=_int(cfg, "intermediate_size", where, 0),
        vocab=_positive(cfg, "vocab_size", where),
        tied_embeddings=_flag(cfg, "tie_word_embeddings", where),
        max_position=_int(cfg, "max_position_embeddings", where, 0),
        rope_theta=_rope_theta(cfg, mt, where),
        norm_eps=_real(cfg, "rms_norm_eps", where, DEFAULT_NORM_EPS.get(mt, 1e-5)),
        hidden_act=_hidden_act(cfg, where),
        layer_types=_layer_types(cfg, n_layers, where),
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
        fields.update(_moe_fields(cfg, mt, n_layers, where))
    if mt in MLA_TYPES:
        fields.update(_mla_fields(cfg, n_heads, where))
    if mt in MLA_TYPES | {"glm4_moe"}:
        fields["mtp_layers"] = _int(cfg, "num_nextn_predict_layers", where, 0)
    if fields["ffn"] == 0 and (not fields.get("n_experts") or fields.get("dense_layers")):
        raise ConfigError(f"{where}: missing field 'intermediate_size' (dense MLP width)")
    bias = bool(cfg.get("attention_bias", mt == "qwen2"))
    fields.update(
        qkv_bias=bias,
        o_bias=bias and mt != "qwen2",
        qk_norm=mt in ("qwen3", "qwen3_moe") or bool(cfg.get("use_qk_norm")),
        attn_sinks=mt == "gpt_oss",
    )
    fields.update(_sliding(cfg, mt, n_layers, fields["layer_types"], where))
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
    mt = _need(cfg, "model_type", where)
    if not isinstance(mt, str) or mt not in SUPPORTED_TYPES:
        raise ConfigError(
            f"{where}: unsupported model_type '{mt}'; supported: "
            f"{', '.join(sorted(SUPPORTED_TYPES))}"
        )
    return cfg, mt


def _mla_fields(cfg: dict, n_heads: int, where: str) -> dict:
    """Multi-head latent attention's ranks and head widths (DeepSeek-V3, Kimi K2); every head
    reads the one compressed cache, so the KV heads are the query heads."""
    return dict(
        attention="mla",
        q_lora_rank=_int(cfg, "q_lora_rank", where, 0),
        kv_lora_rank=_positive(cfg, "kv_lora_rank", where),
        qk_nope_dim=_positive(cfg, "qk_nope_head_dim", where),
        qk_rope_dim=_positive(cfg, "qk_rope_head_dim", where),
        v_head_dim=_positive(cfg, "v_head_dim", where),
        n_kv_heads=n_heads,
    )


# ---- validation beyond one field's type (cross-field relations, limits) ----


def _layer_count(cfg: dict, where: str) -> int:
    """``num_hidden_layers``, refused above :data:`MAX_LAYERS` before anything is built."""
    n = _positive(cfg, "num_hidden_layers", where)
    if n > MAX_LAYERS:
        raise ConfigError(f"{where}: field 'num_hidden_layers' = {n:,} is above the limit of "
                          f"{MAX_LAYERS:,} layers")  # fmt: skip
    return n


def _head_dim(cfg: dict, hidden: int, n_heads: int, mla: bool, where: str) -> int:
    """``head_dim``, or ``hidden_size / num_attention_heads`` when that divides exactly (MLA
    models take their head widths from the ``qk_*``/``v_head_dim`` fields instead)."""
    if cfg.get("head_dim") is not None:
        return _positive(cfg, "head_dim", where)
    if hidden % n_heads and not mla:
        raise ConfigError(
            f"{where}: field 'hidden_size' = {hidden} is not a multiple of "
            f"'num_attention_heads' = {n_heads} and there is no 'head_dim' to say the head width"
        )
    return hidden // n_heads


def _hidden_act(cfg: dict, where: str) -> str:
    """``hidden_act`` (absent: silu), one of :data:`SUPPORTED_ACTS`."""
    act = cfg.get("hidden_act")
    if act is None:
        return "silu"
    if act not in SUPPORTED_ACTS:
        raise ConfigError(f"{where}: field 'hidden_act' = {act!r} is not supported; known: "
                          f"{', '.join(SUPPORTED_ACTS)}")  # fmt: skip
    return "silu"


def _flag(cfg: dict, key: str, where: str) -> bool:
    """A true/false field (absent or null: false); strings such as "no" are refused."""
    value = cfg.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: field '{key}' must be true or false, got {value!r}")
    return value


def _check_consistency(f: dict, cfg: dict, where: str) -> None:
    """Relations between fields: experts per token within the experts (and DeepSeek's groups),
    rotary dimensions even, a norm epsilon below 1."""
    if f.get("n_experts") and f["top_k"] > f["n_experts"]:
        raise ConfigError(f"{where}: field 'num_experts_per_tok' = {f['top_k']} is above the "
                          f"{f['n_experts']} routed experts")  # fmt: skip
    if f["model_type"] in MLA_TYPES:
        _check_groups(f, cfg, where)
    rot, rot_key = (f["qk_rope_dim"], "qk_rope_head_dim") if f.get("attention") == "mla" else (
        f["head_dim"], "head_dim")  # fmt: skip
    if rot % 2:
        raise ConfigError(f"{where}: field '{rot_key}' = {rot} must be even (RoPE rotates "
                          "pairs of dimensions)")  # fmt: skip
    if f["norm_eps"] >= 1:
        raise ConfigError(f"{where}: field 'rms_norm_eps' = {f['norm_eps']:g} must be < 1 (it "
                          "guards a division; released models use 1e-6 to 1e-5)")  # fmt: skip


def _check_groups(f: dict, cfg: dict, where: str) -> None:
    """DeepSeek routing: ``n_group`` divides the experts, ``topk_group <= n_group`` and the kept
    groups hold at least ``num_experts_per_tok`` experts."""
    n_group = _positive(cfg, "n_group", where, 1)
    topk_group = _positive(cfg, "topk_group", where, 1)
    n_exp, top_k = f["n_experts"], f["top_k"]
    if n_exp % n_group:
        raise ConfigError(f"{where}: field 'n_group' = {n_group} does not divide the "
                          f"{n_exp} routed experts")  # fmt: skip
    if topk_group > n_group:
        raise ConfigError(f"{where}: field 'topk_group' = {topk_group} is above 'n_group' = "
                          f"{n_group}")  # fmt: skip
    if top_k > topk_group * (n_exp // n_group):
        raise ConfigError(
            f"{where}: field 'num_experts_per_tok' = {top_k} is above the "
            f"{topk_group * (n_exp // n_group)} experts its 'topk_group' = {topk_group} groups "
            f"of {n_exp // n_group} hold"
        )


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
    """Load a model preset by name, a folder holding ``config.json``, or a ``config.json`` path."""
    text = str(name_or_path)
    path = Path(text)
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
