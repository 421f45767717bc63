"""Run a sweep's points on Dask and gather them into one table.

The points missing from the cache go to a Dask cluster: a local cluster of worker processes
(one thread each) by default, or the scheduler at ``scheduler``'s address; both through one
``distributed.Client``. Each finished point is kept in the cache as it arrives, so that stopping
a sweep loses only the points in flight. The table has one row per point in grid order, so it is
the same whatever the number of workers or the order they finish in.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from .cache import open_cache, point_key
from .cluster import check_scheduler, check_workers, client
from .grid import inputs_of, points
from .point import ERROR, run_point

# a run --json key that is also an input column is kept under this prefix (its resolved value)
RUN_PREFIX = "run."
POLL_S = 0.02  # how often the client looks for finished points (and for a Ctrl-C or SIGTERM)


class Terminated(SystemExit):
    """A SIGTERM stopped the sweep. Raised once the points in flight are cancelled, so that the
    Dask cluster closes as it leaves (killed at once, the local cluster's processes and
    semaphores were left for the resource tracker to report as leaked); uncaught, the process
    exits with status 143 (128 + SIGTERM, as a shell reports a process the signal ended) and
    no traceback."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def sweep(
    grid,
    out: str | Path | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    cache: bool | str | Path = True,
    progress: Callable[[int, int, int], None] | None = None,
):
    """Run every point of ``grid`` (a TOML file's path or a dict, :mod:`pyaccel.sweep.grid`)
    and return the table (a pandas DataFrame): the point's inputs in columns named like the
    axes, every ``run --json`` key flattened with ``.``, and ``error`` (None when it ran).

    ``out``: also write it (Parquet, or CSV by a ``.csv`` suffix), atomically. ``scheduler``:
    the address of a running Dask scheduler; otherwise a local cluster of ``workers`` worker
    processes (default: one per core; never more than the points to run). ``cache``: True (the
    per-user cache folder), a folder, or False. ``progress(done, failed, remaining)`` after
    each point. A Ctrl-C raises KeyboardInterrupt and a SIGTERM :class:`Terminated`, each once
    the points in flight are cancelled and the cluster is closed (finished points stay cached)."""
    from ..io_util import check_output_file

    if out is not None:
        table_format(out)
        check_output_file(out, "--out")
    if scheduler is not None:
        check_scheduler(scheduler)
    check_workers(workers, scheduler)
    given = points(grid)
    inputs = [inputs_of(p) for p in given]
    store = open_cache(cache)
    keys = [point_key(i) for i in inputs] if store else [None] * len(inputs)
    rows: list[dict | None] = [store.get(k) if store else None for k in keys]
    _run_missing(inputs, keys, rows, store, scheduler, workers, progress)
    table = _table(given, rows)
    if out is not None:
        write_table(table, out)
    return table


def _run_missing(inputs, keys, rows, store, scheduler, workers, progress) -> None:
    """Fill the rows that are None by running their points on Dask (cached as they arrive)."""
    todo = [i for i, r in enumerate(rows) if r is None]
    failed = sum(1 for r in rows if r is not None and r.get(ERROR) is not None)
    done = len(rows) - len(todo)
    if progress:
        progress(done, failed, len(todo))
    if not todo:
        return
    from distributed import as_completed

    # the signals are caught before the cluster starts: one arriving while it starts stops the
    # sweep as soon as the client is up, rather than leaving a half-started cluster behind
    with _stop_flag() as stop, client(scheduler, workers, len(todo)) as session:
        futures = session.map(run_point, [inputs[i] for i in todo], pure=False)
        where = {f.key: i for f, i in zip(futures, todo, strict=True)}
        finished = as_completed(futures)
        while not finished.is_empty():
            if stop.signum is not None:  # drop what is in flight; what finished is cached
                session.cancel(futures)
                raise KeyboardInterrupt if stop.signum == signal.SIGINT else Terminated()
            batch = finished.next_batch(block=False)
            if not batch:
                time.sleep(POLL_S)
            for future in batch:
                i = where[future.key]
                rows[i], keep = _outcome(future)
                if store and keep:
                    store.put(keys[i], rows[i])
                done += 1
                failed += rows[i].get(ERROR) is not None
                if progress:
                    progress(done, failed, len(rows) - done)


