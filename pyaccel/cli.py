"""``pyaccel`` command line (SPEC §7): run, report, place, compare, systems, models.

Bad input exits with status 2 and one ``error:`` line on stderr, never a traceback.
"""

from __future__ import annotations

import json
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from .errors import ConfigError, PyaccelError
from .hw.spec_wafer import STRATEGIES
from .io_util import PLOT_SUFFIXES, check_output_file, check_output_folder, dumps_strict
from .numerics.formats import FORMATS
from .records import ErrorRecord
from .units import fmt_bytes, fmt_seconds
from .workload import Workload

try:  # typer >= 0.2x vendors click; older typer uses the click package
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.exceptions import NoArgsIsHelpError, UsageError


class _OneLineErrors(typer.core.TyperGroup):
    """Click's usage errors (bad option values, unknown options, missing options) as one
    ``error:`` line and exit status 2, like every other input error (SPEC §7)."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except NoArgsIsHelpError as exc:
            out.print(exc.ctx.get_help() if exc.ctx is not None else "", markup=False)
            rv = 0
        except UsageError as exc:
            where = f"{exc.ctx.command_path}: " if exc.ctx is not None else ""
            err.print(f"error: {where}{exc.format_message()}", markup=False, highlight=False,
                      soft_wrap=True)  # fmt: skip
            rv = 2
        except typer.Abort:
            err.print("error: aborted", markup=False, highlight=False)
            rv = 1
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    cls=_OneLineErrors,
    add_completion=False,
    rich_markup_mode=None,
    no_args_is_help=True,
    help="Emulate LLM decode on wafer-scale, LPU, hardwired-ASIC and GPU machines.",
)
out = Console(emoji=False)
err = Console(stderr=True, emoji=False, highlight=False)

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
    Optional[str],
    typer.Option(
        "--weights",
        metavar="FMT",
        help=f"format of linear weights: {_FORMATS}. "
        "Default: an etched ASIC's format, else the model's quantization_config, else "
        "the system's native format",
    ),
]
ExpertW = Annotated[
    Optional[str],
    typer.Option(
        "--expert-weights",
        metavar="FMT",
        help="format of routed experts (same choices as --weights). Default: as --weights",
    ),
]
Kv = Annotated[
    str, typer.Option("--kv", metavar="FMT", help="KV-cache format (same choices as --weights)")
]
Spec = Annotated[
    Optional[str],
    typer.Option("--spec-decode", metavar="KIND", help="speculative decoding (not modelled yet)"),
]
Etch = Annotated[bool, typer.Option("--etch", help="asic only: etch dies for this model")]


def _unique_sets(sets: list[str] | None) -> list[str] | None:
    """``--set`` callback: each key once (a repeated key leaves unclear which value was meant)."""
    from .hw.io import check_unique_sets

    try:
        check_unique_sets(sets)
    except PyaccelError as exc:
        raise typer.BadParameter(str(exc)) from None
    return sets


Sets = Annotated[
    Optional[list[str]],
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


def _show_version(value: bool) -> None:
    if value:
        from .records import pyaccel_version

        out.print(f"pyaccel {pyaccel_version()}", markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="print the version and exit", is_eager=True, callback=_show_version
        ),
    ] = False,
) -> None:
    """Emulate LLM decode on wafer-scale, LPU, hardwired-ASIC and GPU machines."""


def _table(title: str | None, columns, caption: str | None = None) -> Table:
    """A table that reads at 80 columns: light rules and no edge padding. ``columns`` are
    header names; a ``>`` prefix right-aligns one (numbers), a ``~`` prefix marks free text.
    Names and numbers stay whole on one line; only free-text columns shrink on a narrow
    terminal, and they wrap (long words fold) instead of being cut with an ellipsis."""
    t = Table(
        title=title,
        caption=caption,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    for col in columns:
        text = col.startswith("~")
        t.add_column(
            col.lstrip(">~"),
            justify="right" if col.startswith(">") else "left",
            no_wrap=not text,
            overflow="fold" if text else "ellipsis",
        )
    return t


@contextmanager
def _user_errors():
    """Turn input errors into one ``error:`` line and exit status 2."""
    try:
        yield
    except PyaccelError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def _workload(batch, context, tokens, weights, expert_weights, kv, spec_decode) -> Workload:
    return Workload(
        batch=batch,
        context=context,
        tokens=tokens,
        weights=weights,
        expert_weights=expert_weights,
        kv=kv,
        spec_decode=spec_decode,
    )


def _print_json(data) -> None:
    """Strict JSON on stdout: no NaN/Infinity literals (non-finite numbers are null)."""
    sys.stdout.write(dumps_strict(data, indent=1) + "\n")


@contextmanager
def _progress(show: bool):
    """Progress bars on stderr when it is a terminal (never with ``--json``): yields
    ``update(done, total, label)``, one bar per label, or ``None`` when nothing is shown."""
    if not show or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import Progress

    with Progress(console=err, transient=True) as bar:
        tasks: dict[str, int] = {}

        def update(done: int, total: int, label: str) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total)
            bar.update(tasks[label], completed=done, total=total)

        yield update


def _labelled(bar, label: str):
    """``progress(done, total)`` for one labelled bar of :func:`_progress` (``None``: no bar)."""
    return None if bar is None else lambda done, total: bar(done, total, label)


def _run(system, model, units, work, sets, etch, show_progress, functional=False,
         trace_steps="ends"):  # fmt: skip
    from .cli_args import parse_units
    from .results import run

    units = parse_units(units)
    with _progress(show_progress and work.tokens >= 64) as bar:
        steps = None if bar is None else lambda step: bar(step + 1, work.tokens, "decode steps")
        return run(model, system, units, work, sets, etch, steps, functional, trace_steps)


@app.command("run")
def run_cmd(
    system: System,
    model: Model,
    units: Units = "auto",
    batch: Batch = 1,
    context: Context = 1024,
    tokens: Tokens = 128,
    weights: Weights = None,
    expert_weights: ExpertW = None,
    kv: Kv = "bf16",
    spec_decode: Spec = None,
    etch: Etch = False,
    functional: Annotated[
        bool,
        typer.Option(
            "--functional",
            help="also run the numerics and compare the logits with "
            "an fp32 reference (tiny models)",
        ),
    ] = False,
    trace: Annotated[
        Optional[str],
        typer.Option(
            "--trace",
            metavar="FILE.json",
            help="write a Perfetto trace (JSON) here; its folder must exist",
        ),
    ] = None,
    trace_steps: TraceSteps = "ends",
    sets: Sets = None,
    as_json: Json = False,
) -> None:
    """Emulate decode steps and print tokens/s, step time, bound and energy."""
    from .report import Report
    from .results import run_record

    with _user_errors():
        work = _workload(batch, context, tokens, weights, expert_weights, kv, spec_decode)
        if trace is not None:  # before emulating: a bad path costs nothing
            check_output_file(trace, "--trace")
        result = _run(system, model, units, work, sets, etch, not as_json, functional,
                      trace_steps)  # fmt: skip
        rep = Report.from_trace(result.trace)
        if trace is not None:
            result.trace.to_perfetto(trace)
        rec = run_record(result, rep.bottleneck)
        if as_json:
            _print_json(rec.to_dict())
        else:
            _print_run(rec)
            _print_warnings(rec.warnings)


def _print_warnings(warnings) -> None:
    """Each warning once, as a ``warning:`` line on stderr (text mode only; JSON carries them)."""
    for text in dict.fromkeys(warnings):
        err.print(f"warning: {text}", markup=False, highlight=False, soft_wrap=True)


def _print_run(rec) -> None:
    """A :class:`~pyaccel.records.RunRecord` as a table."""
    from .report import fmt_ratio

    table = Table(title=f"{rec.model} on {rec.units} x {rec.system}", show_header=False)
    rows = [
        ("tokens/s per user", f"{rec.tokens_per_s_per_user:,.1f}"),
        ("tokens/s total", f"{rec.tokens_per_s:,.1f}"),
        ("step time", fmt_seconds(rec.step_time_s)),
        (
            "lower bound",
            f"{fmt_seconds(rec.lower_bound_step_time_s)} (emulated / bound "
            f"{fmt_ratio(rec.emulated_over_lower_bound)})",
        ),
        ("bottleneck", rec.bottleneck),
        ("energy per token", f"{rec.joules_per_token:.3g} J"),
        ("layout", json.dumps(rec.layout)),
        (
            "workload",
            f"batch {rec.batch}, context {rec.context}, tokens "
            f"{rec.tokens}, weights {rec.weights}, kv {rec.kv}",
        ),
    ]
    rows += _functional_rows(rec.functional)
    for k, v in rows:
        table.add_row(k, v)
    out.print(table)
    out.print(f"[dim]{len(rec.assumptions)} named assumptions (see `pyaccel report`)[/dim]")


# run --functional: the SPEC §7 metrics against the fp32 reference, as text
_FUNCTIONAL_ROWS = (
    ("top1_agreement", "top-1 agreement", "{:.1%} of tokens vs fp32"),
    ("max_abs_logit_error", "max |logit error|", "{:.4g} vs fp32"),
    ("perplexity_ratio", "perplexity ratio", "{:.4f} vs fp32"),
)


def _functional_rows(metrics: dict) -> list[tuple[str, str]]:
    return [
        (label, "-" if metrics[key] is None else fmt.format(metrics[key]))
        for key, label, fmt in _FUNCTIONAL_ROWS
        if key in metrics
    ]


@app.command("report")
def report_cmd(
    system: System,
    model: Model,
    units: Units = "auto",
    batch: Batch = 1,
    context: Context = 1024,
    tokens: Tokens = 128,
    weights: Weights = None,
    expert_weights: ExpertW = None,
    kv: Kv = "bf16",
    spec_decode: Spec = None,
    etch: Etch = False,
    sets: Sets = None,
    plot: Annotated[
        Optional[str],
        typer.Option(
            "--plot",
            metavar="DIR",
            help="write layers.png, roofline.png (and, for "
            "wafers, wafer.png) into DIR; DIR is created if missing, its parent must "
            "exist",
        ),
    ] = None,
    sensitivity: Annotated[
        Optional[float],
        typer.Option(
            "--sensitivity",
            help="also re-emulate with each named assumption -PCT and +PCT percent",
            metavar="PCT",
        ),
    ] = None,
    trace_steps: TraceSteps = "ends",
    as_json: Json = False,
) -> None:
    """Bottleneck report: time by resource and op kind, bound ratio, what-if ranking."""
    from .report import Report
    from .what_if import run_what_if

    with _user_errors():
        work = _workload(batch, context, tokens, weights, expert_weights, kv, spec_decode)
        if sensitivity is not None and not 0 < sensitivity < 100:
            raise ConfigError(f"--sensitivity {sensitivity:g}: must be a percent in (0, 100)")
        if plot is not None:  # before emulating: a bad path costs nothing
            from .plots import REPORT_PLOT_FILES

            check_output_folder(plot, "--plot", REPORT_PLOT_FILES)
        result = _run(system, model, units, work, sets, etch, not as_json, False, trace_steps)
        rep = Report.from_trace(result.trace, run_what_if(result))
        if plot is not None:
            from .plots import report_plots

            report_plots(result.trace, rep, plot)
        rows = alts = None
        if sensitivity is not None:
            from .sensitivity import assumption_sensitivity, choice_alternatives

            n_units = result.placement.n_units
            with _progress(not as_json) as bar:
                rows = assumption_sensitivity(
                    model,
                    system,
                    n_units,
                    work,
                    sets,
                    etch,
                    sensitivity / 100.0,
                    base=result,
                    progress=_labelled(bar, "sensitivity"),
                )
                alts = choice_alternatives(
                    model,
                    system,
                    units,
                    work,
                    sets,
                    etch,
                    base=result,
                    progress=_labelled(bar, "other choices"),
                )
        if as_json:
            data = json.loads(rep.to_json())
            data.update(formats_from=result.formats_from, warnings=list(result.warnings))
            if rows is not None:
                data["sensitivity"] = [_sensitivity_record(r, sensitivity) for r in rows]
                data["alternatives"] = [_alternative_record(a) for a in alts]
            _print_json(data)
        else:
            _print_report(rep)
            _print_warnings(result.warnings)
            if rows is not None:
                _print_sensitivity(rows, sensitivity)
                _print_alternatives(alts)


def _sensitivity_record(row, pct: float) -> dict:
    return {
        "param": row.param,
        "value": row.value,
        "percent": pct,
        "low_value": row.low_value,
        "high_value": row.high_value,
        "low_step_time_s": row.low_step_s,
        "high_step_time_s": row.high_step_s,
        "low_change": row.low_change,
        "high_change": row.high_change,
        "error": row.error,
    }


def _alternative_record(alt) -> dict:
    return {
        "param": alt.param,
        "value": alt.value,
        "choice": alt.choice,
        "units": alt.units,
        "step_time_s": alt.step_s,
        "change": alt.change,
        "error": alt.error,
    }


def _print_alternatives(alts) -> None:
    if not alts:
        return
    t = _table(
        "step time with each other choice of a named assumption (re-emulated)",
        ("assumption", "value", "other choice", ">step time change", "~note"),
    )
    for a in alts:
        change = "cannot run" if a.change is None else f"{a.change:+.1%}"
        t.add_row(a.param, a.value, a.choice, change, a.note)
    out.print(t)


def _print_sensitivity(rows, pct: float) -> None:
    def cell(change):
        return "cannot run" if change is None else f"{change:+.1%}"

    t = _table(
        f"step time with each named assumption -{pct:g} % / +{pct:g} % (re-emulated)",
        ("assumption", ">value", f">-{pct:g} %", f">+{pct:g} %", "~note"),
    )
    for r in rows:
        t.add_row(r.param, f"{r.value:g}", cell(r.low_change), cell(r.high_change), r.error)
    out.print(t)


def _print_report(rep) -> None:
    from .report import OCCUPANCY_NOTE, fmt_ratio

    s = rep.summary
    out.print(
        f"[bold]{s.model} on {s.units} x {s.system}[/bold]: "
        f"{s.tokens_per_s_per_user:,.1f} tok/s per user, {s.tokens_per_s:,.1f} "
        f"total; step {fmt_seconds(s.step_time_s)}, lower bound "
        f"{fmt_seconds(s.lower_bound_step_time_s)} (x{fmt_ratio(rep.bound_ratio)}); "
        f"bottleneck [bold]{rep.bottleneck}[/bold] ({rep.bottleneck_share:.0%})"
    )
    if rep.meta.get("strategy"):  # wafer layouts are a named assumption: say which one ran
        out.print(
            f"layout {rep.meta['strategy']}, {rep.meta.get('stages', 1)} pipeline stage(s), "
            f"{rep.meta.get('micro_batches', 1)} micro-batch(es) in flight"
        )
    t = Table(title="time by resource class (first recorded step)")
    for col in ("resource", "time", "occupancy"):
        t.add_column(col)
    for res, sec in sorted(rep.by_resource.items(), key=lambda kv: -kv[1]):
        t.add_row(res, fmt_seconds(sec), f"{sec / s.step_time_s:.0%}")
    out.print(t)
    out.print(f"note: {OCCUPANCY_NOTE}", markup=False, highlight=False)
    t = Table(title="by op kind")
    for col in ("op kind", "emulated", "lower bound", "ratio", "bound by"):
        t.add_column(col)
    for row in rep.by_kind:
        t.add_row(
            row.kind,
            fmt_seconds(row.emulated_s),
            fmt_seconds(row.bound_s),
            fmt_ratio(row.ratio),
            row.bound_resource,
        )
    out.print(t)
    t = Table(title="what if one resource were twice as fast (re-emulated)")
    for col in ("resource", "step time", "gain"):
        t.add_column(col)
    for row in rep.what_if:
        t.add_row(row.resource, fmt_seconds(row.step_time_s), f"{row.gain:.3f}x")
    out.print(t)
    out.print("[bold]assumptions[/bold]")
    for a in rep.assumptions:
        out.print(f" - {a}", markup=False, highlight=False)
    for a in rep.left_out:
        out.print(f" - left out: {a}", markup=False, highlight=False)


@app.command("place")
def place_cmd(
    system: Annotated[Optional[str], typer.Option("--system", metavar="SYS", help="as run")] = None,
    model: Annotated[Optional[str], typer.Option("--model", metavar="M", help="as run")] = None,
    units: Units = "auto",
    batch: Batch = 1,
    context: Context = 1024,
    tokens: Tokens = 128,
    weights: Weights = None,
    expert_weights: ExpertW = None,
    kv: Kv = "bf16",
    spec_decode: Spec = None,
    etch: Etch = False,
    sets: Sets = None,
    check: Annotated[Optional[Path], typer.Option("--check", help="check a placement JSON")] = None,
    as_json: Json = False,
) -> None:
    """Place a model on a system and show what each unit holds; or check a placement file
    (``place --json`` output) against its recorded system and overrides (--system/--model check
    it against another)."""
    with _user_errors():
        if check is not None:
            if sets:
                raise ConfigError(
                    "place --check reapplies the --set overrides the file records; "
                    "--set is not taken with --check"
                )
            from .place import Placement

            plc = Placement.from_json(str(check), system=system, model=model).check()
        else:
            from .cli_args import parse_units
            from .results import prepare

            if not system or not model:
                raise ConfigError("place needs --system and --model (or --check FILE.json)")
            work = _workload(batch, context, tokens, weights, expert_weights, kv, spec_decode)
            plc = prepare(model, system, parse_units(units), work, sets, etch).placement
        if as_json:
            _print_json(plc.to_dict())
        else:
            _print_place(plc)


def _print_place(plc) -> None:
    """What each unit holds; the runtime's reserve is a column, so the columns add up to used
    (every unit of a system has the same capacity, given once)."""
    out.print(f"[bold]{plc.model}[/bold] on {plc.n_units} x {plc.system} {json.dumps(plc.layout)}")
    if plc.reason:
        out.print(plc.reason, markup=False, highlight=False)
    rows = plc.to_dict()["per_unit"]
    cap = rows[0]["capacity_bytes"]
    t = Table(caption=f"used = weights + kv + buffers + reserved, of {fmt_bytes(cap)} per "
                      f"{plc.unit_noun}")  # fmt: skip
    for col in ("unit", "layers", "weights", "kv", "buffers", "reserved", "used"):
        # wrap at spaces; a layer span folds; headers keep their width (never "…")
        t.add_column(col, overflow="fold", min_width=None if col == "layers" else len(col))
    for row in rows:
        layers = row["layers"]
        span = f"{layers[0]}..{layers[-1]} ({len(layers)})" if layers else "-"
        used = row["used_bytes"]
        t.add_row(
            str(row["unit"]),
            span,
            fmt_bytes(row["weight_bytes"]),
            fmt_bytes(row["kv_bytes"]),
            fmt_bytes(row["buffer_bytes"]),
            fmt_bytes(row["reserved_bytes"]),
            f"{fmt_bytes(used)} ({used / cap:.0%})",
        )
    out.print(t)


@app.command("compare")
def compare_cmd(
    model: Model,
    systems: Annotated[
        Optional[str],
        typer.Option(
            "--systems",
            metavar="SYS,SYS,...",
            help="comma-separated systems (presets or TOML files). Default: every preset",
        ),
    ] = None,
    batch: Batch = 1,
    context: Context = 1024,
    tokens: Tokens = 128,
    weights: Weights = None,
    expert_weights: ExpertW = None,
    kv: Kv = "bf16",
    spec_decode: Spec = None,
    batches: Annotated[
        Optional[str],
        typer.Option(
            "--batches", metavar="N,N,...", help="comma-separated batch sizes. Default: --batch"
        ),
    ] = None,
    plot: Annotated[
        Optional[str],
        typer.Option(
            "--plot",
            metavar="FILE",
            help="write tokens/s per user against total "
            f"tokens/s here; the suffix picks the format: {', '.join(PLOT_SUFFIXES)}",
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """Run one model on several systems (units auto) and compare them side by side."""
    from .cli_args import parse_batches, parse_systems
    from .compare import compare
    from .io_util import plot_format

    with _user_errors():
        names = parse_systems(systems)
        base = _workload(batch, context, tokens, weights, expert_weights, kv, spec_decode)
        if plot is not None:  # before emulating: a bad path costs nothing
            plot_format(plot, "--plot")
            check_output_file(plot, "--plot")
        with _progress(not as_json) as bar:
            sizes = parse_batches(batches, base.batch)
            records = compare(model, names, base, sizes, _labelled(bar, "compare"))
        if plot is not None:
            from .plots import compare_plot

            compare_plot(records, plot)
        if as_json:
            _print_json([r.to_dict() for r in records])
        else:
            _print_compare(records)
            _print_warnings(w for r in records for w in r.warnings)


def _rate(tokens_per_s: float) -> str:
    """Tokens/s for a table: one decimal below 1,000, whole tokens above (narrower columns)."""
    return f"{tokens_per_s:,.1f}" if tokens_per_s < 1000 else f"{tokens_per_s:,.0f}"


def _print_compare(records) -> None:
    """``compare`` records (:class:`~pyaccel.records.RunRecord` or ``ErrorRecord``) as a table,
    then one line per system that could not run."""
    t = _table(
        records[0].model if records else "compare",
        ("system", ">units", ">batch", ">tok/s/user", ">tok/s", ">step", "~bottleneck", ">J/token"),
        caption="tok/s: tokens per second per user and in total; step: time between two tokens "
        "of a sequence; J/token: energy per generated token",
    )
    failed = [r for r in records if isinstance(r, ErrorRecord)]
    for r in records:
        if not isinstance(r, ErrorRecord):
            t.add_row(r.system, str(r.units), str(r.batch), _rate(r.tokens_per_s_per_user),
                      _rate(r.tokens_per_s), fmt_seconds(r.step_time_s), r.bottleneck,
                      f"{r.joules_per_token:.3g}")  # fmt: skip
    out.print(t)
    for r in failed:
        out.print(f"{r.system} (batch {r.batch}): {r.error}", markup=False, highlight=False)


@app.command("systems")
def systems_cmd(
    system: Annotated[
        Optional[str],
        typer.Argument(
            metavar="SYS",
            help="a preset or TOML file: list each --set key with "
            "its value, unit and source or named assumption",
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """List the hardware presets, or one system's parameters (the --set keys)."""
    from .hw.io import load_spec, preset_names

    with _user_errors():
        if system is not None:
            spec = load_spec(system)
            if as_json:
                _print_json(_system_record(spec))
            else:
                _print_system(spec)
            return
        specs = [load_spec(n) for n in preset_names()]
        if as_json:
            _print_json(
                [
                    {
                        "name": s.name,
                        "kind": s.kind,
                        "description": s.description,
                        "native_format": s.native_format,
                        "power_w": s.power_w,
                        "assumptions": len(s.assumptions),
                    }
                    for s in specs
                ]
            )
            return
        t = _table(
            "systems",
            ("name", "kind", "format", ">power", ">assumed", "~description"),
            caption="format: native number format; power: per unit (chip, wafer or GPU); "
            "assumed: parameters resting on a named assumption (pyaccel systems SYS lists them)",
        )
        for s in specs:
            t.add_row(
                s.name,
                s.kind,
                s.native_format,
                f"{s.power_w:,.0f} W",
                str(len(s.assumptions)),
                s.description,
            )
        out.print(t)


