"""Speculative decoding: the ``--spec-decode`` request, acceptance profiles, the rounds they make.

A round drafts ``k`` tokens (the drafter's own steps), then the target verifies them in one step
over ``k + 1`` tokens of each sequence (``Workload.step_tokens``). Draft token ``i`` is accepted
when tokens ``1 .. i - 1`` were and a draw under its per-position acceptance succeeds; the target
then adds one token of its own (the correction, or the bonus after ``k`` accepted), so a round
yields ``accepted + 1`` tokens and the rejected drafts' K/V are dropped (the context grows by what
was kept). Times per round come from the emulated steps; this module only draws the rounds.

Syntax (SPEC §7): ``KIND[:DRAFT][,k=N][,accept=R|R1/R2/...|measured]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ConfigError, option

KINDS = ("draft", "mtp", "eagle3", "block")
K_DEFAULT = 4  # drafted tokens a round when k= is not given (spec.k_default)
K_MAX = 32
SEQUENCES = 200  # seeded sequences the speed distribution is drawn over (issue 18)


@dataclass(frozen=True)
class SpecDecode:
    """A parsed ``--spec-decode``: the drafter ``kind`` (and ``draft`` model for ``draft``),
    ``k`` drafted tokens a round and the acceptance the user gave: ``accept`` per position (a
    tuple of ``k`` probabilities), ``"measured"``, or ``None`` (the published profile)."""

    kind: str
    draft: str | None
    k: int
    accept: tuple[float, ...] | str | None

    @property
    def text(self) -> str:
        """The request in its canonical spelling."""
        head = f"{self.kind}:{self.draft}" if self.draft else self.kind
        out = f"{head},k={self.k}"
        if isinstance(self.accept, tuple):
            out += ",accept=" + "/".join(f"{a:g}" for a in self.accept)
        elif self.accept:
            out += f",accept={self.accept}"
        return out


def parse(text: str) -> SpecDecode:
    """The :class:`SpecDecode` of ``text``; ConfigError naming the part that is wrong."""
    where = option("spec_decode", text)
    head, *options = [p.strip() for p in text.split(",")]
    kind, _, draft = head.partition(":")
    if kind not in KINDS:
        raise ConfigError(f"{where}: kind '{kind}' is not one of {', '.join(KINDS)}")
    if kind == "draft" and not draft:
        raise ConfigError(f"{where}: 'draft' needs its model, e.g. draft:llama-3.2-1b")
    if kind != "draft" and draft:
        raise ConfigError(f"{where}: only 'draft' takes a model after ':' ({kind} has its own)")
    seen: dict[str, str] = {}
    for opt in options:
        key, eq, value = opt.partition("=")
        if not eq or key not in ("k", "accept") or key in seen:
            raise ConfigError(f"{where}: '{opt}' is not k=N or accept=R (each at most once)")
        seen[key] = value
    k = _k(seen.get("k"), where)
    return SpecDecode(kind, draft or None, k, _accept(seen.get("accept"), k, where))


def _k(value: str | None, where: str) -> int:
    if value is None:
        return K_DEFAULT
    if not value.isdigit() or not 1 <= int(value) <= K_MAX:
        raise ConfigError(f"{where}: k={value} must be an integer from 1 to {K_MAX}")
    return int(value)


def _accept(value: str | None, k: int, where: str):
    if value is None or value == "measured":
        return value
    try:
        rates = tuple(float(v) for v in value.split("/"))
    except ValueError:
        raise ConfigError(
            f"{where}: accept={value} is not a rate, R1/R2/... or 'measured'"
        ) from None
    if not all(0.0 <= r <= 1.0 for r in rates):
        raise ConfigError(f"{where}: accept={value}: every rate must lie in [0, 1]")
    if len(rates) == 1:
        return rates * k
    if len(rates) != k:
        raise ConfigError(f"{where}: accept={value} gives {len(rates)} rates for k={k}")
    return rates


@dataclass(frozen=True)
class Profile:
    """Per-position acceptance of one kind of text (``name``; one profile when the source gives
    no split): ``rates[i]``: probability draft token ``i + 1`` is accepted given the ones before."""

    name: str
    rates: tuple[float, ...]


@dataclass(frozen=True)
class Rounds:
    """The drawn rounds of ``n`` sequences: each sequence's tokens per second; over all rounds
    the mean tokens a round makes (accepted drafts + 1, what acceptance alone sets) and the mean
    time a round spends drafting and verifying (s); and ``time_per_token_s``, all the rounds'
    seconds over the tokens they delivered (s): a sequence's last round keeps only the tokens
    it still needs, so with ``tokens`` not a multiple of what rounds make this is more than a
    round's time over its mean tokens."""

    tokens_per_s: np.ndarray
    tokens_per_round_mean: float
    draft_s_mean: float
    verify_s_mean: float
    rounds: int
    time_per_token_s: float

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile of the sequences' tokens per second."""
        return float(np.percentile(self.tokens_per_s, q))


def draw_rounds(profiles, draft_s, verify_s, tokens: int, seed: int = 0,
                n: int = SEQUENCES) -> Rounds:  # fmt: skip
    """Draw ``n`` sequences of ``tokens`` generated tokens each. A sequence picks one of
    ``profiles`` (uniformly, seeded) and draws every round's acceptances under it. ``draft_s``
    and ``verify_s`` are arrays over the context offset from the run's start: the time of the
    round's drafting and of its verification starting at that offset (s)."""
    rng = np.random.default_rng(seed)
    rates = np.array([p.rates for p in profiles], dtype=np.float64)
    picks = rng.integers(0, len(profiles), size=n)
    out = np.empty(n, dtype=np.float64)
    made = draft_t = verify_t = 0.0
    rounds = 0
    for s in range(n):
        done, t = 0, 0.0
        row = rates[picks[s]]
        while done < tokens:
            accepted = _accepted(rng, row)
            d, v = float(draft_s[done]), float(verify_s[done])
            t += d + v
            draft_t, verify_t = draft_t + d, verify_t + v
            got = min(accepted + 1, tokens - done)
            done += got
            made += accepted + 1
            rounds += 1
        out[s] = tokens / t
    return Rounds(out, made / rounds, draft_t / rounds, verify_t / rounds, rounds,
                  (draft_t + verify_t) / (n * tokens))  # fmt: skip


def _accepted(rng, rates: np.ndarray) -> int:
    """Leading successes of one round's draws (draft tokens kept)."""
    hits = rng.random(len(rates)) < rates
    return int(np.argmin(hits)) if not hits.all() else len(rates)
