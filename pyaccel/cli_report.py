"""What ``pyaccel report`` prints: the bottleneck report's text and JSON forms, with a
speculative run's headline over its rounds, prefill, ``--functional`` metrics and
``--sensitivity`` tables (SPEC §5, §7)."""

from __future__ import annotations

import json

from .cli_show import (
    _functional_rows,
    _new_table,
    _print_json,
    _print_warnings,
    _spec_rows,
    _table,
    out,
)
from .records import bound_ratio
from .units import fmt_seconds

# what a speculative run's report tables cover (text and JSON)
SPEC_TABLES_NOTE = ("speculative: the summary is over the rounds (per generated token); the "
                    "resource, op-kind and layer tables are one verification step on the "
                    "target's units; the what-if is over the whole round")  # fmt: skip


NOT_MOVED = "not moved"  # a sensitivity end equal to the value: nothing was re-run


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
    def cell(change, value, row):
        if not row.ranged and value == row.value:
            return NOT_MOVED  # a whole number -/+PCT % rounds back to: nothing was re-run
        moved = "cannot run" if change is None else f"{change:+.1%}"
        return f"{moved} at {value:g}" if row.ranged else moved

    t = _table(
        f"step time with each named assumption at the ends of its preset's range, else "
        f"-{pct:g} % / +{pct:g} % (re-emulated)",
        ("assumption", ">value", f">low (-{pct:g} %)", f">high (+{pct:g} %)", "note"),
    )
    why = [r for r in rows if r.error]  # a sentence each: below the table, not in a column
    for r in rows:
        note = f"[{why.index(r) + 1}]" if r.error else ""
        t.add_row(r.param, f"{r.value:g}", cell(r.low_change, r.low_value, r),
                  cell(r.high_change, r.high_value, r), note)  # fmt: skip
    out.print(t)
    if any(NOT_MOVED in (cell(0.0, r.low_value, r), cell(0.0, r.high_value, r)) for r in rows):
        out.print(f"{NOT_MOVED}: a whole-number assumption that -/+{pct:g} % rounds back to "
                  "its value (not re-emulated)", markup=False, highlight=False)  # fmt: skip
    for n, r in enumerate(why, start=1):
        out.print(f"[{n}] {r.param}: {r.error}", markup=False, highlight=False)


def _print_report(rep, head=None) -> None:
    """The text report; ``head`` (a speculative run's :class:`RunSummary` over its rounds)
    replaces the headline numbers, whose tables stay the verification step's."""
    from .report import OCCUPANCY_NOTE, fmt_ratio

    s, h = rep.summary, head or rep.summary
    out.print(
        f"[bold]{h.model} on {h.units} x {h.system}[/bold]: "
        f"{h.tokens_per_s_per_user:,.1f} tok/s per user, {h.tokens_per_s:,.1f} "
        f"total; step {fmt_seconds(h.step_time_s)}, lower bound "
        f"{fmt_seconds(h.lower_bound_step_time_s)} "
        f"(x{fmt_ratio(bound_ratio(h.to_dict()) if head else rep.bound_ratio)}); "
        f"bottleneck [bold]{rep.bottleneck}[/bold] (what-if winner); busiest "
        f"{rep.busiest_resource} ({rep.busiest_share:.0%} occupancy)"
    )
    if head:
        out.print(f"{SPEC_TABLES_NOTE} (target: {s.units} unit(s); verification step "
                  f"{fmt_seconds(s.step_time_s)}, bound {fmt_seconds(s.lower_bound_step_time_s)})",
                  markup=False, highlight=False)  # fmt: skip
    if rep.meta.get("strategy"):  # wafer layouts are a named assumption: say which one ran
        out.print(
            f"layout {rep.meta['strategy']}, {rep.meta.get('stages', 1)} pipeline stage(s), "
            f"{rep.meta.get('micro_batches', 1)} micro-batch(es) in flight"
        )
    t = _new_table(title=f"time by resource class, {rep.step_title()}")
    for col in ("resource", "time", "occupancy"):
        t.add_column(col)
    for res, sec in sorted(rep.by_resource.items(), key=lambda kv: -kv[1]):
        t.add_row(res, fmt_seconds(sec), f"{rep.share(sec):.0%}")
    out.print(t)
    out.print(f"note: {OCCUPANCY_NOTE}", markup=False, highlight=False)
    for note in rep.notes()[1:]:  # why a share can pass 100 %; which pass the op kinds are
        out.print(f"note: {note}", markup=False, highlight=False)
    t = _new_table(title="by op kind")
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
    t = _new_table(title="what if one resource were twice as fast (re-emulated)")
    for col in ("resource", "step time", "gain"):
        t.add_column(col)
    for row in rep.what_if:
        t.add_row(row.resource, fmt_seconds(row.step_time_s), f"{row.gain:.3f}x")
    out.print(t)
    _print_prefill(rep.prefill)
    out.print("[bold]assumptions[/bold]")
    for a in rep.assumptions:
        out.print(f" - {a}", markup=False, highlight=False)
    for a in rep.left_out:
        out.print(f" - left out: {a}", markup=False, highlight=False)


