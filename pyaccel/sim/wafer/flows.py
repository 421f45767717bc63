"""Point-to-point messages on a line of PEs: independent flows ``(src, dst)`` sharing links and
ramps first come first served, and the GQA query shift built from them, simulated by the
``mesh_run`` kernel (:mod:`.mesh`). Units: integer cycles, wavelets."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .mesh import Line, _line_busy, _run_arrays, frozen

FLOW_COLUMNS = 2  # a flow array's columns: (src, dst)


def line_flows(n: int, flows, nwav: int, setup: int, hop: int, ramp: int = 0):
    """Cycles of point-to-point messages ``(src, dst)`` (pairs, or a k x 2 array) of ``nwav``
    wavelets on a line of ``n`` PEs, all sent after ``setup`` cycles, sharing links (and each
    PE's ramps) first come first served: (cycles, busy cycles per position, messages)."""
    pairs = np.asarray(flows, dtype=np.int64).reshape(-1, FLOW_COLUMNS)
    return _line_flows(n, _flow_paths(n, pairs), nwav, setup, hop, ramp)


@lru_cache(maxsize=4096)
def line_shift(h: int, seg: int, step: int, shifts: tuple, nwav: int, setup: int, hop: int,
               ramp: int = 0):  # fmt: skip
    """:func:`line_flows` of the GQA shift :func:`shift_flows` ``(h, seg, step, shifts)`` (cached
    by shape: the same shift recurs over layers, candidate layouts and what-ifs; the busy
    cycles are read-only, as shared).

    A segment's flows stay inside it, so segments share no PE, link or ramp and each runs as
    it would alone on a line of its own size: one simulation per distinct segment size (a
    1,060-PE line of 132-PE segments is one 132-PE run, not eight), then the slowest
    segment's cycles, the segments' busy cycles side by side and their messages summed."""
    sizes = [min(h, lo + seg) - lo for lo in range(0, h, seg)]
    runs = {n: _segment_shift(n, step, shifts, nwav, setup, hop, ramp) for n in set(sizes)}
    busy = np.concatenate([runs[n][1] for n in sizes])
    return max(r[0] for r in runs.values()), frozen(busy), sum(runs[n][2] for n in sizes)


def _segment_shift(n: int, step: int, shifts: tuple, nwav: int, setup: int, hop: int,
                   ramp: int):  # fmt: skip
    """:func:`line_flows` of the GQA shift of one ``n``-PE segment on a line of its own."""
    paths = _shift_paths(n, n, step, shifts)
    if not len(paths["pe"]):
        return 0, np.zeros(n, dtype=np.int64), 0
    return _line_flows(n, paths, nwav, setup, hop, ramp)


def _line_flows(n: int, paths: dict, nwav: int, setup: int, hop: int, ramp: int):
    res = _run_arrays(_filled_flows(paths, nwav, setup), _line_lat(n, hop, ramp), n, 0)
    return res.cycles, frozen(_line_busy(res.link_busy, n)), len(paths["pe"])


@lru_cache(maxsize=256)
def _line_lat(n: int, hop: int, ramp: int) -> np.ndarray:
    """:attr:`Line.link_lat`, read-only (so the kernel's checks see a frozen structure)."""
    return frozen(Line(n, hop, ramp).link_lat)


@lru_cache(maxsize=256)
def shift_flows(h: int, seg: int, step: int, shifts: tuple) -> np.ndarray:
    """The (src, dst) flows, a read-only k x 2 array, of the GQA shifts by ``s * step`` (s in
    ``shifts``) inside each segment of ``seg`` PEs of a line of ``h``, wrapping around in the
    segment; a PE's flow to itself is left out. Ordered by segment, PE, then shift."""
    by = np.asarray(shifts, dtype=np.int64)
    parts = [np.zeros((0, FLOW_COLUMNS), dtype=np.int64)]
    for lo in range(0, h, seg):
        size = min(h, lo + seg) - lo
        j = np.repeat(np.arange(size, dtype=np.int64), len(by))
        dst = (j + np.tile(by, size) * step) % size
        keep = dst != j
        parts.append(np.stack([lo + j[keep], lo + dst[keep]], axis=1))
    return frozen(np.concatenate(parts))


@lru_cache(maxsize=256)
def _shift_paths(h: int, seg: int, step: int, shifts: tuple) -> dict:
    return _flow_paths(h, shift_flows(h, seg, step, shifts))


def flow_arrays(n: int, flows, nwav: int, setup: int) -> dict:
    """The kernel arrays of ``Tasks`` holding one independent message per flow ``(src, dst)``
    on a :class:`Line` of ``n`` (``Line.path``: src's ramp out, the mesh links from src towards
    dst, dst's ramp in), built with NumPy: a GQA shift on a long line has tens of thousands of
    flows."""
    pairs = np.asarray(flows, dtype=np.int64).reshape(-1, FLOW_COLUMNS)
    return _filled_flows(_flow_paths(n, pairs), nwav, setup)


def _filled_flows(paths: dict, nwav: int, setup: int) -> dict:
    """:func:`_flow_paths`' arrays with every flow's setup cycles and wavelets, no dependencies."""
    if nwav < 1:
        raise ValueError("a message needs at least one wavelet")
    k = len(paths["pe"])
    dep_ptr, dep_idx = _no_deps(k)
    return {
        **paths,
        "setup": np.full(k, int(setup), dtype=np.int64),
        "stream": np.zeros(k, dtype=np.int64),
        "nwav": np.full(k, int(nwav), dtype=np.int64),
        "dep_ptr": dep_ptr,
        "dep_idx": dep_idx,
    }


@lru_cache(maxsize=256)
def _no_deps(k: int) -> tuple[np.ndarray, np.ndarray]:
    """The dependency lists (CSR) of ``k`` tasks that have none, read-only and shared: with a
    shift's cached paths the kernel's checks then see a structure they checked before."""
    return frozen(np.zeros(k + 1, dtype=np.int64)), frozen(np.zeros(0, dtype=np.int64))


def _flow_paths(n: int, pairs: np.ndarray) -> dict:
    """The sending PE and the path (CSR) of each flow ``pairs[i] = (src, dst)`` on a line of
    ``n`` (read-only arrays)."""
    src, dst = pairs[:, 0], pairs[:, 1]
    per = np.abs(dst - src) + 2  # ramp out, the hops, ramp in
    path_ptr = np.concatenate(([0], np.cumsum(per))).astype(np.int64)
    head = path_ptr[:-1]
    # the a-th mesh hop (a = 0, 1, ...) east from s is link 2(s + a), west 2(s - 1 - a) + 1
    east = dst >= src
    base = np.where(east, 2 * src, 2 * src - 1)
    step = np.where(east, 2, -2)
    at = np.arange(path_ptr[-1], dtype=np.int64) - np.repeat(head + 1, per)
    link = np.repeat(base, per) + np.repeat(step, per) * at
    link[head] = 3 * n + src  # the ramp out of the source PE
    link[path_ptr[1:] - 1] = 2 * n + dst  # the ramp into the destination PE
    return {"pe": frozen(src.copy()), "path_ptr": frozen(path_ptr),
            "path_link": frozen(link.astype(np.int64, copy=False))}  # fmt: skip
