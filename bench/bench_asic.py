"""Speed of the ASIC engine itself (pytest-benchmark): runs of the etched HC1, a long trace and
a 70B etch, plus the pipeline kernel against its NumPy twin."""

import numpy as np

import pyaccel as pa
from pyaccel import kernels


def _run(model: str, tokens: int, context: int = 1024, etch: bool = False, kv: str = "bf16"):
    cfg = pa.load_model(model)
    sysm = pa.load_system("taalas-hc1", units="auto", etch=etch)
    work = pa.Workload(context=context, tokens=tokens, kv=kv)
    return pa.emulate(cfg, sysm, pa.place(cfg, sysm, work), work)


def test_hc1_llama8b_256_tokens(benchmark):
    benchmark.group = "asic-engine"
    trace = benchmark(_run, "llama-3.1-8b", 256)
    assert trace.tokens_per_s_per_user > 0


def test_hc1_llama8b_one_step(benchmark):
    benchmark.group = "asic-engine"
    trace = benchmark(_run, "llama-3.1-8b", 1, 64, False, "fp8")
    assert len(trace.step_cycles) == 1


def test_hc1_llama8b_4096_token_trace(benchmark):
    benchmark.group = "asic-engine"
    trace = benchmark.pedantic(_run, args=("llama-3.1-8b", 4096, 64, False, "fp8"), rounds=3)
    assert len(trace.step_cycles) == 4096


def test_etch_llama70b_one_step(benchmark):
    benchmark.group = "asic-engine"
    trace = benchmark.pedantic(_run, args=("llama-3.1-70b", 1, 1024, True), rounds=3)
    assert trace.units > 1


def _pipeline_case():
    rng = np.random.default_rng(0)
    occ = rng.integers(1, 600, (256, 400)).astype(np.int64)
    lat = rng.integers(0, 12, 400).astype(np.int64)
    record = np.zeros(256, dtype=np.bool_)
    record[[0, 255]] = True
    return occ, lat, np.arange(400, dtype=np.int64), 4, record


def test_pipeline_kernel_numba(benchmark):
    benchmark.group = "asic-kernel"
    fn = kernels.get("asic_pipeline", "numba")
    finish, _ = benchmark(fn, *_pipeline_case())
    assert finish.shape == (256, 4)


def test_pipeline_kernel_numpy_twin(benchmark):
    benchmark.group = "asic-kernel"
    fn = kernels.get("asic_pipeline", "numpy")
    finish, _ = benchmark.pedantic(fn, args=_pipeline_case(), rounds=1)
    assert finish.shape == (256, 4)
