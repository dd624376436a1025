"""A griffe extension for the API reference: gradexport's docstrings, read as mkdocstrings expects.

- gradexport's docstrings head their doctests ``Example:`` (sometimes with a
  note, ``Example (the blog's first example):``). griffe's Google parser knows
  only the plural ``Examples:`` as an examples section and renders any other
  title as an admonition of Markdown, where ``>>>`` lines and their output are
  not code. Those headings become ``Examples:``, a note the section's first line.
- Sphinx roles (``:func:`gradexport.replay```) would show literally in
  Markdown; they become inline code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_HEADING = re.compile(r"^(?P<indent>[ \t]*)Example(?: \((?P<note>[^)]*)\))?:[ \t]*$", re.M)
_ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|exc|obj):`~?([^`]+)`")


def _examples_heading(match: re.Match[str]) -> str:
    indent, note = match["indent"], match["note"]
    heading = f"{indent}Examples:"
    return f"{heading}\n{indent}    {note[0].upper()}{note[1:]}:\n" if note else heading


class MarkdownDocstrings(griffe.Extension):
    """Rewrite every docstring griffe loads as described in the module docstring."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            text = _HEADING.sub(_examples_heading, obj.docstring.value)
            obj.docstring.value = _ROLE.sub(r"`\1`", text)
