"""Whole-process speed: what a user waits for, imports and placement included (issue 21, SPEC §10).

Run: ``pytest bench/bench_whole_process.py -s -p no:cacheprovider``. Three checks:

1. **The table**: each case is a new ``pyaccel run ... --json`` process, one warm-up run, then
   the median of 5 (seconds). Beside it, its runs taken in turn with the case's, the median of
   5 of a comparable tool's whole process: ``llm-analysis`` (its own venv, made once in the
   per-user cache folder; ``PYACCEL_BENCH_LLM_ANALYSIS`` names another interpreter that has
   it) answering one decode query for a local JSON of llama-3.1-8b's shapes. Goals are ratios
   to it, so that a slower or faster machine moves both: <= 1.15x for a case whose goal is
   1.0 s, 2.3x for 2.0 s, 3.45x for 3.0 s (the query takes about 0.87 s where the goals were
   set). When llm-analysis cannot be installed, "not available" is printed and the ratios are
   not asserted.
2. **First run after install**: the LPU and ASIC cases in a new process with an empty
   ``NUMBA_CACHE_DIR`` against the warm run, their runs in turn (goal <= 1.2x): compiled-code
   caches are the only thing "warm" may mean; no placement or result cache lives across
   processes.
3. **Trace against step**, in-process on ``emulate()``: a 4,096-token trace against one step,
   every kind, every full-size model at bf16 that places (goal <= 2x). Each side is the best
   of three runs in one process, steps and traces in turn after one untimed step (the first
   trace, with its one-time costs, is printed too): one run each swung by half its value on
   this machine. Each run starts after a
   ``gc.collect()``, so earlier runs' garbage is not collected inside it.

Every figure is printed; with ``-s`` a table at the end.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import pyaccel as pa

RUNS = 5
WARMUP = 1
LLM_ANALYSIS = "llm-analysis==0.2.2"
# (label, pyaccel run arguments, goal as a ratio to llm-analysis's whole process)
TABLE = [
    ("wse3 llama-3.1-8b, 256 tokens",
     ["--system", "wse3", "--model", "llama-3.1-8b", "--tokens", "256"], 1.15),
    ("wse3 llama-3.1-70b, one step, auto",
     ["--system", "wse3", "--model", "llama-3.1-70b", "--units", "auto", "--tokens", "1"], 1.15),
    ("wse2 llama-3.1-70b, one step, auto",
     ["--system", "wse2", "--model", "llama-3.1-70b", "--units", "auto", "--tokens", "1"], 1.15),
    ("groq-tsp llama-2-70b int8, one step, auto",
     ["--system", "groq-tsp", "--model", "llama-2-70b", "--weights", "int8", "--units", "auto",
      "--tokens", "1"], 1.15),
    ("taalas-hc1 llama-3.1-70b --etch, one step",
     ["--system", "taalas-hc1", "--model", "llama-3.1-70b", "--etch", "--units", "auto",
      "--tokens", "1"], 1.15),
    ("wse3 llama-3.1-405b, auto",
     ["--system", "wse3", "--model", "llama-3.1-405b", "--units", "auto"], 2.3),
    ("wse3 deepseek-v3 bf16, auto",
     ["--system", "wse3", "--model", "deepseek-v3", "--weights", "bf16", "--units", "auto"], 3.45),
]  # fmt: skip
COLD = ("groq-tsp", "taalas-hc1")  # the kinds whose kernels once were Numba's only
COLD_GOAL = 1.2
TRACE_TOKENS = 4096
TRACE_GOAL = 2.0
TRACE_SYSTEMS = {"gpu": "h100", "wafer": "wse3", "lpu": "groq-tsp", "asic": "taalas-hc1"}
_RESULTS: list[tuple[str, str, str]] = []  # (section, case, figures) for the closing table


def _median_s(cmd: list[str], cwd: Path | None = None, fresh_env=None) -> float:
    """Median wall seconds of ``cmd`` as a whole process over RUNS runs after WARMUP;
    ``fresh_env()`` gives each timed run extra environment (e.g. an empty cache folder).

    Bytecode caching is on for every timed process: ``pip install .`` compiles a
    package's modules at install, as it did llm-analysis's, but an editable install compiles
    them at the first run, so ``PYTHONDONTWRITEBYTECODE`` (set in some CI and sandbox shells)
    would make every pyaccel run recompile its sources, which no installed copy does."""
    return _medians_s([(cmd, cwd, fresh_env)])[0]


def _medians_s(jobs: list[tuple]) -> list[float]:
    """:func:`_median_s` of each ``(cmd, cwd, fresh_env)`` of ``jobs``, their runs taken in
    turn (one of each, RUNS times, after each one's warm-up), so a slow spell of a noisy
    machine falls on all of them alike rather than on whichever was being timed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for cmd, cwd, _ in jobs:
        for _ in range(WARMUP):
            subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, check=True)
    times: list[list[float]] = [[] for _ in jobs]
    for _ in range(RUNS):
        for (cmd, cwd, fresh_env), out in zip(jobs, times, strict=True):
            run_env = env | (fresh_env() if fresh_env else {})
            t0 = time.perf_counter()
            subprocess.run(cmd, cwd=cwd, env=run_env, capture_output=True, check=True)
            out.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def _pyaccel(args: list[str]) -> list[str]:
    """The command a user types: the installed ``pyaccel`` script beside this interpreter."""
    script = Path(sys.executable).with_name("pyaccel")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "pyaccel"]
    return [*head, "run", *args, "--json"]


