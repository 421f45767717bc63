"""NumPy/Python twin of the ASIC spatial-pipeline simulation (the executable specification)."""

from __future__ import annotations

import numpy as np

from . import checks


def asic_pipeline(
    occ: np.ndarray,
    lat: np.ndarray,
    res: np.ndarray,
    n_users: int,
    record: np.ndarray,
    group: int = 1,
    routes=None,
):
    """Tokens of ``n_users`` users flowing through a spatial pipeline of stages, step by step.

    ``occ[t, s]``: cycles stage ``s`` is busy with one token at step ``t``; ``lat[s]``: cycles
    after that before the token can enter stage ``s + 1`` (pipeline register, drain, link
    latency) while stage ``s`` already takes the next token. ``res[s]`` is the hardware unit the
    stage runs on (stages sharing one, e.g. a die's chip link, wait for each other; ids are
    ``0 .. max(res)``). A user's token of step ``t`` enters stage 0 when its token of step
    ``t - 1`` left the last stage (autoregressive decode); every unit serves tokens in (step,
    user, stage) order without back-filling (for units that only one stage uses this is first
    come, first served). All users' first tokens are ready at cycle 0.

    ``group`` consecutive rows are the tokens one sequence feeds a step (verifying a speculative
    round): they enter one after another and the sequence's next step waits for the last of them
    (``n_users`` is then the number of rows, a multiple of ``group``).

    ``routes = (ex_layer, picks)`` makes stages blocks of routed experts: a stage with
    ``ex_layer[s] = i >= 0`` runs every expert of MoE layer ``i`` as a unit of its own
    (``res[s] + e`` for expert ``e``), and a row takes the units of the experts
    ``picks[t, u, i, :]`` it was routed to, starting when all of them are free and holding them
    all for ``occ[t, s]`` (rows routed to different experts overlap; rows sharing one queue).

    Returns ``finish[t, u]`` (int64: cycle the token leaves the last stage) and, for the steps
    with ``record[t]`` true in order, ``starts[r, u, s]`` (cycle each token starts each stage).
    """
    checks.asic_pipeline(occ, lat, res, n_users, record, group, routes)
    n_steps, n_stages = occ.shape
    ex_layer, picks = routes if routes is not None else (np.full(n_stages, -1), None)
    free = [0] * checks.asic_units(res, ex_layer, picks)
    ready = [0] * n_users
    finish = np.zeros((n_steps, n_users), dtype=np.int64)
    starts = np.zeros((int(record.sum()), n_users, n_stages), dtype=np.int64)
    r = 0
    for t in range(n_steps):
        for u in range(n_users):
            tt = ready[u // group]
            for s in range(n_stages):
                units = _units(res, ex_layer, picks, t, u, s)
                start = max([tt] + [free[unit] for unit in units])
                if record[t]:
                    starts[r, u, s] = start
                for unit in units:
                    free[unit] = start + int(occ[t, s])
                tt = start + int(occ[t, s]) + int(lat[s])
            finish[t, u] = tt
        for u in range(0, n_users, group):
            ready[u // group] = int(finish[t, u : u + group].max())
        if record[t]:
            r += 1
    return finish, starts


def _units(res, ex_layer, picks, t: int, u: int, s: int) -> list[int]:
    """The hardware units row ``u`` of step ``t`` takes at stage ``s``: the stage's own, or the
    blocks of the experts it was routed to."""
    if ex_layer[s] >= 0:
        return [int(res[s] + e) for e in picks[t, u, ex_layer[s]]]
    return [int(res[s])]