def _print_prefill(pf: dict) -> None:
    """Where the prompt's prefill time goes (:meth:`pyaccel.prefill.Prefill.as_dict`)."""
    from .prefill_text import drafter_prefill_text, prefill_note

    if not pf:
        return
    ttft = pf["ttft_s"]
    t = _new_table(
        title=f"prefill: time to first token {fmt_seconds(ttft)}, {pf['prompt_tokens']:,} "
        f"prompt tokens in {pf['chunks']} chunk(s) of <= {pf['chunk_tokens']:,}"
    )
    if not pf.get("resource_s"):  # timed only (run): where the time goes is report's
        out.print(t.title, markup=False, highlight=False)
    else:
        for col in ("resource", "time", "of TTFT"):
            t.add_column(col)
        for res, sec in pf["resource_s"].items():
            t.add_row(res, fmt_seconds(sec), f"{sec / ttft:.0%}")
        out.print(t)
        out.print(f"note: {prefill_note(pf)}", markup=False, highlight=False)
    if pf.get("drafter"):  # a speculative run: the drafter prefilled the prompt too
        out.print(f"drafter prefill: {drafter_prefill_text(pf)}", markup=False, highlight=False)


def _print_spec(spec) -> None:
    """A speculative run's rounds under the report of its verification step."""
    table = _new_table(title="speculative decoding", show_header=False)
    for k, v in _spec_rows(spec.record()):
        table.add_row(k, v)
    table.add_row("tokens/s per user (mean)", f"{float(spec.rounds.tokens_per_s.mean()):,.1f}")
    out.print(table)


def _print_full_report(rep, result, rows, alts, pct, as_json: bool) -> None:
    """``report``: the :class:`~pyaccel.report.Report` of ``result`` with its formats and
    warnings, and the sensitivity ``rows`` and ``alts`` when ``--sensitivity PCT`` asked."""
    spec = getattr(result, "spec", None)
    if as_json:
        data = json.loads(rep.to_json())
        data.update(formats_from=result.formats_from, warnings=list(result.warnings))
        if result.trace.functional:  # --functional: the numerics metrics, as run gives them
            data["functional"] = dict(result.trace.functional)
        if spec is not None:  # headline numbers over the rounds; the rest is the verify step
            from .results import speculative_summary
            from .speculate import ASSUMPTIONS

            data["summary"], extra = speculative_summary(data["summary"], spec)
            data.update(extra)
            data["emulated_over_lower_bound"] = bound_ratio(data["summary"])  # as run --json's
            data["notes"] = [*data.get("notes", []), SPEC_TABLES_NOTE]
            data["assumptions"] = [*data["assumptions"], *ASSUMPTIONS]
        if rows is not None:
            data["sensitivity"] = [r.to_dict(pct) for r in rows]
            data["alternatives"] = [a.to_dict() for a in alts]
        _print_json(data)
    else:
        head = None
        if spec is not None:  # headline numbers over the rounds, as run gives them
            from .records import RunSummary
            from .results import speculative_summary

            head = RunSummary(**speculative_summary(rep.summary.to_dict(), spec)[0])
        _print_report(rep, head)
        for label, value in _functional_rows(result.trace.functional):
            out.print(f"{label}: {value}", markup=False, highlight=False)
        if spec is not None:
            _print_spec(spec)
        _print_warnings(result.warnings)
        if rows is not None:
            _print_sensitivity(rows, pct)
            _print_alternatives(alts)
