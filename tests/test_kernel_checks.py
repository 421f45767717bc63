"""Bad kernel inputs raise the same ValueError on every backend (NumPy, Numba, C).

The compiled kernels index without bounds checks: before these checks a resource id past the
end in the Numba LPU list scheduler wrote outside its array and returned garbage start cycles
(or aborted the process), and the NumPy twin raised a bare IndexError instead.
"""

import numpy as np
import pytest

from pyaccel import kernels


def i64(*values):
    return np.array(values, dtype=np.int64)


def _providers(name: str) -> list[str]:
    """The backends on this machine that have kernel ``name``."""
    found = []
    for backend in kernels.available_backends():
        try:
            kernels.get(name, backend)
        except kernels.KernelBuildError:
            continue
        found.append(backend)
    return found


NO_DEPS = (i64(0, 0, 0, 0), i64())  # dep_ptr, dep_idx of three items without dependencies
# a fragment pool: fragment 0 is instructions 0-1 (1 waits for 0), 1 is instruction 2 (takes
# the previous fragment's output), 2 is instruction 3; each fragment's output its last
POOL = (i64(0, 1, 0, -1), i64(3, 3, 3, 0), i64(0, 0, 0, 5), i64(0, 0, 1, 2, 2), i64(0, -2),
        i64(0, 2, 3, 4), i64(1, 0, 0))  # fmt: skip
NO_MARKS = (i64(0, 0, 0, 0), i64())  # mark_ptr, mark_idx: no fragment marks an instruction

