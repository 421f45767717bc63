"""What the command line prints: its consoles, tables, progress bars and the text and JSON
forms of run records, reports, placements, comparisons and system listings (SPEC §7)."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer

from .errors import as_flags
from .io_util import dumps_strict
from .place.kinds import as_dict
from .records import ErrorRecord
from .units import fmt_bytes, fmt_seconds

if TYPE_CHECKING:
    from rich.table import Table


class _LazyConsole:
    """A rich ``Console`` made at its first use: a ``--json`` run prints through none, and
    importing rich is a noticeable part of a short command's start."""

    def __init__(self, **kwargs) -> None:
        self._kwargs, self._console = kwargs, None

    @property
    def real(self):
        """The ``Console`` itself (for rich's own objects, e.g. a ``Progress`` on it)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._kwargs)
        return self._console

    def __getattr__(self, name: str):
        return getattr(self.real, name)


out = _LazyConsole(emoji=False)


err = _LazyConsole(stderr=True, emoji=False, highlight=False)


def _new_table(*args, **kwargs) -> Table:
    """A rich ``Table`` (rich is imported with the first one a command prints)."""
    from rich.table import Table

    return Table(*args, **kwargs)


def _table(title: str | None, columns, caption: str | None = None) -> Table:
    """A table that reads at 80 columns: light rules and no edge padding. ``columns`` are
    header names; a ``>`` prefix right-aligns one (numbers), a ``~`` prefix marks free text.
    Names and numbers stay whole on one line; only free-text columns shrink on a narrow
    terminal, and they wrap (long words fold) instead of being cut with an ellipsis."""
    from rich import box

    t = _new_table(
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


# Fields whose text may name a setting as the Python API spells it (errors.option): the command
# line shows them with its flags (``units=4`` -> ``--units 4``).
_SETTING_TEXTS = ("reason", "placement_reason")


def _print_json(data) -> None:
    """Strict JSON on stdout: no NaN/Infinity literals (non-finite numbers are null); a
    placement's reason names settings as flags (:func:`~pyaccel.errors.as_flags`)."""
    sys.stdout.write(dumps_strict(_with_flags(data), indent=1) + "\n")


def _with_flags(data):
    """``data`` (JSON types) with every :data:`_SETTING_TEXTS` field, at any depth, as flags."""
    if isinstance(data, list):  # a list of numbers (a run's steps) is returned as it is
        nested = any(isinstance(d, (dict, list)) for d in data)
        return [_with_flags(d) for d in data] if nested else data
    if isinstance(data, dict):
        return {k: as_flags(v) if k in _SETTING_TEXTS and isinstance(v, str) else _with_flags(v)
                for k, v in data.items()}  # fmt: skip
    return data


@contextmanager
def _progress(show: bool):
    """Progress bars on stderr when it is a terminal (never with ``--json``): yields
    ``update(done, total, label)``, one bar per label, or ``None`` when nothing is shown."""
    if not show or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import Progress

    with Progress(console=err.real, transient=True) as bar:
        tasks: dict[str, int] = {}

        def update(done: int, total: int, label: str) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total)
            bar.update(tasks[label], completed=done, total=total)

        yield update


