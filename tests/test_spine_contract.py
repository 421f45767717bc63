"""The spine's division of labour, checked on the source: engines time passes and nothing else
(the step driver owns steps, micro-batches, attention grouping and graphs), kernels report their
own errors, and a kernel that cannot be had is an ``error:`` line, not a traceback."""

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pyaccel.cli import app
from pyaccel.hw.kinds import MACHINE_KINDS

SIM = Path(__file__).resolve().parents[1] / "pyaccel" / "sim"
ENGINE_FILES = sorted(p for kind in MACHINE_KINDS for p in (SIM / kind).glob("*.py"))

# What only the driver does: step loops, micro-batch splits and pipelines, graph rebuilds, event
# logs, progress, attention grouping by window.
DRIVER_ONLY = {
    "a step loop": r"for\s+\w+\s+in\s+range\([^)]*\.tokens",
    "a micro-batch split": r"micro_batch_sizes",
    "the pipeline interval": r"pipeline_cycles\(",
    "a graph rebuild": r"with_workload\(|at_context\(|build_graph\(",
    "an event log": r"EventLog|\.add\(step",
    "progress": r"progress\(",
    "grouping by window": r"is_sliding\(|sliding_window",
}


def offences(text: str) -> list[str]:
    """What of :data:`DRIVER_ONLY` a module's source does (comments and docstrings included:
    a mention is as suspect as a use)."""
    return [what for what, pat in DRIVER_ONLY.items() if re.search(pat, text)]


def test_there_are_engine_packages_to_check():
    assert {p.parent.name for p in ENGINE_FILES} == {"wafer", "lpu", "asic", "gpu"}
    assert len(ENGINE_FILES) >= 10


@pytest.mark.parametrize("path", ENGINE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_engines_leave_steps_micro_batches_and_graphs_to_the_driver(path):
    assert offences(path.read_text()) == []


def test_the_scan_finds_each_thing_the_driver_owns():
    old_engine = """
    sizes = micro_batch_sizes(work.batch, pp)
    for step in range(work.tokens):
        g = graph.with_workload(replace(work, batch=s))
        step_c = pipeline_cycles(stage_c, sizes)
        log = EventLog(); log.add(step, ...)
        progress(step)
        key = (stage, graph.attention.is_sliding(layer))
    """
    assert set(offences(old_engine)) == set(DRIVER_ONLY)


def test_a_kernel_that_cannot_be_had_is_an_error_line(monkeypatch):
    monkeypatch.setenv("PYACCEL_BACKEND", "bogus")
    args = ["run", "--system", "taalas-hc1", "--model", "llama-3.1-8b", "--tokens", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: unknown kernel backend 'bogus'; known: c, numba, numpy"
