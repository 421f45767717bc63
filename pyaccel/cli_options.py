"""The command line's shared options (typer annotations): help says each option's choices and
default; the values are checked by pyaccel itself (one ``error:`` line naming the value)."""

from __future__ import annotations

from typing import Annotated

import typer

from .formats import FORMATS
from .hw.spec_wafer import STRATEGIES

# Options shared by several commands. Help says each option's choices and default; the values
# are checked by pyaccel itself (one `error:` line naming the value and the choices).
_FORMATS = (
    ", ".join(FORMATS)
    + " (aliases: "
    + ", ".join(f"{a} = {f.name}" for f in FORMATS.values() for a in f.aliases)
    + ")"
)


System = Annotated[
    str,
    typer.Option(
        "--system", metavar="SYS", help="hardware preset (see `pyaccel systems`) or a TOML file"
    ),
]


Model = Annotated[
    str,
    typer.Option(
        "--model",
        metavar="M",
        help="model preset (see `pyaccel models`) or a folder with config.json",
    ),
]


Units = Annotated[
    str,
    typer.Option(
        "--units",
        metavar="N|auto",
        help="units (wafers, chips, GPUs), or auto: the fewest that fit",
    ),
]


Batch = Annotated[int, typer.Option("--batch", metavar="N", help="sequences decoded together")]


Context = Annotated[
    int, typer.Option("--context", metavar="N", help="tokens already in each KV cache")
]


Tokens = Annotated[int, typer.Option("--tokens", metavar="N", help="tokens generated per sequence")]


Weights = Annotated[
    str | None,
    typer.Option(
        "--weights",
        metavar="FMT",
        help=f"format of linear weights: {_FORMATS}. "
        "Default: an etched ASIC's format, else the model's quantization_config, else "
        "the system's native format",
    ),
]


ExpertW = Annotated[
    str | None,
    typer.Option(
        "--expert-weights",
        metavar="FMT",
        help="format of routed experts (same choices as --weights). Default: as --weights",
    ),
]


Kv = Annotated[
    str, typer.Option("--kv", metavar="FMT", help="KV-cache format (as --weights, but not hc1)")
]


Spec = Annotated[
    str | None,
    typer.Option(
        "--spec-decode",
        metavar="KIND[:DRAFT][,k=N][,accept=R|R1/R2/...|measured]",
        help="speculative decoding: KIND draft:MODEL (a draft model, e.g. "
        "draft:llama-3.2-1b), eagle3 (a feature-draft head), mtp (the model's MTP module) or "
        "block (k tokens in one pass); k tokens drafted a round (default 4); acceptance a rate, "
        "one per position, or measured with the functional path (default: the published "
        "profile)",
    ),
]


RouterOpt = Annotated[
    str,
    typer.Option(
        "--router",
        metavar="uniform|zipf:S|FILE.npy",
        help="how MoE tokens pick their experts each step: uniformly, by a zipf law of exponent "
        "S over each layer's experts (a skew: hot experts), or from a recorded trace (int "
        "array [tokens, moe_layers, top_k] of expert ids); drawn from --seed",
    ),
]


Seed = Annotated[
    int,
    typer.Option("--seed", metavar="N", help="seed of the drawn speculative rounds (and routers)"),
]


Etch = Annotated[bool, typer.Option("--etch", help="asic only: etch dies for this model")]


def _unique_sets(sets: list[str] | None) -> list[str] | None:
    """``--set`` callback: each item KEY=VALUE and each key once (a repeated key leaves unclear
    which value was meant). Its ConfigError names --set itself; the CLI prints it as it is."""
    from .hw.io import check_unique_sets

    check_unique_sets(sets)
    return sets


Sets = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        callback=_unique_sets,
        help="override a hardware parameter; repeatable. "
        "`pyaccel systems SYS` lists the keys with value, unit and source; the wafer's "
        f"placement_strategy is one of {', '.join(STRATEGIES)}",
    ),
]


Json = Annotated[bool, typer.Option("--json", help="print JSON instead of tables")]


TraceSteps = Annotated[
    str,
    typer.Option(
        "--trace-steps",
        help="decode steps whose events are recorded: 'ends' (first and last), 'all', or "
        "START:STOP:STEP (0-based, STOP exclusive, e.g. 0:128:16); at most 1024 steps",
        metavar="ends|all|START:STOP:STEP",
    ),
]


Functional = Annotated[
    bool,
    typer.Option(
        "--functional",
        help="also run the numerics and compare the logits with an fp32 reference (tiny models)",
    ),
]


TraceFile = Annotated[
    str | None,
    typer.Option(
        "--trace",
        metavar="FILE.json",
        help="write a Perfetto trace (JSON) here; its folder must exist",
    ),
]


PlotDir = Annotated[
    str | None,
    typer.Option(
        "--plot",
        metavar="DIR",
        help="write layers.png, roofline.png (and, for wafers, wafer.png) into DIR; DIR is "
        "created if missing, its parent must exist",
    ),
]


SensitivityPct = Annotated[
    float | None,
    typer.Option(
        "--sensitivity",
        help="also re-emulate with each named assumption -PCT and +PCT percent",
        metavar="PCT",
    ),
]
