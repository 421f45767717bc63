"""A Hugging Face ``quantization_config``: which of a model's weights ship in which format.

DeepSeek-V3 and Kimi K2 ship fp8 (e4m3 with 128 x 128 block scales, ``quant_method: fp8``);
gpt-oss ships its routed experts in MXFP4 (``quant_method: mxfp4``) and lists the modules kept in
16 bits under ``modules_to_not_convert``; Kimi K2 Thinking ships int4 routed experts as
``compressed-tensors`` (one scheme for ``Linear`` layers, ``ignore`` naming what stays 16-bit).
:func:`parse_quantization_config` reads the block once, when the model config is loaded;
:meth:`QuantConfig.formats` maps it onto pyaccel's two weight formats (``weights`` for every
linear weight, ``expert_weights`` for routed experts, SPEC §6). Which formats a run finally uses
(flag > etched ASIC > this > system) is decided in :func:`pyaccel.workload.resolve_workload`.
"""

from __future__ import annotations

import re
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, lru_cache

from ..errors import ConfigError
from ..units import fmt_bytes

LINEAR = ("attn", "mlp", "shared", "experts", "head")
# quant_method -> pyaccel format, and which weight groups the method converts at all. The
# transformers Mxfp4 quantizer replaces only the MoE expert modules; fp8 (FineGrainedFP8,
# DeepSeek's checkpoints) every linear layer but the output head, which transformers' quantizers
# always leave alone; compressed-tensors every layer its scheme targets (``Linear``: all, head
# included) unless ``ignore`` names it.
METHODS = {
    "fp8": ("fp8", LINEAR[:-1]),
    "mxfp4": ("mxfp4", ("experts",)),
}
COMPRESSED = "compressed-tensors"
# dtype of the weights a quantization_config leaves unconverted (``torch_dtype``/``dtype``).
TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
GROUP_NAMES = {
    "attn": "attention projections",
    "mlp": "dense MLP",
    "shared": "shared experts",
    "experts": "routed experts",
    "head": "LM head",
}


@dataclass(frozen=True)
class QuantConfig:
    """The parts of a ``quantization_config`` that decide storage formats.

    ``format`` is the pyaccel format of converted weights (``None``: a method or scheme pyaccel
    does not model); ``unconverted`` the format of weights it leaves alone (the checkpoint's
    dtype); ``converts`` the weight groups the method converts at all (``attn``, ``mlp``,
    ``shared``, ``experts``, ``head``); ``not_converted`` the exclusions (``modules_to_not_convert``
    or compressed-tensors ``ignore``, as regexes matched at the start of HF module names);
    ``block`` the fp8 block size (rows, cols), empty when not block-wise; ``value_format`` fp8's
    ``fmt`` (e4m3 or e5m2).
    """

    method: str
    format: str | None
    unconverted: str = "bf16"
    not_converted: tuple[str, ...] = ()
    block: tuple[int, ...] = ()
    value_format: str = ""
    converts: tuple[str, ...] = ()

    def formats(self, model) -> tuple[str, str, list[str]]:
        """``(weights, expert_weights, notes)`` for ``model`` (a ModelConfig) as it ships;
        ``notes`` say where pyaccel's two formats approximate the checkpoint."""
        assert self.format is not None, "formats() of a method pyaccel does not model"
        status = {g: _converted(self, model, g) for g in _groups(model)}
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

        weights = pick([g for g in status if g not in ("experts", "head")], "linear weights")
        experts = pick(["experts"], "routed experts") if "experts" in status else weights
        head = self.format if status.get("head") is True else self.unconverted
        if "head" in status and head != weights:  # pyaccel stores the head at --weights
            notes.append(
                f"the LM head, {head} in the checkpoint ({_head_bytes(model, head)}), is "
                f"counted at {weights} ({_head_bytes(model, weights)}, read every step) with "
                "the other linear weights"
            )
        if self.block and self.format in (weights, experts):
            rows, cols = (self.block * 2)[:2]
            notes.append(
                f"weight block size {list(self.block)}: one fp32 scale per {rows}x{cols} block "
                f"(+{400 / (rows * cols):.3f} % bytes) is counted as {self.format}'s per-tensor "
                "scale"
            )
        if self.format == "fp8" and self.value_format not in ("", "e4m3"):
            notes.append(f"fmt {self.value_format} is counted as pyaccel's fp8 (e4m3, same bytes)")
        return weights, experts, notes


