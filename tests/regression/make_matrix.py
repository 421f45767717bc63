"""Regenerate tests/regression/run_matrix.json (run from the repository root).

    python tests/regression/make_matrix.py

Commit the new file only when numbers moved on purpose, and say in the commit which keys changed
and why (``python tests/regression/make_matrix.py --diff`` lists them against the committed file).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import cases, cli_invoker, record  # noqa: E402

HERE = Path(__file__).resolve().parent
MATRIX = HERE / "run_matrix.json"


def changed_keys(old, new, path="") -> list[str]:
    """Dotted paths whose values differ between two records."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += changed_keys(old.get(key), new.get(key), f"{path}.{key}" if path else key)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            out += changed_keys(a, b, f"{path}[{i}]")
        return out
    return [] if old == new else [path]


def main(argv: list[str]) -> int:
    invoke = cli_invoker()
    records = []
    for i, args in enumerate(cases()):
        records.append(record(args, invoke))
        print(f"{i + 1:4d} {' '.join(args)} -> exit {records[-1]['exit']}", file=sys.stderr)
    if "--diff" in argv:
        old = json.loads(MATRIX.read_text())["records"]
        for a, b in zip(old, records, strict=False):  # cases added or removed: the common prefix
            keys = changed_keys(a, b)
            if keys:
                print(" ".join(a["args"]), "::", ", ".join(keys))
        return 0
    text = json.dumps({"records": records}, indent=1, sort_keys=True, allow_nan=False) + "\n"
    tmp = MATRIX.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(MATRIX)
    print(f"wrote {MATRIX} ({len(records)} records)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