def _llm_analysis_python() -> str | None:
    """An interpreter that has llm-analysis: ``PYACCEL_BENCH_LLM_ANALYSIS``, else a venv of
    its own in the per-user cache folder (made on first use); None when it cannot be made."""
    named = os.environ.get("PYACCEL_BENCH_LLM_ANALYSIS")
    if named:
        return named
    import platformdirs

    venv = Path(platformdirs.user_cache_dir("pyaccel")) / "bench" / "llm-analysis-venv"
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import llm_analysis.analysis"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return str(python)
    shutil.rmtree(venv, ignore_errors=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", LLM_ANALYSIS], check=True,
                       capture_output=True, timeout=900)  # fmt: skip
        subprocess.run(probe, check=True, capture_output=True)
    except (subprocess.SubprocessError, OSError):
        return None
    return str(python)


def _llama8b_json(folder: Path) -> Path:
    """llama-3.1-8b's shapes, from pyaccel's own preset, as llm-analysis's model JSON."""
    c = pa.load_model("llama-3.1-8b")
    shapes = {
        "name": "l8", "num_layers": c.n_layers, "n_head": c.n_heads, "hidden_dim": c.hidden,
        "vocab_size": c.vocab, "max_seq_len": c.max_position, "num_key_value_heads": c.n_kv_heads,
        "ffn_embed_dim": c.ffn, "expansion_ratio": c.ffn / c.hidden, "model_type": "llama",
    }  # fmt: skip
    path = folder / "l8.json"
    path.write_text(json.dumps(shapes))
    return path


@pytest.fixture(scope="module")
def baseline() -> tuple | None:
    """llm-analysis's query as a :func:`_medians_s` job, its median whole-process seconds
    printed once (None: not available); each row of the table times it again beside itself."""
    python = _llm_analysis_python()
    if python is None:
        print("\nllm-analysis: not available (could not be installed)")
        _RESULTS.append(("baseline", "llm-analysis", "not available"))
        return None
    folder = Path(tempfile.mkdtemp(prefix="pyaccel-bench-"))
    _llama8b_json(folder)
    cmd = [
        python,
        "-m",
        "llm_analysis.analysis",
        "infer",
        "--model_name",
        "l8.json",
        "--gpu_name",
        "h100-sxm-80gb",
        "--dtype_name",
        "w16a16e16",
        "--seq_len",
        "1024",
        "--num_tokens_to_generate",
        "1",
        "--batch_size_per_gpu",
        "1",
        "--tp_size",
        "1",
    ]
    job = (cmd, folder, None)  # the query names its JSON in the working folder
    seconds = _medians_s([job])[0]
    _RESULTS.append(("baseline", "llm-analysis infer (llama-3.1-8b shapes)", f"{seconds:.3f} s"))
    return job


