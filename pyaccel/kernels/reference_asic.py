"""NumPy/Python twin of the ASIC spatial-pipeline simulation (the executable specification)."""

from __future__ import annotations

from functools import partial

import numpy as np

from . import checks


def asic_pipeline(occ: np.ndarray, lat: np.ndarray, res: np.ndarray, n_users: int,
                  record: np.ndarray, group: int = 1, routes=None,
                  tail: int | None = None):  # fmt: skip
    """Tokens of ``n_users`` users flowing through a spatial pipeline of stages, step by step.

    ``occ[i, s]``: cycles stage ``s`` is busy with a token at position ``i`` (or its compact
    form, :func:`full_occupancy`): step ``t``'s row ``j`` of a group (below) is at ``t + j``,
    its context ``j`` tokens longer, so ``occ`` has ``steps + group - 1`` rows, ``steps`` that
    of ``record``; ``lat[s]``: cycles after that before the token can enter stage ``s + 1``
    (register, drain, link latency) while stage ``s`` already takes the next token. ``res[s]``
    is the stage's hardware unit (stages sharing one, e.g. a die's chip link, wait for each
    other); a 2-D ``res[s, :]`` lists the units a stage takes all at once (e.g. the links of
    every die of a gather), ``-1`` padding after the first. A user's token of step ``t`` enters
    stage 0 when its token of step ``t - 1`` left the last stage (autoregressive decode); every
    unit serves tokens in (step, user, stage) order without back-filling (first come, first
    served for a unit only one stage uses). All first tokens are ready at cycle 0.

    ``group`` consecutive rows are one sequence's tokens of a step (a speculative round, a
    prompt chunk): they enter one after another, each one position on from the last, and its
    next step waits for the last (``n_users`` rows, whole groups). Stages from ``tail`` on
    (default: none) are taken only by each group's last row (a prompt chunk's LM head and
    sampling, which only the row it samples needs); the group's other rows leave after stage
    ``tail - 1``, and their starts at the stages they skip are -1.

    ``routes = (ex_layer, picks[, ex_unit])`` makes stages routed: a stage with
    ``ex_layer[s] = i >= 0`` runs on the units of the experts ``picks[t, u, i, :]`` a row was
    routed to in MoE layer ``i``, starting when all of them are free and holding them all for
    its busy cycles (rows routed to different units overlap; rows sharing one queue). Expert
    ``e``'s unit at stage ``s`` is ``ex_unit[s, e]`` (e.g. the chip link of the die holding
    it; experts sharing a unit take it once), by default ``res[s] + e`` (a block per expert).

    Returns ``finish[t, u]`` (int64: cycle the token leaves the last stage) and, for the steps
    with ``record[t]`` true in order, ``starts[r, u, s]`` (cycle each token starts each stage).
    """
    checks.asic_pipeline(occ, lat, res, n_users, record, group, routes, tail)
    occ = full_occupancy(occ)
    n_steps, n_stages = len(record), occ.shape[1]
    tail = n_stages if tail is None else int(tail)
    ex_layer, picks, ex_unit = expert_units(res, routes)
    free = [0] * checks.asic_units(res, ex_layer, picks, ex_unit)
    ready = [0] * n_users
    finish = np.zeros((n_steps, n_users), dtype=np.int64)
    starts = np.zeros((int(record.sum()), n_users, n_stages), dtype=np.int64)
    r = 0
    for t in range(n_steps):
        for u in range(n_users):
            stop = n_stages if u % group == group - 1 else tail
            units_at = partial(_units, res, ex_layer, picks, ex_unit, t, u)
            out = starts[r, u] if record[t] else None
            finish[t, u] = _row(occ[t + u % group], lat, stop, ready[u // group], free,
                                units_at, out)  # fmt: skip
        for u in range(0, n_users, group):
            ready[u // group] = int(finish[t, u : u + group].max())
        if record[t]:
            r += 1
    return finish, starts


def _row(busy, lat, stop: int, tt: int, free: list, units_at, out) -> int:
    """One row's pass through stages ``0 .. stop - 1`` from cycle ``tt`` (``busy[s]``: stage
    ``s``'s cycles this step; ``units_at(s)``: the units it takes), each stage starting when
    the row and all its units are ready; ``free`` is updated, and the starts go to ``out``
    (-1 at the stages skipped; None: not recorded). Returns the cycle the row leaves."""
    if out is not None:
        out[stop:] = -1
    for s in range(stop):
        units = units_at(s)
        start = max([tt] + [free[unit] for unit in units])
        if out is not None:
            out[s] = start
        for unit in units:
            free[unit] = start + int(busy[s])
        tt = start + int(busy[s]) + int(lat[s])
    return tt


def full_occupancy(occ) -> np.ndarray:
    """``occ`` as a steps x stages array (its compact form ``(base, cols, col_stage)``: every
    step's row is ``base`` with stage ``col_stage[a]`` replaced by ``cols[t, a]``)."""
    if not isinstance(occ, tuple):
        return np.asarray(occ)
    base, cols, col_stage = occ
    full = np.tile(np.asarray(base, dtype=np.int64), (len(cols), 1))
    full[:, np.asarray(col_stage, dtype=np.int64)] = cols
    return full


def compact_occupancy(occ) -> tuple:
    """``occ`` in its compact form ``(base, cols, col_of)`` with ``col_of[s]`` the column of
    stage ``s`` (-1: ``base[s]`` every step), contiguous int64 (what the compiled kernels
    take); a steps x stages array becomes one column a stage."""
    if isinstance(occ, tuple):
        base, cols, col_stage = (np.asarray(a, dtype=np.int64) for a in occ)
    else:
        cols = np.asarray(occ, dtype=np.int64)
        base, col_stage = np.zeros(cols.shape[1], dtype=np.int64), np.arange(cols.shape[1])
    col_of = np.full(len(base), -1, dtype=np.int64)
    col_of[col_stage] = np.arange(len(col_stage))
    return (np.ascontiguousarray(base), np.ascontiguousarray(cols, dtype=np.int64),
            col_of)  # fmt: skip


def expert_units(res, routes) -> tuple:
    """``(ex_layer, picks, ex_unit)`` of ``routes`` with its defaults: no routed stage, and a
    block per expert (``ex_unit[s, e] = res[s] + e``)."""
    n_stages = len(res)
    res = np.asarray(res, dtype=np.int64)
    first = res if res.ndim == 1 else res[:, 0]
    if routes is None:
        return np.full(n_stages, -1, dtype=np.int64), None, np.zeros((n_stages, 0), np.int64)
    if len(routes) == 3:
        return routes
    ex_layer, picks = routes
    n_experts = int(np.max(picks)) + 1 if np.size(picks) else 0
    ex_unit = first[:, None] + np.arange(n_experts, dtype=np.int64)
    return ex_layer, picks, ex_unit


def _units(res, ex_layer, picks, ex_unit, t: int, u: int, s: int) -> list[int]:
    """The hardware units row ``u`` of step ``t`` takes at stage ``s``: the stage's own, or
    those of the experts it was routed to (each once)."""
    if ex_layer[s] >= 0:
        return sorted({int(ex_unit[s, e]) for e in picks[t, u, ex_layer[s]]})
    return [int(unit) for unit in np.atleast_1d(res[s]) if unit >= 0]
