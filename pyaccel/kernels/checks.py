"""Input checks shared by every backend of a kernel (NumPy twin, Numba and C wrappers).

The compiled kernels index arrays without bounds checks: a bad id would read or write outside
an array and corrupt memory silently. Each kernel's wrappers call the same check here first, so
a bad input raises the same ``ValueError`` (naming the array, the position, the value and the
limit) on every backend. The checks are vectorised and cost a few array passes per call.
"""

from __future__ import annotations

import weakref

import numpy as np


def _fail(name: str, arr: np.ndarray, bad: np.ndarray, limit: str):
    i = int(np.flatnonzero(bad)[0])
    raise ValueError(f"{name}[{i}] = {arr.reshape(-1)[i]} is out of range ({limit})")


def same_length(n: int, **arrays) -> None:
    """Every array is one-dimensional with ``n`` entries."""
    for name, arr in arrays.items():
        if np.ndim(arr) != 1 or len(arr) != n:
            raise ValueError(f"{name} has shape {np.shape(arr)}; expected ({n},)")


def ids_in(name: str, ids: np.ndarray, low: int | None, limit: int | None) -> None:
    """Every id is in ``[low, limit)`` (None: no bound on that side)."""
    ids = np.asarray(ids)
    bad = np.zeros(ids.shape, dtype=bool)
    if low is not None:
        bad |= ids < low
    if limit is not None:
        bad |= ids >= limit
    if bad.any():
        bounds = [f">= {low}" if low is not None else "", f"< {limit}" if limit is not None else ""]
        _fail(name, ids, bad, "must be " + " and ".join(b for b in bounds if b))


def csr(ptr_name: str, ptr: np.ndarray, n: int, idx_name: str, idx: np.ndarray) -> None:
    """``ptr`` (``n + 1`` offsets from 0, non-decreasing, ending at ``len(idx)``) splits ``idx``
    into ``n`` lists."""
    ptr = np.asarray(ptr)
    same_length(n + 1, **{ptr_name: ptr})
    if ptr[0] != 0 or ptr[-1] != len(idx):
        raise ValueError(
            f"{ptr_name} runs from {ptr[0]} to {ptr[-1]}; "
            f"expected 0 to len({idx_name}) = {len(idx)}"
        )
    step = np.diff(ptr)
    if (step < 0).any():
        _fail(f"{ptr_name} step", step, step < 0, "offsets must not decrease")


def earlier_deps(ptr: np.ndarray, idx: np.ndarray, n: int) -> None:
    """CSR dependency lists of ``n`` items, each naming only earlier items."""
    csr("dep_ptr", ptr, n, "dep_idx", idx)
    owner = np.repeat(np.arange(n), np.diff(np.asarray(ptr)))
    idx = np.asarray(idx)
    bad = (idx < 0) | (idx >= owner)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"dep_idx[{i}] = {idx[i]} is out of range (a dependency of item {owner[i]} "
            "must be an earlier item, >= 0)"
        )


def interval_union(starts: np.ndarray, ends: np.ndarray) -> None:
    """Two int arrays of one length, sorted by start."""
    same_length(len(starts), starts=starts, ends=ends)
    down = np.diff(np.asarray(starts)) < 0
    if down.any():
        i = int(np.flatnonzero(down)[0]) + 1
        raise ValueError(f"starts[{i}] = {starts[i]} is below starts[{i - 1}]: must be sorted")


def lpu_list_schedule(resource, duration, latency, dep_ptr, dep_idx, n_resources) -> None:
    """Resource ids in ``[-1, n_resources)`` (-1: none), durations and latencies of 0 cycles or
    more, earlier dependencies, one length."""
    n = len(resource)
    same_length(n, resource=resource, duration=duration, latency=latency)
    ids_in("resource", resource, -1, int(n_resources))
    _cycles(duration=duration, latency=latency)
    earlier_deps(dep_ptr, dep_idx, n)


def _cycles(**arrays) -> None:
    """Every entry is 0 cycles or more: no instruction ends before it starts or is usable
    before it ends (the C fragment scheduler's memo moves schedules whose every cycle is
    then a max of cycles, never of the schedule's start, csrc/lpu.c)."""
    for name, arr in arrays.items():
        ids_in(name, arr, 0, None)


