"""Rotary position embeddings as Hugging Face ``transformers`` computes them: the rope parameters
of a config (``rope_scaling`` / ``rope_parameters``), inverse frequencies for default, linear,
llama3 and yarn scaling, DeepSeek's attention scale, and the two ways pairs rotate."""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError
from ..model.config import ModelConfig

ROPE_TYPES = ("default", "linear", "llama3", "yarn")
# rope fields that must be positive numbers when present (mscale ones may be 0: "off")
_ROPE_POSITIVE = ("rope_theta", "factor", "low_freq_factor", "high_freq_factor", "beta_fast",
                  "beta_slow", "attention_factor", "original_max_position_embeddings")  # fmt: skip
_ROPE_NON_NEGATIVE = ("mscale", "mscale_all_dim")


def rope_parameters(cfg: ModelConfig) -> dict:
    """``cfg``'s rope parameters as transformers reads them: ``rope_scaling`` (or the newer
    ``rope_parameters``) with ``rope_type`` (old spelling ``type``, absent: ``default``),
    ``rope_theta`` and, for llama3/yarn, ``original_max_position_embeddings``."""
    raw = cfg.raw
    rp = raw.get("rope_scaling") or raw.get("rope_parameters") or {}
    if not isinstance(rp, dict):
        raise ConfigError(f"{cfg.name}: 'rope_scaling' must be an object, got {rp!r}")
    rp = dict(rp)
    rp["rope_type"] = rp.get("rope_type") or rp.get("type") or "default"
    if rp.get("rope_theta") is None:
        rp["rope_theta"] = cfg.rope_theta
    if rp["rope_type"] not in ROPE_TYPES:
        raise ConfigError(
            f"{cfg.name}: rope type '{rp['rope_type']}' is not covered by the reference forward "
            f"pass; supported: {', '.join(ROPE_TYPES)}"
        )
    if rp["rope_type"] in ("llama3", "yarn") and rp.get("original_max_position_embeddings") is None:
        rp["original_max_position_embeddings"] = (
            raw.get("original_max_position_embeddings") or cfg.max_position
        )
    _check_rope_numbers(rp, cfg.source or cfg.name)
    return rp


def _check_rope_numbers(rp: dict, where: str) -> None:
    """Rope scaling numbers are finite and positive, and llama3's frequency band is not empty
    (a factor of 0 or equal band edges made every activation NaN)."""
    if rp["rope_type"] == "llama3":
        for key in ("factor", "low_freq_factor", "high_freq_factor"):
            if rp.get(key) is None:
                raise ConfigError(f"{where}: rope_scaling of type llama3 needs '{key}'")
    for key in _ROPE_POSITIVE + _ROPE_NON_NEGATIVE:
        value = rp.get(key)
        if value is None:
            continue
        positive = key in _ROPE_POSITIVE
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (number and math.isfinite(value) and (value > 0 if positive else value >= 0)):
            raise ConfigError(f"{where}: rope_scaling field '{key}' must be a finite number "
                              f"{'> 0' if positive else '>= 0'}, got {value!r}")  # fmt: skip
    if rp["rope_type"] == "llama3" and rp["high_freq_factor"] <= rp["low_freq_factor"]:
        raise ConfigError(
            f"{where}: rope_scaling field 'high_freq_factor' = {rp['high_freq_factor']} must be "
            f"> 'low_freq_factor' = {rp['low_freq_factor']} (the band between them is smoothed)"
        )


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _rope_factor(rp: dict, max_position: int) -> float:
    """The scaling factor; yarn without one uses max / original positions (as HF does)."""
    if rp.get("factor") is not None:
        return float(rp["factor"])
    if rp["rope_type"] == "yarn":
        return max_position / float(rp["original_max_position_embeddings"])
    raise ConfigError(f"rope type '{rp['rope_type']}' needs a 'factor'")


def rope_inv_freq(rp: dict, dim: int, max_position: int) -> tuple[np.ndarray, float]:
    """fp32 inverse frequencies ``[dim // 2]`` and the cos/sin factor of rope parameters ``rp``
    (from :func:`rope_parameters`) over ``dim`` rotary features, computed as transformers does."""
    f32 = np.float32
    base = float(rp["rope_theta"])
    expo = np.arange(0, dim, 2, dtype=np.float32) / f32(dim)
    pos_freqs = (f32(base) ** expo).astype(np.float32)
    inv = (f32(1.0) / pos_freqs).astype(np.float32)
    kind = rp["rope_type"]
    if kind == "default":
        return inv, 1.0
    if kind == "linear":
        return (inv / f32(_rope_factor(rp, max_position))).astype(np.float32), 1.0
    if kind == "llama3":
        factor = _rope_factor(rp, max_position)
        lo_f, hi_f = float(rp["low_freq_factor"]), float(rp["high_freq_factor"])
        old = float(rp["original_max_position_embeddings"])
        lo_wav, hi_wav = old / lo_f, old / hi_f
        wavelen = (f32(2 * math.pi) / inv).astype(np.float32)
        scaled = np.where(wavelen > f32(lo_wav), inv / f32(factor), inv).astype(np.float32)
        smooth = ((f32(old) / wavelen - f32(lo_f)) / f32(hi_f - lo_f)).astype(np.float32)
        smoothed = (f32(1) - smooth) * scaled / f32(factor) + smooth * scaled
        medium = ~(wavelen < f32(hi_wav)) & ~(wavelen > f32(lo_wav))
        return np.where(medium, smoothed, scaled).astype(np.float32), 1.0
    # yarn
    orig = float(rp["original_max_position_embeddings"])
    factor = _rope_factor(rp, max_position)
    att = rp.get("attention_factor")
    mscale, mscale_all = rp.get("mscale"), rp.get("mscale_all_dim")
    if att is None:
        if mscale and mscale_all:
            att = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all)
        else:
            att = _yarn_mscale(factor)
    beta_fast, beta_slow = rp.get("beta_fast") or 32, rp.get("beta_slow") or 1

    def corr_dim(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if rp.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - f32(low)) / f32(high - low), 0, 1)
    extra = (f32(1) - ramp).astype(np.float32)
    interp = (f32(1.0) / (f32(factor) * pos_freqs)).astype(np.float32)
    return (interp * (f32(1) - extra) + inv * extra).astype(np.float32), float(att)


def mla_softmax_scale(cfg: ModelConfig, rp: dict) -> float:
    """DeepSeek's attention scale: ``qk_head_dim ** -0.5``, times ``mscale(factor,
    mscale_all_dim) ** 2`` under a scaled rope with ``mscale_all_dim`` set (HF
    ``yarn_apply_mscale``)."""
    scale = (cfg.qk_nope_dim + cfg.qk_rope_dim) ** -0.5
    if rp["rope_type"] != "default" and rp.get("mscale_all_dim"):
        m = _yarn_mscale(_rope_factor(rp, cfg.max_position or 4096), rp["mscale_all_dim"])
        scale = scale * m * m
    return scale


def rope_cos_sin(inv_freq: np.ndarray, pos: int, factor: float = 1.0):
    """fp32 cos/sin (half width) at position ``pos`` of inverse frequencies ``inv_freq``, each
    times the rope's attention ``factor`` (yarn), as HF computes them."""
    ang = (np.float32(pos) * inv_freq).astype(np.float32)
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    if factor != 1.0:
        cos, sin = cos * np.float32(factor), sin * np.float32(factor)
    return cos, sin


def rope_half(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Llama-style rope (rotate_half) over the last axis."""
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def rope_interleave(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """DeepSeek-style rope on interleaved pairs, output de-interleaved (as HF writes it)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