# kernel, case name, arguments, the message expected on every backend
BAD = [
    ("lpu_list_schedule", "resource past the end",
     (i64(0, 2, 1), i64(3, 3, 3), i64(0, 0, 0), *NO_DEPS, 2), r"resource\[1\] = 2 .*< 2"),
    ("lpu_list_schedule", "resource below -1",
     (i64(0, -2, 1), i64(3, 3, 3), i64(0, 0, 0), *NO_DEPS, 2), r"resource\[1\] = -2 .*>= -1"),
    ("lpu_list_schedule", "dependency on a later item",
     (i64(0, 1), i64(3, 3), i64(0, 0), i64(0, 1, 1), i64(1), 2), r"dep_idx\[0\] = 1 .*earlier"),
    ("lpu_list_schedule", "dep_ptr past dep_idx",
     (i64(0, 1), i64(3, 3), i64(0, 0), i64(0, 0, 4), i64(0), 2), r"dep_ptr runs from 0 to 4"),
    ("lpu_list_schedule", "lengths differ",
     (i64(0, 1), i64(3), i64(0, 0), i64(0, 0, 0), i64(), 2), r"duration has shape \(1,\)"),
    ("lpu_list_schedule", "a negative latency",
     (i64(0, 1), i64(3, 3), i64(0, -1), i64(0, 0, 0), i64(), 2),
     r"latency\[1\] = -1 .*>= 0"),
    ("lpu_fragment_schedule", "a negative duration",
     (POOL[0], i64(3, -3, 3, 0), *POOL[2:], *NO_MARKS, i64(0, 1), i64(0), 2),
     r"duration\[1\] = -3 .*>= 0"),
    ("lpu_fragment_schedule", "an input at a program's start",
     (*POOL[:4], i64(0, -2), *POOL[5:], *NO_MARKS, i64(0, 2), i64(1, 0), 2),
     r"seq\[0\] = 1 takes an input \(-2\) but starts its program"),
    ("lpu_fragment_schedule", "dependency on a later instruction of its fragment",
     (*POOL[:4], i64(1, 0), *POOL[5:], *NO_MARKS, i64(0, 1), i64(0), 2),
     r"dep_idx\[0\] = 1 .*earlier one of that fragment"),
    ("lpu_fragment_schedule", "a fragment past the pool",
     (*POOL, *NO_MARKS, i64(0, 1), i64(3), 2), r"seq\[0\] = 3 .*< 3"),
    ("lpu_fragment_schedule", "an output outside its fragment",
     (*POOL[:6], i64(2, 0, 0), *NO_MARKS, i64(0, 1), i64(0), 2), r"frag_out\[0\] = 2 .*< 2"),
    ("lpu_fragment_schedule", "a mark outside its fragment",
     (*POOL, i64(0, 1, 1, 1), i64(2), i64(0, 1), i64(0), 2), r"mark_idx\[0\] = 2 .*< 2"),
    ("lpu_link_schedule", "link past the end",
     (i64(0, 3), i64(64, 64), np.zeros(2, bool), i64(0, 0, 0), i64(), np.array([4.0]), i64(9),
      320), r"link\[1\] = 3 .*< 1"),
    ("lpu_link_schedule", "a link of zero bytes per cycle",
     (i64(0), i64(64), np.zeros(1, bool), i64(0, 0), i64(), np.array([0.0]), i64(9), 320),
     r"link_bytes_per_cycle\[0\] = 0.0 .*positive"),
    ("mesh_run", "PE past the end",
     (i64(0, 9), i64(1, 1), i64(0, 0), i64(1, 1), i64(0, 0, 0), i64(), i64(0, 0, 0), i64(),
      i64(1), 2, 0), r"task_pe\[1\] = 9 .*< 2"),
    ("mesh_run", "link past the end",
     (i64(0), i64(1), i64(0), i64(4), i64(0, 0), i64(), i64(0, 1), i64(7), i64(1), 2, 0),
     r"path_link\[0\] = 7 .*< 1"),
    ("mesh_run", "dependency on itself",
     (i64(0), i64(1), i64(0), i64(4), i64(0, 1), i64(0), i64(0, 0), i64(), i64(1), 2, 0),
     r"dep_idx\[0\] = 0 .*earlier"),
    ("asic_pipeline", "negative unit id",
     (np.ones((2, 2), np.int64), i64(1, 1), i64(0, -1), 1, np.ones(2, bool)), r"res\[1\] = -1"),
    ("asic_pipeline", "record of the wrong length",
     (np.ones((2, 2), np.int64), i64(1, 1), i64(0, 1), 1, np.ones(3, bool)),
     r"record has shape \(3,\); expected \(2,\)"),
    ("interval_union", "ends shorter than starts", (i64(0, 5, 9), i64(3)), r"ends has shape"),
    ("interval_union", "starts not sorted", (i64(5, 0), i64(6, 3)), r"starts\[1\] = 0 .*sorted"),
    ("gemv_packed", "a table without every code",
     (np.full((1, 16), 255, np.uint8), 8, np.ones(4, np.float32), None, 0,
      np.ones(1, np.float32), 0, np.ones(16, np.float32)), r"lut has fewer than 2\*\*bits"),
    ("gemv_packed", "rows too short for the columns",
     (np.zeros((1, 4), np.uint8), 8, np.ones(256, np.float32), None, 0,
      np.ones(1, np.float32), 0, np.ones(16, np.float32)), r"packed rows are shorter"),
    ("gemv_packed", "block scales of the wrong shape",
     (np.zeros((2, 16), np.uint8), 8, np.ones(256, np.float32), np.ones((2, 1), np.float32), 8,
      np.ones(2, np.float32), 0, np.ones(16, np.float32)), r"bscale must be rows x"),
    ("gemv_packed", "a row scale missing",
     (np.zeros((2, 16), np.uint8), 8, np.ones(256, np.float32), None, 0,
      np.ones(1, np.float32), 0, np.ones(16, np.float32)), r"rscale has shape \(1,\)"),
]  # fmt: skip


@pytest.mark.parametrize("name,case,args,message", BAD, ids=[f"{b[0]}: {b[1]}" for b in BAD])
def test_bad_input_raises_the_same_error_on_every_backend(name, case, args, message):
    backends = _providers(name)
    assert "numpy" in backends and len(backends) >= 2, backends  # a twin and a fast kernel
    messages = {}
    for backend in backends:
        with pytest.raises(ValueError, match=message) as err:
            kernels.get(name, backend)(*args)
        messages[backend] = str(err.value)
    assert len(set(messages.values())) == 1, messages


