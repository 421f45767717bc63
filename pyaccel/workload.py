"""Workload: what a decode run asks of a machine (batch, context, tokens, number formats)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from os import PathLike

from .errors import ConfigError
from .formats import FORMATS, Format, get_format
from .units import as_int

# Decode steps one run may emulate: every step is simulated and kept (step times, contexts), so
# a mistyped --tokens would otherwise run for hours.
MAX_TOKENS = 1_000_000
# Sequences one step decodes together: serving engines batch hundreds to a few thousand; a
# million is far past any deployment and keeps batch x tokens x KV bytes inside the 64-bit byte
# counts placement works in (a mistyped --batch otherwise overflows them).
MAX_BATCH = 1_000_000
# Tokens already in each KV cache: the longest trained windows are 10M tokens (Llama 4 Scout);
# beyond that no model attends, and batch x context bytes would leave 64-bit counts.
MAX_CONTEXT = 10_000_000
# The upper limits of the integer fields, with what each counts (for the error message).
LIMITS = {
    "batch": (MAX_BATCH, "sequences per step"),
    "context": (MAX_CONTEXT, "cached tokens per sequence"),
    "tokens": (MAX_TOKENS, "decode steps per run"),
}

# What each text field of a workload looks like, for the error a value of another type gets
# (``kv`` and ``router`` have defaults and take no None; an unset format is None).
EXAMPLES = {
    "router": "'uniform', 'zipf:1.2' or 'trace.npy'",
    "spec_decode": "'draft:llama-3.2-1b,k=4', or None",
    "weights": "'bf16' or 'int4', or None for the system's native format",
    "expert_weights": "'int4-g32', or None for the weights' format",
    "kv": "'bf16' (the default) or 'fp8'",
}


@dataclass(frozen=True)
class Workload:
    """A decode run: ``batch`` sequences, each starting with ``context`` cached tokens and
    generating ``tokens`` more (the context grows by one per step).

    ``spec_decode``: a speculative-decoding request (:mod:`pyaccel.spec_decode`); ``router``:
    how an MoE model's tokens pick their experts (:mod:`pyaccel.routing`: ``uniform``,
    ``zipf:S`` or a trace ``FILE.npy``); ``seed`` the seed of drawn rounds and routes.
    ``step_tokens``: tokens each sequence feeds through one step (1
    when decoding; ``k + 1`` when a speculative round's target verifies ``k`` drafted tokens;
    engines see ``batch x step_tokens`` token rows). ``prefill``: the step is a chunk of each
    sequence's prompt (:mod:`pyaccel.prefill`): its rows fill the KV cache and only each
    sequence's last row is sampled (``logit_rows``). ``expand_mla``: an MLA model's attention
    runs in the expanded (compute-friendly) form when a sequence has several rows in the step:
    its cached latents are up-projected to per-head keys and values once for those rows and
    ordinary multi-head attention runs over them, as GPU serving engines prefill; otherwise the
    absorbed form decode uses (:func:`pyaccel.model.attention.expanded_mla`).
    ``weights`` applies to every linear weight,
    ``expert_weights`` overrides it for routed experts,
    ``kv`` is the KV-cache format. ``None`` formats mean "the system's native format".

    The names are resolved once, here: ``weights_format``, ``expert_weights_format`` and
    ``kv_format`` are the :class:`~pyaccel.formats.Format` of each (``None`` where the name is),
    for the graph, engines and executors; the string fields stay the canonical names (JSON, CLI).
    """

    batch: int = 1
    context: int = 1024
    tokens: int = 128
    weights: str | None = None
    expert_weights: str | None = None
    kv: str = "bf16"
    spec_decode: str | None = None
    step_tokens: int = 1
    prefill: bool = False
    expand_mla: bool = False
    seed: int = 0
    router: str = "uniform"
    weights_format: Format | None = field(default=None, init=False, repr=False, compare=False)
    expert_weights_format: Format | None = field(
        default=None, init=False, repr=False, compare=False
    )
    kv_format: Format | None = field(default=None, init=False, repr=False, compare=False)
    # the k of spec_decode (0 without), parsed once: every attention op's resident KV asks
    drafted: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_counts(self)
        _check_flags(self)
        _check_texts(self)
        for name in ("weights", "expert_weights", "kv"):
            value = getattr(self, name)
            if value is not None:
                fmt = get_format(value, f"--{name.replace('_', '-')} format")
                if name == "kv" and fmt.role_bits:
                    raise ConfigError(_mixed_kv_message(fmt))
                object.__setattr__(self, name, fmt.name)
                object.__setattr__(self, f"{name}_format", fmt)
        from .routing import parse as parse_router

        object.__setattr__(self, "router", parse_router(self.router).text)
        if self.spec_decode:  # canonical spelling; a bad request fails here, before placing
            from .spec_decode import parse

            request = parse(self.spec_decode)
            object.__setattr__(self, "spec_decode", request.text)
            object.__setattr__(self, "drafted", request.k)

    def resolved(self, native_format: str) -> Workload:
        """This workload with unset weight formats filled in from a system's native format."""
        weights = self.weights or native_format
        return replace(self, weights=weights, expert_weights=self.expert_weights or weights)

    @property
    def rows(self) -> int:
        """Token rows one step pushes through the model: ``batch x step_tokens``."""
        return self.batch * self.step_tokens

    @property
    def logit_rows(self) -> int:
        """Token rows whose logits one step computes and samples: every row when decoding or
        verifying (each verified draft needs the target's distribution), one a sequence in a
        prefill chunk (its last: the rows before it only fill the cache, as vLLM's and SGLang's
        logits processors select each request's last scheduled token)."""
        return self.batch if self.prefill else self.rows

    @property
    def max_len(self) -> int:
        """Tokens each sequence keeps by the end of the run: ``context + tokens`` (the length a
        user asks for, and the one capacity messages count in)."""
        return self.context + self.tokens

    @property
    def ahead_positions(self) -> int:
        """K/V positions a step writes past the tokens a sequence keeps: a speculative round's
        verification writes its ``k`` drafted tokens' K/V before their acceptance is known
        (``spec_decode``'s ``k``, the same for the target's decode workload and for its
        verification's with ``step_tokens = k + 1``); 0 without ``spec_decode`` (a prefill
        chunk's ``step_tokens`` are prompt tokens, inside ``context``)."""
        return self.drafted

    @property
    def kv_len(self) -> int:
        """Positions each sequence's KV cache must hold by the end of the run (tokens): its
        ``max_len`` and the :attr:`ahead_positions` its last step writes beyond them (a last
        round that starts at ``max_len - 1`` kept tokens verifies ``k + 1``, writing through
        position ``max_len + k``)."""
        return self.max_len + self.ahead_positions


