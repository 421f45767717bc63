"""Plots (matplotlib, written atomically; PNG, SVG or PDF by the file's suffix): per-layer time by
resource, roofline of the ops, and tokens/s per user against total tokens/s."""

from __future__ import annotations

import io
from pathlib import Path

from .io_util import make_output_folder, plot_format, write_atomic

REPORT_PLOT_FILES = ("layers.png", "roofline.png", "wafer.png")
"""The files ``report --plot DIR`` may write (``wafer.png`` for wafer runs only)."""


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# no creation date, and fixed SVG element ids: the same inputs give the same file bytes
_NO_DATE = {"png": {}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}


def _save(fig, path: Path) -> Path:
    """Write ``fig`` to ``path`` in the format its suffix names (png, svg or pdf)."""
    import matplotlib

    buf = io.BytesIO()
    try:
        fmt = plot_format(path)
        with matplotlib.rc_context({"svg.hashsalt": "pyaccel"}):
            fig.savefig(buf, format=fmt, dpi=120, bbox_inches="tight", metadata=_NO_DATE[fmt])
    finally:
        _figure().close(fig)
    return write_atomic(path, buf.getvalue(), "plot file")


def layer_plot(report, path: Path) -> Path:
    """Stacked bar per layer key: seconds by resource class in the first recorded step."""
    plt = _figure()
    layers = list(report.by_layer)
    resources = sorted({r for d in report.by_layer.values() for r in d})
    fig, ax = plt.subplots(figsize=(max(6, len(layers) * 0.12), 4))
    bottom = [0.0] * len(layers)
    for res in resources:
        vals = [report.by_layer[layer].get(res, 0.0) * 1e6 for layer in layers]
        ax.bar(range(len(layers)), vals, bottom=bottom, label=res, width=0.9)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_xlabel("layer (embed, 0..L-1, head)")
    ax.set_ylabel("time (us)")
    ax.set_title(f"{report.summary.model} on {report.summary.system}: time per layer")
    ax.legend(fontsize=7)
    return _save(fig, path)


def roofline_plot(trace, path: Path) -> Path:
    """Each op's emulated time against its lower bound (log-log); the diagonal is the bound."""
    from .sim.roofline import roofline

    plt = _figure()
    model, system, placement, work = trace.inputs
    roof = roofline(model, system, placement, work, int(trace.step_context[0]))
    df = trace.to_dataframe()
    first = df[df["step"] == df["step"].min()]
    emulated = first.groupby("op")["duration_s"].sum()
    xs, ys, cs = [], [], []
    colours = {}
    for b in roof.ops:
        if b.op in emulated.index and b.seconds > 0:
            xs.append(b.seconds)
            ys.append(emulated[b.op] + first[first["op"] == f"{b.op}.launch"]["duration_s"].sum())
            cs.append(colours.setdefault(b.resource, f"C{len(colours)}"))
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.scatter(xs, ys, c=cs, s=8)
    lo, hi = min(xs + ys), max(xs + ys)
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("lower bound (s)")
    ax.set_ylabel("emulated (s)")
    for res, c in colours.items():
        ax.scatter([], [], c=c, label=f"bound by {res}")
    ax.legend(fontsize=7)
    ax.set_title("ops: emulated vs lower bound")
    return _save(fig, path)


def report_plots(trace, report, folder: Path) -> list[Path]:
    """Write the report's plots into ``folder`` (and, for wafer runs, ``wafer.png``); the
    folder is created if missing, its parents never are."""
    folder = make_output_folder(folder, "plot folder")
    out = [
        layer_plot(report, folder / "layers.png"),
        roofline_plot(trace, folder / "roofline.png"),
    ]
    if "link_busy_cycles" in trace.arrays:
        out.append(wafer_heatmap(trace, folder / "wafer.png"))
    return out


def compare_plot(records: list, path: Path) -> Path:
    """Tokens/s per user against total tokens/s over batch sizes, one line per system
    (``records``: ``compare``'s; those that could not run are left out)."""
    from .records import RunRecord

    plt = _figure()
    fig, ax = plt.subplots(figsize=(6, 4))
    by_system: dict[str, list] = {}
    for r in records:
        if isinstance(r, RunRecord):
            by_system.setdefault(r.system, []).append(r)
    for name, rows in by_system.items():
        rows.sort(key=lambda r: r.batch)
        ax.plot([r.tokens_per_s for r in rows], [r.tokens_per_s_per_user for r in rows], "o-",
                label=name)  # fmt: skip
        for r in rows:
            ax.annotate(str(r.batch), (r.tokens_per_s, r.tokens_per_s_per_user), fontsize=6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("total tokens/s")
    ax.set_ylabel("tokens/s per user")
    ax.set_title(f"{records[0].model if records else ''}: latency vs throughput (labels: batch)")
    ax.legend(fontsize=7)
    return _save(fig, path)


def validate_plot(rows: list, path: Path) -> Path:
    """Emulated against published tokens/s per user, one labelled point per row that ran
    (``rows``: ``validate``'s), log-log; the diagonal is agreement, the band x/2..x2."""
    plt = _figure()
    fig, ax = plt.subplots(figsize=(5, 5))
    ran = [r for r in rows if r.emulated_tok_s]
    xs, ys = [r.published_tok_s for r in ran], [r.emulated_tok_s for r in ran]
    ax.scatter(xs, ys, s=12)
    for r in ran:
        ax.annotate(f"{r.system} {r.model}", (r.published_tok_s, r.emulated_tok_s), fontsize=6)
    lo, hi = min(xs + ys, default=1.0) / 2, max(xs + ys, default=10.0) * 2
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.fill_between([lo, hi], [lo / 2, hi / 2], [lo * 2, hi * 2], color="0.9", zorder=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("published tokens/s per user")
    ax.set_ylabel("emulated tokens/s per user")
    ax.set_title("pyaccel validate")
    return _save(fig, path)


def wafer_heatmap(trace, path: Path) -> Path:
    """Wafer heatmaps of one pass: cycles each PE's links were reserved (``link_busy_cycles``)
    and resident SRAM bytes per PE (``sram_bytes``), wafers side by side (wafer engine only)."""
    import numpy as np

    plt = _figure()
    busy, sram = trace.arrays["link_busy_cycles"], trace.arrays["sram_bytes"]
    n_units = busy.shape[0]
    gap = max(1, busy.shape[2] // 50)

    def strip(arr):
        pad = np.full((arr.shape[1], gap), np.nan)
        parts = []
        for u in range(n_units):
            parts += [arr[u].astype(float), pad]
        return np.hstack(parts[:-1])

    fig, axes = plt.subplots(1, 2, figsize=(min(24, 7 + 3.2 * n_units), 4.5))
    for ax, data, title, unit in (
        (axes[0], strip(busy), "mesh link busy per PE", "cycles per pass"),
        (axes[1], strip(sram) / 1024, "resident SRAM per PE", "KiB"),
    ):
        im = ax.imshow(data, aspect="auto", interpolation="nearest", cmap="viridis")
        ax.set_title(f"{trace.model} on {n_units} x {trace.system}: {title}", fontsize=8)
        ax.set_xlabel("PE x (wafers left to right)")
        ax.set_ylabel("PE y")
        fig.colorbar(im, ax=ax, label=unit)
    fig.tight_layout()  # keep the first colour bar's label clear of the second panel
    return _save(fig, path)
