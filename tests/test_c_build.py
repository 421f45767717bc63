"""The C kernels on machines unlike this one: a non-x86 build (the x86 paths forced off) compiles
and gives the NumPy twin's bits, and without the C module pyaccel runs on Numba/NumPy and says
so once."""

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from pyaccel.kernels import reference_gemv
from pyaccel.numerics.codecs import encode
from pyaccel.numerics.gemv import operands

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"
NO_X86 = ("PYACCEL_NO_X86", None)


def _compiler() -> str:
    """The C compiler setuptools would use (CC, else Python's build CC); skip visibly without."""
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")[0]
    works = shutil.which(cc) and subprocess.run([cc, "--version"], capture_output=True, check=False)
    if not works or works.returncode:
        pytest.skip(f"no working C compiler ({cc!r}) on this machine")
    return cc


def _build_script():
    spec = importlib.util.spec_from_file_location("pyaccel_build_ffi", CSRC / "build_ffi.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_x86_paths_are_guarded():
    """With the guard forced off (as on aarch64) the GEMV's files include no x86 header and use
    no vector type, and every file compiles warning-free."""
    cc = _compiler()
    for gemv in ("gemv.c", "gemv_planes.c"):
        pre = subprocess.run(
            [cc, "-E", "-std=c99", "-DPYACCEL_NO_X86", f"-I{CSRC}", str(CSRC / gemv)],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert "immintrin.h" not in pre and "__m256" not in pre and "__m512" not in pre, gemv
    for src in sorted(CSRC.glob("*.c")):
        done = subprocess.run(
            [cc, "-fsyntax-only", "-std=c99", "-Wall", "-Wextra", "-Werror", "-DPYACCEL_NO_X86",
             f"-I{CSRC}", str(src)], capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def portable(tmp_path_factory):
    """The C module built from csrc/ with the x86 paths forced off, under another name."""
    _compiler()
    builder = _build_script().make_builder(
        CSRC, module="_ckernels_portable", macros=(NO_X86,), optional=False
    )
    so = builder.compile(tmpdir=str(tmp_path_factory.mktemp("portable")))
    spec = importlib.util.spec_from_file_location("_ckernels_portable", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("fmt,bits", [("int8", None), ("int4", None), ("mxfp4", None),
                                      ("nvfp4", None), ("hc1", 3), ("hc1", 6)])  # fmt: skip
def test_portable_build_gives_the_twins_bits(portable, monkeypatch, fmt, bits):
    from pyaccel.kernels import ffi_gemv

    monkeypatch.setattr(ffi_gemv, "ffi", portable.ffi)
    monkeypatch.setattr(ffi_gemv, "lib", portable.lib)
    rng = np.random.default_rng(5)
    for rows, cols in ((1, 1), (5, 17), (9, 48), (13, 129), (8, 1100)):
        ops = operands(encode(rng.standard_normal((rows, cols)).astype(np.float32), fmt, bits))
        x = rng.standard_normal(cols).astype(np.float32)
        want = reference_gemv.gemv_packed(*ops, x)
        for threads in (1, 2):
            assert np.array_equal(ffi_gemv.gemv_packed(*ops, x, threads=threads), want)
        for isa in ("avx2", "avx512"):  # compiled out: refused, nothing computed
            with pytest.raises(RuntimeError, match=isa):
                ffi_gemv.gemv_packed(*ops, x, isa=isa)


def _run_without_c(args, **env):
    """``pyaccel ARGS`` in a new process whose C module is missing (as after a failed build)."""
    code = (
        "import sys, pyaccel.kernels.ffi as f\n"
        "f.available = False\n"
        "from pyaccel.cli import main\n"
        f"sys.argv = ['pyaccel', *{args!r}]\n"
        "main()\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != "PYACCEL_BACKEND"} | env
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=environ, check=False)  # fmt: skip


def test_without_the_c_module_one_warning_line_and_clean_json():
    done = _run_without_c(["run", "--system", "wse3", "--model", "llama-3.1-8b", "--tokens", "2",
                           "--json"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tokens_per_s_per_user"] > 0  # stdout is only the JSON
    lines = done.stderr.splitlines()
    warnings = [ln for ln in lines if ln.startswith("warning:")]
    assert len(warnings) == 1 and "C kernels" in warnings[0], done.stderr
    assert "Traceback" not in done.stderr


def test_a_backend_named_by_the_user_needs_no_warning():
    done = _run_without_c(["run", "--system", "groq-tsp", "--model", "llama-3.1-8b", "--tokens",
                           "2", "--json"], PYACCEL_BACKEND="numba")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "warning:" not in done.stderr
