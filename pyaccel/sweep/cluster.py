"""The Dask cluster a sweep runs on: a running scheduler's address (checked for its form before
connecting, and a connection that fails said as one error), or a local cluster of worker
processes (their number checked against a limit)."""

from __future__ import annotations

import os
import re
from contextlib import contextmanager

from ..errors import ConfigError

# How long to wait for a scheduler to answer: a reachable one answers in well under a second;
# Dask's own default (30 s) leaves a mistyped address looking like a hang.
CONNECT_TIMEOUT_S = 10.0
# Worker processes of a local cluster: each is a Python process holding pyaccel (~200 MB), so
# more than a large machine's cores only costs memory; a mistyped --workers would start that many.
MAX_WORKERS = 256
# Dask's transports (distributed.comm.registry); tcp when the address names none.
SCHEMES = ("tcp", "tls", "ws", "wss", "ucx", "inproc")
FORM = "[tcp://]HOST:PORT, e.g. tcp://127.0.0.1:8786"
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[^:/\s\[\]]+):(?P<port>[^:]*)$")


def check_scheduler(address: str) -> str:
    """``address`` if it has a Dask scheduler address's form (``[SCHEME://]HOST:PORT``, port
    1-65535; ``inproc://`` any name), else a ConfigError naming --scheduler, the value and what
    is wrong."""
    why = _address_problem(address.strip())
    if why:
        raise ConfigError(f"--scheduler '{address}': {why}; expected {FORM}")
    return address


def _address_problem(address: str) -> str | None:
    """What is wrong with a scheduler address's form, or None."""
    scheme, sep, rest = address.rpartition("://")
    scheme = scheme if sep else "tcp"
    if scheme not in SCHEMES:
        return f"unknown scheme '{scheme}://' (one of {', '.join(SCHEMES)})"
    if scheme == "inproc":
        return None
    match = _HOST_PORT.match(rest)
    if match is None:
        return "no port number" if ":" not in rest else "not HOST:PORT"
    port = match["port"]
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        return f"port '{port}' is not a number from 1 to 65535"
    return None


def check_workers(workers: int | None, scheduler: str | None = None) -> None:
    """A local cluster's worker count: at least 1 and at most :data:`MAX_WORKERS`; none with
    a ``scheduler`` (its cluster's own workers run the points)."""
    if workers is None:
        return
    if scheduler is not None:
        raise ConfigError(
            f"--workers {workers!r}: sets the local cluster's worker processes; with "
            f"--scheduler '{scheduler}' that cluster's own workers run the points (start more "
            "with dask worker), so leave one of them out"
        )
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"--workers {workers!r}: expected a positive integer")
    if workers > MAX_WORKERS:
        raise ConfigError(f"--workers {workers:,} is above the limit of {MAX_WORKERS} worker "
                          "processes (each a Python process; this machine has "
                          f"{os.cpu_count() or 1} cores)")  # fmt: skip


def _connect(address: str):
    """A Dask client of the scheduler at ``address``; a ConfigError when none answers."""
    from distributed import Client

    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:  # TimeoutError and refused connections alike
        raise ConfigError(
            f"--scheduler '{address}': no Dask scheduler answered within "
            f"{CONNECT_TIMEOUT_S:g} s ({type(exc).__name__}: {exc}); start one (dask "
            "scheduler) or leave --scheduler out for a local cluster"
        ) from None


@contextmanager
def client(scheduler: str | None, workers: int | None, points: int | None = None):
    """A Dask client of the scheduler at ``scheduler``, or of a new local cluster of
    ``workers`` single-threaded worker processes (default: one per core), never more than the
    ``points`` to run (each is a Python process to start; closed on exit)."""
    from distributed import Client

    if scheduler:
        session = _connect(check_scheduler(scheduler))
        try:
            yield session
        finally:
            session.close()
        return
    n = min(workers or os.cpu_count() or 1, points or MAX_WORKERS)
    with _local_cluster(n) as cluster, Client(cluster) as session:
        yield session


def _local_cluster(n: int):
    """A local cluster of ``n`` single-threaded worker processes; a ConfigError when they do
    not start. The usual cause: a script calling :func:`pyaccel.sweep` at its top level, which
    each worker process (started by spawning a Python that imports the script) runs again."""
    from distributed import LocalCluster

    try:
        return LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                            dashboard_address=":0", silence_logs=40)  # fmt: skip
    except RuntimeError as exc:
        raise ConfigError(
            f"the local Dask cluster's {n} worker process(es) did not start "
            f"({type(exc).__name__}: {exc}); in a script, call pa.sweep under "
            '`if __name__ == "__main__":` (each worker process imports the script)'
        ) from None
