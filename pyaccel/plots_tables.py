"""Plots that answer the field's questions from a table of runs (a sweep's, :mod:`pyaccel.sweep`):
the batch frontier, the cost of speed and capacity maps. Each is labelled with its units, the
assumptions it rests on and the pyaccel version; a point that could not run is drawn as failed
(a red cross and a legend entry that counts them), never left out."""

from __future__ import annotations

from pathlib import Path

from .plots import _figure, _footer, _save

FAILED_MARK = dict(marker="x", color="red", linestyle="none")
FAILED_LABEL = "failed (could not run): {n}"


def _load(table):
    """A sweep table: a DataFrame, or a Parquet/CSV file of one."""
    import pandas as pd

    if isinstance(table, pd.DataFrame):
        return table
    from .sweep.runner import table_format

    path = Path(table)
    if not path.is_file():
        from .errors import ConfigError

        raise ConfigError(f"table {table}: no such file")
    return pd.read_parquet(path) if table_format(path, "table") == "parquet" else pd.read_csv(path)


# columns a plot reads as numbers (where a point ran: a failed point's are empty)
NUMERIC = ("batch", "context", "units", "run.units", "tokens_per_s", "tokens_per_s_per_user",
           "joules_per_token")  # fmt: skip


def _need(df, columns: list[str], kind: str) -> None:
    """The table has ``columns``, at least one row, and numbers in those of :data:`NUMERIC`
    where its points ran; else one :class:`ConfigError` naming the column, row and value."""
    import pandas as pd

    from .errors import ConfigError

    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ConfigError(f"plot {kind}: the table has no column(s) {', '.join(missing)} (a "
                          "pyaccel sweep table with those axes)")  # fmt: skip
    if df.empty:
        raise ConfigError(f"plot {kind}: the table has no rows (no point to draw)")
    ran = df[df["error"].isna()]
    for c in (c for c in columns if c in NUMERIC):
        bad = ran[c].notna() & pd.to_numeric(ran[c], errors="coerce").isna()
        if bad.any():
            row = bad.idxmax()
            hint = " (a sweep table gives the units runs used in run.units)" if c == "units" else ""
            raise ConfigError(f"plot {kind}: column {c} of row {row} is {ran.at[row, c]!r}, "
                              f"not a number{hint}")  # fmt: skip


def _units_column(df) -> str:
    """The column of the units each run used: ``run.units`` where ``units`` is an axis of the
    sweep (then ``units`` holds what was asked, e.g. ``auto``), else ``units``."""
    return "run.units" if "run.units" in df.columns else "units"


# a run's inputs whose sweep column holds what a point asked (missing where it left the axis
# out); the ``run.`` column beside it holds what the run resolved (sweep.runner._table). Units
# stay as asked: --units auto resolving to more units at a larger batch is one curve
RESOLVED = ("batch", "context", "weights", "kv")


def _resolved(df):
    """``df`` with each of :data:`RESOLVED` as the runs resolved it, where the table has it."""
    return df.assign(**{c: df["run." + c] for c in RESOLVED if "run." + c in df.columns})


# columns beside the system that split a curve when the table's points differ in them (else
# points of two contexts, say, would be joined into one zig-zag line), and how a label says each
SERIES_SPLIT = {"model": "{}", "context": "ctx {}", "weights": "{}", "kv": "kv {}",
                "units": "{} units"}  # fmt: skip


def _series(df) -> list[tuple[str, object]]:
    """(label, rows) per system, and per model, context, weight and KV format or unit count
    wherever the table's points differ in it, in table order."""
    keys = ["system"] + [c for c in SERIES_SPLIT if c in df.columns and df[c].nunique() > 1]
    out = []
    for key, rows in df.groupby(keys, sort=False, dropna=False):
        parts = key if isinstance(key, tuple) else (key,)
        said = [SERIES_SPLIT[c].format(_plain(v)) for c, v in zip(keys[1:], parts[1:], strict=True)]
        out.append((" / ".join([str(parts[0]), *said]), rows))
    return out


