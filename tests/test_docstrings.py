"""Docstrings are written in what mkdocstrings' Google style reads natively, so the API reference renders them as written.

That is: an ``Examples:`` section (griffe reads no singular ``Example:``; it
would become an admonition whose ``>>>`` lines are prose), inline code or
Markdown links instead of Sphinx roles (``:func:`x``` shows literally), and
fenced code blocks instead of reStructuredText literal blocks (``text::``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gradexport"
PROBLEMS = {
    "a singular Example: heading": re.compile(r"^\s*Example(?: \([^)]*\))?:\s*$", re.MULTILINE),
    "a Sphinx role": re.compile(r":(?:func|class|meth|mod|data|attr|exc|obj):`"),
    "a reStructuredText literal block (text::)": re.compile(r"\S::\s*$", re.MULTILINE),
}


def _docstrings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in [tree, *ast.walk(tree)]:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=False)
            if text:
                found.append((getattr(node, "lineno", 1), text))
    return found


MODULES = sorted(path for path in PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.relative_to(PACKAGE).as_posix())
def test_docstrings_are_markdown(path):
    problems = [
        f"{path.name}:{line}: {name}: {match.group(0).strip()!r}"
        for line, text in _docstrings(path)
        for name, pattern in PROBLEMS.items()
        for match in pattern.finditer(text)
    ]
    assert not problems, "\n".join(problems)


def test_the_checks_find_what_they_look_for():
    text = "Example:\n    >>> 1\n\nSee :func:`gradexport.replay` and this::\n\n    code\n"
    assert all(pattern.search(text) for pattern in PROBLEMS.values())
    assert not any(pattern.search("Examples:\n    `gradexport.replay`, ``a::b``\n") for pattern in PROBLEMS.values())


def test_every_public_function_has_an_example():
    """The API reference shows an example for each function of gradexport.__all__ (a doctest, so it also runs)."""
    import inspect

    import gradexport

    missing = [
        name
        for name in gradexport.__all__
        if inspect.isfunction(getattr(gradexport, name)) and "Examples:" not in (inspect.getdoc(getattr(gradexport, name)) or "")
    ]
    assert not missing, missing
