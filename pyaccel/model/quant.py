"""A Hugging Face ``quantization_config``: which of a model's weights ship in which format.

DeepSeek-V3 and Kimi K2 ship fp8 (e4m3 with 128 x 128 block scales, ``quant_method: fp8``);
gpt-oss ships its routed experts in MXFP4 (``quant_method: mxfp4``) and lists the modules kept in
16 bits under ``modules_to_not_convert``. :func:`parse_quantization_config` reads the block once,
when the model config is loaded; :meth:`QuantConfig.formats` maps it onto pyaccel's two weight
formats (``weights`` for every linear weight, ``expert_weights`` for routed experts, SPEC §6).
Which formats a run finally uses (flag > etched ASIC > this > system) is decided in
:func:`pyaccel.workload.resolve_workload`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError

# quant_method -> pyaccel format, and which weight groups the method converts at all. The
# transformers Mxfp4 quantizer replaces only the MoE expert modules; fp8 (FineGrainedFP8,
# DeepSeek's checkpoints) converts every linear layer.
METHODS = {
    "fp8": ("fp8", ("attn", "mlp", "shared", "experts")),
    "mxfp4": ("mxfp4", ("experts",)),
}
# dtype of the weights a quantization_config leaves unconverted (``torch_dtype``/``dtype``).
TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
GROUP_NAMES = {
    "attn": "attention projections",
    "mlp": "dense MLP",
    "shared": "shared experts",
    "experts": "routed experts",
}


@dataclass(frozen=True)
class QuantConfig:
    """The parts of a ``quantization_config`` that decide storage formats.

    ``format`` is the pyaccel format of converted weights (``None``: a method pyaccel does not
    model); ``unconverted`` the format of weights it leaves alone (the checkpoint's dtype);
    ``not_converted`` the ``modules_to_not_convert`` patterns (HF module names, regex or prefix);
    ``block`` the fp8 ``weight_block_size`` (rows, cols), empty when not block-wise.
    """

    method: str
    format: str | None
    unconverted: str = "bf16"
    not_converted: tuple[str, ...] = ()
    block: tuple[int, ...] = ()
    value_format: str = ""

    def formats(self, model) -> tuple[str, str, list[str]]:
        """``(weights, expert_weights, notes)`` for ``model`` (a ModelConfig) as it ships;
        ``notes`` say where pyaccel's two formats approximate the checkpoint."""
        assert self.format is not None, "formats() of a method pyaccel does not model"
        converts = METHODS[self.method][1]
        status = {g: _converted(self, model, g, converts) for g in _groups(model)}
        notes = []

        def pick(groups: list[str], what: str) -> str:
            states = {status[g] for g in groups}
            if states == {True}:
                return self.format
            if True in states or "some" in states:  # wider is the side that does not flatter
                kept = [GROUP_NAMES[g] for g in groups if status[g] is not True]
                notes.append(
                    f"the checkpoint converts only part of its {what} to {self.format} "
                    f"({', '.join(kept)} wholly or partly kept at {self.unconverted}): all "
                    f"counted at {self.unconverted} (pyaccel has one format for the linear "
                    "weights and one for routed experts)"
                )
            return self.unconverted

        weights = pick([g for g in status if g != "experts"], "linear weights")
        experts = pick(["experts"], "routed experts") if "experts" in status else weights
        if weights == self.format and not model.tied_embeddings:
            notes.append(
                f"the LM head, kept at {self.unconverted} in the checkpoint, is counted at "
                f"{weights} with the other linear weights"
            )
        if self.block and self.format in (weights, experts):
            rows, cols = (self.block * 2)[:2]
            notes.append(
                f"weight_block_size {list(self.block)}: one fp32 scale per {rows}x{cols} block "
                f"(+{400 / (rows * cols):.3f} % bytes) is counted as {self.format}'s per-tensor "
                "scale"
            )
        if self.format == "fp8" and self.value_format not in ("", "e4m3"):
            notes.append(f"fmt {self.value_format} is counted as pyaccel's fp8 (e4m3, same bytes)")
        return weights, experts, notes


def parse_quantization_config(cfg: dict, where: str) -> QuantConfig | None:
    """The ``quantization_config`` of a parsed HF config (``None`` when there is none); a
    malformed block raises :class:`ConfigError` naming the field."""
    q = cfg.get("quantization_config")
    if q is None:
        return None
    field = "quantization_config"
    if not isinstance(q, dict):
        raise ConfigError(f"{where}: field '{field}' must be an object, got {q!r}")
    method = q.get("quant_method")
    if not isinstance(method, str) or not method.strip():
        raise ConfigError(
            f"{where}: field '{field}.quant_method' must be a non-empty string, got {method!r}"
        )
    method = method.strip().lower()
    patterns = q.get("modules_to_not_convert") or []
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise ConfigError(
            f"{where}: field '{field}.modules_to_not_convert' must be a list of module names, "
            f"got {patterns!r}"
        )
    block = q.get("weight_block_size") or []
    if (
        not isinstance(block, list)
        or len(block) > 2
        or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
    ):
        raise ConfigError(
            f"{where}: field '{field}.weight_block_size' must be one or two positive integers, "
            f"got {block!r}"
        )
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    return QuantConfig(
        method=method,
        format=METHODS[method][0] if method in METHODS else None,
        unconverted=TORCH_DTYPES.get(str(dtype), "bf16"),
        not_converted=tuple(patterns),
        block=tuple(block),
        value_format=str(q.get("fmt") or ""),
    )


def _groups(model) -> list[str]:
    """The weight groups ``model`` has (``attn``, ``mlp``, ``shared``, ``experts``)."""
    groups = ["attn"]
    if not model.is_moe or model.dense_layers:
        groups.append("mlp")
    if model.n_shared_experts:
        groups.append("shared")
    if model.is_moe:
        groups.append("experts")
    return groups


def _module_names(model, group: str, layer: int) -> list[str]:
    """HF module names of ``group`` in ``layer`` (one expert stands for all of them)."""
    base = f"model.layers.{layer}"
    if group == "attn":
        if model.attention == "mla":
            q = ["q_a_proj", "q_b_proj"] if model.q_lora_rank else ["q_proj"]
            projs = q + ["kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]
        else:
            projs = ["q_proj", "k_proj", "v_proj", "o_proj"]
        return [f"{base}.self_attn.{p}" for p in projs]
    mlp = ["gate_proj", "up_proj", "down_proj"]
    if group == "mlp":
        return [f"{base}.mlp.{p}" for p in mlp]
    if group == "shared":
        return [f"{base}.mlp.shared_experts.{p}" for p in mlp]
    if model.model_type == "mixtral":
        return [f"{base}.block_sparse_moe.experts.0.{p}" for p in ("w1", "w2", "w3")]
    if model.model_type == "gpt_oss":  # one module holding every expert's tensors
        return [f"{base}.mlp.experts.{p}" for p in ("gate_up_proj", "down_proj")]
    return [f"{base}.mlp.experts.0.{p}" for p in mlp]


def _layers(model, group: str) -> range | list[int]:
    if group == "mlp":
        return [i for i in range(model.n_layers) if model.is_dense_layer(i)]
    if group in ("shared", "experts"):
        return [i for i in range(model.n_layers) if not model.is_dense_layer(i)]
    return range(model.n_layers)


def _converted(quant: QuantConfig, model, group: str, converts: tuple[str, ...]):
    """True when every module of ``group`` is converted, False when none is, ``"some"``
    otherwise."""
    if group not in converts:
        return False
    hits = {
        not any(
            module_matches(name, p) for name in _with_parents(module) for p in quant.not_converted
        )
        for i in _layers(model, group)
        for module in _module_names(model, group, i)
    }
    return hits.pop() if len(hits) == 1 else "some"


def _with_parents(module: str) -> list[str]:
    """``a.b.c`` and its parent modules ``a.b`` and ``a``: excluding a parent (``self_attn``)
    excludes what it holds."""
    parts = module.split(".")
    return [".".join(parts[:n]) for n in range(len(parts), 0, -1)]


def module_matches(name: str, pattern: str) -> bool:
    """True when ``modules_to_not_convert`` entry ``pattern`` names module ``name``, as
    transformers reads it: the pattern (a regex; ``*`` as in ``model.layers.*.self_attn``)
    matches the start of the name, or the name ends with it (``lm_head``, ``self_attn``)."""
    if name.endswith(pattern):
        return True
    try:
        return re.match(pattern, name) is not None
    except re.error:  # not a regex: a literal prefix with shell-style ``*``
        regex = ".*".join(re.escape(part) for part in pattern.split("*"))
        return re.match(regex, name) is not None
