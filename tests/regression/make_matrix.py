"""Regenerate tests/regression/run_matrix.json (run from the repository root).

    python tests/regression/make_matrix.py

Commit the new file only when numbers moved on purpose, and say in the commit which keys changed
and why (``python tests/regression/make_matrix.py --diff`` lists them against the committed file).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import cases, cli_invoker, record  # noqa: E402

HERE = Path(__file__).resolve().parent
MATRIX = HERE / "run_matrix.json"


# The functional numerics' accuracy figures reduce float32 arrays in an order NumPy's SIMD
# kernels choose per version and CPU (numpy 2.4.6 moved them by ~1e-8 relative); they are
# compared to this relative tolerance. Every other key, every timing key included, is exact.
NUMERIC_KEYS = {"mean_abs_logit_error", "max_abs_logit_error", "perplexity_ratio",
                "reference_perplexity"}  # fmt: skip
NUMERIC_REL_TOL = 1e-6


def changed_keys(old, new, path="") -> list[str]:
    """Dotted paths whose values differ between two records (:data:`NUMERIC_KEYS` beyond
    :data:`NUMERIC_REL_TOL`)."""
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
    if path.rpartition(".")[2] in NUMERIC_KEYS and _floats(old, new):
        return [] if math.isclose(old, new, rel_tol=NUMERIC_REL_TOL) else [path]
    return [] if old == new else [path]


def _floats(*values) -> bool:
    return all(isinstance(v, float) for v in values)


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