@pytest.mark.parametrize("label,args,goal", TABLE, ids=[t[0] for t in TABLE])
def test_whole_process(label, args, goal, baseline, benchmark):
    benchmark.group = "whole-process"
    jobs = [(_pyaccel(args), None, None)] + ([baseline] if baseline else [])
    got = benchmark.pedantic(_medians_s, args=(jobs,), rounds=1, iterations=1)
    seconds, ratio = got[0], (got[0] / got[1] if baseline else None)
    benchmark.extra_info.update(seconds=seconds, ratio_to_llm_analysis=ratio, goal_ratio=goal)
    shown = f"{seconds:.3f} s" + (f"  x{ratio:.2f} of {got[1]:.3f} s (goal <= x{goal})"
                                  if ratio else "")  # fmt: skip
    _RESULTS.append(("table", label, shown))
    if ratio is not None:
        assert ratio <= goal, f"{label}: {shown}"


@pytest.mark.parametrize("system", COLD)
def test_first_run_after_install(system):
    label, args, _ = next(t for t in TABLE if t[1][1] == system)
    cmd = _pyaccel(args)
    fresh = lambda: {"NUMBA_CACHE_DIR": tempfile.mkdtemp()}  # noqa: E731
    warm, cold = _medians_s([(cmd, None, None), (cmd, None, fresh)])
    _RESULTS.append(("cold", label, f"cold {cold:.3f} s / warm {warm:.3f} s = x{cold / warm:.2f}"))
    assert cold / warm <= COLD_GOAL, f"{label}: first run x{cold / warm:.2f} of a warm run"


def _emulate_s(model, system, plc, work) -> float:
    # the garbage earlier runs left is collected now, not by whichever run comes next (a full
    # collection over a long bench's caches is tens of ms); a run's own garbage stays timed
    gc.collect()
    t0 = time.perf_counter()
    pa.emulate(model, system, plc, work)
    return time.perf_counter() - t0


def _trace_cases():
    from pyaccel.model.config import preset_names

    models = [m for m in preset_names() if not m.startswith("tiny-")]
    return [(kind, m) for kind in TRACE_SYSTEMS for m in models]


@pytest.mark.parametrize("kind,model", _trace_cases(), ids=[f"{k}-{m}" for k, m in _trace_cases()])
def test_trace_against_one_step(kind, model):
    cfg = pa.load_model(model)
    system = pa.load_system(TRACE_SYSTEMS[kind], units="auto", etch=kind == "asic")
    one, trace = (pa.Workload(tokens=n, weights="bf16") for n in (1, TRACE_TOKENS))
    try:
        plc = pa.place(cfg, system, trace)
    except pa.PyaccelError as err:
        _RESULTS.append(("trace", f"{kind} {model}", f"does not place: {str(err)[:60]}"))
        pytest.skip(str(err))
    _emulate_s(cfg, system, plc, one)  # the step's one-time costs, as a user's first run pays
    # steps and traces in turn, so a slow spell of the machine falls on both sides
    pairs = [(_emulate_s(cfg, system, plc, one), _emulate_s(cfg, system, plc, trace))
             for _ in range(3)]  # fmt: skip
    step, runs = min(s for s, _ in pairs), [t for _, t in pairs]
    whole = min(runs)
    shown = (f"step {step * 1e3:.1f} ms, trace {whole:.2f} s = x{whole / step:.2f} (first "
             f"x{runs[0] / step:.2f})")  # fmt: skip
    _RESULTS.append(("trace", f"{kind} {model}", shown))
    assert whole / step <= TRACE_GOAL, f"{kind} {model}: trace x{whole / step:.2f} of one step"


def teardown_module(module):
    if _RESULTS:
        print("\nwhole-process speed (median of 5 after a warm-up; ratios to llm-analysis)")
        for section, case, figures in _RESULTS:
            print(f"  {section:8} {case:46} {figures}")