def _outcome(future) -> tuple[dict, bool]:
    """A finished point's row, and whether the cache may keep it. A point whose run never
    returned (its worker process died, e.g. out of memory: Dask's KilledWorker) is an error
    row like any other failure, so the sweep still gives its table; it is not kept, as it may
    run another time."""
    from distributed import KilledWorker

    try:
        return future.result(), True
    except KilledWorker:  # its message names a random task key: keep the table deterministic
        why = ("every worker process that ran it died (KilledWorker: out of memory, or a "
               "crash; the workers' logs say which)")  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - run_point returns its own errors as rows
        why = f"{type(exc).__name__}: {str(exc).strip()}"
    return {ERROR: f"the point did not finish: {why}"}, False


class _Stop:
    """The stopping signal that arrived while a sweep ran (``signum``; None: none yet)."""

    signum: int | None = None


@contextmanager
def _stop_flag():
    """A :class:`_Stop` that the first Ctrl-C (SIGINT) or SIGTERM sets instead of acting at
    whatever line runs: interrupted inside the Dask client's own calls, the client could be
    left unable to close its cluster, and the process hung; ended by SIGTERM's default action,
    it closed nothing. A second signal of the same kind acts at once (its previous handler).
    SIGTERM is caught only where its handler is the default one (a program's own handler is
    left to it)."""
    stop = _Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop  # signal handlers belong to the main thread
        return
    previous = {signal.SIGINT: signal.getsignal(signal.SIGINT) or signal.default_int_handler}
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        previous[signal.SIGTERM] = signal.SIG_DFL

    def first(signum, frame):
        stop.signum = stop.signum or signum
        signal.signal(signum, previous[signum])

    for signum in previous:
        signal.signal(signum, first)
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _table(given: list[dict], rows: list[dict]):
    """One row a point, in grid order: the axes the grid named (as given; None where a point
    left one out), then the record's keys in the order they first appear (``run.``-prefixed
    where an axis has the name), ``error`` last."""
    import pandas as pd

    axes = list(dict.fromkeys(k for p in given for k in p))
    keys = list(dict.fromkeys(k for r in rows for k in r if k != ERROR))
    named = [RUN_PREFIX + k if k in axes else k for k in keys]  # e.g. run.units: as resolved
    data = [[r.get(k) for k in keys] + [r.get(ERROR)] for r in rows]
    text = {k for k in axes if len({_kind(p[k]) for p in given if p.get(k) is not None}) > 1}
    inputs = [[_as_column(p.get(k), k in text) for k in axes] for p in given]
    table = pd.concat([pd.DataFrame(inputs, columns=axes),
                       pd.DataFrame(data, columns=[*named, ERROR])], axis=1)  # fmt: skip
    columns = [*zip(*inputs, strict=True), *zip(*data, strict=True)]  # each column's values
    for name, values in zip(table.columns, columns, strict=True):
        if _whole_with_gaps(values):  # pandas would make them floats (1024.0) around the gaps
            table[name] = pd.array(values, dtype="Int64")
    return table


def _whole_with_gaps(values) -> bool:
    """Whether a column's values are integers with at least one None among them."""
    present = [v for v in values if v is not None]
    whole = all(isinstance(v, int) and not isinstance(v, bool) for v in present)
    return bool(present) and whole and len(present) < len(values)


def _kind(value) -> str:
    """What one Parquet column can hold of a value: text, a boolean or a number (integers and
    floats share a column)."""
    return "text" if isinstance(value, str) else "bool" if isinstance(value, bool) else "number"


def _as_column(value, as_text: bool):
    """An axis's value as its column holds it: as given, or as text where the axis mixes
    kinds (text and numbers, ``units = ["auto", 4]``; booleans and numbers,
    ``"set.host_overlap" = [true, 0.5]``), which one Parquet column cannot hold."""
    return str(value) if as_text and value is not None else value


def table_format(path: str | Path, option: str = "--out") -> str:
    """``parquet`` or ``csv``, by the file's suffix; ConfigError for any other (naming
    ``option``, the argument the path was given as)."""
    from ..errors import ConfigError

    suffix = Path(path).suffix.lower()
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix == ".csv":
        return "csv"
    raise ConfigError(f"{option} {path}: a sweep table is .parquet or .csv, not '{suffix}'")


def write_table(table, path: str | Path) -> None:
    """Write the table atomically as Parquet or CSV (by suffix)."""
    import io

    from ..io_util import write_atomic

    if table_format(path) == "csv":
        write_atomic(path, table.to_csv(index=False), "--out")
        return
    buf = io.BytesIO()
    table.to_parquet(buf, index=False)
    write_atomic(path, buf.getvalue(), "--out")
