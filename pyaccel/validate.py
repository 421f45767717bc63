"""``pyaccel validate``: emulate every row of a published-speed table and set the two side by
side (SPEC §9: a published speed is a check, never an input).

The table is a CSV with the columns of :data:`COLUMNS` (``bench/published.csv`` is the shipped
one; a copy ships as package data). Extra columns (date, source, quality, notes) are carried
along and ignored. A row's published speed may be a range (``14357-17000``): it is judged
against the end nearer the emulated speed. A batch or context that does not start with an
integer (``unknown (served under load)``) is emulated at the CLI default, and the row says so;
one whose leading integer is not the whole number (``1.5``, ``8k``, ``1,024``) is refused.
A context that names the published workload, ``N in / M out``, is emulated as that workload:
M decode steps from context N, judged by their mean speed (the speed a user of that workload
sees, the context growing to N + M); other rows emulate :data:`VALIDATE_TOKENS` steps. An
optional column ``sets`` holds a row's hardware overrides, ``KEY=VALUE`` separated by ``;``
(as ``--set`` takes them: the configuration a measurement was taken in, e.g. an eager-mode GPU
run's ``launch_mode=eager``).
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .errors import ConfigError, PyaccelError
from .hw.io import unit_count
from .workload import Workload

COLUMNS = ("system", "model", "weights", "units", "batch", "context", "tokens_per_s_per_user")
# emulated decode steps per row without a published output length: enough for the context to
# grow, few enough to stay fast
VALIDATE_TOKENS = 16
DEFAULTS = {"batch": Workload.batch, "context": Workload.context}
_RANGE = re.compile(r"^\s*([0-9.eE+]+)\s*(?:-|–|to)\s*([0-9.eE+]+)\s*$")
_IN_OUT = re.compile(r"^\s*(\d+)\s*in\s*/\s*(\d+)\s*out\s*$")
_SET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S+$")
# a batch or context whose leading integer is not the whole number: 1.5, 1e3, 8k, 1,024, 1-4
_PART_NUMBER = re.compile(r"^\s*[-+]?\d+(?=[^\d\s(])")


@dataclass(frozen=True)
class PublishedRow:
    """One row of a published-speed table, parsed: the case to emulate (``tokens`` decode steps
    from ``context``) and the published tokens/s per user (``low`` == ``high`` unless the table
    gives a range). ``notes``: how the fields the table leaves open or spells out as a
    workload are emulated; ``sets``: the row's ``--set`` overrides (``KEY=VALUE``)."""

    line: int
    system: str
    model: str
    weights: str | None
    units: int | str
    batch: int
    context: int
    low: float
    high: float
    notes: tuple[str, ...] = ()
    tokens: int = VALIDATE_TOKENS
    sets: tuple[str, ...] = ()

    def workload(self) -> Workload:
        """The decode the row is emulated at (its batch, context, weights and steps)."""
        return Workload(batch=self.batch, context=self.context, tokens=self.tokens,
                        weights=self.weights)  # fmt: skip


@dataclass(frozen=True)
class ValidationRow:
    """One row's outcome. ``published_tok_s`` is the published end nearer the emulated speed;
    ``ratio`` is emulated / published; ``error`` says why a row could not run (then the
    emulated fields are None). ``notes``: the row's fields emulated at CLI defaults, a
    published workload emulated as such, and the row's sets (:class:`PublishedRow`).
    ``reach``: with ``--ranges``, the speeds each ranged named assumption spans
    (:mod:`pyaccel.validate_ranges`: objects with ``reaches(low, high)`` and ``to_dict()``),
    else None; ``low``/``high``: the published speed's ends; ``row``: the table row judged
    (its line and the case emulated), None for a row made by hand."""

    system: str
    model: str
    published_tok_s: float
    emulated_tok_s: float | None
    ratio: float | None
    bottleneck: str | None
    error: str | None
    notes: tuple[str, ...] = field(default=(), compare=False)
    reach: tuple | None = field(default=None, compare=False)
    low: float = field(default=0.0, compare=False)
    high: float = field(default=0.0, compare=False)
    row: PublishedRow | None = field(default=None, compare=False)

    @property
    def where(self) -> str:
        """The row as text names it: system, model and, from a table, its line."""
        line = f" (line {self.row.line})" if self.row is not None else ""
        return f"{self.system} {self.model}{line}"

    @property
    def reached_by(self) -> list[str]:
        """The named assumptions whose sourced range alone spans the published speed."""
        return [r.param for r in self.reach or () if r.reaches(self.low, self.high)]

    def to_dict(self) -> dict:
        """The ``validate --json`` entry: the judgement, the table row's line and the case it
        was emulated as (weights, units, batch, context, decode steps, sets) with the notes on
        how (with ``--ranges``: also ``ranges`` and ``published_within_range_of``)."""
        out = {k: getattr(self, k) for k in ("system", "model", "published_tok_s",
               "emulated_tok_s", "ratio", "bottleneck", "error")}  # fmt: skip
        if self.row is not None:
            r = self.row
            out.update(line=r.line, weights=r.weights, units=r.units, batch=r.batch,
                       context=r.context, tokens=r.tokens, sets=list(r.sets))  # fmt: skip
        out["notes"] = list(self.notes)
        if self.reach is not None:
            out["ranges"] = [r.to_dict() for r in self.reach]
            out["published_within_range_of"] = self.reached_by
        return out


def shipped_table() -> str:
    """The shipped published-speed table (package data; equal to ``bench/published.csv``)."""
    return resources.files("pyaccel.data").joinpath("published.csv").read_text(encoding="utf-8")


