"""Workload: what a decode run asks of a machine (batch, context, tokens, number formats)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import ConfigError
from .numerics.formats import get_format

# Decode steps one run may emulate: every step is simulated and kept (step times, contexts), so
# a mistyped --tokens would otherwise run for hours.
MAX_TOKENS = 1_000_000


@dataclass(frozen=True)
class Workload:
    """A decode run: ``batch`` sequences, each starting with ``context`` cached tokens and
    generating ``tokens`` more (the context grows by one per step).

    ``weights`` applies to every linear weight, ``expert_weights`` overrides it for routed experts,
    ``kv`` is the KV-cache format. ``None`` formats mean "the system's native format".
    """

    batch: int = 1
    context: int = 1024
    tokens: int = 128
    weights: str | None = None
    expert_weights: str | None = None
    kv: str = "bf16"
    spec_decode: str | None = None

    def __post_init__(self) -> None:
        for name, low in (("batch", 1), ("context", 0), ("tokens", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(
                    f"workload field '{name}' must be an integer >= {low}, got {value!r}"
                )
        if self.tokens > MAX_TOKENS:
            raise ConfigError(
                f"workload field 'tokens' = {self.tokens:,} is above the limit of "
                f"{MAX_TOKENS:,} decode steps per run"
            )
        for name in ("weights", "expert_weights", "kv"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(
                    self, name, get_format(value, f"--{name.replace('_', '-')} format").name
                )
        if self.spec_decode:
            raise ConfigError(
                f"--spec-decode '{self.spec_decode}': speculative decoding is not "
                "modelled yet (a later stage); run without it"
            )

    def resolved(self, native_format: str) -> "Workload":
        """This workload with unset weight formats filled in from a system's native format."""
        weights = self.weights or native_format
        return replace(self, weights=weights, expert_weights=self.expert_weights or weights)

    @property
    def max_len(self) -> int:
        """Tokens each sequence's KV cache must hold by the end of the run."""
        return self.context + self.tokens
