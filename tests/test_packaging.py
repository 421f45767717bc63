"""The package as a user gets it: an sdist built from this checkout, wheels built from it (one
with the C kernels, one with a failing C compiler, ``CC=false``), installed with their
dependencies into a fresh venv and run there on a wafer, an LPU and an ASIC.

The venv is made from the base interpreter without system site-packages, whatever environment
runs the tests (itself a venv or not), and pip fills it from its configured index. An editable
install would read presets from the checkout and hide missing package data; a run must write
nothing inside the installed package (Numba caches go to the per-user cache folder).

Slow (a venv with numpy, numba, ... takes about a minute): ``.ci/run`` runs it with ``-m slow``.
"""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = {"wse2", "wse3", "wse3t", "groq-tsp", "taalas-hc1", "taalas-hc2", "h100", "h200", "b200",
           "ascend-950"}  # fmt: skip
ONE_PER_KIND = ("wse3", "groq-tsp", "taalas-hc1")  # a wafer, an LPU and an ASIC


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=900, check=False, **kw
    )
    if done.returncode:
        pytest.fail(f"{' '.join(map(str, cmd))} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def _clean_env(**extra) -> dict:
    """This environment without anything that would point a child at the checkout or at another
    cache or backend."""
    drop = {"PYTHONPATH", "NUMBA_CACHE_DIR", "PYACCEL_BACKEND", "VIRTUAL_ENV", "PYTHONHOME"}
    return {k: v for k, v in os.environ.items() if k not in drop} | extra


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    """{"c": wheel with the C module, "no_c": wheel built with CC=false}, both from one sdist
    (each built in pip's own fresh folder, so no build/ of the checkout leaks in)."""
    tmp = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--sdist", "--outdir", tmp / "sdist", ROOT])
    sdist = next((tmp / "sdist").glob("pyaccel-*.tar.gz"))
    built = {}
    for name, env in (("c", {}), ("no_c", {"CC": "false"})):
        out = tmp / name
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, sdist],
             env=_clean_env(**env))  # fmt: skip
        built[name] = next(out.glob("pyaccel-*.whl"))
    return built


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheels):
    """A fresh venv from the base interpreter with the C wheel and its dependencies installed;
    returns (bin folder, a working folder outside the checkout)."""
    tmp = tmp_path_factory.mktemp("venv")
    base = getattr(sys, "_base_executable", None) or sys.executable
    _run([base, "-m", "venv", tmp / "venv"], env=_clean_env())
    bindir = tmp / "venv" / ("Scripts" if os.name == "nt" else "bin")
    _run([bindir / "python", "-m", "pip", "install", "-q", wheels["c"]], env=_clean_env())
    return bindir, tmp


def _package_files(bindir, cwd) -> tuple[Path, set]:
    """The installed pyaccel folder (checked to be inside the venv) and every file in it."""
    where = _run([bindir / "python", "-c", "import pyaccel; print(pyaccel.__file__)"], cwd=cwd,
                 env=_clean_env()).stdout.strip()  # fmt: skip
    folder = Path(where).parent
    assert folder.is_relative_to(bindir.parent), f"pyaccel imported from {where}, not the venv"
    return folder, {p.relative_to(folder) for p in folder.rglob("*")}


def _pyaccel(bindir, cwd, *args, **env) -> subprocess.CompletedProcess:
    """The installed CLI, with a cache folder of its own (XDG_CACHE_HOME under ``cwd``)."""
    env = _clean_env(XDG_CACHE_HOME=str(cwd / "xdg"), **env)
    return _run([bindir / "pyaccel", *args], cwd=cwd, env=env)


def _run_json(bindir, cwd, system, *more) -> tuple[dict, str]:
    done = _pyaccel(bindir, cwd, "run", "--system", system, "--model", "llama-3.1-8b",
                    "--tokens", "3", "--json", *more)  # fmt: skip
    return json.loads(done.stdout), done.stderr


def test_wheels_carry_presets_license_and_no_build_script(wheels):
    names = zipfile.ZipFile(wheels["c"]).namelist()
    assert "pyaccel/hw/presets/h100.toml" in names
    assert "pyaccel/model/presets/llama-3.1-8b.json" in names
    assert "pyaccel/data/published.csv" in names
    assert "pyaccel/data/acceptance.csv" in names and "pyaccel/data/drafters.toml" in names
    assert any(n.startswith("pyaccel/_ckernels") for n in names)
    assert not any(n.startswith("csrc/") for n in names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    meta = zipfile.ZipFile(wheels["c"]).read("pyaccel-0.1.0.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in meta
    assert not any("_ckernels" in n for n in zipfile.ZipFile(wheels["no_c"]).namelist())


def test_installed_wheel_runs_every_kind_and_writes_nothing_inside_itself(venv):
    bindir, tmp = venv
    folder, before = _package_files(bindir, tmp)
    systems = json.loads(_pyaccel(bindir, tmp, "systems", "--json").stdout)
    assert {s["name"] for s in systems} == SYSTEMS
    models = json.loads(_pyaccel(bindir, tmp, "models", "--json").stdout)
    assert {"llama-3.1-8b", "deepseek-v3", "kimi-k2", "gpt-oss-120b"} <= {m["name"] for m in models}
    for system in (*ONE_PER_KIND, "h100"):
        result, stderr = _run_json(bindir, tmp, system)
        assert result["system"] == system and result["tokens_per_s_per_user"] > 0, result
        assert "C kernels" not in stderr  # this wheel has them
    # every kind's kernels are in C: the Numba ones run (and cache) only when asked for
    _pyaccel(bindir, tmp, "report", "--system", "groq-tsp", "--model", "llama-3.1-8b",
             "--tokens", "3", PYACCEL_BACKEND="numba")  # fmt: skip
    rows = json.loads(_pyaccel(bindir, tmp, "validate", "--json").stdout)  # the shipped table
    assert len(rows) >= 5 and sum(r["error"] is None for r in rows) >= 4
    assert _package_files(bindir, tmp)[1] == before, f"files appeared in {folder}"
    assert list((tmp / "xdg" / "pyaccel" / "numba").rglob("*.nbi")), "Numba cached elsewhere"


@pytest.fixture
def no_c_installed(venv, wheels):
    """The venv with the CC=false wheel in place of the C one (put back afterwards)."""
    bindir, tmp = venv
    pip = [bindir / "python", "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall"]
    _run([*pip, wheels["no_c"]], env=_clean_env())
    yield bindir, tmp
    _run([*pip, wheels["c"]], env=_clean_env())


def test_wheel_built_without_a_c_compiler_runs_and_warns_once(no_c_installed):
    bindir, tmp = no_c_installed
    _, before = _package_files(bindir, tmp)
    for system in ("groq-tsp", "wse3"):
        result, stderr = _run_json(bindir, tmp, system)  # stdout parses: only the JSON
        assert result["tokens_per_s_per_user"] > 0
        warnings = [ln for ln in stderr.splitlines() if ln.startswith("warning:")]
        assert len(warnings) == 1 and "C kernels" in warnings[0], stderr
        assert "Traceback" not in stderr
    assert _package_files(bindir, tmp)[1] == before