def read_table(text: str, where: str) -> list[PublishedRow]:
    """The rows of a published-speed CSV; a missing column or a malformed value raises
    :class:`ConfigError` naming the file, line, column and value."""
    reader = csv.reader(io.StringIO(text.removeprefix("\ufeff")))  # a spreadsheet's BOM
    header = [name.strip() for name in next(reader, [])]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ConfigError(f"{where}: missing column(s) {', '.join(missing)}; a published-speed "
                          f"table has the columns {', '.join(COLUMNS)}")  # fmt: skip
    rows, end = [], reader.line_num
    for fields in reader:  # a row's line is where it starts: after blank lines, before the
        start, end = end + 1, reader.line_num  # further lines of a quoted multi-line note
        if fields:
            raw = dict(zip(header, fields, strict=False))
            rows.append(_parse({c: raw.get(c) for c in header}, where, start))
    if not rows:
        raise ConfigError(f"{where}: no rows below the header")
    return rows


def _parse(raw: dict, where: str, line: int) -> PublishedRow:
    def bad(column: str, must: str) -> ConfigError:
        return ConfigError(f"{where} line {line}: column '{column}' must be {must}, got "
                           f"{raw.get(column)!r}")  # fmt: skip

    for column in ("system", "model"):
        if not (raw.get(column) or "").strip():
            raise bad(column, "a name")
    low, high = _speed(raw["tokens_per_s_per_user"] or "")
    if not 0 < low <= high < math.inf:
        raise bad("tokens_per_s_per_user", "a positive number or a range LOW-HIGH")
    try:  # read as --units reads it: 'auto' in any case
        units = unit_count(raw["units"] or "")
    except ConfigError:
        raise bad("units", "a positive integer or 'auto'") from None
    values, notes = {}, []
    for column, default in DEFAULTS.items():
        number = re.match(r"\s*([-+]?\d+)", raw[column] or "")
        if number and int(number.group(1)) < 1:
            raise bad(column, "a positive integer, or text saying it is not published")
        if _PART_NUMBER.match(raw[column] or ""):
            raise bad(
                column,
                "a whole number alone or before words ('1 per user'), not a "
                "fraction, a multiple or a list ('1.5', '8k', '1,024')",
            )
        found = re.match(r"\s*(\d+)", raw[column] or "")
        values[column] = int(found.group(1)) if found else default
        if not found:
            notes.append(f"{column} {default} (published: {(raw[column] or '').strip()!r})")
    tokens, workload = VALIDATE_TOKENS, _IN_OUT.match(raw["context"] or "")
    if workload:
        tokens = int(workload.group(2))
        if tokens < 1:
            raise bad("context", "'N in / M out' with M >= 1 generated tokens")
        notes.append(f"context {values['context']} for {tokens} generated tokens, their mean "
                     f"speed (published: {raw['context'].strip()!r})")  # fmt: skip
    sets = tuple(s.strip() for s in (raw.get("sets") or "").split(";") if s.strip())
    if not all(_SET.match(s) for s in sets):
        raise bad("sets", "KEY=VALUE overrides separated by ';'")
    if sets:
        notes.append(f"--set {' --set '.join(sets)} (the table's sets)")
    return PublishedRow(line, raw["system"].strip(), raw["model"].strip(),
                        (raw["weights"] or "").strip() or None,
                        units, values["batch"],
                        values["context"], low, high, tuple(notes), tokens, sets)  # fmt: skip


def _speed(text: str) -> tuple[float, float]:
    """(low, high) of a published speed: one number or a range; (0, 0) when neither."""
    try:
        found = _RANGE.match(text)
        if found:
            return float(found.group(1)), float(found.group(2))
        value = float(text)
        return value, value
    except ValueError:
        return 0.0, 0.0


def judge(row: PublishedRow) -> tuple[ValidationRow, object | None]:
    """Emulate one row (its batch, context, weights and decode steps) and judge its mean speed
    over those steps against the nearer end of its published speed: the judged row, and the
    :class:`~pyaccel.results.Run` it came from (None when the row could not run)."""
    from .results import run_and_record

    try:
        # decode speed is what is judged: the prompt's prefill is not emulated
        result, rep, _ = run_and_record(row.model, row.system, row.units, row.workload(),
                                        list(row.sets), prefill=None)  # fmt: skip
    except PyaccelError as exc:
        return ValidationRow(row.system, row.model, row.high, None, None, None, str(exc),
                             row.notes, low=row.low, high=row.high, row=row), None  # fmt: skip
    emulated = result.trace.tokens_per_s_per_user
    published = min((row.low, row.high), key=lambda p: abs(p - emulated))
    judged = ValidationRow(row.system, row.model, published, emulated, emulated / published,
                           rep.bottleneck, None, row.notes, low=row.low, high=row.high,
                           row=row)  # fmt: skip
    return judged, result


def validate_row(row: PublishedRow) -> ValidationRow:
    """One row emulated and judged (:func:`judge`)."""
    return judge(row)[0]


def load_table(path: str | Path | None = None) -> list[PublishedRow]:
    """The rows of the published-speed table at ``path`` (default: the shipped one)."""
    if path is None:
        return read_table(shipped_table(), "shipped published.csv")
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({exc.__class__.__name__})") from None
    return read_table(text, str(path))


def validate(path: str | Path | None = None, progress=None) -> list[ValidationRow]:
    """Every row of the published-speed table at ``path`` (default: the shipped one),
    emulated and judged; ``progress(done, total)`` after each row."""
    rows, out = load_table(path), []
    for row in rows:
        out.append(validate_row(row))
        if progress:
            progress(len(out), len(rows))
    return out