def _head_bytes(model, fmt: str) -> str:
    from ..formats import get_format

    return fmt_bytes(get_format(fmt).tensor_bytes(model.vocab, model.hidden, "head"))


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
    for pattern in patterns:
        _check_regex(pattern, f"{where}: field '{field}.modules_to_not_convert'")
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
    common = {"method": method, "unconverted": TORCH_DTYPES.get(str(dtype), "bf16")}
    if method == COMPRESSED:
        return _compressed_tensors(q, where, common)
    fmt, converts = METHODS.get(method, (None, ()))
    return QuantConfig(
        **common,
        format=fmt,
        converts=converts,
        not_converted=tuple(patterns),
        block=tuple(block),
        value_format=str(q.get("fmt") or ""),
    )


def _compressed_tensors(q: dict, where: str, common: dict) -> QuantConfig:
    """A ``compressed-tensors`` block: one weight scheme for every ``Linear`` layer that pyaccel
    has a format for (int4 group 32/128, int8 per channel, fp8), ``ignore`` as exclusions
    (``re:`` prefix: a regex; otherwise an exact module name). Anything else: not modelled."""
    field = "quantization_config.config_groups"
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not all(isinstance(g, dict) for g in groups.values()):
        raise ConfigError(f"{where}: field '{field}' must be an object of groups, got {groups!r}")
    ignore = q.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(p, str) for p in ignore):
        raise ConfigError(
            f"{where}: field 'quantization_config.ignore' must be a list of module names, "
            f"got {ignore!r}"
        )
    patterns = tuple(p[3:] if p.startswith("re:") else re.escape(p) + "$" for p in ignore)
    for pattern in patterns:
        _check_regex(pattern, f"{where}: field 'quantization_config.ignore'")
    schemes = list(groups.values())
    fmt, block = None, ()
    if len(schemes) == 1 and schemes[0].get("targets") == ["Linear"]:
        weights = schemes[0].get("weights")
        fmt = _compressed_format(weights) if isinstance(weights, dict) else None
        structure = weights.get("block_structure") if isinstance(weights, dict) else None
        if fmt == "fp8" and isinstance(structure, list) and len(structure) == 2:
            block = tuple(int(b) for b in structure if isinstance(b, int) and b > 0)
    return QuantConfig(**common, format=fmt, converts=LINEAR, not_converted=patterns, block=block)


def _compressed_format(weights: dict) -> str | None:
    """The pyaccel format of one compressed-tensors weight scheme, or None."""
    kind, bits = weights.get("type"), weights.get("num_bits")
    strategy, group = weights.get("strategy"), weights.get("group_size")
    if kind == "int" and bits == 4 and strategy == "group" and group in (32, 128):
        return "int4-g32" if group == 32 else "int4"
    if kind == "int" and bits == 8 and strategy == "channel":
        return "int8"
    if kind == "float" and bits == 8:
        return "fp8"
    return None


def _groups(model) -> list[str]:
    """The weight groups ``model`` has (``attn``, ``mlp``, ``shared``, ``experts``, ``head``)."""
    groups = ["attn"]
    if not model.is_moe or model.dense_layers:
        groups.append("mlp")
    if model.n_shared_experts:
        groups.append("shared")
    if model.is_moe:
        groups.append("experts")
    if not model.tied_embeddings:  # a tied head reads the 16-bit embedding table
        groups.append("head")
    return groups


def _module_names(model, group: str, layer: int) -> list[str]:
    """HF module names of ``group`` in ``layer`` (one expert stands for all of them)."""
    base = f"model.layers.{layer}"
    if group == "head":
        return ["lm_head"]
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
    return range(1) if group == "head" else range(model.n_layers)


def _converted(quant: QuantConfig, model, group: str):
    """True when every module of ``group`` is converted, False when none is, ``"some"``
    otherwise."""
    if group not in quant.converts:
        return False
    excluded = cache(_matcher(quant.not_converted))  # parents repeat across a layer's modules
    hits = {
        not any(excluded(name) for name in _with_parents(module))
        for i in _layers(model, group)
        for module in _module_names(model, group, i)
    }
    return hits.pop() if len(hits) == 1 else "some"