def _mixed_kv_message(fmt) -> str:
    """Why a per-role mixed weight format (hc1) cannot be a KV-cache format: its bits are
    assigned by weight tensor role, and a cache holds no weight tensors."""
    kv_ok = ", ".join(n for n, f in FORMATS.items() if not f.role_bits)
    return (f"--kv format '{fmt.name}' assigns bits by weight tensor role (attention, MLP, "
            f"head) and has no meaning for a KV cache; KV formats: {kv_ok}")  # fmt: skip


def _check_counts(work: Workload) -> None:
    """The integer fields: whole numbers (NumPy ones become ints) within their limits."""
    for name, low in (("batch", 1), ("context", 0), ("tokens", 1), ("step_tokens", 1),
                      ("seed", 0)):  # fmt: skip
        value = as_int(getattr(work, name))  # NumPy integers too (a loop over np.arange)
        if value is None or value < low:
            raise ConfigError(
                f"workload field '{name}' must be an integer >= {low}, got {getattr(work, name)!r}"
            )
        object.__setattr__(work, name, value)
    for name, (limit, what) in LIMITS.items():
        if getattr(work, name) > limit:
            raise ConfigError(
                f"workload field '{name}' = {getattr(work, name):,} is above the limit of "
                f"{limit:,} {what}"
            )


def _check_flags(work: Workload) -> None:
    """The yes/no fields are booleans (NumPy ones become bools)."""
    for name in ("prefill", "expand_mla"):
        value = getattr(work, name)
        if isinstance(value, str) or value not in (True, False):
            raise ConfigError(f"workload field '{name}' must be True or False, got {value!r}")
        object.__setattr__(work, name, bool(value))


def _check_texts(work: Workload) -> None:
    """The text fields are strings (an unset format or spec_decode: None; a routing trace may
    be a Path)."""
    if isinstance(work.router, PathLike):
        object.__setattr__(work, "router", str(work.router))
    for name, example in EXAMPLES.items():
        value = getattr(work, name)
        if not isinstance(value, str) and (value is not None or name in ("router", "kv")):
            raise ConfigError(
                f"workload field '{name}' must be a string (e.g. {example}), got {value!r}"
            )


