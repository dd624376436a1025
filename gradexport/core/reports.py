"""How report objects show in a notebook: HTML tables and blocks whose every name is escaped as data.

A report (`gradexport.records.NonfiniteReport`, `gradexport.tools.SavedMemory`, a diff's
summary, a check's result) prints as text with ``str()`` and shows in
Jupyter through ``_repr_html_``; these helpers build that HTML, so that a
module or parameter named ``<script>`` shows as text, never as markup.

Examples:
    >>> html_table(["node", "op"], [["n1", "<Mul>"]])
    '<table><tr><th>node</th><th>op</th></tr><tr><td>n1</td><td>&lt;Mul&gt;</td></tr></table>'
    >>> html_block("<b>", "a & b")
    '<p><b>&lt;b&gt;</b></p><pre>a &amp; b</pre>'
    >>> module_label(""), module_label("encoder.0")
    ('(model)', 'encoder.0')
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

__all__ = ["MODEL_LABEL", "html_block", "html_table", "in_module", "module_label"]

#: How every report names the top-level model, whose qualified module name is ``""``.
MODEL_LABEL = "(model)"


def module_label(name: str) -> str:
    """A module's qualified name as reports show it: `MODEL_LABEL` for the model itself (``""``)."""
    return name or MODEL_LABEL


def in_module(name: str | None) -> str:
    """`` in module 'encoder.0'``, `` in the model`` for ``""``, nothing for ``None`` (no module known).

    Examples:
        >>> in_module("act"), in_module(""), in_module(None)
        (" in module 'act'", ' in the model', '')
    """
    if name is None:
        return ""
    return f" in module {name!r}" if name else " in the model"


def html_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A ``<table>`` with a header row; every cell is ``str()`` of its value, escaped."""
    head = "".join(f"<th>{html.escape(str(header))}</th>" for header in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def html_block(title: str, text: str = "") -> str:
    """A bold title and, when given, a preformatted text, both escaped."""
    block = f"<pre>{html.escape(text)}</pre>" if text else ""
    return f"<p><b>{html.escape(title)}</b></p>{block}"