def _with_parents(module: str) -> list[str]:
    """``a.b.c`` and its parent modules ``a.b`` and ``a``: excluding a parent (``self_attn``)
    excludes what it holds."""
    parts = module.split(".")
    return [".".join(parts[:n]) for n in range(len(parts), 0, -1)]


def _regex(pattern: str) -> str:
    """``pattern`` as a regex; one that does not compile is a literal with shell-style ``*``."""
    try:
        with _quiet():
            re.compile(pattern)
        return pattern
    except (re.error, RecursionError, OverflowError):
        return ".*".join(re.escape(part) for part in pattern.split("*"))


# Repeats allowed in one exclusion regex. Module names are short (< 60 characters), so up to
# three unnested repeats match in ~10 us (real configs use two: ".*self_attn.*"); nested or
# alternated repeats ("(.*)*x") or many in a row (".*.*.*.*.*.*x": ms, growing as length^n)
# backtrack for hours, so a config holding one is refused.
MAX_REPEATS = 3


class _Explosive(Exception):
    """A regex whose backtracking can take exponential time."""


def _check_regex(pattern: str, what: str) -> None:
    """Refuse an exclusion regex whose matching time can explode (see ``MAX_REPEATS``)."""
    import re._parser as sre  # the stdlib's own parse of a pattern (Python >= 3.11)

    try:
        with _quiet():
            tree = sre.parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return  # not a regex: matched as a literal with shell-style ``*`` (linear)
    try:
        if _repeats(sre, tree, inside=False) <= MAX_REPEATS:
            return
    except (_Explosive, RecursionError):
        pass
    raise ConfigError(
        f"{what}: entry {pattern!r} is a regex with nested or alternated repeats, "
        f"back-references or more than {MAX_REPEATS} repeats, whose matching time can "
        "explode; write it more simply (e.g. 'model.layers.*.self_attn')"
    )


def _repeats(sre, items, inside: bool) -> int:
    """Repeats (of more than one) in a parsed regex; raises :class:`_Explosive` for a repeat or
    an alternation inside a repeat, and for back-references."""
    count = 0
    for op, av in items:
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            many = av[1] > 1
            if many and inside:
                raise _Explosive
            count += many + _repeats(sre, av[2], inside or many)
        elif op is sre.BRANCH:
            if inside:
                raise _Explosive
            count += sum(_repeats(sre, branch, inside) for branch in av[1])
        elif op in (sre.SUBPATTERN, sre.ASSERT, sre.ASSERT_NOT):
            count += _repeats(sre, av[-1], inside)
        elif op is sre.ATOMIC_GROUP:
            count += _repeats(sre, av, inside)
        elif op in (sre.GROUPREF, sre.GROUPREF_EXISTS):
            raise _Explosive
    return count


@lru_cache(maxsize=64)
def _matcher(patterns: tuple[str, ...]):
    """One test for all ``patterns`` (see :func:`module_matches`), compiled once."""
    if not patterns:
        return lambda name: False
    regexes = [_regex(p) for p in patterns]
    with _quiet():
        try:
            starts = re.compile("|".join(f"(?:{r})" for r in regexes))
            return lambda name: name.endswith(patterns) or starts.match(name) is not None
        except (re.error, RecursionError, OverflowError):  # inline flags are legal only first
            each = [re.compile(r) for r in regexes]
            return lambda name: name.endswith(patterns) or any(r.match(name) for r in each)


@contextmanager
def _quiet():
    """Silence the stdlib's FutureWarnings about odd regexes (stderr carries only our lines)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def module_matches(name: str, pattern: str) -> bool:
    """True when ``modules_to_not_convert`` entry ``pattern`` names module ``name``, as
    transformers reads it: the pattern (a regex; ``*`` as in ``model.layers.*.self_attn``)
    matches the start of the name, or the name ends with it (``lm_head``, ``self_attn``).
    Callers also try the module's parents, so a pattern naming a parent excludes its children."""
    return _matcher((pattern,))(name)
