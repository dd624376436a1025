"""How reports show: as terminal text and in a notebook, with every name escaped as data.

A report (`gradexport.records.NonfiniteReport`, `gradexport.tools.SavedMemory`, a diff's
summary, a check's result) prints as text with ``str()`` and shows in
Jupyter through ``_repr_html_``. In text, `printable` writes each name as
one visible line: a newline in a parameter name cannot forge a report line,
an ANSI escape sequence cannot reach the terminal, a lone surrogate cannot
stop the output stream (the command line also passes every line it prints
through it); the writers' labels use the same function. The HTML helpers
make a module or parameter named ``<script>`` show as text, never as markup.

Examples:
    >>> print(printable("layer\\n2 \\x1b[31mred\\ud800"))
    layer\\n2 \\x1b[31mred\\ud800
    >>> html_table(["node", "op"], [["n1", "<Mul>"]])
    '<table><tr><th>node</th><th>op</th></tr><tr><td>n1</td><td>&lt;Mul&gt;</td></tr></table>'
    >>> html_block("<b>", "a & b")
    '<p><b>&lt;b&gt;</b></p><pre>a &amp; b</pre>'
    >>> module_label(""), module_label("encoder.0")
    ('(model)', 'encoder.0')
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence

__all__ = ["MODEL_LABEL", "html_block", "html_table", "in_module", "module_label", "printable"]

#: How every report names the top-level model, whose qualified module name is ``""``.
MODEL_LABEL = "(model)"


def module_label(name: str) -> str:
    """A module's qualified name as reports show it: `MODEL_LABEL` for the model itself (``""``)."""
    return printable(name) or MODEL_LABEL


def in_module(name: str | None) -> str:
    """`` in module 'encoder.0'``, `` in the model`` for ``""``, nothing for ``None`` (no module known).

    Examples:
        >>> in_module("act"), in_module(""), in_module(None)
        (" in module 'act'", ' in the model', '')
    """
    if name is None:
        return ""
    return f" in module {name!r}" if name else " in the model"


# Control characters (ANSI escape sequences start with one), line and paragraph
# separators, lone surrogates and the noncharacters U+FFFE/U+FFFF would break a
# report or label line, a UTF-8 stream or an SVG's XML, so they are shown as escapes.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with control characters written as escapes, so that it is one visible line.

    Examples:
        >>> printable("a\\nb\\x00")
        'a\\\\nb\\\\x00'
    """
    return _UNPRINTABLE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _ESCAPES.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def html_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A ``<table>`` with a header row; every cell is ``str()`` of its value, escaped."""
    head = "".join(f"<th>{html.escape(str(header))}</th>" for header in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def html_block(title: str, text: str = "") -> str:
    """A bold title and, when given, a preformatted text, both escaped."""
    block = f"<pre>{html.escape(text)}</pre>" if text else ""
    return f"<p><b>{html.escape(title)}</b></p>{block}"
