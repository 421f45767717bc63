"""``pyaccel`` command line (SPEC §7): run, report, place, compare, validate, sweep, systems,
models.

Bad input exits with status 2 and one ``error:`` line on stderr, never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from .cli_listings import ModelRow, _print_models, _print_system, _print_systems, _system_record
from .cli_options import (
    Batch,
    Context,
    Etch,
    ExpertW,
    Functional,
    Json,
    Kv,
    Model,
    PlotDir,
    RouterOpt,
    Seed,
    SensitivityPct,
    Sets,
    Spec,
    System,
    Tokens,
    TraceFile,
    TraceSteps,
    Units,
    Weights,
)
from .cli_report import _print_full_report
from .cli_show import (
    _flagged,
    _labelled,
    _print_compare,
    _print_json,
    _print_place,
    _print_run,
    _print_warnings,
    _progress,
    _say_written,
    _user_errors,
    err,
    out,
)
from .cli_sweep import register as register_sweep
from .cli_validate import _print_validate
from .errors import ConfigError, PlacementError, PyaccelError, as_flags
from .io_util import PLOT_SUFFIXES, check_output_file, check_output_folder
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
        except PyaccelError as exc:  # an option's callback checks its value (e.g. --set)
            err.print(f"error: {as_flags(str(exc))}", markup=False, highlight=False,
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


def _check_plot_file(plot: str | None) -> None:
    """A ``--plot FILE``'s format and folder, checked before emulating: a bad path costs
    nothing."""
    from .io_util import plot_format

    if plot is not None:
        plot_format(plot, "--plot")
        check_output_file(plot, "--plot")


def _workload(
    batch, context, tokens, weights, expert_weights, kv, spec_decode, seed, router="uniform"
) -> Workload:
    return Workload(
        batch=batch,
        context=context,
        tokens=tokens,
        weights=weights,
        expert_weights=expert_weights,
        kv=kv,
        spec_decode=spec_decode,
        seed=seed,
        router=router,
    )


def _run(system, model, units, work, sets, etch, show_progress, functional=False,
         trace_steps="ends", prefill="ttft"):  # fmt: skip
    from .cli_args import parse_units
    from .results import run

    units = parse_units(units)
    with _progress(show_progress and work.tokens >= 64) as bar:
        steps = None if bar is None else lambda step: bar(step + 1, work.tokens, "decode steps")
        return run(model, system, units, work, sets, etch, steps, functional, trace_steps,
                   prefill)  # fmt: skip


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
    router: RouterOpt = "uniform",
    seed: Seed = 0,
    etch: Etch = False,
    functional: Functional = False,
    trace: TraceFile = None,
    trace_steps: TraceSteps = "ends",
    sets: Sets = None,
    as_json: Json = False,
) -> None:
    """Emulate decode steps and print tokens/s, step time, bound and energy."""
    from .results import measured_record

    with _user_errors():
        work = _workload(
            batch, context, tokens, weights, expert_weights, kv, spec_decode, seed, router
        )
        if trace is not None:  # before emulating: a bad path costs nothing
            check_output_file(trace, "--trace")
        result = _run(system, model, units, work, sets, etch, not as_json, functional,
                      trace_steps)  # fmt: skip
        written = [result.trace.to_perfetto(trace)] if trace is not None else []
        rec = measured_record(result)
        if as_json:
            _print_json(rec.to_dict())
        else:
            _print_run(rec)
            _print_warnings(rec.warnings)
        _say_written(written, as_json)


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
    router: RouterOpt = "uniform",
    seed: Seed = 0,
    etch: Etch = False,
    sets: Sets = None,
    plot: PlotDir = None,
    sensitivity: SensitivityPct = None,
    functional: Functional = False,
    trace: TraceFile = None,
    trace_steps: TraceSteps = "ends",
    as_json: Json = False,
) -> None:
    """Bottleneck report: time by resource and op kind, bound ratio, what-if ranking, and
    where the prompt's prefill time goes (and, as run, --functional's metrics, --trace)."""
    from .cli_args import parse_units
    from .report import Report
    from .results import prefill_assumptions
    from .roofline_points import roofline_points
    from .what_if import run_what_if

    with _user_errors():
        work = _workload(
            batch, context, tokens, weights, expert_weights, kv, spec_decode, seed, router
        )
        if sensitivity is not None and not 0 < sensitivity < 100:
            raise ConfigError(f"--sensitivity {sensitivity:g}: must be a percent in (0, 100)")
        if plot is not None:  # before emulating: a bad path costs nothing
            from .plots import REPORT_PLOT_FILES, report_plots

            check_output_folder(plot, "--plot", REPORT_PLOT_FILES)
        if trace is not None:
            check_output_file(trace, "--trace")
        result = _run(system, model, units, work, sets, etch, not as_json, functional,
                      trace_steps, "events")  # fmt: skip
        written = [result.trace.to_perfetto(trace)] if trace is not None else []
        rep = Report.from_trace(result.trace, run_what_if(result))
        rep.prefill = result.prefill.as_dict()
        rep.roofline = roofline_points(result.trace)
        rep.assumptions += prefill_assumptions(result)
        drawn, removed = report_plots(result.trace, rep, plot) if plot is not None else ([], [])
        written += drawn
        rows = alts = None
        if sensitivity is not None:
            case = (model, system, parse_units(units), work, sets, etch)
            rows, alts = _sensitivity(case, result, sensitivity, not as_json)
        _print_full_report(rep, result, rows, alts, sensitivity, as_json)
        _say_written(written, as_json, removed)


def _sensitivity(case: tuple, result, pct: float, show_progress: bool):
    """``report --sensitivity PCT``: each named assumption of the run's system scaled by
    -PCT/+PCT percent, and each other choice of its text assumptions, re-emulated.
    ``case``: the command's (model, system, units, workload, sets, etch); ``result`` its run."""
    from .sensitivity import assumption_sensitivity, choice_alternatives

    model, system, units, work, sets, etch = case
    with _progress(show_progress) as bar:
        rows = assumption_sensitivity(model, system, result.placement.n_units, work, sets, etch,
                                      pct / 100.0, base=result,
                                      progress=_labelled(bar, "sensitivity"))  # fmt: skip
        alts = choice_alternatives(model, system, units, work, sets, etch, base=result,
                                   progress=_labelled(bar, "other choices"))  # fmt: skip
    return rows, alts


