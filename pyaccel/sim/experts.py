"""Expert parallelism's per-step arithmetic, shared by the engines: from a step's routing (the
experts each token row picked), what each unit holding experts must do and send.

A row lives on its *home* unit (where its attention ran); its ``top_k`` experts live on their
*owner* units. The dispatch all-to-all sends the row's hidden vector once to every other unit
that owns one of its experts (DeepEP and vLLM's all-to-all kernels send one copy per
destination GPU, not per expert); the combine all-to-all sends the owners' outputs back the
same way (so a unit's sends in one are its receives in the other).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ExpertLoad:
    """One MoE layer's work and traffic per unit at one step (int64 arrays, one entry a unit):
    ``experts`` the distinct routed experts it holds (whose weights it reads), ``pairs`` the
    (row, expert) pairs it computes, ``sent``/``received`` the rows it sends and receives in the
    dispatch all-to-all."""

    experts: np.ndarray
    pairs: np.ndarray
    sent: np.ndarray
    received: np.ndarray

    def busiest_link_rows(self) -> int:
        """Rows the busiest unit sends or receives in one all-to-all (either direction)."""
        return int(max(self.sent.max(initial=0), self.received.max(initial=0)))


def expert_load(picks: np.ndarray, home: np.ndarray, owner: np.ndarray, n_units: int) -> ExpertLoad:
    """The :class:`ExpertLoad` of one MoE layer: ``picks[r, j]`` the expert ids row ``r``
    picked, ``home[r]`` the unit index it lives on, ``owner[e]`` the unit index holding expert
    ``e`` (unit indices ``0 .. n_units - 1``)."""
    own = owner[picks]
    pairs = np.bincount(own.ravel(), minlength=n_units)
    routed = np.flatnonzero(np.bincount(picks.ravel(), minlength=len(owner)))  # distinct ids
    experts = np.bincount(owner[routed], minlength=n_units)
    dest = np.sort(own, axis=1)
    first = np.ones(dest.shape, dtype=bool)
    first[:, 1:] = dest[:, 1:] != dest[:, :-1]
    remote = first & (dest != home[:, None])
    sent = np.bincount(home, weights=remote.sum(axis=1), minlength=n_units).astype(np.int64)
    received = np.bincount(dest[remote], minlength=n_units)
    return ExpertLoad(experts.astype(np.int64), pairs.astype(np.int64), sent,
                      received.astype(np.int64))  # fmt: skip


def expert_loads_over(
    picks: np.ndarray, home: np.ndarray, owner: np.ndarray, n_units: int
) -> ExpertLoad:
    """:func:`expert_load` of many steps at once: ``picks[t, r, j]`` the expert ids row ``r``
    picked at step ``t``; an :class:`ExpertLoad` whose arrays are ``[steps, n_units]``, row
    ``t`` equal to :func:`expert_load` of ``picks[t]``."""
    steps = len(picks)
    experts, pairs = experts_and_pairs_over(picks, owner, n_units)
    own = owner[picks]
    at = (np.arange(steps, dtype=np.int64) * n_units)[:, None, None]  # step t's units, shifted
    cells = steps * n_units
    dest = np.sort(own, axis=-1)
    first = np.ones(dest.shape, dtype=bool)
    first[:, :, 1:] = dest[:, :, 1:] != dest[:, :, :-1]
    remote = first & (dest != home[None, :, None])
    sent = np.bincount((home[None, :] + at[:, :, 0]).ravel(), weights=remote.sum(axis=-1).ravel(),
                       minlength=cells).reshape(steps, n_units)  # fmt: skip
    received = np.bincount((dest + at)[remote], minlength=cells).reshape(steps, n_units)
    return ExpertLoad(experts, pairs, sent.astype(np.int64), received.astype(np.int64))


def experts_and_pairs_over(picks: np.ndarray, owner: np.ndarray, n_units: int) -> tuple:
    """``(experts, pairs)`` of :func:`expert_loads_over` alone (int64 ``[steps, n_units]``):
    what each unit computes, without the all-to-all's traffic."""
    steps = len(picks)
    at = (np.arange(steps, dtype=np.int64) * n_units)[:, None, None]  # step t's units, shifted
    cells = steps * n_units
    pairs = np.bincount((owner[picks] + at).ravel(), minlength=cells).reshape(steps, n_units)
    routed = np.zeros((steps, len(owner)), dtype=np.int64)  # experts each step routed to
    routed[np.arange(steps)[:, None], picks.reshape(steps, -1)] = 1
    held = (owner[None, :] + at[:, :, 0]).ravel()  # the unit (shifted) holding each expert
    experts = np.bincount(held, weights=routed.ravel(), minlength=cells).reshape(steps, n_units)
    return experts.astype(np.int64), pairs.astype(np.int64)


def busiest_link_rows_over(load: ExpertLoad) -> np.ndarray:
    """:meth:`ExpertLoad.busiest_link_rows` of each step of a :func:`expert_loads_over` load
    (int64 ``[steps]``)."""
    return np.maximum(load.sent.max(axis=1, initial=0), load.received.max(axis=1, initial=0))


def fewest_owners(top_k: int, expert_units) -> int:
    """The fewest units that hold a token row's experts, whatever it picks: its ``top_k``
    distinct experts, living where ``expert_units`` (the unit of each expert) says, span at
    least ``ceil(top_k / h)`` units, ``h`` the most experts one unit holds (0 without any)."""
    most = max(Counter(expert_units).values(), default=0)
    return -(-top_k // most) if most else 0


def homes(sequences, step_tokens: int) -> np.ndarray:
    """The home unit index of every token row of a micro-batch whose sequences are split over
    units as ``sequences`` (contiguous blocks in unit order: the driver's
    :func:`~pyaccel.batches.rank_shares`), ``step_tokens`` rows a sequence."""
    per_seq = np.repeat(np.arange(len(sequences)), sequences)
    return np.repeat(per_seq, step_tokens)
