"""Model weights for functional emulation: a Hugging Face folder (lazy safetensors) or a seeded
random model of the same shapes, both under the Hugging Face checkpoint tensor names.

Safetensors are read through ``safetensors.safe_open`` (NumPy framework, memory-mapped; bf16 as
``ml_dtypes.bfloat16``) so that bf16 files load without torch and nothing is read before it is
needed. Every tensor the model needs is checked (present, shape, dtype) from the headers before
any is returned: a bad folder raises one :class:`ConfigError` naming the file and tensor, never a
partial model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from ml_dtypes import bfloat16  # registers bfloat16 with NumPy: safetensors' BF16 arrays

from ..errors import ConfigError
from ..model.config import ModelConfig
from .checkpoint import fused_tensors
from .codecs import bf16_bits

# Families whose forward pass numerics/reference.py implements.
FUNCTIONAL_TYPES = {"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text",
                    "gemma3", "mixtral", "qwen3_moe", "deepseek_v2", "deepseek_v3", "kimi_k2",
                    "llama4_text", "llama4"}  # fmt: skip
# Routers with a per-expert score-correction bias (DeepSeek-V3's auxiliary-loss-free balancing)
CORRECTION_BIAS_TYPES = ("deepseek_v3", "kimi_k2")

# safetensors dtypes read as weights (converted to fp32; bf16 via ml_dtypes' bfloat16)
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")


def nonfinite_count(x: np.ndarray) -> str | None:
    """``None`` when every value of ``x`` is finite, else how many are NaN and infinite."""
    if np.isfinite(x).all():
        return None
    n_nan, n_inf = int(np.isnan(x).sum()), int(np.isinf(x).sum())
    return f"{n_nan:,} NaN and {n_inf:,} infinite values of {x.size:,}"


def check_finite_tensor(name: str, arr: np.ndarray, where: str | Path) -> np.ndarray:
    """``arr`` unchanged when every value is finite; else :class:`ConfigError` naming the file
    and tensor (NaN or inf weights make every metric of a functional run meaningless)."""
    bad = nonfinite_count(arr)
    if bad is None:
        return arr
    raise ConfigError(f"{where}: tensor '{name}' holds {bad}; weights must be finite")


def check_supported(cfg: ModelConfig) -> None:
    """Raise :class:`ConfigError` unless the reference forward pass covers ``cfg``'s family."""
    if cfg.model_type not in FUNCTIONAL_TYPES:
        raise ConfigError(
            f"functional emulation does not cover model_type '{cfg.model_type}' yet; supported: "
            f"{', '.join(sorted(FUNCTIONAL_TYPES))}"
        )


def _layer_tensors(cfg: ModelConfig, i: int) -> dict[str, tuple[int, ...]]:
    h, p = cfg.hidden, f"model.layers.{i}."
    out: dict[str, tuple[int, ...]] = {
        p + "input_layernorm.weight": (h,),
        p + "post_attention_layernorm.weight": (h,),
    }
    if cfg.sandwich_norms:  # Gemma: norms before and after the MLP too
        out[p + "pre_feedforward_layernorm.weight"] = (h,)
        out[p + "post_feedforward_layernorm.weight"] = (h,)
    a = p + "self_attn."
    if cfg.attention == "mla":
        qd = cfg.qk_nope_dim + cfg.qk_rope_dim
        if cfg.q_lora_rank:
            out[a + "q_a_proj.weight"] = (cfg.q_lora_rank, h)
            out[a + "q_a_layernorm.weight"] = (cfg.q_lora_rank,)
            out[a + "q_b_proj.weight"] = (cfg.n_heads * qd, cfg.q_lora_rank)
        else:
            out[a + "q_proj.weight"] = (cfg.n_heads * qd, h)
        out[a + "kv_a_proj_with_mqa.weight"] = (cfg.kv_lora_rank + cfg.qk_rope_dim, h)
        out[a + "kv_a_layernorm.weight"] = (cfg.kv_lora_rank,)
        out[a + "kv_b_proj.weight"] = (
            cfg.n_heads * (cfg.qk_nope_dim + cfg.v_head_dim),
            cfg.kv_lora_rank,
        )
        out[a + "o_proj.weight"] = (h, cfg.n_heads * cfg.v_head_dim)
    else:
        hd = cfg.head_dim
        for name, rows in (("q", cfg.n_heads * hd), ("k", cfg.n_kv_heads * hd),
                           ("v", cfg.n_kv_heads * hd)):  # fmt: skip
            out[a + f"{name}_proj.weight"] = (rows, h)
            if cfg.qkv_bias:
                out[a + f"{name}_proj.bias"] = (rows,)
        out[a + "o_proj.weight"] = (h, cfg.n_heads * hd)
        if cfg.o_bias:
            out[a + "o_proj.bias"] = (h,)
        if cfg.qk_norm:
            out[a + "q_norm.weight"] = (hd,)
            out[a + "k_norm.weight"] = (hd,)
    out.update(_mlp_tensors(cfg, i))
    return out