def _in_fragment(name: str, local, length) -> None:
    """Each of ``local`` is an instruction of its fragment (``length[i]`` instructions)."""
    local = np.asarray(local)
    bad = (local < 0) | (local >= length)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}[{i}] = {local[i]} is out of range (must be >= 0 and < "
                         f"{length[i]}, its fragment's length)")  # fmt: skip


def lpu_fragment_schedule(resource, duration, latency, dep_ptr, dep_idx, frag_ptr, frag_out,
                          mark_ptr, mark_idx, seq_ptr, seq, n_resources) -> None:  # fmt: skip
    """A pool of fragments (resource ids in ``[-1, n_resources)``, durations and latencies of 0
    cycles or more, each dependency an earlier instruction of its own fragment or -2, each
    output and mark one of its fragment's instructions), and programs of pool fragments whose
    first fragment takes no input."""
    n = len(resource)
    same_length(n, resource=resource, duration=duration, latency=latency)
    ids_in("resource", resource, -1, int(n_resources))
    _cycles(duration=duration, latency=latency)
    csr("dep_ptr", dep_ptr, n, "dep_idx", dep_idx)
    n_frags = len(frag_ptr) - 1
    csr("frag_ptr", frag_ptr, n_frags, "resource", resource)
    same_length(n_frags, frag_out=frag_out)
    length = np.diff(np.asarray(frag_ptr))
    _in_fragment("frag_out", frag_out, length)
    csr("mark_ptr", mark_ptr, n_frags, "mark_idx", mark_idx)
    _in_fragment("mark_idx", mark_idx, np.repeat(length, np.diff(np.asarray(mark_ptr))))
    # each dependency's place in its own fragment: earlier than its instruction, or -2
    owner = np.repeat(np.arange(n), np.diff(np.asarray(dep_ptr)))
    local = owner - np.repeat(np.asarray(frag_ptr)[:-1], length)[owner]
    idx = np.asarray(dep_idx)
    bad = ((idx < 0) & (idx != -2)) | (idx >= local)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"dep_idx[{i}] = {idx[i]} is out of range (a dependency of instruction {local[i]} "
            "of its fragment must be an earlier one of that fragment, >= 0, or -2 for the input)"
        )
    csr("seq_ptr", seq_ptr, len(seq_ptr) - 1, "seq", seq)
    ids_in("seq", seq, 0, n_frags)
    takes = np.zeros(n_frags, dtype=bool)
    takes[np.searchsorted(np.asarray(frag_ptr), owner[idx == -2], side="right") - 1] = True
    firsts = np.asarray(seq_ptr)[:-1][np.diff(np.asarray(seq_ptr)) > 0]
    bad = takes[np.asarray(seq)[firsts]]
    if bad.any():
        i = int(firsts[np.flatnonzero(bad)[0]])
        raise ValueError(f"seq[{i}] = {seq[i]} takes an input (-2) but starts its program")


def lpu_link_schedule(
    link, n_bytes, cut_through, dep_ptr, dep_idx, link_bytes_per_cycle, link_latency
) -> None:
    """Link ids in range, positive finite link rates, earlier dependencies, one length."""
    n, n_links = len(link), len(link_bytes_per_cycle)
    same_length(n, link=link, n_bytes=n_bytes, cut_through=cut_through)
    same_length(n_links, link_bytes_per_cycle=link_bytes_per_cycle, link_latency=link_latency)
    ids_in("link", link, 0, n_links)
    bpc = np.asarray(link_bytes_per_cycle, dtype=np.float64)
    bad = ~(np.isfinite(bpc) & (bpc > 0))
    if bad.any():
        _fail("link_bytes_per_cycle", bpc, bad, "must be positive and finite")
    earlier_deps(dep_ptr, dep_idx, n)


# Task-list structures found well-formed, by the ids of their arrays: a cached template (read-only
# arrays, refilled with new setup cycles and message lengths at every call) is checked once, not
# at every fill. Only arrays that own their data and are read-only (``sim.wafer.mesh.frozen``)
# qualify. An entry holds weak references (a GQA shift's paths are megabytes, and the caches
# that own them let them go), and counts only while each still refers to the array at hand: an
# id reused by a new array after the old one died never matches.
_CHECKED: dict[tuple, tuple] = {}
_CHECKED_MAX = 4096


