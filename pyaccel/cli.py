"""``pyaccel`` command line (SPEC §7): run, report, place, compare, systems, models.

Bad input exits with status 2 and one ``error:`` line on stderr, never a traceback.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from .errors import ConfigError, PyaccelError
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
    no_args_is_help=True,
    help="Emulate LLM decode on wafer-scale, LPU, hardwired-ASIC and GPU machines.",
)
out = Console(emoji=False)
err = Console(stderr=True, emoji=False, highlight=False)

System = Annotated[str, typer.Option("--system", help="preset name or TOML file")]
Model = Annotated[str, typer.Option("--model", help="preset name or folder with config.json")]
Units = Annotated[str, typer.Option("--units", help="number of units, or 'auto'")]
Batch = Annotated[int, typer.Option("--batch", help="sequences decoded together")]
Context = Annotated[int, typer.Option("--context", help="tokens already in each cache")]
Tokens = Annotated[int, typer.Option("--tokens", help="tokens generated per sequence")]
Weights = Annotated[Optional[str], typer.Option("--weights", help="format of linear weights")]
ExpertW = Annotated[
    Optional[str], typer.Option("--expert-weights", help="format of routed experts")
]
Kv = Annotated[str, typer.Option("--kv", help="KV-cache format")]
Spec = Annotated[Optional[str], typer.Option("--spec-decode", help="speculative decoding")]
Etch = Annotated[bool, typer.Option("--etch", help="asic: etch dies for this model")]


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
    typer.Option("--set", help="override KEY=VALUE", callback=_unique_sets),
]
Json = Annotated[bool, typer.Option("--json", help="print JSON")]


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
    sys.stdout.write(json.dumps(data, indent=1, default=str) + "\n")


@contextmanager
def _progress(total: int, show: bool):
    """A progress bar on a terminal (stderr) for runs of many tokens; nothing otherwise."""
    if not show or total < 64 or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import Progress

    with Progress(console=err, transient=True) as bar:
        task = bar.add_task("decode steps", total=total)
        yield lambda step: bar.update(task, completed=step + 1)


def _run(system, model, units, work, sets, etch, show_progress, functional=False):
    from .results import run

    with _progress(work.tokens, show_progress) as progress:
        return run(model, system, units, work, sets, etch, progress, functional)


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
    functional: Annotated[bool, typer.Option("--functional", help="also run the numerics")] = False,
    trace: Annotated[Optional[Path], typer.Option("--trace", help="write a Perfetto JSON")] = None,
    sets: Sets = None,
    as_json: Json = False,
) -> None:
    """Emulate decode steps and print tokens/s, step time, bound and energy."""
    from .report import Report
    from .results import run_record

    with _user_errors():
        work = _workload(batch, context, tokens, weights, expert_weights, kv, spec_decode)
        result = _run(system, model, units, work, sets, etch, not as_json, functional)
        rep = Report.from_trace(result.trace, what_if=False)
        if trace is not None:
            result.trace.to_perfetto(trace)
        rec = run_record(result, rep.bottleneck)
        if as_json:
            _print_json(rec)
        else:
            _print_run(rec)


def _print_run(rec: dict) -> None:
    from .report import fmt_ratio

    table = Table(title=f"{rec['model']} on {rec['units']} x {rec['system']}", show_header=False)
    rows = [
        ("tokens/s per user", f"{rec['tokens_per_s_per_user']:,.1f}"),
        ("tokens/s total", f"{rec['tokens_per_s']:,.1f}"),
        ("step time", fmt_seconds(rec["step_time_s"])),
        (
            "lower bound",
            f"{fmt_seconds(rec['lower_bound_step_time_s'])} (emulated / bound "
            f"{fmt_ratio(rec['emulated_over_lower_bound'])})",
        ),
        ("bottleneck", rec["bottleneck"]),
        ("energy per token", f"{rec['joules_per_token']:.3g} J"),
        ("layout", json.dumps(rec["layout"])),
        (
            "workload",
            f"batch {rec['batch']}, context {rec['context']}, tokens "
            f"{rec['tokens']}, weights {rec['weights']}, kv {rec['kv']}",
        ),
    ]
    for k, v in rows:
        table.add_row(k, v)
    out.print(table)
    out.print(f"[dim]{len(rec['assumptions'])} named assumptions (see `pyaccel report`)[/dim]")


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
    plot: Annotated[Optional[Path], typer.Option("--plot", help="write plots here")] = None,
    sensitivity: Annotated[
        Optional[float],
        typer.Option(
            "--sensitivity",
            help="also re-emulate with each named assumption -PCT and +PCT percent",
            metavar="PCT",
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """Bottleneck report: time by resource and op kind, bound ratio, what-if ranking."""
    from .report import Report

    with _user_errors():
        work = _workload(batch, context, tokens, weights, expert_weights, kv, spec_decode)
        if sensitivity is not None and not 0 < sensitivity < 100:
            raise ConfigError(f"--sensitivity {sensitivity:g}: must be a percent in (0, 100)")
        result = _run(system, model, units, work, sets, etch, not as_json)
        rep = Report.from_trace(result.trace)
        if plot is not None:
            from .plots import report_plots

            report_plots(result.trace, rep, plot)
        rows = alts = None
        if sensitivity is not None:
            from .sensitivity import assumption_sensitivity, choice_alternatives

            n_units = result.placement.n_units
            rows = assumption_sensitivity(
                model, system, n_units, work, sets, etch, sensitivity / 100.0, base=result
            )
            alts = choice_alternatives(model, system, units, work, sets, etch, base=result)
        if as_json:
            data = json.loads(rep.to_json())
            if rows is not None:
                data["sensitivity"] = [_sensitivity_record(r, sensitivity) for r in rows]
                data["alternatives"] = [_alternative_record(a) for a in alts]
            _print_json(data)
        else:
            _print_report(rep)
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
    t = Table(title="step time with each other choice of a named assumption (re-emulated)")
    for col in ("assumption", "value", "other choice", "step time change", "note"):
        t.add_column(col)
    for a in alts:
        change = "cannot run" if a.change is None else f"{a.change:+.1%}"
        t.add_row(a.param, a.value, a.choice, change, a.note)
    out.print(t)


def _print_sensitivity(rows, pct: float) -> None:
    def cell(change):
        return "cannot run" if change is None else f"{change:+.1%}"

    t = Table(title=f"step time with each named assumption -{pct:g} % / +{pct:g} % (re-emulated)")
    for col in ("assumption", "value", f"-{pct:g} %", f"+{pct:g} %", "note"):
        t.add_column(col)
    for r in rows:
        t.add_row(r.param, f"{r.value:g}", cell(r.low_change), cell(r.high_change), r.error)
    out.print(t)


def _print_report(rep) -> None:
    from .report import fmt_ratio

    s = rep.summary
    out.print(
        f"[bold]{s['model']} on {s['units']} x {s['system']}[/bold]: "
        f"{s['tokens_per_s_per_user']:,.1f} tok/s per user, {s['tokens_per_s']:,.1f} "
        f"total; step {fmt_seconds(s['step_time_s'])}, lower bound "
        f"{fmt_seconds(s['lower_bound_step_time_s'])} (x{fmt_ratio(rep.bound_ratio)}); "
        f"bottleneck [bold]{rep.bottleneck}[/bold] ({rep.bottleneck_share:.0%})"
    )
    if rep.meta.get("strategy"):  # wafer layouts are a named assumption: say which one ran
        out.print(
            f"layout {rep.meta['strategy']}, {rep.meta.get('stages', 1)} pipeline stage(s), "
            f"{rep.meta.get('micro_batches', 1)} micro-batch(es) in flight"
        )
    t = Table(title="time by resource class (first recorded step)")
    for col in ("resource", "time", "share"):
        t.add_column(col)
    for res, sec in sorted(rep.by_resource.items(), key=lambda kv: -kv[1]):
        t.add_row(res, fmt_seconds(sec), f"{sec / s['step_time_s']:.0%}")
    out.print(t)
    t = Table(title="by op kind")
    for col in ("op kind", "emulated", "lower bound", "ratio", "bound by"):
        t.add_column(col)
    for row in rep.by_kind:
        t.add_row(
            row["kind"],
            fmt_seconds(row["emulated_s"]),
            fmt_seconds(row["bound_s"]),
            fmt_ratio(row["ratio"]),
            row["bound_resource"],
        )
    out.print(t)
    t = Table(title="what if one resource were twice as fast (re-emulated)")
    for col in ("resource", "step time", "gain"):
        t.add_column(col)
    for row in rep.what_if:
        t.add_row(row["resource"], fmt_seconds(row["step_time_s"]), f"{row['gain']:.3f}x")
    out.print(t)
    out.print("[bold]assumptions[/bold]")
    for a in rep.assumptions:
        out.print(f" - {a}", markup=False, highlight=False)
    for a in rep.left_out:
        out.print(f" - left out: {a}", markup=False, highlight=False)


@app.command("place")
def place_cmd(
    system: Annotated[Optional[str], typer.Option("--system")] = None,
    model: Annotated[Optional[str], typer.Option("--model")] = None,
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
    """Place a model on a system (or check a placement file) and show what each unit holds."""
    with _user_errors():
        if check is not None:
            plc = _check_file(check, model)
        else:
            from .results import prepare

            if not system or not model:
                raise ConfigError("place needs --system and --model (or --check FILE.json)")
            work = _workload(batch, context, tokens, weights, expert_weights, kv, spec_decode)
            plc = prepare(model, system, units, work, sets, etch)[3]
        if as_json:
            _print_json(_place_record(plc))
        else:
            _print_place(plc)


def _check_file(path: Path, model: str | None):
    from .model.config import load_model
    from .model.graph import build_graph
    from .place import Placement

    plc = Placement.from_json(str(path))
    cfg = load_model(model or plc.model)
    work = Workload(**{k: v for k, v in plc.workload.items() if k in Workload.__dataclass_fields__})
    return plc.check(build_graph(cfg, work))


def _place_record(plc) -> dict:
    per_unit = []
    for u in range(plc.n_units):
        b = plc.unit_bytes(u)
        per_unit.append(
            {
                "unit": u,
                "layers": plc.layers_on(u),
                "weight_bytes": b["weights"],
                "kv_bytes": b["kv"],
                "buffer_bytes": b["buffers"],
                "reserved_bytes": sum(plc.reserved_bytes.values()),
                "capacity_bytes": sum(plc.capacity_bytes.values()),
            }
        )
    return {
        "system": plc.system,
        "model": plc.model,
        "units": plc.n_units,
        "layout": plc.layout,
        "reason": plc.reason,
        "per_unit": per_unit,
        "layers": [
            {"layer": s.layer, "units": list(s.units), "region": s.region} for s in plc.layers
        ],
    }


def _print_place(plc) -> None:
    out.print(f"[bold]{plc.model}[/bold] on {plc.n_units} x {plc.system} {json.dumps(plc.layout)}")
    if plc.reason:
        out.print(plc.reason, markup=False, highlight=False)
    t = Table()
    for col in ("unit", "layers", "weights", "kv", "buffers", "used / capacity"):
        t.add_column(col)
    for row in _place_record(plc)["per_unit"]:
        layers = row["layers"]
        span = f"{layers[0]}..{layers[-1]} ({len(layers)})" if layers else "-"
        used = row["weight_bytes"] + row["kv_bytes"] + row["buffer_bytes"] + row["reserved_bytes"]
        t.add_row(
            str(row["unit"]),
            span,
            fmt_bytes(row["weight_bytes"]),
            fmt_bytes(row["kv_bytes"]),
            fmt_bytes(row["buffer_bytes"]),
            f"{used / row['capacity_bytes']:.0%} of {fmt_bytes(row['capacity_bytes'])}",
        )
    out.print(t)


@app.command("compare")
def compare_cmd(
    model: Model,
    systems: Annotated[
        Optional[str],
        typer.Option("--systems", help="comma-separated systems (default: every preset)"),
    ] = None,
    batch: Batch = 1,
    context: Context = 1024,
    tokens: Tokens = 128,
    weights: Weights = None,
    expert_weights: ExpertW = None,
    kv: Kv = "bf16",
    spec_decode: Spec = None,
    batches: Annotated[
        Optional[str], typer.Option("--batches", help="comma-separated batch sizes")
    ] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="write a PNG here")] = None,
    as_json: Json = False,
) -> None:
    """Run one model on several systems (units auto) and compare them side by side."""
    from .compare import compare

    with _user_errors():
        _check_system_list(systems)
        base = _workload(batch, context, tokens, weights, expert_weights, kv, spec_decode)
        records = compare(model, systems, base, batches)
        if plot is not None:
            from .plots import compare_plot

            compare_plot(records, plot)
        if as_json:
            _print_json(records)
        else:
            _print_compare(records)


def _check_system_list(systems: str | None) -> None:
    """``--systems``: absent means every preset; given, every comma-separated name is non-empty
    and appears once (``--systems ""`` must not silently mean "all")."""
    if systems is None:
        return
    names = [s.strip() for s in systems.split(",")]
    for i, name in enumerate(names):
        if not name:
            raise ConfigError(
                f"--systems {systems!r}: system {i + 1} of {len(names)} is empty; give "
                "comma-separated preset names or TOML files (e.g. h100,wse3), or leave "
                "--systems out for every preset"
            )
        if name in names[:i]:
            raise ConfigError(f"--systems {systems!r}: '{name}' is listed twice")


def _print_compare(records: list[dict]) -> None:
    t = Table(title=f"{records[0]['model']}" if records else "compare")
    cols = ("system", "units", "batch", "tok/s/user", "tok/s", "step", "bottleneck", "J/token")
    for col in cols:
        t.add_column(col, no_wrap=True,
                     justify="left" if col in ("system", "bottleneck") else "right")  # fmt: skip
    for r in records:
        if "error" not in r:
            t.add_row(r["system"], str(r["units"]), str(r["batch"]),
                      f"{r['tokens_per_s_per_user']:,.1f}", f"{r['tokens_per_s']:,.1f}",
                      fmt_seconds(r["step_time_s"]), r["bottleneck"],
                      f"{r['joules_per_token']:.3g}")  # fmt: skip
    out.print(t)
    for r in records:
        if "error" in r:
            out.print(f"{r['system']} (batch {r['batch']}): {r['error']}", markup=False,
                      highlight=False)  # fmt: skip


@app.command("systems")
def systems_cmd(as_json: Json = False) -> None:
    """List the hardware presets."""
    from .hw.io import load_spec, preset_names

    with _user_errors():
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
        t = Table(title="systems")
        t.add_column("name", no_wrap=True, min_width=max(len(s.name) for s in specs))
        for col in ("kind", "native format", "power/unit", "assumptions", "description"):
            t.add_column(col)
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
        t = Table(title="models")
        t.add_column("name", no_wrap=True, min_width=max(len(r["name"]) for r in rows))
        for col in ("type", "params", "layers", "hidden", "attention", "experts"):
            t.add_column(col)
        for r in rows:
            experts = f"{r['experts']} (top {r['top_k']})" if r["experts"] else "-"
            t.add_row(
                r["name"],
                r["model_type"],
                f"{r['params'] / 1e9:,.2f} B",
                str(r["layers"]),
                str(r["hidden"]),
                r["attention"],
                experts,
            )
        out.print(t)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