def _swiglu(prefix: str, h: int, f: int, names=("gate_proj", "up_proj", "down_proj")) -> dict:
    g, u, d = names
    return {
        f"{prefix}{g}.weight": (f, h),
        f"{prefix}{u}.weight": (f, h),
        f"{prefix}{d}.weight": (h, f),
    }


def _mlp_tensors(cfg: ModelConfig, i: int) -> dict[str, tuple[int, ...]]:
    h, p = cfg.hidden, f"model.layers.{i}."
    if cfg.model_type in ("llama4_text", "llama4"):
        return _llama4_mlp_tensors(cfg, i)
    if cfg.is_dense_layer(i):
        return _swiglu(p + "mlp.", h, cfg.ffn)
    out: dict[str, tuple[int, ...]] = {}
    if cfg.model_type == "mixtral":
        out[p + "block_sparse_moe.gate.weight"] = (cfg.n_experts, h)
        for e in range(cfg.n_experts):
            out.update(_swiglu(f"{p}block_sparse_moe.experts.{e}.", h, cfg.expert_ffn,
                               ("w1", "w3", "w2")))  # fmt: skip
        return out
    out[p + "mlp.gate.weight"] = (cfg.n_experts, h)
    if cfg.model_type in CORRECTION_BIAS_TYPES:
        out[p + "mlp.gate.e_score_correction_bias"] = (cfg.n_experts,)
    for e in range(cfg.n_experts):
        out.update(_swiglu(f"{p}mlp.experts.{e}.", h, cfg.expert_ffn))
    if cfg.n_shared_experts:
        out.update(_swiglu(p + "mlp.shared_experts.", h, cfg.expert_ffn * cfg.n_shared_experts))
    return out


def _llama4_mlp_tensors(cfg: ModelConfig, i: int) -> dict[str, tuple[int, ...]]:
    """Llama 4's ``feed_forward``: a dense MLP, or a router, routed experts and the shared
    expert (the experts' fused checkpoint tensors: :mod:`pyaccel.numerics.checkpoint`)."""
    h, f = cfg.hidden, f"model.layers.{i}.feed_forward."
    if cfg.is_dense_layer(i):
        return _swiglu(f, h, cfg.ffn)
    out = {f + "router.weight": (cfg.n_experts, h)}
    for e in range(cfg.n_experts):
        out.update(_swiglu(f"{f}experts.{e}.", h, cfg.expert_ffn))
    out.update(_swiglu(f + "shared_expert.", h, cfg.expert_ffn))
    return out