@dataclass(frozen=True)
class ResolvedWorkload:
    """A workload with every format decided, where each came from, and what the user should know.

    ``formats_from`` maps ``weights``, ``expert_weights`` and ``kv`` to ``flag`` (given
    explicitly), ``etched`` (the format an ASIC's ROM is etched at), ``quantization_config`` (the
    model's own), ``system`` (the preset's native format) or, for ``kv``, ``default`` (bf16;
    an explicit ``--kv bf16`` reads the same, as it changes nothing).
    ``warnings`` are sentences for the ``warnings`` list of ``run --json`` (``warning:`` lines in
    text).
    """

    workload: Workload
    formats_from: dict
    warnings: tuple[str, ...] = ()


def resolve_workload(workload: Workload, model, spec) -> ResolvedWorkload:
    """Decide the formats of ``workload`` for ``model`` (a ModelConfig) on a machine ``spec``
    (a HardwareSpec), first that applies (SPEC §6): an explicit format; an etched ASIC's format;
    the model's ``quantization_config``; the system's native format. Also warns when the run
    goes past the model's ``max_position_embeddings``."""
    source, default, warnings = _default_formats(model, spec, needed=not workload.weights)
    weights = workload.weights or default[0]
    # an explicit --weights covers routed experts too unless --expert-weights says otherwise
    experts = workload.expert_weights or workload.weights or default[1]
    formats_from = {
        "weights": "flag" if workload.weights else source,
        "expert_weights": "flag" if workload.expert_weights or workload.weights else source,
        "kv": "default" if workload.kv == Workload.kv else "flag",
    }
    if source == "quantization_config" and workload.weights:
        warnings = []  # every format flagged: the config's notes no longer apply
    elif source == "quantization_config":
        taken = [f"weights {weights}"]
        if model.is_moe and not workload.expert_weights:
            taken.append(f"routed experts {experts}")
        warnings.insert(
            0,
            f"formats from {model.name}'s quantization_config (quant_method "
            f"'{model.quantization.method}'): {', '.join(taken)}; pass --weights or "
            "--expert-weights to choose others",
        )
    warnings += _context_warnings(workload, model) + _expert_option_warnings(workload, model)
    work = replace(workload, weights=weights, expert_weights=experts)
    return ResolvedWorkload(work, formats_from, tuple(warnings))


def _default_formats(model, spec, needed: bool) -> tuple[str, tuple[str, str], list[str]]:
    """Where unflagged formats come from, the (weights, expert_weights) formats it gives, and
    warnings about the model's quantization_config (``needed``: some format is unflagged)."""
    quant = model.quantization
    etched = getattr(spec.params, "etched_format", None) if spec.kind == "asic" else None
    if etched:
        warnings = []
        if quant is not None and needed:
            warnings.append(
                f"{model.name}'s quantization_config ({quant.method}) is not used: "
                f"{spec.name} dies are etched at {etched}"
            )
        return "etched", (etched, etched), warnings
    if quant is not None and quant.format:
        weights, experts, notes = quant.formats(model)
        return "quantization_config", (weights, experts), [f"{model.name}: {n}" for n in notes]
    warnings = []
    if quant is not None and needed:
        warnings.append(
            f"{model.name}'s quantization_config (quant_method '{quant.method}') describes a "
            f"format pyaccel does not model: ignored; weights use {spec.native_format}, the "
            f"{spec.name} native format"
        )
    return "system", (spec.native_format, spec.native_format), warnings


def _expert_option_warnings(workload: Workload, model) -> list[str]:
    """A warning when a dense model gives a ``--router`` nothing to route (``--expert-weights``
    is refused for one elsewhere)."""
    if model.is_moe or workload.router == Workload.router:
        return []
    return [f"--router {workload.router} has no effect: {model.name} has no routed experts"]


def _context_warnings(workload: Workload, model) -> list[str]:
    """A warning when the run's last cache position lies beyond the model's trained length:
    the kept tokens' and, with speculative decoding, the ``k`` drafted positions a last round
    writes past them (:attr:`Workload.kv_len`)."""
    limit = model.max_position
    if not limit or workload.kv_len <= limit:
        return []
    ahead = workload.ahead_positions
    drafted = f" + {ahead:,} drafted" if ahead else ""
    text = (
        f"context {workload.context:,} + {workload.tokens:,} generated tokens{drafted} = "
        f"{workload.kv_len:,} positions, beyond {model.name}'s max_position_embeddings "
        f"{limit:,}: emulated as asked, but the model was not trained for that length"
    )
    return [text]