def _frozen_key(*arrays) -> tuple | None:
    """The ids of ``arrays`` when every one is a read-only array owning its data, else None."""
    for a in arrays:
        if not isinstance(a, np.ndarray) or a.flags.writeable or a.base is not None:
            return None
    return tuple(id(a) for a in arrays)


def mesh_run(task_pe, task_setup, task_stream, task_nwav, dep_ptr, dep_idx, path_ptr,
             path_link, link_lat, n_pes) -> None:  # fmt: skip
    """PE ids below ``n_pes`` (negative: a router forward), link ids in range, earlier
    dependencies, well-formed path lists, one length per task array. The structure (PEs,
    dependencies, paths, links) of read-only arrays is checked once per process."""
    n = len(task_pe)
    same_length(n, task_pe=task_pe, task_setup=task_setup, task_stream=task_stream,
                task_nwav=task_nwav)  # fmt: skip
    if int(n_pes) < 0:
        raise ValueError(f"n_pes = {n_pes} is out of range (must be >= 0)")
    structure = (task_pe, dep_ptr, dep_idx, path_ptr, path_link, link_lat)
    key = _frozen_key(*structure)
    refs = _CHECKED.get((key, int(n_pes))) if key is not None else None
    if refs is not None and all(r() is a for r, a in zip(refs, structure, strict=True)):
        return
    ids_in("task_pe", task_pe, None, int(n_pes))
    earlier_deps(dep_ptr, dep_idx, n)
    csr("path_ptr", path_ptr, n, "path_link", path_link)
    ids_in("path_link", path_link, 0, len(link_lat))
    if key is not None:
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED[key, int(n_pes)] = tuple(weakref.ref(a) for a in structure)


def occupancy_shape(occ) -> tuple[int, int]:
    """``(positions, stages)`` of an ASIC pipeline's ``occ``: a positions x stages array, or its
    compact form ``(base, cols, col_stage)`` (``base`` a row of stages; ``cols`` positions x
    columns, each replacing the distinct stage ``col_stage[a]``)."""
    if isinstance(occ, tuple):
        if len(occ) != 3:
            raise ValueError(f"occ has {len(occ)} parts; expected (base, cols, col_stage)")
        base, cols, col_stage = occ
        if np.ndim(base) != 1 or np.ndim(cols) != 2:
            raise ValueError(f"occ parts have shapes {np.shape(base)} and {np.shape(cols)}; "
                             "expected (stages,) and (steps, columns)")  # fmt: skip
        same_length(np.shape(cols)[1], col_stage=col_stage)
        ids_in("col_stage", col_stage, 0, len(base))
        # a set, not numpy.unique, whose first call imports numpy.ma (~10 ms of a run)
        if len(set(np.asarray(col_stage).tolist())) != len(col_stage):
            raise ValueError("col_stage names a stage twice; each column replaces its own stage")
        return np.shape(cols)[0], len(base)
    if np.ndim(occ) != 2:
        raise ValueError(f"occ has shape {np.shape(occ)}; expected (steps, stages)")
    return np.shape(occ)


