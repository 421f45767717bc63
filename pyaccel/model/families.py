"""What each model family's ``config.json`` means beyond the fields every decoder shares: which
families are supported, their MoE fields, sliding windows, MLA ranks, activations and Gemma's
departures from Llama (HF transformers' defaults where a field is absent)."""

from __future__ import annotations

from ..errors import ConfigError
from .fields import integer, layer_list, positive, real

GEMMA_TYPES = {"gemma2", "gemma3_text", "gemma3"}
DENSE_TYPES = {"llama", "mistral", "qwen2", "qwen3", "phi3"} | GEMMA_TYPES
LLAMA4_TYPES = {"llama4_text", "llama4"}
MOE_TYPES = {"mixtral", "qwen3_moe", "glm4_moe", "gpt_oss"} | LLAMA4_TYPES
MLA_TYPES = {"deepseek_v2", "deepseek_v3", "kimi_k2"}
SUPPORTED_TYPES = DENSE_TYPES | MOE_TYPES | MLA_TYPES
# What Hugging Face transformers (5.x config classes) assumes when a config.json leaves the field
# out (kimi_k2 ships DeepSeek-V3's config class); the others default to rms_norm_eps 1e-5 and
# rope_theta 10000.
EPS_1E6_TYPES = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3",
                 "kimi_k2", *sorted(GEMMA_TYPES))  # fmt: skip
DEFAULT_NORM_EPS = dict.fromkeys(EPS_1E6_TYPES, 1e-6)
DEFAULT_ROPE_THETA = {"mixtral": 1e6, "gpt_oss": 150000.0, "gemma3_text": 1e6, "gemma3": 1e6}
# Activations of the gated MLP the graph and the functional reference implement (Hugging Face
# ACT2FN names; "swish" is transformers' alias of SiLU).
SUPPORTED_ACTS = ("silu", "swish", "gelu_pytorch_tanh")


def layer_types(cfg: dict, mt: str, n_layers: int, where: str) -> tuple[str, ...]:
    types = cfg.get("layer_types")
    if types is None and mt in GEMMA_TYPES and cfg.get("sliding_window"):
        # HF's defaults: Gemma 2 alternates sliding/full; Gemma 3 makes every
        # sliding_window_pattern-th layer full
        every = 2 if mt == "gemma2" else positive(cfg, "sliding_window_pattern", where, 6)
        return tuple("full_attention" if (i + 1) % every == 0 else "sliding_attention"
                     for i in range(n_layers))  # fmt: skip
    if types is None:
        return ()
    allowed = {"full_attention", "sliding_attention"}
    if not isinstance(types, list) or len(types) != n_layers or not set(types) <= allowed:
        raise ConfigError(
            f"{where}: field 'layer_types' must list {n_layers} entries from {sorted(allowed)}"
        )
    return tuple(types)


def moe_fields(cfg: dict, mt: str, n_layers: int, where: str) -> dict:
    """Expert counts and which layers stay dense, per family's field names."""
    if mt in LLAMA4_TYPES:
        return llama4_moe_fields(cfg, n_layers, where)
    if mt == "mixtral":
        return dict(
            n_experts=positive(cfg, "num_local_experts", where),
            top_k=positive(cfg, "num_experts_per_tok", where),
            expert_ffn=positive(cfg, "intermediate_size", where),
            dense_layers=(),
        )
    if mt == "gpt_oss":
        top_key = "num_experts_per_tok" if "num_experts_per_tok" in cfg else "experts_per_token"
        return dict(
            n_experts=positive(cfg, "num_local_experts", where),
            top_k=positive(cfg, top_key, where),
            expert_ffn=positive(cfg, "intermediate_size", where),
            dense_layers=(),
            expert_bias=True,
            router_bias=True,
        )
    if mt == "qwen3_moe":
        step = positive(cfg, "decoder_sparse_step", where, 1)
        only = layer_list(cfg, "mlp_only_layers", n_layers, where)
        dense = tuple(i for i in range(n_layers) if i in only or (i + 1) % step != 0)
        return dict(
            n_experts=positive(cfg, "num_experts", where),
            top_k=positive(cfg, "num_experts_per_tok", where),
            expert_ffn=positive(cfg, "moe_intermediate_size", where),
            dense_layers=dense,
        )
    # glm4_moe, deepseek_v2, deepseek_v3, kimi_k2
    first_dense = integer(cfg, "first_k_dense_replace", where, 0)
    freq = positive(cfg, "moe_layer_freq", where, 1)
    dense = tuple(i for i in range(n_layers) if i < first_dense or i % freq != 0)
    return dict(
        n_experts=positive(cfg, "n_routed_experts", where),
        top_k=positive(cfg, "num_experts_per_tok", where),
        n_shared_experts=integer(cfg, "n_shared_experts", where, 0),
        expert_ffn=positive(cfg, "moe_intermediate_size", where),
        dense_layers=dense,
    )


def sliding(cfg: dict, mt: str, n_layers: int, types: tuple[str, ...], where: str) -> dict:
    """Sliding-window attention: per ``layer_types`` (gpt-oss), all layers (Mistral/Mixtral), or
    layers from ``max_window_layers`` on when ``use_sliding_window`` is set (Qwen2/Qwen3)."""
    window = cfg.get("sliding_window") or 0
    if types:
        if "sliding_attention" in types:
            return dict(sliding_window=positive(cfg, "sliding_window", where))
        return {}
    if not window:
        return {}
    if mt in ("mistral", "mixtral", "phi3"):  # every layer (Phi-3: HF's mask for all layers)
        return dict(
            sliding_window=positive(cfg, "sliding_window", where),
            layer_types=("sliding_attention",) * n_layers,
        )
    if cfg.get("use_sliding_window"):
        first = integer(cfg, "max_window_layers", where, 0)
        return dict(
            sliding_window=positive(cfg, "sliding_window", where),
            layer_types=tuple(
                "sliding_attention" if i >= first else "full_attention" for i in range(n_layers)
            ),
        )
    return {}


