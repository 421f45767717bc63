"""Every fast kernel against its NumPy twin; the C build is present and not stale in CI."""

import os

import numpy as np
import pytest

from pyaccel import kernels
from pyaccel.kernels import ffi, reference


def _cases():
    rng = np.random.default_rng(7)
    yield np.array([], dtype=np.int64), np.array([], dtype=np.int64)
    yield np.array([3]), np.array([3])  # empty interval
    yield np.array([0, 2, 10]), np.array([5, 4, 11])
    for n in (5, 50, 500):
        s = np.sort(rng.integers(0, 1000, n))
        yield s, s + rng.integers(-3, 40, n)


@pytest.mark.parametrize("backend", kernels.available_backends())
def test_interval_union_matches_reference(backend):
    fast = kernels.get("interval_union", backend)
    for starts, ends in _cases():
        s = np.ascontiguousarray(starts, dtype=np.int64)
        e = np.ascontiguousarray(ends, dtype=np.int64)
        assert fast(s, e) == reference.interval_union(s, e)


def test_named_missing_backend_is_an_error():
    with pytest.raises(kernels.KernelBuildError):
        kernels.get("interval_union", "fortran")
    with pytest.raises(kernels.KernelBuildError):
        kernels.get("no_such_kernel", "numpy")


def test_c_module_built_and_fresh():
    if not ffi.available:
        if os.environ.get("CI"):
            pytest.fail("the C kernels are not built (cffi build missing) in CI")
        pytest.skip("C kernels not built on this machine")
    assert not ffi.is_stale(), "csrc/ changed since the C module was built: reinstall"
