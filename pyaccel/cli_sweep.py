"""``pyaccel sweep GRID.toml`` (a grid of runs on Dask, as one table: :mod:`pyaccel.sweep`) and
``pyaccel plot KIND TABLE`` (the pictures that answer questions from such tables)."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from .cli_show import _user_errors, err, out

Grid = Annotated[str, typer.Argument(metavar="GRID.toml", help="the grid: [axes] and [[point]]")]
Out = Annotated[
    str | None,
    typer.Option("--out", metavar="FILE", help="write the table here (.parquet, or .csv)"),
]
Scheduler = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        metavar="ADDRESS",
        help="a running Dask scheduler (e.g. tcp://host:8786); default: a local "
        "cluster of this machine's cores",
    ),  # fmt: skip
]
Workers = Annotated[
    int | None,
    typer.Option(
        "--workers",
        metavar="N",  # checked by sweep.cluster.check_workers: one error line as every other
        help="worker processes of the local cluster (default: one per core; never more "
        "than the points to run)",
    ),  # fmt: skip
]
CacheDir = Annotated[
    str | None,
    typer.Option(
        "--cache", metavar="DIR", help="keep finished points here (default: the user cache folder)"
    ),  # fmt: skip
]
NoCache = Annotated[bool, typer.Option("--no-cache", help="run every point, keep none")]


def sweep_cmd(
    grid: Grid,
    out_file: Out = None,
    scheduler: Scheduler = None,
    workers: Workers = None,
    cache: CacheDir = None,
    no_cache: NoCache = False,
) -> None:
    """Run every point of a grid (on Dask) and write one table: inputs, run --json keys, error."""
    from .sweep import sweep

    cached: list[int] = []  # the points done before any ran: those the cache held
    seen = [0, 0]  # points done, points in all

    with _user_errors(), _bar() as bar, _stopped(seen, no_cache):

        def progress(done: int, failed: int, remaining: int) -> None:
            cached[:] = cached or [done]
            seen[:] = [done, done + remaining]
            if bar:
                bar(done, failed, remaining)

        table = sweep(grid, out_file, scheduler, workers,
                      False if no_cache else (True if cache is None else cache),
                      progress)  # fmt: skip
    failed = int(table["error"].notna().sum())
    kept = "--no-cache kept no point" if no_cache else "its points are in the cache"
    where = f" -> {out_file}" if out_file else f"; no --out: the table was not written ({kept})"
    out.print(f"{len(table)} points, {len(table) - failed} ran, {failed} failed "
              f"({cached[0] if cached else 0} from the cache){where}",
              markup=False, highlight=False, soft_wrap=True)  # fmt: skip


# exit status of a command stopped by Ctrl-C (128 + SIGINT), as a shell reports it
INTERRUPTED_EXIT = 130


@contextmanager
def _stopped(seen: list[int], no_cache: bool):
    """A Ctrl-C or a SIGTERM (once the sweep has closed its cluster) as one line saying how far
    the sweep got and what a rerun does, then exit status 130 or 143 (128 + the signal)."""
    from .sweep.runner import Terminated

    try:
        yield
    except (KeyboardInterrupt, Terminated) as exc:
        stopped = isinstance(exc, Terminated)
        then = ("--no-cache kept none of them" if no_cache
                else "they are in the cache: the same command runs only the rest")  # fmt: skip
        err.print(f"{'terminated' if stopped else 'interrupted'}: {seen[0]} of {seen[1]} "
                  f"points done; {then}", markup=False, highlight=False,
                  soft_wrap=True)  # fmt: skip
        raise typer.Exit(exc.code if stopped else INTERRUPTED_EXIT) from None


@contextmanager
def _bar():
    """``progress(done, failed, remaining)`` as a bar on stderr when it is a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import Progress

    with Progress(console=err.real, transient=True) as bar:
        task = bar.add_task("points", total=None)

        def update(done: int, failed: int, remaining: int) -> None:
            text = f"points: {done} done ({failed} failed), {remaining} left"
            bar.update(task, completed=done, total=done + remaining, description=text)

        yield update


PLOT_KINDS = ("frontier", "cost", "capacity", "roofline", "validation")
PlotKind = Annotated[str, typer.Argument(metavar="KIND", help=" | ".join(PLOT_KINDS))]
Table = Annotated[
    str,
    typer.Argument(
        metavar="TABLE",
        help="a sweep table (.parquet/.csv) for frontier, cost and capacity; a "
        "report --json file for roofline; a validate --json file for "
        "validation",
    ),  # fmt: skip
]
PlotOut = Annotated[str, typer.Option("--out", metavar="FILE", help="the picture (.png, .svg, "
                                                                    ".pdf)")]  # fmt: skip


def plot_cmd(kind: PlotKind, table: Table, out_file: PlotOut) -> None:
    """Draw one picture from a table: the batch frontier, the cost of speed, capacity maps, a
    machine's roofline or emulated against published speeds."""
    from .errors import ConfigError
    from .io_util import check_output_file, plot_format

    with _user_errors():
        if kind not in PLOT_KINDS:
            raise ConfigError(f"plot '{kind}': unknown kind; one of {', '.join(PLOT_KINDS)}")
        plot_format(out_file, "--out")
        check_output_file(out_file, "--out")
        draw_plot(kind, table, out_file)
    out.print(f"wrote {out_file}", markup=False, highlight=False)


def draw_plot(kind: str, table, path) -> None:
    """Draw ``kind`` from ``table`` (a sweep table or its file; a JSON file for roofline and
    validation, or its document) into ``path``; an input of the wrong kind is a ConfigError
    naming the command that writes the right one (:mod:`pyaccel.plot_inputs`)."""
    from . import plot_inputs, plots, plots_tables

    if kind in ("roofline", "validation"):
        if isinstance(table, (dict, list)):
            plot_inputs.check_json_input(kind, table, "(given)")
            data = table
        else:
            data = plot_inputs.read_json_input(kind, table)
        fn = plots.roofline_plot if kind == "roofline" else plots.validate_plot
        fn(data, path)
        return
    if isinstance(table, (str, Path)):
        plot_inputs.check_table_path(kind, table)
    getattr(plots_tables, f"{kind}_plot")(table, path)


def register(app: typer.Typer) -> None:
    """Add the ``sweep`` and ``plot`` commands to ``app``."""
    app.command("sweep")(sweep_cmd)
    app.command("plot")(plot_cmd)
