"""What ``pyaccel plot KIND TABLE`` is given, checked before drawing: the JSON file or sweep
table each kind draws from, recognised by its keys, and a ConfigError naming TABLE, what it is
and the command that writes the right one when it is not that kind's input."""

from __future__ import annotations

from pathlib import Path

from .errors import ConfigError

# each kind's input, and the command line that writes it
MAKERS = {
    "roofline": (
        "a report --json file",
        "pyaccel report --system SYS --model M --json > FILE.json",
    ),
    "validation": ("a validate --json file", "pyaccel validate --json > FILE.json"),
}
TABLE_MAKER = "pyaccel sweep GRID.toml --out FILE.parquet"
# a JSON document's identifying keys -> which command wrote it (first match wins)
_OBJECTS = (
    ({"summary", "by_resource_s"}, "a report --json file"),
    ({"per_unit", "layers", "format_version"}, "a place --json file"),
    ({"tokens_per_s_per_user", "step_time_s"}, "a run --json file"),
    ({"params", "native_format"}, "a systems SYS --json file"),
)
_ROWS = (
    ({"published_tok_s", "emulated_tok_s"}, "a validate --json file"),
    ({"system", "tokens_per_s_per_user"}, "a compare --json file"),
    ({"system", "error"}, "a compare --json file"),
    ({"native_format", "assumptions"}, "a systems --json file"),
    ({"model_type", "params"}, "a models --json file"),
)


def json_kind(data) -> str:
    """Which command's ``--json`` output ``data`` looks like (``a report --json file``), or
    what it is (``an empty list``, ``a JSON object of other keys``)."""
    if isinstance(data, dict):
        found = [what for keys, what in _OBJECTS if keys <= data.keys()]
        return found[0] if found else ("an empty JSON object" if not data else
                                       "a JSON object of other keys")  # fmt: skip
    if isinstance(data, list):
        if not data:
            return "an empty list"
        if all(isinstance(r, dict) for r in data):
            found = [what for keys, what in _ROWS if all(keys <= r.keys() for r in data)]
            if found:
                return found[0]
        return "a list of other things"
    return f"a JSON {type(data).__name__}"


def check_json_input(kind: str, data, source: str) -> None:
    """Refuse ``data`` (read from ``source``) unless it is ``kind``'s input (roofline: a report
    with roofline ops; validation: at least one validate row)."""
    need, command = MAKERS[kind]
    what = json_kind(data)
    if what != need:
        raise ConfigError(f"plot {kind}: TABLE {source} is {what}; {kind} draws from {need} "
                          f"(write one with: {command})")  # fmt: skip
    if kind == "roofline":
        _check_roofline(data.get("roofline"), source, command)


def _check_roofline(roof, source: str, command: str) -> None:
    """Refuse a report's ``roofline`` without ops, or with a field the plot cannot draw."""
    from .roofline_points import malformed

    if not isinstance(roof, dict) or not isinstance(roof.get("ops"), list) or not roof["ops"]:
        raise ConfigError(f"plot roofline: TABLE {source} is a report --json file without "
                          f"'roofline' ops (write a new one with: {command})")  # fmt: skip
    problem = malformed(roof)
    if problem:
        raise ConfigError(f"plot roofline: TABLE {source}: {problem}")


def read_json_input(kind: str, path: str):
    """The JSON document at ``path``, checked to be ``kind``'s input."""
    import json

    need, command = MAKERS[kind]
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"plot {kind}: TABLE {path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"plot {kind}: TABLE {path} is not a JSON file ({exc}); {kind} "
            f"draws from {need} (write one with: {command})"
        ) from None
    check_json_input(kind, data, path)
    return data


def check_table_path(kind: str, path) -> None:
    """A sweep table's file: it exists and has a ``.parquet``/``.pq`` or ``.csv`` suffix (else a
    ConfigError naming TABLE, and for a JSON file the kinds that draw from one)."""
    suffix = Path(path).suffix.lower()
    if suffix not in (".parquet", ".pq", ".csv"):
        also = ("; plot roofline and plot validation draw from JSON files"
                if suffix == ".json" else "")  # fmt: skip
        raise ConfigError(f"plot {kind}: TABLE {path} is not a sweep table (.parquet or .csv, "
                          f"not '{suffix}'); write one with: {TABLE_MAKER}{also}")  # fmt: skip
    if not Path(path).is_file():
        raise ConfigError(f"plot {kind}: TABLE {path}: no such file")
