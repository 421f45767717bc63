"""``--spec-decode ...,accept=measured``: per-position acceptance measured with the functional
path (the NumPy reference decoder of :mod:`pyaccel.numerics.reference`) on models small enough
to run, instead of a published profile.

Greedy (temperature 0) speculative decoding of one seeded prompt: each round the drafter
proposes ``k`` tokens from the kept sequence, the target's greedy token is computed after each
prefix of them, and drafts are kept while they match; the target's own token follows. Both
decoders rewind their caches to the kept length (what a paged cache does on rejection). Rates
are conditional: of the rounds that reached draft position ``i``, the share that kept it.
"""

from __future__ import annotations

import numpy as np

from .errors import ConfigError
from .numerics.execute import PROMPT_TOKENS, SEED
from .numerics.reference import DecodeModel, Numerics
from .numerics.weights import load_weights, weights_folder
from .spec_decode import Profile, SpecDecode

MEASURED_TOKENS = 64  # tokens generated after the prompt to measure over


def measure_acceptance(req: SpecDecode, target, drafter) -> tuple[list[Profile], str]:
    """([the measured profile], its source) of ``req``'s drafter on ``target`` (ModelConfigs)."""
    if req.kind != "draft":
        raise ConfigError(
            f"--spec-decode {req.kind},accept=measured: measuring needs the drafter's own "
            f"weights; {req.kind} heads are costed from their published shapes without weights, "
            "so only draft:MODEL (a model preset or folder) can be measured"
        )
    models = [_decoder(cfg) for cfg in (target, drafter)]
    hits, tries, rounds = _measure(*models, req.k)
    rates = tuple(float(h / t) if t else 0.0 for h, t in zip(hits, tries, strict=True))
    origin = ", ".join(
        f"{cfg.name}: {'folder weights' if weights_folder(cfg) else 'seeded random weights'}"
        for cfg in (target, drafter)
    )
    source = (
        f"measured with the functional path: greedy speculative decoding of a seeded "
        f"{PROMPT_TOKENS}-token prompt, {MEASURED_TOKENS} tokens, {rounds} rounds "
        f"(positions reached: {'/'.join(str(int(t)) for t in tries)}; {origin})"
    )
    return [Profile("measured", rates)], source


def _decoder(cfg) -> DecodeModel:
    return DecodeModel(cfg, Numerics(load_weights(cfg, SEED)),
                       max_len=PROMPT_TOKENS + MEASURED_TOKENS + 64)  # fmt: skip


def _measure(target: DecodeModel, draft: DecodeModel, k: int):
    """(kept drafts per position, rounds that reached each position, rounds)."""
    rng = np.random.default_rng(SEED)
    seq = [int(t) for t in rng.integers(0, min(target.cfg.vocab, draft.cfg.vocab), PROMPT_TOKENS)]
    hits, tries = np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64)
    for m in (target, draft):  # both caches hold the prompt but its last token
        for t in seq[:-1]:
            m.step([t])
    goal, rounds = len(seq) + MEASURED_TOKENS, 0
    while len(seq) < goal:
        drafts = _greedy(draft, seq[-1], k)
        # the target's token after the kept sequence and after each prefix of the drafts
        choice = [int(np.argmax(target.step([t])[0])) for t in [seq[-1], *drafts]]
        kept = next((i for i in range(k) if drafts[i] != choice[i]), k)
        tries[: min(kept + 1, k)] += 1
        hits[:kept] += 1
        base = len(seq) - 1
        seq += drafts[:kept] + [choice[kept]]
        target.pos = base + kept + 1  # rewind to the kept tokens (their K/V stay valid)
        draft.pos = base + min(kept, k - 1) + 1
        if kept == k:  # the drafter never fed its last draft: it does now (catch-up)
            draft.step([drafts[-1]])
        rounds += 1
    return hits, tries, rounds


def _greedy(model: DecodeModel, last: int, k: int) -> list[int]:
    """``k`` greedy tokens of ``model`` after feeding ``last``."""
    out, tok = [], last
    for _ in range(k):
        tok = int(np.argmax(model.step([tok])[0]))
        out.append(tok)
    return out