@contextmanager
def _user_errors():
    """Turn input errors into one ``error:`` line and exit status 2."""
    from .errors import PyaccelError, as_flags
    from .kernels import KernelBuildError

    try:
        yield
    except (PyaccelError, KernelBuildError) as exc:  # settings named as the flags that set them
        err.print(f"error: {as_flags(str(exc))}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def _labelled(bar, label: str):
    """``progress(done, total)`` for one labelled bar of :func:`_progress` (``None``: no bar)."""
    return None if bar is None else lambda done, total: bar(done, total, label)


def _print_warnings(warnings) -> None:
    """Each warning once, as a ``warning:`` line on stderr (text mode only; JSON carries them)."""
    for text in dict.fromkeys(warnings):
        err.print(f"warning: {text}", markup=False, highlight=False, soft_wrap=True)


def _spec_rows(extra: dict) -> list[tuple[str, str]]:
    """A speculative run's rows: the speed distribution, tokens a round, where a round goes."""
    spec = extra.get("spec_decode")
    if not spec:
        return []
    p10, p50, p90 = (extra[f"tokens_per_s_per_user_p{q}"] for q in (10, 50, 90))
    accept = "/".join(f"{a:.2f}" for a in spec["acceptance"])
    return [
        ("speculation", f"{spec['kind']} {spec['draft'] or ''}, k={spec['k']}".replace(" ,", ",")),
        ("tokens/s per user p10 / p50 / p90", f"{p10:,.1f} / {p50:,.1f} / {p90:,.1f}"),
        ("tokens per round (mean)", f"{spec['tokens_per_round_mean']:.2f} (acceptance {accept})"),
        (
            "round time",
            f"draft {fmt_seconds(spec['draft_s_per_round'])} + verify "
            f"{fmt_seconds(spec['verify_s_per_round'])}",
        ),  # fmt: skip
        ("acceptance source", spec["acceptance_source"]),
        *_drafter_rows(spec.get("drafter"), spec.get("target_units", 0)),
    ]


def _drafter_rows(d: dict | None, target_units: int) -> list[tuple[str, str]]:
    """The drafter's shape, where it runs (its own units with the target's ``target_units``
    make the run's) and where its shapes come from."""
    if not d:
        return []
    own = d["own_units"]
    where = (f"{own} units of its own ({target_units + own} in all with the target's "
             f"{target_units})" if own else "the target's units")  # fmt: skip
    shape = f"{d['model']}: {d['layers']} layer(s), hidden {d['hidden']:,}, vocab {d['vocab']:,}"
    return [
        ("drafter", f"{shape}; drafts as a {d['mode']}; on {where}"),
        ("drafter shapes", ("assumed from the kind's rule: " if d["shapes_assumed"] else "")
         + d["source"]),
    ]  # fmt: skip


def _ttft_rows(rec) -> list[tuple[str, str]]:
    """The time to first token and how the prompt was chunked, when it was emulated."""
    if rec.ttft_s is None:
        return []
    p = rec.prefill
    rows = [
        (
            "time to first token",
            f"{fmt_seconds(rec.ttft_s)} ({p['prompt_tokens']:,} prompt "
            f"tokens, {p['chunks']} chunk(s) of <= {p['chunk_tokens']:,})",
        )
    ]
    if p.get("drafter"):
        from .prefill_text import drafter_prefill_text

        rows.append(("drafter prefill", drafter_prefill_text(p)))
    return rows


def _print_run(rec) -> None:
    """A :class:`~pyaccel.records.RunRecord` as a table."""
    from .report import fmt_ratio

    table = _new_table(title=f"{rec.model} on {rec.units} x {rec.system}", show_header=False)
    rows = [
        ("tokens/s per user", f"{rec.tokens_per_s_per_user:,.1f}"),
        ("tokens/s total", f"{rec.tokens_per_s:,.1f}"),
        ("step time", fmt_seconds(rec.step_time_s)),
        (
            "lower bound",
            f"{fmt_seconds(rec.lower_bound_step_time_s)} (emulated / bound "
            f"{fmt_ratio(rec.emulated_over_lower_bound)})",
        ),
        ("bottleneck (what-if winner)", rec.bottleneck),
        ("busiest resource (occupancy)", rec.busiest_resource),
        ("energy per token", f"{rec.joules_per_token:.3g} J"),
        *_ttft_rows(rec),
        ("layout", json.dumps(rec.layout)),
        (
            "workload",
            f"batch {rec.batch}, context {rec.context}, tokens "
            f"{rec.tokens}, weights {rec.weights}, kv {rec.kv}",
        ),
    ]
    rows += _functional_rows(rec.functional)
    rows += _spec_rows(rec.extra)
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


# what `place --spec-decode` shows: the target's placement on the units a run would use
PLACE_SPEC_NOTE = (
    "--spec-decode: the unit count is the one a run uses with its drafter, which was placed as "
    "the run places it (beside the target, or on an ASIC's or LPU's units of its own) and fits; "
    "the table shows the target's bytes"
)


def _print_place(plc, speculative: bool = False) -> None:
    """What each unit holds; the runtime's reserve is a column, so the columns add up to used
    (every unit of a system has the same capacity, given once); ``speculative``: placed with
    a drafter (:data:`PLACE_SPEC_NOTE`)."""
    layout = json.dumps(as_dict(plc.layout))
    out.print(f"[bold]{plc.model}[/bold] on {plc.n_units} x {plc.system} {layout}")
    if plc.reason:
        out.print(as_flags(plc.reason), markup=False, highlight=False)
    rows = plc.to_dict()["per_unit"]
    cap = rows[0]["capacity_bytes"]
    t = _new_table(caption=f"used = weights + kv + buffers + reserved, of {fmt_bytes(cap)} per "
                      f"{plc.unit_noun}")  # fmt: skip
    experts = experts_by_unit(plc)
    cols = ("unit", "layers", *(("experts",) if experts else ()), "weights", "kv", "buffers",
            "reserved", "used")  # fmt: skip
    for col in cols:
        # wrap at spaces; a layer span folds; headers keep their width (never "…")
        t.add_column(col, overflow="fold", min_width=None if col == "layers" else len(col))
    for row in rows:
        layers = row["layers"]
        span = f"{layers[0]}..{layers[-1]} ({len(layers)})" if layers else "-"
        used = row["used_bytes"]
        held = (experts.get(row["unit"], "-"),) if experts else ()
        t.add_row(
            str(row["unit"]),
            span,
            *held,
            fmt_bytes(row["weight_bytes"]),
            fmt_bytes(row["kv_bytes"]),
            fmt_bytes(row["buffer_bytes"]),
            fmt_bytes(row["reserved_bytes"]),
            f"{fmt_bytes(used)} ({used / cap:.0%})",
        )
    out.print(t)
    if speculative:
        out.print(f"note: {PLACE_SPEC_NOTE}", markup=False, highlight=False)


def experts_by_unit(plc) -> dict[int, str]:
    """The routed experts each unit holds with expert parallelism, as id ranges (``0-31``),
    with the MoE layers they are of when a unit's experts differ between layers; empty when
    no layer spreads its experts."""
    held: dict[int, dict[tuple, list]] = {}
    for s in plc.layers:
        for unit in set(s.expert_units):
            ids = tuple(e for e, u in enumerate(s.expert_units) if u == unit)
            held.setdefault(unit, {}).setdefault(ids, []).append(s.layer)
    out = {}
    for unit, by_ids in held.items():
        parts = [_ranges(ids) + (f" (L{layers[0]}..{layers[-1]})" if len(by_ids) > 1 else "")
                 for ids, layers in by_ids.items()]  # fmt: skip
        out[unit] = "; ".join(parts)
    return out


def _ranges(ids: tuple[int, ...]) -> str:
    """``0-3, 7``: consecutive ids as ranges."""
    out, start = [], None
    for i, e in enumerate(ids):
        if start is None:
            start = e
        if i + 1 == len(ids) or ids[i + 1] != e + 1:
            out.append(f"{start}-{e}" if e > start else f"{e}")
            start = None
    return ", ".join(out)


def _rate(tokens_per_s: float) -> str:
    """Tokens/s for a table: one decimal below 1,000, whole tokens above (narrower columns)."""
    return f"{tokens_per_s:,.1f}" if tokens_per_s < 1000 else f"{tokens_per_s:,.0f}"


def layout_text(layout: dict) -> str:
    """A placement's layout in a few characters for a table: ``TxP`` (GPU, LPU: tensor-parallel
    width x pipeline stages), ``STRATEGY`` (wafers: their placement strategy), ``etched`` or
    ``as built`` (ASIC dies designed for this model, or the preset's)."""
    if layout.get("ep") and "pp" in layout:
        return f"EP{layout['ep']}x{layout['pp']}"
    if "tp" in layout and "pp" in layout:
        return f"{layout['tp']}x{layout['pp']}"
    if "strategy" in layout:
        return str(layout["strategy"])
    if "etched" in layout:
        return "etched" if layout["etched"] else "as built"
    return ", ".join(f"{k} {v}" for k, v in layout.items())


def _flagged(records) -> list:
    """``compare`` records with each error's settings named as the command line's flags
    (``--units 4``, not the Python API's ``units=4``)."""
    from dataclasses import replace

    from .errors import as_flags

    return [replace(r, error=as_flags(r.error)) if isinstance(r, ErrorRecord) else r
            for r in records]  # fmt: skip


def _print_compare(records) -> None:
    """``compare`` records (:class:`~pyaccel.records.RunRecord` or ``ErrorRecord``) as a table,
    a row each in their order (a system that could not run: the units asked, dashes and "see
    below"), then one line per system that could not run saying why. The batch column appears
    when the records are of several batch sizes (else the title says it), and the step time
    (1 / tokens per second per user) and energy per token are left to ``--json``, so the
    table reads at 80 columns."""
    batches = sorted({r.batch for r in records})
    several = len(batches) > 1
    title = records[0].model if records else "compare"
    if records and not several:
        title = f"{title}, batch {batches[0]}"
    ran = [r for r in records if not isinstance(r, ErrorRecord)]
    spec = next((r.extra["spec_decode"] for r in ran if "spec_decode" in r.extra), None)
    if spec:  # the numbers are over speculative rounds, the units the drafter's too
        head = f"{spec['kind']}:{spec['draft']}" if spec["draft"] else spec["kind"]
        title = f"{title}, --spec-decode {head},k={spec['k']}"
    t = _table(
        title,
        ("system", ">units", "~layout", *((">batch",) if several else ()), ">tok/s\nper user",
         ">tok/s\ntotal", ">TTFT", "bottleneck"),
        caption="tok/s: tokens per second per user and in total; layout: tensor-parallel width "
        "x pipeline stages (GPU, LPU), the wafers' placement strategy, or whether the ASIC's "
        "dies were etched for the model; TTFT: time to first token for one prompt of the "
        "context's length; bottleneck: the what-if winner (energy per token and step time: "
        "--json)",
    )  # fmt: skip
    for r in records:
        batch = (str(r.batch),) if several else ()
        if isinstance(r, ErrorRecord):
            t.add_row(r.system, str(r.units), "-", *batch, "-", "-", "-", "see below")
            continue
        t.add_row(r.system, str(r.units), layout_text(r.layout), *batch,
                  _rate(r.tokens_per_s_per_user), _rate(r.tokens_per_s),
                  fmt_seconds(r.ttft_s) if r.ttft_s is not None else "-",
                  r.bottleneck)  # fmt: skip
    out.print(t)
    for r in records:
        if isinstance(r, ErrorRecord):
            out.print(f"{r.system} (batch {r.batch}): {r.error}", markup=False, highlight=False)


def _say_written(paths, as_json: bool, removed=()) -> None:
    """``wrote PATH`` for each file a command wrote beside its output (``--trace``, ``--plot``),
    as ``plot`` says (not with ``--json``, whose stdout is the JSON alone), and ``removed PATH``
    for each plot of an earlier run it removed from ``--plot DIR`` (this run draws none such;
    on stderr with ``--json``: a file gone is never left unsaid)."""
    for path in [] if as_json else paths:
        out.print(f"wrote {path}", markup=False, highlight=False, soft_wrap=True)
    for path in removed:
        (err if as_json else out).print(
            f"removed {path} (an earlier run's: this run draws no {path.name})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