def mla_fields(cfg: dict, n_heads: int, where: str) -> dict:
    """Multi-head latent attention's ranks and head widths (DeepSeek-V3, Kimi K2); every head
    reads the one compressed cache, so the KV heads are the query heads."""
    return dict(
        attention="mla",
        q_lora_rank=integer(cfg, "q_lora_rank", where, 0),
        kv_lora_rank=positive(cfg, "kv_lora_rank", where),
        qk_nope_dim=positive(cfg, "qk_nope_head_dim", where),
        qk_rope_dim=positive(cfg, "qk_rope_head_dim", where),
        v_head_dim=positive(cfg, "v_head_dim", where),
        n_kv_heads=n_heads,
    )


def hidden_act(cfg: dict, mt: str, where: str) -> str:
    """The gated MLP's activation, ``silu`` or ``gelu_tanh``: ``hidden_act`` (Gemma:
    ``hidden_activation``, absent: GELU-tanh; others absent: SiLU), one of
    :data:`SUPPORTED_ACTS`."""
    key = "hidden_activation" if mt in GEMMA_TYPES else "hidden_act"
    act = cfg.get(key) or ("gelu_pytorch_tanh" if mt in GEMMA_TYPES else "silu")
    if act not in SUPPORTED_ACTS:
        raise ConfigError(f"{where}: field '{key}' = {act!r} is not supported; known: "
                          f"{', '.join(SUPPORTED_ACTS)}")  # fmt: skip
    return "gelu_tanh" if act == "gelu_pytorch_tanh" else "silu"


def gemma_fields(cfg: dict, mt: str, where: str) -> dict:
    """Gemma 2/3's departures from Llama (HF's config defaults where a field is absent;
    ``null`` soft-capping is off)."""
    gemma2 = mt == "gemma2"
    caps = {}
    for key, name, default in (("attn_logit_softcapping", "attn_softcap", 50.0),
                               ("final_logit_softcapping", "final_softcap", 30.0)):  # fmt: skip
        value = cfg.get(key, default if gemma2 else None)
        caps[name] = real({key: value}, key, where, 0.0) if value is not None else 0.0
    out = dict(embed_scale=True, norm_offset=1.0, sandwich_norms=True, **caps,
               attn_scale=real(cfg, "query_pre_attn_scalar", where, 256.0) ** -0.5)  # fmt: skip
    if not gemma2:  # Gemma 3: per-head q/k norms, a rope base of their own on sliding layers
        out.update(qk_norm=True, local_rope_theta=real(cfg, "rope_local_base_freq", where,
                                                        10000.0))  # fmt: skip
    return out


def check_groups(f: dict, cfg: dict, where: str) -> None:
    """DeepSeek routing: ``n_group`` divides the experts, ``topk_group <= n_group`` and the kept
    groups hold at least ``num_experts_per_tok`` experts."""
    n_group = positive(cfg, "n_group", where, 1)
    topk_group = positive(cfg, "topk_group", where, 1)
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


def llama4_moe_fields(cfg: dict, n_layers: int, where: str) -> dict:
    """Llama 4's MoE: ``moe_layers`` (or every ``interleave_moe_layer_step``-th layer), experts
    and one always-on shared expert of ``intermediate_size``; dense layers of
    ``intermediate_size_mlp``."""
    step = positive(cfg, "interleave_moe_layer_step", where, 1)
    moe = cfg.get("moe_layers")
    moe = layer_list(cfg, "moe_layers", n_layers, where) if moe is not None else set(
        range(step - 1, n_layers, step))  # fmt: skip
    return dict(
        n_experts=positive(cfg, "num_local_experts", where),
        top_k=positive(cfg, "num_experts_per_tok", where),
        expert_ffn=positive(cfg, "intermediate_size", where),
        n_shared_experts=1,
        dense_layers=tuple(i for i in range(n_layers) if i not in moe),
        ffn=integer(cfg, "intermediate_size_mlp", where, 16384),
    )


def llama4_attention_fields(cfg: dict, n_layers: int, where: str) -> dict:
    """Llama 4's attention: layers without rope (``no_rope_layers[i] == 0``; by default every
    ``no_rope_layer_interval``-th), chunked attention of ``attention_chunk_size`` tokens on the
    rope layers, a weightless L2 norm of q and k there (``use_qk_norm``), and the attention
    temperature tuning of the no-rope layers."""
    flags = cfg.get("no_rope_layers")
    if not flags:
        every = positive(cfg, "no_rope_layer_interval", where, 4)
        flags = [int((i + 1) % every != 0) for i in range(n_layers)]
    if not isinstance(flags, list) or len(flags) != n_layers or not set(flags) <= {0, 1}:
        raise ConfigError(f"{where}: field 'no_rope_layers' must list {n_layers} flags 0 or 1")
    chunk = cfg.get("attention_chunk_size", 8192)
    tuning = cfg.get("attn_temperature_tuning", True)
    return dict(
        nope_layers=tuple(i for i, f in enumerate(flags) if not f),
        attention_chunk=integer({"c": chunk}, "c", where, 0) if chunk is not None else 0,
        qk_l2_norm=bool(cfg.get("use_qk_norm", True)),
        qk_norm=False,
        temp_floor=real(cfg, "floor_scale", where, 8192.0) if tuning else 0.0,
        temp_scale=real(cfg, "attn_scale", where, 0.1) if tuning else 0.0,
    )