def test_good_input_still_runs_on_every_backend():
    """The checks accept what the engines send: router forwards (PE -1), no-resource delays."""
    args = (i64(0, -1, 1), i64(3, 2, 3), i64(1, 0, 0), i64(0, 0, 1, 2), i64(0, 1), 2)
    runs = {b: kernels.get("lpu_list_schedule", b)(*args).tolist() for b in _providers(
        "lpu_list_schedule")}  # fmt: skip
    assert set(map(tuple, runs.values())) == {(0, 4, 6)}, runs
    mesh = (i64(0, -1), i64(1, 0), i64(0, 0), i64(2, 2), i64(0, 0, 1), i64(0), i64(0, 1, 2),
            i64(0, 0), i64(1), 1, 0)  # fmt: skip
    heads = {b: kernels.get("mesh_run", b)(*mesh)[0].tolist() for b in _providers("mesh_run")}
    assert len({tuple(h) for h in heads.values()}) == 1, heads


def test_a_frozen_task_list_structure_is_checked_once(monkeypatch):
    # A cached template's arrays are read-only: its structure (PEs, dependencies, paths, links)
    # is checked at its first run only. Writeable arrays are checked at every call, and a bad
    # frozen structure raises at every call (it is never remembered as checked).
    from pyaccel.kernels import checks
    from pyaccel.sim.wafer.mesh import frozen

    def mesh_args(writeable: bool):
        pe, path_ptr, path_link = i64(0, 1), i64(0, 1, 2), i64(0, 1)
        dep_ptr, dep_idx, lat = i64(0, 0, 1), i64(0), i64(1, 1)
        structure = [pe, dep_ptr, dep_idx, path_ptr, path_link, lat]
        if not writeable:
            structure = [frozen(a) for a in structure]
        pe, dep_ptr, dep_idx, path_ptr, path_link, lat = structure
        return (pe, i64(3, 3), i64(0, 0), i64(2, 2), dep_ptr, dep_idx, path_ptr, path_link, lat, 2)

    calls = []
    real = checks.earlier_deps
    monkeypatch.setattr(checks, "earlier_deps", lambda *a: (calls.append(a), real(*a)))
    frozen_args, open_args = mesh_args(False), mesh_args(True)
    for _ in range(3):
        checks.mesh_run(*frozen_args)
        checks.mesh_run(*open_args)
    assert len(calls) == 1 + 3
    bad = list(mesh_args(False))
    bad[7] = frozen(i64(0, 5))  # a link past the end
    for _ in range(2):
        with pytest.raises(ValueError, match=r"path_link\[1\] = 5"):
            checks.mesh_run(*bad)
    for backend in _providers("mesh_run"):  # the kernels take the checked arrays as they are
        head, tail, _ = kernels.get("mesh_run", backend)(*frozen_args, 0)
        assert tail.tolist() == kernels.get("mesh_run", backend)(*open_args, 0)[1].tolist()


def test_the_checked_memo_keeps_no_structure_alive():
    # a GQA shift's paths are megabytes: once the caches that own them let go, the memo of
    # checked structures must not keep them (it holds weak references)
    import gc
    import weakref

    from pyaccel.kernels import checks
    from pyaccel.sim.wafer.mesh import frozen

    structure = [frozen(a) for a in (i64(0, 1), i64(0, 0, 1), i64(0), i64(0, 1, 2), i64(0, 1),
                                     i64(1, 1))]  # fmt: skip
    pe, dep_ptr, dep_idx, path_ptr, path_link, lat = structure
    checks.mesh_run(pe, i64(3, 3), i64(0, 0), i64(2, 2), dep_ptr, dep_idx, path_ptr, path_link,
                    lat, 2)  # fmt: skip
    gone = weakref.ref(path_link)
    del structure, pe, dep_ptr, dep_idx, path_ptr, path_link, lat
    gc.collect()
    assert gone() is None