def _plain(value) -> str:
    """A table value for a label: whole floats (a CSV's 1024.0) as integers."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _mark_failed(ax, failed, x, y) -> None:
    """Failed points as red crosses at ``(x, y)`` (axes fraction when None) and one legend
    entry counting them."""
    n = len(failed)
    if not n:
        return
    xs = [x] * n if x is not None else []
    ys = [y] * n if y is not None else []
    if xs and ys:
        ax.plot(xs, ys, **FAILED_MARK, label=FAILED_LABEL.format(n=n))
    else:
        ax.plot([], [], **FAILED_MARK, label=FAILED_LABEL.format(n=n))


def frontier_plot(table, path: str | Path) -> Path:
    """The batch frontier: tokens/s per user against aggregate tokens/s (log-log), one curve per
    system over the table's batch sizes (labelled), failed points counted."""
    df = _resolved(_load(table))
    _need(df, ["system", "model", "batch", "tokens_per_s", "tokens_per_s_per_user", "error"],
          "frontier")  # fmt: skip
    plt = _figure()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ran, failed = df[df["error"].isna()], df[df["error"].notna()]
    for label, rows in _series(ran):
        rows = rows.sort_values("batch")
        ax.plot(rows["tokens_per_s"], rows["tokens_per_s_per_user"], "o-", label=label, ms=4)
        for _, r in rows.iterrows():
            ax.annotate(f"b{int(r['batch'])}", (r["tokens_per_s"], r["tokens_per_s_per_user"]),
                        fontsize=8, xytext=(3, 3), textcoords="offset points")  # fmt: skip
    _mark_failed(ax, failed, None, None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("aggregate tokens/s (all sequences of the batch)")
    ax.set_ylabel("tokens/s per user (one sequence)")
    ax.set_title("batch frontier: per-user speed against throughput (labels: batch)")
    ax.legend(fontsize=7, loc="best")
    _footer(
        fig,
        "decode steps only (prefill apart); each system's named assumptions: pyaccel systems SYS",
    )
    return _save(fig, path)


def capacity_plot(table, path: str | Path) -> Path:
    """Capacity map: the units each model needs (``--units auto``) against context length, one
    line per system, model and weight format; contexts that fit nowhere marked as failed."""
    df = _load(table)
    units = _units_column(df)
    _need(df, ["system", "model", "context", units, "error"], "capacity")
    plt = _figure()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    fmt = df["weights"] if "weights" in df.columns else df.get("run.weights")
    df = df.assign(_format=fmt.fillna("default") if fmt is not None else "default")
    ran, failed = df[df["error"].isna()], df[df["error"].notna()]
    for key, rows in ran.groupby(["system", "model", "_format"], sort=False):
        rows = rows.sort_values("context")
        ax.plot(rows["context"], rows[units], "o-", ms=4, label=" / ".join(map(str, key)))
    top = float(ran[units].max()) if len(ran) else 1.0
    for _, r in failed.iterrows():
        ax.plot([r["context"]], [top * 1.5], **FAILED_MARK)
    _mark_failed(ax, failed, None, None)
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    whole = FuncFormatter(lambda v, _: f"{v:,.0f}")  # 1,024 and 16 rather than 2^10 and 2^4
    ax.xaxis.set_major_formatter(whole)
    ax.yaxis.set_major_formatter(whole)
    ax.set_xlabel("context length (tokens cached per sequence)")
    ax.set_ylabel("units needed (wafers, chips, dies or GPUs)")
    ax.set_title("capacity: units a model needs against context (crosses: fit nowhere)")
    ax.legend(fontsize=7, loc="best")
    _footer(
        fig,
        "units from --units auto (the placer's fewest-units layout that fits every "
        "level of memory, KV cache included); per-unit capacities: pyaccel systems SYS",
    )
    return _save(fig, path)


def cost_plot(table, path: str | Path, prices: dict | None = None) -> Path:
    """The cost of speed: tokens/s per user against joules per token and, where a system has a
    named price (:func:`pyaccel.prices.load_prices`), against dollars per million tokens."""
    from .prices import dollars_per_mtok, load_prices

    df = _resolved(_load(table))
    _need(df, ["system", "model", "batch", _units_column(df), "tokens_per_s",
               "tokens_per_s_per_user", "joules_per_token", "error"], "cost")  # fmt: skip
    prices = load_prices() if prices is None else prices
    plt = _figure()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    ran, failed = df[df["error"].isna()], df[df["error"].notna()]
    unpriced = []
    for label, rows in _series(ran):
        rows = rows.sort_values("batch")
        left.plot(rows["tokens_per_s_per_user"], rows["joules_per_token"], "o-", ms=4,
                  label=label)  # fmt: skip
        dollars = [dollars_per_mtok(prices, r) for _, r in rows.iterrows()]
        if any(d is None for d in dollars):
            unpriced.append(label)
            continue
        right.plot(rows["tokens_per_s_per_user"], dollars, "o-", ms=4, label=label)
    for ax, ylabel in ((left, "energy (J per token)"), (right, "price ($ per million tokens)")):
        _mark_failed(ax, failed, None, None)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tokens/s per user")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7, loc="best")
    left.set_title("energy per token against per-user speed")
    right.set_title("price per token against per-user speed")
    note = f"; no price for: {', '.join(unpriced)}" if unpriced else ""
    _footer(
        fig,
        "J/token from each preset's power (named assumptions); $ from the named prices "
        f"in pyaccel/data/prices.toml (hourly price x units / tokens per hour){note}",
    )
    fig.tight_layout()
    return _save(fig, path)
