"""Speed of the GPU engine itself (pytest-benchmark): a 256-token run and a 4,096-token trace."""

import pyaccel as pa


def _run(model: str, system: str, units, tokens: int):
    cfg = pa.load_model(model)
    sysm = pa.load_system(system, units=units)
    work = pa.Workload(tokens=tokens)
    return pa.emulate(cfg, sysm, pa.place(cfg, sysm, work), work)


def test_llama8b_h100_256_tokens(benchmark):
    benchmark.group = "gpu-engine"
    trace = benchmark(_run, "llama-3.1-8b", "h100", 1, 256)
    assert trace.tokens_per_s_per_user > 0


def test_llama405b_h100_auto_4096_tokens(benchmark):
    benchmark.group = "gpu-engine"
    trace = benchmark.pedantic(_run, args=("llama-3.1-405b", "h100", "auto", 4096), rounds=3)
    assert len(trace.step_cycles) == 4096
