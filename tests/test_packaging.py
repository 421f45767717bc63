"""The wheel carries every preset: build it, install it into a fresh venv, run the CLI there.

An editable install reads presets from the checkout and would hide missing package data.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "-q",
            "-w",
            str(tmp / "dist"),
        ]
    )
    wheel = next((tmp / "dist").glob("pyaccel-*.whl"))
    # The venv sees this interpreter's site-packages for the dependencies (numpy, numba, ...), but
    # pyaccel itself comes from the wheel installed into the venv, which is checked below.
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(tmp / "venv")])
    bindir = tmp / "venv" / ("Scripts" if os.name == "nt" else "bin")
    _run([str(bindir / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)])
    return bindir, tmp


def test_wheel_contains_presets_and_no_build_script(venv):
    import zipfile

    _, tmp = venv
    names = zipfile.ZipFile(next((tmp / "dist").glob("*.whl"))).namelist()
    assert "pyaccel/hw/presets/h100.toml" in names
    assert "pyaccel/model/presets/llama-3.1-8b.json" in names
    assert any(n.startswith("pyaccel/_ckernels") for n in names)
    assert not any(n.startswith("csrc/") for n in names)


def test_installed_cli_lists_every_preset(venv):
    bindir, tmp = venv
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = _run(
        [str(bindir / "python"), "-c", "import pyaccel; print(pyaccel.__file__)"], cwd=tmp, env=env
    ).stdout
    assert str(tmp) in where, f"pyaccel imported from {where}, not from the wheel"
    systems = json.loads(
        _run([str(bindir / "pyaccel"), "systems", "--json"], cwd=tmp, env=env).stdout
    )
    assert {s["name"] for s in systems} == {
        "wse2",
        "wse3",
        "groq-tsp",
        "taalas-hc1",
        "h100",
        "h200",
        "b200",
    }
    models = json.loads(
        _run([str(bindir / "pyaccel"), "models", "--json"], cwd=tmp, env=env).stdout
    )
    assert {"llama-3.1-8b", "deepseek-v3", "kimi-k2", "gpt-oss-120b"} <= {m["name"] for m in models}
    run = json.loads(
        _run(
            [
                str(bindir / "pyaccel"),
                "run",
                "--system",
                "h100",
                "--model",
                "llama-3.1-8b",
                "--tokens",
                "2",
                "--json",
            ],
            cwd=tmp,
            env=env,
        ).stdout
    )
    assert run["tokens_per_s_per_user"] > 0