def asic_pipeline(occ, lat, res, n_users, record, group=1, routes=None, tail=None) -> None:
    """``occ`` positions x stages, ``steps + group - 1`` positions (or its compact form,
    :func:`occupancy_shape`); per-stage ``lat`` and unit ids ``res`` >= 0 (2-D: a row of ids
    per stage, -1 padding after the first); per-step ``record`` (its length the steps);
    ``n_users`` rows in whole groups of ``group`` >= 1; ``routes``:
    per-stage MoE layer indices (-1: not an expert stage) and ``picks`` steps x rows x layers x
    top_k expert ids >= 0; ``tail`` (None or 0 .. stages): the first stage only a group's last
    row takes."""
    if int(n_users) < 0:
        raise ValueError(f"n_users = {n_users} is out of range (must be >= 0)")
    if int(group) < 1 or int(n_users) % int(group):
        raise ValueError(f"group = {group} must be >= 1 and divide n_users = {n_users}")
    positions, n_stages = occupancy_shape(occ)
    n_steps = positions - (int(group) - 1)  # a group's later rows take the positions after
    if tail is not None and not 0 <= int(tail) <= n_stages:
        raise ValueError(f"tail = {tail} is out of range (must be 0 .. {n_stages} stages)")
    same_length(n_stages, lat=lat)
    if int(group) > 1 and np.ndim(record) == 1 and len(record) != n_steps:
        raise ValueError(
            f"occ has {positions} positions; expected {len(record) + group - 1}: "
            f"one a step of record, and {group - 1} more for a group's later rows"
        )
    same_length(n_steps, record=record)
    if np.ndim(res) not in (1, 2) or len(res) != n_stages:
        raise ValueError(f"res has shape {np.shape(res)}; expected ({n_stages},) or "
                         f"({n_stages}, units)")  # fmt: skip
    ids_in("res", res if np.ndim(res) == 1 else np.asarray(res)[:, :1], 0, None)
    ids_in("res", res, -1, None)
    if routes is not None:
        if len(routes) not in (2, 3):
            raise ValueError(f"routes has {len(routes)} parts; expected "
                             "(ex_layer, picks[, ex_unit])")  # fmt: skip
        ex_layer, picks = routes[:2]
        same_length(n_stages, ex_layer=ex_layer)
        if np.ndim(picks) != 4 or np.shape(picks)[:2] != (n_steps, int(n_users)):
            raise ValueError(f"picks has shape {np.shape(picks)}; expected ({n_steps}, "
                             f"{n_users}, moe_layers, top_k)")  # fmt: skip
        ids_in("ex_layer", ex_layer, -1, np.shape(picks)[2])
        ids_in("picks", picks, 0, None)
        if len(routes) == 3:
            ex_unit = routes[2]
            top = int(np.max(picks)) + 1 if np.size(picks) else 0
            shape = np.shape(ex_unit)
            if len(shape) != 2 or shape[0] != n_stages or shape[1] < top:
                raise ValueError(f"ex_unit has shape {shape}; expected ({n_stages}, >= {top}): "
                                 "a unit for every stage and expert picked")  # fmt: skip
            ids_in("ex_unit", ex_unit, 0, None)


def asic_units(res, ex_layer, picks, ex_unit) -> int:
    """Hardware units an ASIC pipeline needs: every stage's unit, and for a routed stage the
    unit of every expert (``ex_unit[s, e]``)."""
    n = int(np.max(res)) + 1 if len(res) else 0
    routed = np.asarray(ex_layer) >= 0
    if picks is not None and np.size(picks) and routed.any():
        n = max(n, int(np.asarray(ex_unit)[routed].max()) + 1)
    return n