# A parameter's unit: the "(unit)" in its doc (fields.py: "SRAM per PE (bytes)"; a parenthesis
# that is not a unit, "(fabric minus I/O halo)", does not match), else its name's unit suffix.
_UNIT = re.compile(
    r"\s*\(((?:bytes|bits|Hz|W|s|cycles|FLOP|OP|rows|transistors|um\^2|mm\^2|x|0-1)"
    r"(?:/(?:s|cycle|bit))?(?: per direction)?)\)"
)
_UNIT_SUFFIXES = (
    ("_bytes_per_s", "bytes/s"),
    ("_bytes_per_cycle", "bytes/cycle"),
    ("_flops_per_s", "FLOP/s"),
    ("_ops_per_s", "OP/s"),
    ("_per_cycle", "per cycle"),
    ("_bytes", "bytes"),
    ("_cycles", "cycles"),
    ("_hz", "Hz"),
    ("_w", "W"),
    ("_s", "s"),
    ("_pes", "PEs"),
    ("transistors", "transistors"),
)


def _param_unit(name: str, meta: dict) -> str:
    """Unit of a hardware parameter for listings (``text`` for text, ``count`` for counts)."""
    if meta.get("text"):
        return "text"
    found = _UNIT.findall(meta["doc"])
    if found:
        return "fraction" if found[-1] == "0-1" else found[-1]
    unit = next((u for suffix, u in _UNIT_SUFFIXES if name.endswith(suffix)), None)
    return unit or ("count" if meta.get("integer") else "-")


