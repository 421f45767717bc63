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


def _render(fig, fmt: str) -> bytes:
    """``fig`` as the bytes of a ``fmt`` file (png, svg or pdf); the figure is closed."""
    import matplotlib

    buf = io.BytesIO()
    try:
        with matplotlib.rc_context({"svg.hashsalt": "pyaccel"}):
            fig.savefig(buf, format=fmt, dpi=120, bbox_inches="tight", metadata=_NO_DATE[fmt])
    finally:
        _figure().close(fig)
    return buf.getvalue()


def _save(fig, path: Path) -> Path:
    """Write ``fig`` to ``path`` in the format its suffix names (png, svg or pdf)."""
    try:
        fmt = plot_format(path)
    except BaseException:
        _figure().close(fig)
        raise
    return write_atomic(path, _render(fig, fmt), "plot file")


def layer_plot(report, path: Path) -> Path:
    """Stacked bar per layer key: microseconds by resource class in the report's step (the
    first recorded), which the title and footer name."""
    return _save(_layer_figure(report), path)


def _layer_figure(report):
    plt = _figure()
    layers = list(report.by_layer)
    resources = sorted({r for d in report.by_layer.values() for r in d})
    fig, ax = plt.subplots(figsize=(max(6, len(layers) * 0.12), 4))
    bottom = [0.0] * len(layers)
    for res in resources:
        vals = [report.by_layer[layer].get(res, 0.0) * 1e6 for layer in layers]
        ax.bar(range(len(layers)), vals, bottom=bottom, label=res, width=0.9)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    step = max(1, len(layers) // 16)  # at most ~16 labels, each under its own bar
    ticks = list(range(0, len(layers), step))
    ax.set_xticks(ticks, [str(layers[i]) for i in ticks], fontsize=7)
    ax.set_xlim(-0.6, len(layers) - 0.4)
    ax.set_xlabel("layer key (embed, 0..L-1, head)")
    ax.set_ylabel("time (us)")
    s = report.summary
    ax.set_title(f"{s.model} on {s.units} x {s.system}: time per layer, step {report.step}")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _footer(fig, f"a bar: each resource class's busy time in the layer (union over units) in "
                 f"step {report.step} (context {report.step_context:,}); classes work at the "
                 "same time, so a bar can stand taller than the layer took")  # fmt: skip
    return fig


def roofline_plot(report: dict, path: Path) -> Path:
    """A true roofline of one machine (``report``: ``report --json``'s object, or
    :meth:`Report.as_dict`, with its ``roofline``): attainable FLOP/s per unit against
    operational intensity (log-log), the memory slope and each compute ceiling, every op of the
    step a point at its achieved rate (its FLOPs per unit over its busiest unit's time)."""
    return _save(_roofline_figure(report), path)


def _roofline_figure(report: dict):
    import numpy as np

    from .errors import ConfigError

    roof = report.get("roofline") or {}
    if not roof.get("ops"):
        raise ConfigError("plot roofline: the report has no 'roofline' ops (write it with "
                          "pyaccel report ... --json, which carries them)")  # fmt: skip
    ops = roof["ops"]
    plt = _figure()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = np.array([o["flops"] / o["bytes"] for o in ops])
    y = np.array([o["flops"] / o["units"] / o["emulated_s"] for o in ops])
    bw = roof["memory_bytes_per_s"]
    peaks = sorted({o["peak_flops_per_s"] for o in ops if o["peak_flops_per_s"] > 0})
    ridge = max(peaks, default=0.0) / bw  # the intensity where the memory slope meets compute
    span = np.logspace(np.log10(x.min() / 4), np.log10(max(x.max(), ridge) * 4), 200)
    for peak in peaks:
        ax.plot(span, np.minimum(bw * span, peak), "k-", lw=0.8)
        ax.annotate(f"{peak:.3g} FLOP/s", (span[-1], peak), fontsize=7, ha="right",
                    va="bottom")  # fmt: skip
    ax.plot(span, bw * span, "k:", lw=0.6, label=f"{roof['memory_resource']}: {bw:.3g} B/s")
    groups: dict[str, list[int]] = {}
    for i, o in enumerate(ops):
        groups.setdefault(o["class"], []).append(i)
    for name, idx in groups.items():
        ax.scatter(x[idx], y[idx], s=10, label=f"{name} ops ({len(idx)})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("operational intensity (FLOPs per byte moved)")
    ax.set_ylabel("achieved FLOP/s per unit")
    s = report.get("summary", {})
    ax.set_title(f"roofline: {s.get('model', '')} on {s.get('units', '')} x "
                 f"{s.get('system', '')} (one step's ops)")  # fmt: skip
    ax.legend(fontsize=7, loc="lower right")
    _footer(fig, f"peaks: the lower bound's per-unit rates ({roof['memory_resource']}, "
                 f"{roof['compute_resource']}); achieved: an op's FLOPs per unit over its "
                 "busiest unit's time in the first recorded step")  # fmt: skip
    return fig


def _footer(fig, assumptions: str) -> None:
    """The pyaccel version and the assumptions a plot rests on, under its axes."""
    from .records import pyaccel_version

    fig.text(0.01, -0.02, f"pyaccel {pyaccel_version()} - {assumptions}", fontsize=6,
             ha="left", va="top", wrap=True)  # fmt: skip


def report_plots(trace, report, folder: Path) -> tuple[list[Path], list[Path]]:
    """Write the report's plots into ``folder`` (and, for wafer runs, ``wafer.png``); the
    folder is created if missing, its parents never are. Returns (files written, files
    removed): a plot of :data:`REPORT_PLOT_FILES` this run does not draw (``wafer.png`` of an
    earlier wafer run) is removed, so that the folder holds one run's plots. Every picture is
    drawn before any file changes; then each is written atomically, and only then is the
    stale one removed (a plain file only: a link or anything else at the name is left)."""
    folder = make_output_folder(folder, "plot folder")
    figures = {"layers.png": lambda: _layer_figure(report),
               "roofline.png": lambda: _roofline_figure(report.as_dict())}  # fmt: skip
    if "link_busy_cycles" in trace.arrays:
        figures["wafer.png"] = lambda: _wafer_figure(trace)
    drawn = {name: _render(figure(), "png") for name, figure in figures.items()}
    written = [write_atomic(folder / name, data, "plot file") for name, data in drawn.items()]
    stale = [folder / name for name in REPORT_PLOT_FILES if name not in drawn]
    removed = [path for path in stale if path.is_file() and not path.is_symlink()]
    for path in removed:
        path.unlink()
    return written, removed


def compare_plot(records: list, path: Path) -> Path:
    """Tokens/s per user against total tokens/s over batch sizes, one line per system
    (``records``: ``compare``'s; those that could not run are counted in the legend)."""
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
            ax.annotate(f"b{r.batch}", (r.tokens_per_s, r.tokens_per_s_per_user), fontsize=8,
                        xytext=(3, 3), textcoords="offset points")  # fmt: skip
    failed = [r for r in records if not isinstance(r, RunRecord)]
    if failed:
        ax.plot([], [], marker="x", color="red", linestyle="none",
                label=f"failed (could not run): {len(failed)}")  # fmt: skip
    if by_system:
        ax.set_xscale("log")
        ax.set_yscale("log")
    else:  # nothing to scale log axes to: say so on the picture
        ax.text(0.5, 0.5, "no system could run the model", ha="center", va="center",
                transform=ax.transAxes)  # fmt: skip
        ax.set_xticks([])
        ax.set_yticks([])
    ax.set_xlabel("total tokens/s")
    ax.set_ylabel("tokens/s per user")
    ax.set_title(f"{records[0].model if records else ''}: latency vs throughput (labels: batch)")
    ax.legend(fontsize=7)
    return _save(fig, path)


VALIDATION_BAND = 1.5  # the band around agreement the validation plot shades (x/1.5 .. x*1.5)


def validate_plot(rows: list, path: Path) -> Path:
    """Emulated against published tokens/s per user, one labelled point per row that ran
    (``rows``: ``validate``'s rows or their ``--json`` objects), log-log; the diagonal is
    agreement, the shaded band x/1.5..x1.5; rows that could not run are counted as failed."""
    plt = _figure()
    fig, ax = plt.subplots(figsize=(6, 6))
    rows = [r if isinstance(r, dict) else r.to_dict() for r in rows]
    ran = [r for r in rows if r.get("emulated_tok_s")]
    failed = [r for r in rows if not r.get("emulated_tok_s")]
    xs, ys = [r["published_tok_s"] for r in ran], [r["emulated_tok_s"] for r in ran]
    ax.scatter(xs, ys, s=14, label=f"ran ({len(ran)})")
    for r in ran:
        ax.annotate(f"{r['system']} {r['model']}", (r["published_tok_s"], r["emulated_tok_s"]),
                    fontsize=7, xytext=(3, 2), textcoords="offset points")  # fmt: skip
    lo = min(xs + ys + [r["published_tok_s"] for r in failed], default=1.0) / 2
    hi = max(xs + ys + [r["published_tok_s"] for r in failed], default=10.0) * 2
    if failed:  # at their published speed, on the bottom edge
        ax.plot([r["published_tok_s"] for r in failed], [lo] * len(failed), marker="x",
                color="red", linestyle="none", clip_on=False,
                label=f"failed (could not run): {len(failed)}")  # fmt: skip
    band = VALIDATION_BAND
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.fill_between([lo, hi], [lo / band, hi / band], [lo * band, hi * band], color="0.9",
                    zorder=0, label=f"within x{band:g}")  # fmt: skip
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("published tokens/s per user")
    ax.set_ylabel("emulated tokens/s per user")
    ax.set_title("pyaccel validate: emulated against published speeds")
    ax.legend(fontsize=7, loc="upper left")
    _footer(fig, "published speeds are checks, never inputs (pyaccel/data/published.csv, with "
                 "sources); each emulated row rests on its preset's named assumptions")  # fmt: skip
    return _save(fig, path)


def wafer_heatmap(trace, path: Path) -> Path:
    """Wafer heatmaps of one pass: the time each PE's links were reserved, in microseconds
    (``link_busy_cycles`` over the wafer's clock; SPEC §6: reports give times in seconds), and
    the resident SRAM per PE in KiB (``sram_bytes``), wafers side by side (wafer engine only)."""
    return _save(_wafer_figure(trace), path)


def _wafer_figure(trace):
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

    link_us = strip(busy) / trace.clock_hz * 1e6  # the engine's cycles as a time (SPEC §6)
    fig, axes = plt.subplots(1, 2, figsize=(min(24, 7 + 3.2 * n_units), 4.5))
    for ax, data, title, unit in (
        (axes[0], link_us, "mesh link busy time per PE", "link busy time per pass (us)"),
        (axes[1], strip(sram) / 1024, "resident SRAM per PE", "KiB"),
    ):
        im = ax.imshow(data, aspect="auto", interpolation="nearest", cmap="viridis")
        ax.set_title(f"{trace.model} on {n_units} x {trace.system}: {title}", fontsize=8)
        ax.set_xlabel("PE x (wafers left to right)")
        ax.set_ylabel("PE y")
        fig.colorbar(im, ax=ax, label=unit)
    fig.tight_layout()  # keep the first colour bar's label clear of the second panel
    return fig