@app.command("place")
def place_cmd(
    ctx: typer.Context,
    system: Annotated[str | None, typer.Option("--system", metavar="SYS", help="as run")] = None,
    model: Annotated[str | None, typer.Option("--model", metavar="M", help="as run")] = None,
    units: Units = "auto",
    batch: Batch = 1,
    context: Context = 1024,
    tokens: Tokens = 128,
    weights: Weights = None,
    expert_weights: ExpertW = None,
    kv: Kv = "bf16",
    spec_decode: Spec = None,
    router: RouterOpt = "uniform",
    seed: Seed = 0,
    etch: Etch = False,
    sets: Sets = None,
    check: Annotated[
        Path | None, typer.Option("--check", metavar="FILE.json", help="check a placement JSON")
    ] = None,
    as_json: Json = False,
) -> None:
    """Place a model on a system and show what each unit holds; or check a placement file
    (``place --json`` output) against its recorded system and overrides (--system/--model check
    it against another)."""
    with _user_errors():
        if check is not None:
            from .cli_args import refuse_beside_check
            from .place import Placement

            refuse_beside_check(ctx)
            plc = Placement.from_json(str(check), system=system, model=model)
            try:
                plc.check()
            except PlacementError as exc:  # a malformed file names its path (SPEC §7)
                raise PlacementError(f"{check}: {exc}") from None
        else:
            from .cli_args import parse_units
            from .results import prepare_run

            if not system or not model:
                raise ConfigError("place needs --system and --model (or --check FILE.json)")
            work = _workload(
                batch, context, tokens, weights, expert_weights, kv, spec_decode, seed, router
            )
            plc = prepare_run(model, system, parse_units(units), work, sets, etch).placement
        if as_json:
            _print_json(plc.to_dict())
        else:
            _print_place(plc, spec_decode and check is None)


@app.command("compare")
def compare_cmd(
    model: Model,
    systems: Annotated[
        str | None,
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
    router: RouterOpt = "uniform",
    seed: Seed = 0,
    batches: Annotated[
        str | None,
        typer.Option(
            "--batches", metavar="N,N,...", help="comma-separated batch sizes. Default: --batch"
        ),
    ] = None,
    plot: Annotated[
        str | None,
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

    with _user_errors():
        names = parse_systems(systems)
        base = _workload(
            batch, context, tokens, weights, expert_weights, kv, spec_decode, seed, router
        )
        _check_plot_file(plot)
        with _progress(not as_json) as bar:
            sizes = parse_batches(batches, base.batch)
            records = _flagged(compare(model, names, base, sizes, _labelled(bar, "compare")))
        if plot is not None:
            from .plots import compare_plot

            compare_plot(records, plot)
        if as_json:
            _print_json([r.to_dict() for r in records])
        else:
            _print_compare(records)
            _print_warnings(w for r in records for w in r.warnings)


@app.command("validate")
def validate_cmd(
    published: Annotated[
        str | None,
        typer.Option(
            "--published",
            metavar="FILE.csv",
            help="a published-speed table with the columns system, model, weights, units, "
            "batch, context, tokens_per_s_per_user. Default: the shipped one",
        ),
    ] = None,
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot",
            metavar="FILE",
            help=f"write emulated against published here ({', '.join(PLOT_SUFFIXES)})",
        ),
    ] = None,  # fmt: skip
    ranges: Annotated[
        bool,
        typer.Option(
            "--ranges",
            help="also re-emulate each row with every named assumption that has a sourced "
            "range (or choices) at each end of it, and say whose range reaches the published "
            "speed",
        ),
    ] = False,
    as_json: Json = False,
) -> None:
    """Emulate every row of a published-speed table: emulated, published, ratio, bottleneck."""
    from .validate import validate
    from .validate_ranges import validate_ranges

    with _user_errors():
        _check_plot_file(plot)
        with _progress(not as_json) as bar:
            rows = (validate_ranges if ranges else validate)(published, _labelled(bar, "validate"))
        if plot is not None:
            from .plots import validate_plot

            validate_plot(rows, plot)
        if as_json:
            _print_json([r.to_dict() for r in rows])
        else:
            _print_validate(rows)


@app.command("systems")
def systems_cmd(
    system: Annotated[
        str | None,
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
        _print_systems([load_spec(n) for n in preset_names()], as_json)


@app.command("models")
def models_cmd(as_json: Json = False) -> None:
    """List the model presets."""
    from .model.config import load_model, preset_names
    from .model.graph import build_graph

    with _user_errors():
        rows = []
        for name in preset_names():
            cfg = load_model(name)
            rows.append(ModelRow.of(name, cfg, build_graph(cfg, Workload(tokens=1)).param_count))
        _print_models(rows, as_json)


register_sweep(app)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