def _param_value(value) -> str:
    """A parameter value as ``--set`` takes it back (shortest form that round-trips)."""
    if isinstance(value, float):
        short = f"{value:.6g}"
        return short if float(short) == value else repr(value)
    return str(value)


def _system_record(spec) -> dict:
    """``systems SYS --json``: the spec and each parameter with value, unit, doc and either its
    ``source`` or its named ``assumption``."""
    from dataclasses import fields

    from .hw.spec import PARAMS_BY_KIND

    params = []
    for f in fields(PARAMS_BY_KIND[spec.kind]):
        row = {
            "key": f.name,
            "value": getattr(spec.params, f.name),
            "unit": _param_unit(f.name, f.metadata),
            "doc": f.metadata["doc"],
            # informational parameters document the machine; no engine reads them, --set refuses
            "settable": not f.metadata.get("informational", False),
        }
        if f.name in spec.sources:
            row["source"] = spec.sources[f.name]
        else:
            row["assumption"] = spec.assumptions.get(f.name, "")
        if f.metadata.get("choices"):
            row["choices"] = list(f.metadata["choices"])
        params.append(row)
    return {
        "name": spec.name,
        "kind": spec.kind,
        "description": spec.description,
        "native_format": spec.native_format,
        "power_w": spec.power_w,
        "params": params,
    }


