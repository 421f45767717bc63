"""The command line's listings of presets: ``systems`` (every preset, or one system's
parameters with value, unit and source or named assumption) and ``models``."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields

from .cli_show import _print_json, _table, out

# A parameter's unit: the "(unit)" in its doc (fields.py: "SRAM per PE (bytes)"; a parenthesis
# that is not a unit, "(fabric minus I/O halo)", does not match), else its name's unit suffix.
_UNIT = re.compile(
    r"\s*\(((?:bytes|bits|Hz|W|s|cycles|FLOP|OP|rows|transistors|um\^2|mm\^2|x|0-1)"
    r"(?:/(?:s|cycle|bit))?(?: per direction)?)\)"
)


_UNIT_SUFFIXES = (
    ("_bytes_per_s", "bytes/s"),
    ("_bytes_per_cycle", "bytes/cycle"),
    ("_flops_per_s", "FLOP/s"),
    ("_ops_per_s", "OP/s"),
    ("_per_cycle", "per cycle"),
    ("_bytes", "bytes"),
    ("_cycles", "cycles"),
    ("_hz", "Hz"),
    ("_w", "W"),
    ("_s", "s"),
    ("_pes", "PEs"),
    ("transistors", "transistors"),
)


def _param_unit(name: str, meta: dict) -> str:
    """Unit of a hardware parameter for listings (``text`` for text, ``count`` for counts)."""
    if meta.get("text"):
        return "text"
    found = _UNIT.findall(meta["doc"])
    if found:
        return "fraction" if found[-1] == "0-1" else found[-1]
    unit = next((u for suffix, u in _UNIT_SUFFIXES if name.endswith(suffix)), None)
    return unit or ("count" if meta.get("integer") else "-")


def _param_value(value) -> str:
    """A parameter value as ``--set`` takes it back (shortest form that round-trips)."""
    if isinstance(value, float):
        short = f"{value:.6g}"
        return short if float(short) == value else repr(value)
    return str(value)


@dataclass(frozen=True)
class ParamRow:
    """One hardware parameter as ``systems SYS`` lists it: its ``--set`` key, value, unit and
    doc, whether ``--set`` takes it, and either its public ``source`` or (``source`` None) the
    named ``assumption`` it rests on; ``choices`` for a text parameter with a fixed set."""

    key: str
    value: object
    unit: str
    doc: str
    settable: bool
    source: str | None
    assumption: str
    choices: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """The row as ``systems SYS --json`` prints it (``source`` or ``assumption``, and
        ``choices`` only where there are some)."""
        out = {"key": self.key, "value": self.value, "unit": self.unit, "doc": self.doc,
               "settable": self.settable}  # fmt: skip
        if self.source is not None:
            out["source"] = self.source
        else:
            out["assumption"] = self.assumption
        if self.choices:
            out["choices"] = list(self.choices)
        return out


def _param_rows(spec) -> list[ParamRow]:
    """Every parameter of ``spec``'s kind, in the order of its dataclass."""
    from .hw.spec import PARAMS_BY_KIND

    return [
        ParamRow(
            key=f.name,
            value=getattr(spec.params, f.name),
            unit=_param_unit(f.name, f.metadata),
            doc=f.metadata["doc"],
            # informational parameters document the machine; no engine reads them, --set refuses
            settable=not f.metadata.get("informational", False),
            source=spec.sources.get(f.name),
            assumption=spec.assumptions.get(f.name, ""),
            choices=tuple(f.metadata.get("choices") or ()),
        )
        for f in fields(PARAMS_BY_KIND[spec.kind])
    ]


def _system_record(spec) -> dict:
    """``systems SYS --json``: the spec and each parameter with value, unit, doc and either its
    ``source`` or its named ``assumption``."""
    return {
        "name": spec.name,
        "kind": spec.kind,
        "description": spec.description,
        "native_format": spec.native_format,
        "power_w": spec.power_w,
        "params": [p.to_dict() for p in _param_rows(spec)],
    }


def _print_system(spec) -> None:
    from rich.text import Text

    params = _param_rows(spec)
    out.print(
        Text.assemble(
            (spec.name, "bold"),
            f" ({spec.kind}): {spec.description}; native format {spec.native_format}",
        )
    )
    n_set = sum(p.settable for p in params)
    out.print(
        f"{len(params)} parameters ({n_set} of them --set KEY=VALUE keys): value and "
        "unit, what it is, then its public source or the named assumption it rests on.",
        markup=False,
        highlight=False,
    )
    for p in params:
        unit = "" if p.unit in ("count", "text", "-") else f" {p.unit}"
        choices = f" (one of {', '.join(p.choices)})" if p.choices else ""
        if not p.settable:
            choices += " [informational: no engine reads it, not a --set key]"
        doc = _UNIT.sub("", p.doc, count=1)  # the unit is already beside the value
        out.print()
        value = f" = {_param_value(p.value)}{unit}: {doc}{choices}"
        out.print(Text.assemble((p.key, "bold"), value))
        how = f"source: {p.source}" if p.source is not None else f"assumption: {p.assumption}"
        out.print(Text(how, style="dim"))


def _params(count: int) -> str:
    """A parameter count in billions (B), or millions (M) for the tiny test models."""
    return f"{count / 1e9:,.2f} B" if count >= 1e9 else f"{count / 1e6:,.2f} M"


def _print_systems(specs, as_json: bool) -> None:
    """The hardware presets: a JSON list or a table."""
    if as_json:
        _print_json(
            [
                {
                    "name": s.name,
                    "kind": s.kind,
                    "description": s.description,
                    "native_format": s.native_format,
                    "power_w": s.power_w,
                    "assumptions": len(s.assumptions),
                }
                for s in specs
            ]
        )
        return
    t = _table(
        "systems",
        ("name", "kind", "format", ">power", ">assumed", "~description"),
        caption="format: native number format; power: per unit (chip, wafer or GPU); "
        "assumed: parameters resting on a named assumption (pyaccel systems SYS lists them)",
    )
    for s in specs:
        t.add_row(
            s.name,
            s.kind,
            s.native_format,
            f"{s.power_w:,.0f} W",
            str(len(s.assumptions)),
            s.description,
        )
    out.print(t)


@dataclass(frozen=True)
class ModelRow:
    """One model preset as ``models`` lists it: its HF ``model_type``, decoder layers, hidden
    width, attention kind (gqa, mla), routed experts and how many each token uses, and its
    parameter count."""

    name: str
    model_type: str
    layers: int
    hidden: int
    attention: str
    experts: int
    top_k: int
    params: int

    @classmethod
    def of(cls, name: str, cfg, param_count: int) -> ModelRow:
        """The row of preset ``name`` loaded as ``cfg`` (a ModelConfig)."""
        return cls(name, cfg.model_type, cfg.n_layers, cfg.hidden, cfg.attention, cfg.n_experts,
                   cfg.top_k, param_count)  # fmt: skip


def _print_models(rows: list[ModelRow], as_json: bool) -> None:
    """The model presets: a JSON list or a table."""
    if as_json:
        _print_json([asdict(r) for r in rows])
        return
    t = _table(
        "models",
        ("name", "type", ">params", ">layers", ">hidden", "attn", "experts"),
        caption="params: B = 10^9, M = 10^6; attn: attention (gqa: grouped-query, mla: "
        "multi-head latent); experts: routed experts (and how many each token uses)",
    )
    for r in rows:
        experts = f"{r.experts} (top {r.top_k})" if r.experts else "-"
        t.add_row(r.name, r.model_type, _params(r.params), str(r.layers), str(r.hidden),
                  r.attention, experts)  # fmt: skip
    out.print(t)
