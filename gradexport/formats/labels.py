"""The text of every label, decided once for all writers.

Node labels by kind: a root shows its name and tensor; a backward node its op
(``MulBackward0``), its module path when the diagram draws no module boxes,
its special kind and, with ``show_saved``, what it saved; a leaf its
parameter names and tensor; a None slot ``None``; a folded module (from
`gradexport.collapse`) its path and how many nodes it stands for.

Label lines are plain text with control characters shown as escapes (a
newline in a name reads ``\\n``); each writer escapes them for its syntax.
Element ids are safe in every syntax without quoting: ``n0``, ``n1``... for
the graph model's ids, ``u<hex>`` for any other id.

Examples:
    >>> node_lines({"kind": "leaf", "names": ["w"], "shape": [3], "dtype": "float64"}, show_saved=False, show_module=False)
    ('w', '(3,) float64')
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from .source import is_model_id
from .styles import NODE_STYLES

__all__ = ["element_id", "look_signature", "node_class", "node_lines", "printable", "saved_text", "tensor_text"]


def element_id(node: Any) -> str:
    """An id for ``node`` that DOT and Mermaid accept as is, distinct for distinct nodes.

    The graph model's ids (``n0``, ``n1``...) stay as they are; any other id
    becomes ``u`` followed by the hex of its ``repr``, so that no name,
    keyword or punctuation ever reaches the syntax as an id.

    Examples:
        >>> element_id("n12"), element_id("end"), element_id(3)
        ('n12', 'u27656e6427', 'u33')
    """
    if type(node) is str and is_model_id(node):
        return node
    return "u" + repr(node).encode("utf-8", "surrogatepass").hex()


# Control characters, line and paragraph separators, lone surrogates and the
# noncharacters U+FFFE/U+FFFF would break a label line, the file's UTF-8 or the
# SVG's XML, so they are shown as escapes.
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


def tensor_text(record: Mapping[str, Any]) -> str:
    """``(4, 4)``, plus the dtype unless float32 and the device unless cpu.

    Examples:
        >>> tensor_text({"shape": [2], "dtype": "float64", "device": "cpu"})
        '(2,) float64'
    """
    parts = [str(tuple(record["shape"]))] if "shape" in record else []
    dtype = record.get("dtype", "float32")
    device = record.get("device", "cpu")
    if dtype != "float32":
        parts.append(str(dtype))
    if device != "cpu":
        parts.append(str(device))
    return " ".join(parts)


_SAVED_VALUE_CHARS = 40


def saved_text(value: Any) -> str:
    if isinstance(value, Mapping) and "shape" in value:
        return tensor_text(value)
    if isinstance(value, Mapping) and "unavailable" in value:
        return f"unavailable ({value['unavailable']})"
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= _SAVED_VALUE_CHARS else text[: _SAVED_VALUE_CHARS - 1] + "…"


def node_class(attributes: Mapping[str, Any]) -> str:
    kind = attributes.get("kind", "backward")
    if kind == "backward" and attributes.get("special"):
        return "special"
    return kind if kind in NODE_STYLES else "backward"


def node_lines(attributes: Mapping[str, Any], show_saved: bool, show_module: bool) -> tuple[str, ...]:
    kind = attributes.get("kind")
    if kind == "none":
        return ("None",)
    if kind == "module":
        return (printable(attributes.get("module") or "(model)"), f"module of {attributes.get('num_nodes', '?')} nodes")
    lines: list[str] = []
    if kind == "root":
        lines.append(str(attributes.get("root", "root")))
    elif kind == "leaf":
        if attributes.get("names"):
            lines.append(", ".join(map(str, attributes["names"])))
    else:
        lines.append(str(attributes.get("op", "?")))
        if show_module and attributes.get("module"):
            lines.append(str(attributes["module"]))
        if attributes.get("special"):
            lines.append(f"special: {attributes['special']}")
    if kind in ("root", "leaf"):
        lines.append(tensor_text(attributes))
    if show_saved:
        lines.extend(f"{name}: {saved_text(value)}" for name, value in attributes.get("saved", {}).items())
    return tuple(printable(line) for line in lines if line)


def look_signature(kind: Any, attributes: Mapping[str, Any], show_saved: bool, show_module: bool) -> tuple[Any, ...] | None:
    """What a backward node's or a leaf's look depends on (see `_node_lines`); None for other nodes."""
    if show_saved and "saved" in attributes:
        return None
    if kind == "backward":
        return (attributes.get("op"), attributes.get("special"), show_module and attributes.get("module"))
    if kind == "leaf":
        names, shape = attributes.get("names"), attributes.get("shape")
        return (
            "leaf",
            tuple(names) if names else (),
            None if shape is None else tuple(shape),
            attributes.get("dtype", "float32"),
            attributes.get("device", "cpu"),
        )
    return None
