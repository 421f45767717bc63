"""Every fast kernel against its NumPy twin; the C build is present and not stale in CI."""

import os
import subprocess
import sys
from pathlib import Path

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


def _numba_cache_path(tmp_path, prelude="", **env) -> tuple[Path, bool]:
    """(Where a jit kernel caches its compiled code, whether numba was imported before the jit
    module) in a new process with ``env`` (XDG_CACHE_HOME is tmp_path/xdg)."""
    code = (
        f"{prelude}\nimport sys\nimport pyaccel, pyaccel.kernels\n"
        "eager = 'numba' in sys.modules\n"
        "import pyaccel.kernels.jit as j\n"
        "print(j._interval_union._cache._cache_path); print(eager)\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    environ |= {"XDG_CACHE_HOME": str(tmp_path / "xdg"), **env}
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                         text=True, check=True).stdout.split()  # fmt: skip
    return Path(out[0]), out[1] == "True"


PACKAGE = Path(kernels.__file__).resolve().parent


@pytest.mark.skipif(sys.platform != "linux", reason="XDG_CACHE_HOME is the Linux cache folder")
def test_numba_caches_in_the_user_cache_folder_not_the_package(tmp_path):
    path, eager = _numba_cache_path(tmp_path)
    assert path.is_relative_to(tmp_path / "xdg" / "pyaccel" / "numba"), path
    assert not path.resolve().is_relative_to(PACKAGE)
    assert not eager, "importing pyaccel imported numba"
    # numba imported first (its config already read) still caches there
    path, _ = _numba_cache_path(tmp_path, prelude="import numba")
    assert path.is_relative_to(tmp_path / "xdg" / "pyaccel" / "numba"), path


def test_numba_cache_dir_set_by_the_user_wins(tmp_path):
    path, _ = _numba_cache_path(tmp_path, NUMBA_CACHE_DIR=str(tmp_path / "mine"))
    assert path.is_relative_to(tmp_path / "mine"), path


@pytest.mark.parametrize(
    "system,model,sets",
    [
        ("wse3", "tiny-llama", ""),
        ("groq-tsp", "tiny-llama", ""),
        ("taalas-hc1", "tiny-llama", ""),
        ("h100", "tiny-llama", ""),
        ("h100", "tiny-mixtral", "expert_layout=ep"),  # each step's routing, at once
        ("groq-tsp", "tiny-mixtral", "expert_layout=ep"),
    ],
)
def test_a_run_with_the_c_kernels_never_imports_numba(tmp_path, system, model, sets):
    """Every engine's hot loops have C versions: a run pays numba's import (0.5 s) and first
    JIT only when the C module is missing or numba is asked for by name."""
    if not ffi.available:
        pytest.skip("C kernels not built on this machine")
    code = (
        "import sys, pyaccel as pa\n"
        "cfg = pa.load_model(sys.argv[2]); sysm = pa.load_system(sys.argv[1], units='auto',\n"
        "    etch=sys.argv[1] == 'taalas-hc1', overrides=[s for s in sys.argv[3:] if s])\n"
        "work = pa.Workload(context=16, tokens=3, batch=4 if sys.argv[3] else 1)\n"
        "pa.emulate(cfg, sysm, pa.place(cfg, sysm, work), work)\n"
        "print('numba' in sys.modules, 'numpy.ma' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYACCEL_BACKEND"}
    out = subprocess.run([sys.executable, "-c", code, system, model, sets], env=env,
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert out[-2] == "False", f"a {system} run imported numba"
    # nor numpy.ma (~10 ms), which numpy.unique's first call imports
    assert out[-1] == "False", f"a {system} run imported numpy.ma"