def gemv_packed(packed, bits, lut, bscale, block, rscale, x) -> None:
    """A rows x bytes code array holding ``len(x)`` codes of ``bits`` (1..8) per row, a table
    with every code, ``rscale`` per row and, when ``block``, ``bscale`` of rows x
    ceil(cols / block)."""
    if np.ndim(packed) != 2 or np.ndim(x) != 1:
        raise ValueError(f"packed must be 2-D and x 1-D; got {np.shape(packed)} and {np.shape(x)}")
    rows, cols, bits, block = np.shape(packed)[0], len(x), int(bits), int(block)
    if not 1 <= bits <= 8:
        raise ValueError(f"bits = {bits} is out of range (must be 1 to 8)")
    if np.shape(packed)[1] * 8 < cols * bits:
        raise ValueError("packed rows are shorter than cols * bits")
    if np.ndim(lut) != 1 or len(lut) < 1 << bits:
        raise ValueError("lut has fewer than 2**bits entries")
    same_length(rows, rscale=rscale)
    if block < 0:
        raise ValueError(f"block = {block} is out of range (must be >= 0; 0: no block scales)")
    if block and np.shape(bscale) != (rows, -(-cols // block)):
        raise ValueError("bscale must be rows x ceil(cols / block)")


def micro_batch_rounds(occ, busy, lat, rounds, relay=None) -> None:
    """``occ``, ``busy`` and ``lat`` all micro-batches x stages, none negative; rounds >= 0;
    ``relay`` None or ``(roff, rbusy, win_ptr, win_start, win_end)``: ``roff`` and ``rbusy``
    as ``occ``, none negative; ``win_ptr`` CSR over every (micro-batch, stage) into windows
    with ``0 <= start < end``, sorted and disjoint within each (micro-batch, stage)."""
    if np.ndim(occ) != 2:
        raise ValueError(f"occ has shape {np.shape(occ)}; expected (micro-batches, stages)")
    for name, arr in (("busy", busy), ("lat", lat)):
        if np.shape(arr) != np.shape(occ):
            raise ValueError(f"{name} has shape {np.shape(arr)}; expected {np.shape(occ)}")
    for name, arr in (("occ", occ), ("busy", busy), ("lat", lat)):
        ids_in(name, np.asarray(arr).ravel(), 0, None)
    if int(rounds) < 0:
        raise ValueError(f"rounds = {rounds} is out of range (must be >= 0)")
    if relay is not None:
        _relay(np.shape(occ), *relay)


def _relay(shape, roff, rbusy, win_ptr, win_start, win_end) -> None:
    for name, arr in (("roff", roff), ("rbusy", rbusy)):
        if np.shape(arr) != shape:
            raise ValueError(f"{name} has shape {np.shape(arr)}; expected {shape}")
        ids_in(name, np.asarray(arr).ravel(), 0, None)
    ws, we = np.asarray(win_start), np.asarray(win_end)
    same_length(len(ws), win_start=ws, win_end=we)
    csr("win_ptr", win_ptr, shape[0] * shape[1], "win_start", ws)
    ids_in("win_start", ws, 0, None)
    short = we <= ws
    if short.any():
        _fail("win_end", we, short, "must be above its win_start")
    # a window must not begin before the one before it (of the same micro-batch and stage) ends
    first = np.zeros(len(ws), dtype=bool)
    first[np.asarray(win_ptr)[:-1][np.diff(np.asarray(win_ptr)) > 0]] = True
    overlap = np.zeros(len(ws), dtype=bool)
    overlap[1:] = (ws[1:] < we[:-1]) & ~first[1:]
    if overlap.any():
        _fail("win_start", ws, overlap, "windows must be sorted and disjoint")


def route_draws(entropy, steps, weights, n, k) -> None:
    """Non-negative integer ``entropy`` words and ``steps``; ``weights`` of at least ``k`` > 0
    indices, non-negative, with positive weight on at least ``k`` of them; ``n`` >= 0 rows."""
    if not len(entropy) or any(int(e) < 0 for e in entropy):
        raise ValueError(f"entropy = {tuple(entropy)} must be one or more integers >= 0")
    if np.ndim(steps) != 1:
        raise ValueError(f"steps has shape {np.shape(steps)}; expected (n_steps,)")
    ids_in("steps", steps, 0, None)
    w = np.asarray(weights)
    if w.ndim != 1 or int(k) < 1 or int(k) > len(w):
        raise ValueError(f"k = {k} distinct picks need 1 <= k <= len(weights) = {len(w)}")
    if not np.isfinite(w).all() or (w < 0).any() or int((w > 0).sum()) < int(k):
        raise ValueError(f"weights must be finite, >= 0 and positive on at least k = {k} "
                         "indices")  # fmt: skip
    if int(n) < 0:
        raise ValueError(f"n = {n} is out of range (must be >= 0)")


def route_counts(picks, spans, n_experts) -> None:
    """``picks`` steps x rows x layers x top_k expert ids in ``[0, n_experts)``; ``spans``
    (start, stop) row ranges within the rows, start <= stop."""
    if np.ndim(picks) != 4:
        raise ValueError(f"picks has shape {np.shape(picks)}; expected (steps, rows, layers, "
                         "top_k)")  # fmt: skip
    ids_in("picks", picks, 0, int(n_experts))
    sp = np.asarray(spans)
    if sp.ndim != 2 or (len(sp) and sp.shape[1] != 2):
        raise ValueError(f"spans has shape {sp.shape}; expected (n_spans, 2)")
    ids_in("spans", sp, 0, np.shape(picks)[1] + 1)
    if len(sp) and (sp[:, 0] > sp[:, 1]).any():
        _fail("spans start", sp[:, 0], sp[:, 0] > sp[:, 1], "must not exceed its stop")