def _print_system(spec) -> None:
    from rich.text import Text

    rec = _system_record(spec)
    out.print(
        Text.assemble(
            (rec["name"], "bold"),
            f" ({rec['kind']}): {rec['description']}; native format {rec['native_format']}",
        )
    )
    n_set = sum(p["settable"] for p in rec["params"])
    out.print(
        f"{len(rec['params'])} parameters ({n_set} of them --set KEY=VALUE keys): value and "
        "unit, what it is, then its public source or the named assumption it rests on.",
        markup=False,
        highlight=False,
    )
    for p in rec["params"]:
        unit = "" if p["unit"] in ("count", "text", "-") else f" {p['unit']}"
        choices = f" (one of {', '.join(p['choices'])})" if "choices" in p else ""
        if not p["settable"]:
            choices += " [informational: no engine reads it, not a --set key]"
        doc = _UNIT.sub("", p["doc"], count=1)  # the unit is already beside the value
        out.print()
        out.print(
            Text.assemble(
                (p["key"], "bold"), f" = {_param_value(p['value'])}{unit}: {doc}{choices}"
            )
        )
        how = f"source: {p['source']}" if "source" in p else f"assumption: {p['assumption']}"
        out.print(Text(how, style="dim"))


@app.command("models")
def models_cmd(as_json: Json = False) -> None:
    """List the model presets."""
    from .model.config import load_model, preset_names
    from .model.graph import build_graph

    with _user_errors():
        rows = []
        for name in preset_names():
            cfg = load_model(name)
            rows.append(
                {
                    "name": name,
                    "model_type": cfg.model_type,
                    "layers": cfg.n_layers,
                    "hidden": cfg.hidden,
                    "attention": cfg.attention,
                    "experts": cfg.n_experts,
                    "top_k": cfg.top_k,
                    "params": build_graph(cfg, Workload(tokens=1)).param_count,
                }
            )
        if as_json:
            _print_json(rows)
            return
        t = _table(
            "models",
            ("name", "type", ">params", ">layers", ">hidden", "attn", "experts"),
            caption="params: B = 10^9, M = 10^6; attn: attention (gqa: grouped-query, mla: "
            "multi-head latent); experts: routed experts (and how many each token uses)",
        )
        for r in rows:
            experts = f"{r['experts']} (top {r['top_k']})" if r["experts"] else "-"
            t.add_row(
                r["name"],
                r["model_type"],
                _params(r["params"]),
                str(r["layers"]),
                str(r["hidden"]),
                r["attention"],
                experts,
            )
        out.print(t)


def _params(count: int) -> str:
    """A parameter count in billions (B), or millions (M) for the tiny test models."""
    return f"{count / 1e9:,.2f} B" if count >= 1e9 else f"{count / 1e6:,.2f} M"


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
