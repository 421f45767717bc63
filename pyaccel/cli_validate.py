"""``pyaccel validate``'s text output: emulated against published speed per row, how the rows
were emulated, and with ``--ranges`` each row's named unknowns against its published speed."""

from __future__ import annotations

from .cli_show import _rate, _table, out


def _print_validate(rows) -> None:
    """``validate`` rows as a table (emulated, published, ratio, bottleneck), then one line per
    row emulated at a CLI default or as its published workload, or not run; with ``--ranges``
    a table per row that ran (:func:`_print_reach`)."""
    t = _table(
        "emulated vs published decode speed",
        ("system", "model", ">emulated", ">published", ">ratio", "~bottleneck"),
        caption="tokens/s per user; ratio: emulated / published (a range is judged against its "
        "nearer end); bottleneck: the what-if winner",
    )
    for r in rows:
        ok = r.error is None
        t.add_row(r.system, r.model, _rate(r.emulated_tok_s) if ok else "-",
                  _rate(r.published_tok_s), f"{r.ratio:.2f}" if ok else "-",
                  r.bottleneck or "-")  # fmt: skip
    out.print(t)
    for r in rows:
        if r.error is not None:
            out.print(f"{r.where}: not run: {r.error}", markup=False, highlight=False)
            continue
        for d in r.notes:
            out.print(f"{r.where}: emulated at {d}", markup=False, highlight=False)
    for r in rows:
        if r.reach is not None and r.error is None:
            _print_reach(r)


def _print_reach(row) -> None:
    """One row's named unknowns: the speed at each end of each one's sourced range (or its
    slowest and fastest other choice), then those whose speeds span the published one."""
    published = _rate(row.low) if row.low == row.high else f"{_rate(row.low)}-{_rate(row.high)}"
    t = _table(
        f"{row.where}: emulated {_rate(row.emulated_tok_s)}, published "
        f"{published} tok/s per user; each named unknown over its sourced range",
        ("assumption", ">value", ">low end", ">tok/s", ">high end", ">tok/s"),
        caption="re-emulated on the same units with one assumption at a time at each end of its "
        "preset's range (a choice: its slowest and fastest other choices)",
    )
    for x in row.reach:
        low, high = (_rate(v) if v is not None else "-" for v in (x.low, x.high))
        t.add_row(x.param, _value(x.value), _value(x.low_value), low, _value(x.high_value), high)
    out.print(t)
    names = row.reached_by
    out.print(f"{row.where}: the published speed lies within the range of "
              f"{', '.join(names) if names else 'no single named unknown'}",
              markup=False, highlight=False)  # fmt: skip
    for x in row.reach:
        if x.error:
            out.print(f"  {x.param}: {x.error}", markup=False, highlight=False)


def _value(v) -> str:
    """An assumption's value for a table: a number in its shortest form, a choice as it is."""
    return f"{v:g}" if isinstance(v, (int, float)) else str(v)