def expected_tensors(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor name (HF checkpoint naming) and shape the forward pass of ``cfg`` needs."""
    check_supported(cfg)
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg.vocab, cfg.hidden)}
    for i in range(cfg.n_layers):
        out.update(_layer_tensors(cfg, i))
    out["model.norm.weight"] = (cfg.hidden,)
    if not cfg.tied_embeddings:
        out["lm_head.weight"] = (cfg.vocab, cfg.hidden)
    return out


def random_weights(cfg: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """A seeded random model of ``cfg``'s shapes (fp32): matrices N(0, 1/fan_in) so activations
    keep unit scale through the layers, norms scaling by 1 + N(0, 0.1^2) (Gemma's weights, read
    as 1 + w, are N(0, 0.1^2)), embeddings N(0, 1) (Gemma's N(0, 1/hidden): it scales them up
    by sqrt(hidden)), router correction biases N(0, 0.01^2). Same ``cfg`` and ``seed``, same
    weights, bit for bit."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in expected_tensors(cfg).items():
        if name.endswith("e_score_correction_bias") or name.endswith(".bias"):
            arr = 0.01 * rng.standard_normal(shape)
        elif len(shape) == 1:
            arr = 1.0 - cfg.norm_offset + 0.1 * rng.standard_normal(shape)
        elif name == "model.embed_tokens.weight":
            arr = rng.standard_normal(shape) / (np.sqrt(shape[1]) if cfg.embed_scale else 1.0)
        else:
            arr = rng.standard_normal(shape) / np.sqrt(shape[1])
        out[name] = arr.astype(np.float32)
    return out


# --------------------------------------------------------------------------------------------
# safetensors (read and written by the safetensors library; bf16 as ml_dtypes.bfloat16)


def open_safetensors(path: Path):
    """An open ``safetensors.safe_open`` handle (NumPy arrays, memory-mapped); a file that is
    not safetensors, is cut short or cannot be read raises :class:`ConfigError` naming it."""
    from safetensors import SafetensorError, safe_open

    try:
        return safe_open(str(path), framework="numpy")
    except SafetensorError as exc:
        if "not fully covered" in str(exc):  # the header's data end != the file's length
            raise ConfigError(
                f"{path}: truncated or corrupt: its tensor data runs past the end of the file "
                f"or stops short of it ({path.stat().st_size:,} bytes)"
            ) from None
        raise ConfigError(f"{path}: not a safetensors file ({exc})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.__class__.__name__}: {exc})") from None


def _as_fp32(arr: np.ndarray) -> np.ndarray:
    """A tensor of any supported float dtype as fp32 (exact for bf16, fp16 and fp32)."""
    return np.asarray(arr).astype(np.float32)


def write_safetensors(path: str | Path, tensors: dict[str, np.ndarray], bf16: bool = False) -> None:
    """Write ``tensors`` (fp32, or bf16 with ``bf16=True``, rounded to nearest even) as one
    safetensors file."""
    from safetensors.numpy import save_file

    out = {}
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name], dtype=np.float32)
        out[name] = bf16_bits(arr).view(bfloat16) if bf16 else arr
    save_file(out, str(path))


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of one safetensors file as fp32 arrays (small files: golden data)."""
    path = Path(path)
    fh = open_safetensors(path)
    out = {}
    for name in fh.keys():
        dtype = fh.get_slice(name).get_dtype()
        if dtype not in FLOAT_DTYPES:
            raise ConfigError(f"{path}: tensor '{name}' has dtype {dtype}")
        out[name] = check_finite_tensor(name, _as_fp32(fh.get_tensor(name)), path)
    return out


class LazyWeights:
    """Tensors of a HF folder, validated up front and read (memory-mapped) on first access.

    ``self[name]`` returns an fp32 array; ``names`` lists what the model needs.
    """

    def __init__(self, folder: Path, cfg: ModelConfig):
        self.folder = folder
        self.expected = expected_tensors(cfg)
        self._where: dict[str, Path] = {}
        self._files: dict[Path, object] = {}  # open safe_open handles
        self._cache: dict[str, np.ndarray] = {}
        self._index(folder)
        # tensors a family's checkpoint stores fused (Phi-3's qkv_proj, gate_up_proj)
        fused = fused_tensors(cfg)
        self._fused_shape = {f: shape for f, (shape, _) in fused.items()}
        self._parts = {part.name: (f, part) for f, (_, parts) in fused.items()
                       if f in self._where for part in parts}  # fmt: skip
        self._validate()

    def _index(self, folder: Path) -> None:
        index = folder / "model.safetensors.index.json"
        if index.is_file():
            try:
                wmap = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                files = sorted({folder / f for f in wmap.values()})
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                raise ConfigError(f"{index}: not a valid index (needs a 'weight_map')") from None
        else:
            files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise ConfigError(f"{folder}: no *.safetensors files")
        for path in files:
            if not path.is_file():
                raise ConfigError(
                    f"{index}: lists {path.name}, which is missing"
                    if index.is_file()
                    else f"{path}: not a regular file"
                )
            self._files[path] = fh = open_safetensors(path)
            for name in fh.keys():
                self._where[name] = path

    def _validate(self) -> None:
        for name, shape in self.expected.items():
            if name in self._parts:  # validated as the fused tensor that holds it
                name = self._parts[name][0]
                shape = self._fused_shape[name]
            if name not in self._where:
                raise ConfigError(
                    f"{self.folder}: missing tensor '{name}' (shape {list(shape)}); the model "
                    f"needs {len(self.expected)} tensors"
                )
            path = self._where[name]
            info = self._files[path].get_slice(name)
            if tuple(info.get_shape()) != shape:
                raise ConfigError(
                    f"{path}: tensor '{name}' has shape {list(info.get_shape())}, the config "
                    f"needs {list(shape)}"
                )
            if info.get_dtype() not in FLOAT_DTYPES:
                raise ConfigError(
                    f"{path}: tensor '{name}' has dtype {info.get_dtype()}; supported: "
                    f"{', '.join(FLOAT_DTYPES)}"
                )

    @property
    def names(self) -> list[str]:
        """The tensor names the model needs."""
        return list(self.expected)

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self._parts:
            fused, part = self._parts[name]
            return part.take(self[fused])
        if name not in self._cache:
            where = self._where[name]
            arr = _as_fp32(self._files[where].get_tensor(name))
            self._cache[name] = check_finite_tensor(name, arr, where)
        return self._cache[name]

    def __contains__(self, name: str) -> bool:
        return name in self.expected


def weights_folder(cfg: ModelConfig) -> Path | None:
    """The folder of ``cfg``'s config.json when it holds safetensors, else None."""
    src = Path(cfg.source) if cfg.source else None
    if src is None or not src.is_file():
        return None
    folder = src.parent
    has = any(folder.glob("*.safetensors")) or (folder / "model.safetensors.index.json").is_file()
    return folder if has else None


# Random models larger than this are refused (they would not fit in RAM as fp32 twice over).
MAX_RANDOM_PARAMS = 200_000_000


def load_weights(cfg: ModelConfig, seed: int = 0):
    """``cfg``'s weights: its folder's safetensors if it has any, else a seeded random model."""
    folder = weights_folder(cfg)
    if folder is not None:
        return LazyWeights(folder, cfg)
    n = sum(int(np.prod(s)) for s in expected_tensors(cfg).values())
    if n > MAX_RANDOM_PARAMS:
        raise ConfigError(
            f"functional emulation of {cfg.name} needs {n:,} parameters in memory "
            f"({n * 4 / 1e9:.1f} GB fp32 per copy); the limit is {MAX_RANDOM_PARAMS:,}: use a "
            "tiny model (tiny-llama, tiny-qwen3, tiny-mixtral, tiny-deepseek-v3, tiny-deepseek-v2, "
            "tiny-phi3, tiny-gemma2, tiny-gemma3, tiny-llama4) or a folder"
        )
    return random_weights(cfg, seed)
