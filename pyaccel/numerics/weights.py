"""Model weights for functional emulation: a Hugging Face folder (lazy safetensors) or a seeded
random model of the same shapes, both under the Hugging Face checkpoint tensor names.

Safetensors are read with a small reader of our own (header JSON + ``np.memmap``) so that bf16
files load without torch and nothing is read before it is needed. Every tensor the model needs is
checked (present, shape, dtype) from the headers before any is returned: a bad folder raises one
:class:`ConfigError` naming the file and tensor, never a partial model.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..model.config import ModelConfig
from .codecs import bf16_bits, bf16_decode

# Families whose forward pass numerics/reference.py implements.
FUNCTIONAL_TYPES = {"llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", "deepseek_v3",
                    "kimi_k2"}  # fmt: skip

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64}
FLOAT_DTYPES = tuple(_ST_DTYPES)


def check_finite_tensor(name: str, arr: np.ndarray, where: str | Path) -> np.ndarray:
    """``arr`` unchanged when every value is finite; else :class:`ConfigError` naming the file
    and tensor (NaN or inf weights make every metric of a functional run meaningless)."""
    if np.isfinite(arr).all():
        return arr
    n_nan, n_inf = int(np.isnan(arr).sum()), int(np.isinf(arr).sum())
    raise ConfigError(
        f"{where}: tensor '{name}' holds {n_nan:,} NaN and {n_inf:,} infinite values of "
        f"{arr.size:,}; weights must be finite"
    )


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
    if cfg.attention == "mla":
        out[p + "mlp.gate.e_score_correction_bias"] = (cfg.n_experts,)
    for e in range(cfg.n_experts):
        out.update(_swiglu(f"{p}mlp.experts.{e}.", h, cfg.expert_ffn))
    if cfg.n_shared_experts:
        out.update(_swiglu(p + "mlp.shared_experts.", h, cfg.expert_ffn * cfg.n_shared_experts))
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
    keep unit scale through the layers, norm weights 1 + N(0, 0.1^2), embeddings N(0, 1), router
    correction biases N(0, 0.01^2). Same ``cfg`` and ``seed``, same weights, bit for bit."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in expected_tensors(cfg).items():
        if name.endswith("e_score_correction_bias") or name.endswith(".bias"):
            arr = 0.01 * rng.standard_normal(shape)
        elif len(shape) == 1:
            arr = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name == "model.embed_tokens.weight":
            arr = rng.standard_normal(shape)
        else:
            arr = rng.standard_normal(shape) / np.sqrt(shape[1])
        out[name] = arr.astype(np.float32)
    return out


# --------------------------------------------------------------------------------------------
# safetensors


def read_header(path: Path) -> tuple[dict, int]:
    """(tensor entries, byte offset of the data) of a safetensors file; bad files raise
    :class:`ConfigError` naming the file."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise ConfigError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (n,) = struct.unpack("<Q", raw)
            if n > 100_000_000:
                raise ConfigError(f"{path}: not a safetensors file (header length {n})")
            header = json.loads(fh.read(n).decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.__class__.__name__}: {exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConfigError(f"{path}: not a safetensors file (header is not JSON)") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{path}: not a safetensors file (header is not an object)")
    header.pop("__metadata__", None)
    return header, 8 + n


def write_safetensors(path: str | Path, tensors: dict[str, np.ndarray], bf16: bool = False) -> None:
    """Write ``tensors`` (fp32, or bf16 with ``bf16=True``) as one safetensors file."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name], dtype=np.float32)
        data = bf16_bits(arr).tobytes() if bf16 else arr.tobytes()
        header[name] = {
            "dtype": "BF16" if bf16 else "F32",
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            fh.write(blob)


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of one safetensors file as fp32 arrays (small files: golden data)."""
    path = Path(path)
    header, start = read_header(path)
    raw = path.read_bytes()
    out = {}
    for name, entry in header.items():
        if entry.get("dtype") not in _ST_DTYPES:
            raise ConfigError(f"{path}: tensor '{name}' has dtype {entry.get('dtype')}")
        lo, hi = entry["data_offsets"]
        arr = np.frombuffer(raw[start + lo : start + hi], dtype=_ST_DTYPES[entry["dtype"]])
        arr = bf16_decode(arr) if entry["dtype"] == "BF16" else arr.astype(np.float32)
        out[name] = check_finite_tensor(name, arr.reshape(entry["shape"]), path)
    return out


class LazyWeights:
    """Tensors of a HF folder, validated up front and read (memory-mapped) on first access.

    ``self[name]`` returns an fp32 array; ``names`` lists what the model needs.
    """

    def __init__(self, folder: Path, cfg: ModelConfig):
        self.folder = folder
        self.expected = expected_tensors(cfg)
        self._where: dict[str, tuple[Path, dict, int]] = {}
        self._cache: dict[str, np.ndarray] = {}
        self._maps: dict[Path, np.memmap] = {}
        self._index(folder)
        self._validate()

    def _index(self, folder: Path) -> None:
        index = folder / "model.safetensors.index.json"
        if index.is_file():
            try:
                wmap = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            except (OSError, ValueError, KeyError, TypeError):
                raise ConfigError(f"{index}: not a valid index (needs a 'weight_map')") from None
            files = sorted({folder / f for f in wmap.values()})
        else:
            files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise ConfigError(f"{folder}: no *.safetensors files")
        for path in files:
            if not path.is_file():
                raise ConfigError(f"{index}: lists {path.name}, which is missing")
            header, start = read_header(path)
            size = path.stat().st_size
            for name, entry in header.items():
                end = start + int(entry.get("data_offsets", [0, 0])[1])
                if end > size:
                    raise ConfigError(f"{path}: tensor '{name}' runs past the end of the file")
                self._where[name] = (path, entry, start)

    def _validate(self) -> None:
        for name, shape in self.expected.items():
            if name not in self._where:
                raise ConfigError(
                    f"{self.folder}: missing tensor '{name}' (shape {list(shape)}); the model "
                    f"needs {len(self.expected)} tensors"
                )
            path, entry, _ = self._where[name]
            if tuple(entry.get("shape", ())) != shape:
                raise ConfigError(
                    f"{path}: tensor '{name}' has shape {entry.get('shape')}, the config "
                    f"needs {list(shape)}"
                )
            if entry.get("dtype") not in _ST_DTYPES:
                raise ConfigError(
                    f"{path}: tensor '{name}' has dtype {entry.get('dtype')}; supported: "
                    f"{', '.join(FLOAT_DTYPES)}"
                )

    @property
    def names(self) -> list[str]:
        """The tensor names the model needs."""
        return list(self.expected)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._cache:
            path, entry, start = self._where[name]
            if path not in self._maps:
                self._maps[path] = np.memmap(path, dtype=np.uint8, mode="r")
            lo, hi = entry["data_offsets"]
            raw = self._maps[path][start + lo : start + hi]
            arr = np.frombuffer(raw, dtype=_ST_DTYPES[entry["dtype"]])
            arr = bf16_decode(arr) if entry["dtype"] == "BF16" else arr.astype(np.float32)
            self._cache[name] = check_finite_tensor(name, arr.reshape(entry["shape"]), path)
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
            "tiny model (tiny-llama, tiny-qwen3, tiny-mixtral, tiny-deepseek-v3) or a folder"
        )
    return random_weights(cfg, seed)
