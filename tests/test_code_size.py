"""Small modules and functions that read top to bottom (issue 13): in ``pyaccel/`` no function
is over 60 lines and no module over 500 lines."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pyaccel"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500
SOURCES = sorted(PACKAGE.rglob("*.py"))


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_and_functions_are_small(path):
    text = path.read_text()
    n_lines = len(text.splitlines())
    assert n_lines <= MAX_MODULE_LINES, f"{path.name}: {n_lines} lines > {MAX_MODULE_LINES}"
    long = {
        f"{fn.name} (line {fn.lineno}): {fn.end_lineno - fn.lineno + 1} lines"
        for fn in _functions(ast.parse(text))
        if fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES
    }
    assert not long, f"{path.name}: functions over {MAX_FUNCTION_LINES} lines: {sorted(long)}"


def test_the_check_sees_the_package():
    assert len(SOURCES) > 50 and any(p.name == "cli.py" for p in SOURCES)
