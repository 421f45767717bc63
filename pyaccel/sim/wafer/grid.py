"""Whole-grid simulation of a sequence of wafer collectives, each op's every line on its own
links of a ``w x h`` :class:`~.mesh.Grid` (XY routing), run by the ``mesh_run`` kernel.

A *grid op* is one collective whose lines all lie along one axis (0: rows, along x; 1: columns,
along y): every line runs the same line template (:class:`~.mesh.Template`, filled with the
op's local work, message start cost and message length). Consecutive ops overlap as far as
the dataflow allows: a PE starts its part of op k+1 when it holds op k's result (a *ready* task
per PE waits for the task that delivered it), not when the whole grid has finished op k. So
lines that finish early start the next op early, and the traffic of two ops in flight meets on
the ramps of the PEs both feed (links reserved first come first served in op order).

:func:`grid_sequence` builds and runs the whole grid (the exact 2-D simulation).
:func:`profile_sequence` is its fast twin for identical lines: under XY routing an op's lines
share no mesh link, so a line whose PEs are all ready ``d`` cycles later runs exactly ``d``
cycles later; the grid's ready times stay a sum ``X[x] + Y[y]`` and each op updates only the
vector along its axis, by simulating one line. It is exact except where two ops' wavelets meet
on a ramp (``grid_sequence`` sees that; the tests measure the difference on small grids).
Units: integer cycles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .mesh import Grid, MeshResult, Template, _run_arrays

# order of the kernel arrays a task list is made of
_KEYS = ("pe", "setup", "stream", "nwav", "dep_ptr", "dep_idx", "path_ptr", "path_link")


@dataclass(frozen=True)
class GridOp:
    """One collective run by every line along ``axis``: the line template and its fill (the
    PEs' local work before sending, the message start cost, wavelets per message)."""

    axis: int
    template: Template
    setup: int
    overhead: int
    nwav: int


def line_maps(w: int, h: int, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Grid PE ids ``[line, position]`` and grid link ids ``[line, line-link]`` of the lines
    along ``axis`` (a :class:`~.mesh.Line`'s links ``2i`` i->i+1, ``2i+1`` i+1->i, ``2n+i``
    ramp into i, ``3n+i`` ramp out of i), for :class:`~.mesh.Grid` numbering (``(y * w + x) *
    Grid.LINKS + port``)."""
    n, lines = (w, h) if axis == 0 else (h, w)
    pos, idx = np.arange(n), np.arange(lines)[:, None]
    if axis == 0:
        pe = idx * w + pos
        fwd, back = Grid.E, Grid.W
    else:
        pe = pos * w + idx
        fwd, back = Grid.S, Grid.N
    nxt = np.concatenate((pe[:, 1:], pe[:, -1:]), axis=1)  # the last PE has no onward link
    k = Grid.LINKS
    links = np.empty((lines, 4 * n), dtype=np.int64)
    links[:, 0 : 2 * n : 2] = pe * k + fwd
    links[:, 1 : 2 * n : 2] = nxt * k + back
    links[:, 2 * n : 3 * n] = pe * k + Grid.RAMP
    links[:, 3 * n :] = pe * k + Grid.RAMP_OUT
    return pe.astype(np.int64), links


def _ready_tasks(pes: np.ndarray, setup: np.ndarray, after: np.ndarray | None) -> dict:
    """One pathless task per PE: it starts ``setup`` cycles after the task ``after[i]`` (if
    any) delivered the previous op's result, and holds the PE until then."""
    k = len(pes)
    deps = np.zeros(0, dtype=np.int64) if after is None else np.asarray(after, dtype=np.int64)
    per = 0 if after is None else 1
    return {
        "pe": np.asarray(pes, dtype=np.int64),
        "setup": np.asarray(setup, dtype=np.int64),
        "stream": np.zeros(k, dtype=np.int64),
        "nwav": np.zeros(k, dtype=np.int64),
        "dep_ptr": np.arange(k + 1, dtype=np.int64) * per,
        "dep_idx": deps,
        "path_ptr": np.zeros(k + 1, dtype=np.int64),
        "path_link": np.zeros(0, dtype=np.int64),
    }


def _tiled(a: dict, pe_map: np.ndarray, link_map: np.ndarray, base: int) -> dict:
    """A line's filled template copied onto every line of the maps (lines one after another,
    task ids from ``base``)."""
    lines, n_t = pe_map.shape[0], len(a["pe"])
    start = base + n_t * np.arange(lines, dtype=np.int64)[:, None]
    tpe = a["pe"]
    pe = np.where(tpe >= 0, pe_map[:, np.maximum(tpe, 0)], -1)
    n_dep, n_path = np.diff(a["dep_ptr"]), np.diff(a["path_ptr"])
    return {
        "pe": pe.ravel(),
        "setup": np.tile(a["setup"], lines),
        "stream": np.tile(a["stream"], lines),
        "nwav": np.tile(a["nwav"], lines),
        "dep_ptr": np.concatenate(([0], np.cumsum(np.tile(n_dep, lines)))),
        "dep_idx": (a["dep_idx"][None, :] + start).ravel(),
        "path_ptr": np.concatenate(([0], np.cumsum(np.tile(n_path, lines)))),
        "path_link": link_map[:, a["path_link"]].ravel(),
    }


def _concat(blocks: list[dict]) -> dict:
    """Task lists one after another (CSR pointers re-based)."""
    out = {}
    for key in _KEYS:
        if key.endswith("_ptr"):
            ends = np.cumsum([0] + [b[key][-1] for b in blocks[:-1]])
            parts = [blocks[0][key][:1]] + [
                b[key][1:] + e for b, e in zip(blocks, ends, strict=True)
            ]
        else:
            parts = [b[key] for b in blocks]
        out[key] = np.concatenate(parts).astype(np.int64)
    return out


@dataclass(frozen=True)
class GridRun:
    """A sequence's whole-grid simulation: per op, when each PE held its result (``[op, h,
    w]`` cycles), and the raw kernel result (``link_busy`` per grid link)."""

    done: np.ndarray
    result: MeshResult

    @property
    def cycles(self) -> int:
        """When the last PE held the last op's result."""
        return int(self.done[-1].max()) if len(self.done) else 0


def grid_sequence(w: int, h: int, ops: list[GridOp], hop: int, pass_lat: int, ramp: int = 0,
                  backend=None) -> GridRun:  # fmt: skip
    """Simulate ``ops`` one after another on every line of a ``w x h`` grid (links of ``hop``
    cycles, ramps of ``ramp``: the ops' templates must be built with the same), each PE
    starting op k+1 once it holds op k's result."""
    blocks, base, after, arrive_ids = [], 0, None, []
    for op in ops:
        pe_map, link_map = line_maps(w, h, op.axis)
        if op.template.arrive is None or op.template.n_pes != pe_map.shape[1]:
            raise ValueError(f"op along axis {op.axis}: template of {op.template.n_pes} PEs "
                             f"with arrivals needed for lines of {pe_map.shape[1]}")  # fmt: skip
        order = pe_map.ravel()
        dep = None if after is None else after[order]
        blocks.append(_ready_tasks(order, np.zeros(len(order), dtype=np.int64), dep))
        base += len(order)
        a = op.template.filled(op.setup, op.overhead, op.nwav)
        blocks.append(_tiled(a, pe_map, link_map, base))
        ids = base + len(a["pe"]) * np.arange(pe_map.shape[0])[:, None] + op.template.arrive
        after = np.empty(w * h, dtype=np.int64)
        after[pe_map.ravel()] = ids.ravel()
        arrive_ids.append(after)
        base += len(a["pe"]) * pe_map.shape[0]
    if not blocks:
        return GridRun(np.zeros((0, h, w), dtype=np.int64), MeshResult(*(np.zeros(0),) * 3))
    res = _run_arrays(_concat(blocks), Grid(w, h, hop, ramp).link_lat, w * h, pass_lat, backend)
    done = np.stack([res.tail[ids].reshape(h, w) for ids in arrive_ids])
    return GridRun(done, res)


def line_with_ready(op: GridOp, ready: np.ndarray, pass_lat: int,
                    backend=None) -> tuple[np.ndarray, MeshResult]:  # fmt: skip
    """One line of ``op`` whose PE i may start at ``ready[i]``: when each PE holds the result
    (cycles), and the kernel result."""
    tpl = op.template
    n = tpl.n_pes
    a = _concat([_ready_tasks(np.arange(n), ready, None),
                 _shifted(tpl.filled(op.setup, op.overhead, op.nwav), n)])  # fmt: skip
    res = _run_arrays(a, tpl.link_lat, n, pass_lat, backend)
    return res.tail[n + tpl.arrive], res


def _shifted(a: dict, by: int) -> dict:
    """Task list ``a`` with its dependency ids moved up by ``by`` (tasks put before it)."""
    return {**a, "dep_idx": a["dep_idx"] + by}


def profile_sequence(w: int, h: int, ops: list[GridOp], pass_lat: int,
                     backend=None) -> list[tuple[np.ndarray, np.ndarray]]:  # fmt: skip
    """The fast twin of :func:`grid_sequence` for identical lines: per op, the ready vectors
    ``(X, Y)`` after it (PE (x, y) holds the op's result at ``X[x] + Y[y]`` cycles)."""
    vec = [np.zeros(w, dtype=np.int64), np.zeros(h, dtype=np.int64)]
    out = []
    for op in ops:
        vec[op.axis] = line_with_ready(op, vec[op.axis], pass_lat, backend)[0]
        out.append((vec[0].copy(), vec[1].copy()))
    return out
