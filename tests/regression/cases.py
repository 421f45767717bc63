"""The regression matrix: which CLI calls it records, and how one call becomes a record.

Every system preset x {llama-3.1-8b, llama-3.1-70b, mixtral-8x7b (MoE), tiny-llama --functional}
x batch {1, 8} x two contexts, then the expert-parallel layouts of :data:`EP_CASES`, each as
``run --json``, ``place --json`` and ``report --json``. A call that exits 2 is recorded with
its ``error:`` line. ``make_matrix.py`` writes the file;
``tests/test_regression_matrix.py`` replays it and compares every key exactly.
"""

from __future__ import annotations

import json

SYSTEMS = ("wse2", "wse3", "groq-tsp", "taalas-hc1", "h100", "h200", "b200")
MODELS = ("llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "tiny-llama")
BATCHES = (1, 8)
CONTEXTS = {"tiny-llama": (128, 384)}  # inside its 512-token window
DEFAULT_CONTEXTS = (1024, 4096)
COMMANDS = ("run", "place", "report")
TOKENS = "4"
# Expert-parallel layouts, which the grid above never keeps: GPUs with experts whole on each
# and attention data-parallel (8 GPUs, one stage; 16 GPUs in 2 stages, whose 6 sequences make
# uneven micro-batches over the EP ranks), LPU chips each running their own experts, and
# wafers sharing a layer's experts (a 12 x 12 grid: tiny-mixtral's fastest layout spreads its
# experts over the 4 wafers). Each pins its unit count, so EP timing and bounds are recorded.
EP_CASES = (
    ("--system", "h100", "--model", "mixtral-8x7b", "--units", "8", "--batch", "16",
     "--context", "1024", "--set", "expert_layout=ep"),
    ("--system", "h100", "--model", "mixtral-8x7b", "--units", "16", "--batch", "6",
     "--context", "1024", "--set", "expert_layout=ep"),
    ("--system", "groq-tsp", "--model", "tiny-mixtral", "--batch", "8", "--context", "128",
     "--set", "expert_layout=ep"),
    ("--system", "wse3", "--model", "tiny-mixtral", "--units", "4", "--batch", "1",
     "--context", "128", "--set", "usable_width_pes=12", "--set", "usable_height_pes=12"),
)  # fmt: skip
# Keys that may differ between two builds of the same code.
VOLATILE = frozenset({"pyaccel_version"})


def cases() -> list[list[str]]:
    """Every recorded command line (without the leading ``pyaccel``), in a fixed order."""
    out = []
    for system in SYSTEMS:
        for model in MODELS:
            for batch in BATCHES:
                for context in CONTEXTS.get(model, DEFAULT_CONTEXTS):
                    args = ["--system", system, "--model", model, "--batch", str(batch)]
                    args += ["--context", str(context)]
                    if system == "taalas-hc1" and model != "llama-3.1-8b":
                        args.append("--etch")  # HC1 runs its etched model; others need dies
                    for command in COMMANDS:
                        extra = [] if command == "place" else ["--tokens", TOKENS]
                        if command == "run" and model == "tiny-llama":
                            extra.append("--functional")
                        out.append([command, *args, *extra, "--json"])
    for args in EP_CASES:
        for command in COMMANDS:
            extra = [] if command == "place" else ["--tokens", TOKENS]
            out.append([command, *args, *extra, "--json"])
    return out


def _strip(value):
    """Drop volatile keys at any depth."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def record(args: list[str], invoke) -> dict:
    """One call's record: ``invoke(args)`` returns (exit code, stdout, stderr)."""
    code, stdout, stderr = invoke(args)
    rec: dict = {"args": args, "exit": code}
    if code == 0:
        rec["json"] = _strip(json.loads(stdout))
    else:
        rec["error"] = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    return rec


def cli_invoker():
    """Run ``pyaccel ARGS`` in-process through the typer app (same output as the shell)."""
    from typer.testing import CliRunner

    from pyaccel.cli import app

    runner = CliRunner()

    def invoke(args):
        result = runner.invoke(app, args)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code, result.stdout, result.stderr

    return invoke
