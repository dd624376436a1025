"""The text of every label, decided once for all writers.

Node labels by kind: a root shows its name and tensor; a backward node its op
(``MulBackward0``), its module path when the diagram draws no module boxes,
its special kind and, with ``show_saved``, what it saved; a leaf its
parameter names and tensor; a None slot ``None``; a folded module (from
`gradexport.collapse`) its path and how many nodes it stands for.

Label lines are plain text with control characters shown as escapes (a
newline in a name reads ``\\n``), each at most `MAX_LINE_CHARS`
characters (longer ones end in ``…``; the full name stays in the graph and
its JSON); each writer escapes them for its syntax. Element ids are short and
safe in every syntax without quoting: ``n0``, ``n1``... for the graph model's
ids, ``u_<readable part>_<hash>`` for any other id.

Examples:
    >>> node_lines({"kind": "leaf", "names": ["w"], "shape": [3], "dtype": "float64"}, show_saved=False, show_module=False)
    ('w', '(3,) float64')
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from ..core.kinds import is_model_id
from ..core.reports import MODEL_LABEL, printable
from .styles import NODE_STYLES

__all__ = [
    "DIFF_MARKS",
    "MAX_LINE_CHARS",
    "byte_text",
    "element_id",
    "look_signature",
    "module_title",
    "node_class",
    "node_lines",
    "printable",
    "saved_text",
    "shorten",
    "tensor_text",
]


def element_id(node: Any) -> str:
    """A short id for ``node`` that DOT and Mermaid accept as is, the same on every run, distinct for distinct nodes.

    The graph model's ids (``n0``, ``n1``...) stay as they are. Any other id
    becomes ``u_``, its first ASCII letters and digits (at most 32, for a
    reader of the text), and 16 hex digits of a hash of its ``repr``, so that
    no name, keyword or punctuation ever reaches the syntax as an id and no
    name, however long, makes a long id.

    Examples:
        >>> element_id("n12"), element_id("module:layer1.0"), element_id(3)
        ('n12', 'u_module_layer1_0_59a07c668dbbb903', 'u_3_9e251905a6d98e01')
    """
    if type(node) is str and is_model_id(node):
        return node
    readable = _NOT_ID_CHARS.sub("_", str(node)).strip("_")[:_READABLE_ID_CHARS]
    digest = hashlib.blake2b(repr(node).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return f"u_{readable}_{digest}" if readable else f"u_{digest}"


_NOT_ID_CHARS = re.compile(r"[^A-Za-z0-9]+")
_READABLE_ID_CHARS = 32

#: The most characters of one label line; longer lines are cut and end in ``…``.
#: Graphviz refuses quoted strings over 16,384 characters and nodes over 65,535
#: points wide, and no one reads a line that long anyway.
MAX_LINE_CHARS = 200


def shorten(line: str) -> str:
    """``line``, cut to `MAX_LINE_CHARS` characters with a visible ``…`` when longer.

    Examples:
        >>> shorten("x" * 300)[-3:], len(shorten("x" * 300))
        ('xx…', 200)
    """
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


def module_title(path: str, classes: Mapping[str, str] | None = None) -> str:
    """How a module box or a folded module is titled: ``layer1.0: BasicBlock``, the model's class for ``""``.

    Without the class (a graph built without ``module=``), the path alone, and
    ``(model)`` for the model. The title is one printable line.

    Examples:
        >>> module_title("layer1.0", {"layer1.0": "BasicBlock"}), module_title("", {"": "ResNet"}), module_title("")
        ('layer1.0: BasicBlock', 'ResNet', '(model)')
    """
    class_name = classes.get(path) if isinstance(classes, Mapping) else None
    if not isinstance(class_name, str):
        class_name = None
    if path == "":
        title = class_name or MODEL_LABEL
    else:
        title = f"{path}: {class_name}" if class_name else path
    return shorten(printable(title))


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


#: What a diff state reads as in a label, so the diagram needs no legend (and no colour) to be read.
DIFF_MARKS = {"added": "+ added", "removed": "− removed", "changed": "~ changed"}


def node_class(attributes: Mapping[str, Any]) -> str:
    """The style class of a node: a mark (``nonfinite`` origin, ``diff`` state) or its kind."""
    if attributes.get("nonfinite") == "origin":
        return "nonfinite"
    mark = attributes.get("diff")
    if mark in DIFF_MARKS:
        return mark
    kind = attributes.get("kind", "backward")
    if kind == "backward" and attributes.get("special"):
        return "special"
    return kind if kind in NODE_STYLES else "backward"


def node_lines(
    attributes: Mapping[str, Any],
    show_saved: bool,
    show_module: bool,
    exec_order: bool = False,
    saved_bytes: bool = False,
    classes: Mapping[str, str] | None = None,
) -> tuple[str, ...]:
    """The label lines of a node (see the module docstring): its marks, its own lines, then its saved bytes.

    ``classes`` (the graph's ``module_classes``) titles folded modules.

    Examples:
        >>> node_lines({"kind": "backward", "op": "LogBackward0", "exec_order": 2, "diff": "added"}, False, False, exec_order=True)
        ('#2 + added', 'LogBackward0')
    """
    marks = []
    if exec_order and "exec_order" in attributes:
        marks.append(f"#{attributes['exec_order']}")
    if attributes.get("nonfinite") == "origin":
        marks.append("non-finite gradient starts here")
    mark = attributes.get("diff")
    if mark in DIFF_MARKS:
        changed = ", ".join(map(str, attributes.get("changes", ()))) if mark == "changed" else ""
        marks.append(f"{DIFF_MARKS[mark]}: {changed}" if changed else DIFF_MARKS[mark])
    lines = [printable(" ".join(marks))] if marks else []
    lines.extend(_kind_lines(attributes, show_saved, show_module, classes))
    if saved_bytes and "saved_bytes" in attributes:
        shared = attributes.get("saved_bytes_shared", 0)
        lines.append(f"saved {byte_text(attributes['saved_bytes'])}" + (f" (+{byte_text(shared)} shared)" if shared else ""))
    return tuple(lines)


def byte_text(count: int) -> str:
    """A byte count for people: ``512 B``, ``1.5 KiB``, ``3.0 MiB``.

    Examples:
        >>> byte_text(512), byte_text(1536), byte_text(3 * 2**20)
        ('512 B', '1.5 KiB', '3.0 MiB')
    """
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _kind_lines(attributes: Mapping[str, Any], show_saved: bool, show_module: bool, classes: Mapping[str, str] | None) -> tuple[str, ...]:
    kind = attributes.get("kind")
    if kind == "none":
        return ("None",)
    if kind == "module":
        count = attributes.get("num_nodes", "?")
        return (module_title(str(attributes.get("module", "")), classes), f"folded: {count} node{'' if count == 1 else 's'}")
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
    return tuple(shorten(printable(line)) for line in lines if line)


def look_signature(kind: Any, attributes: Mapping[str, Any], show_saved: bool, show_module: bool) -> tuple[Any, ...] | None:
    """What a backward node's or a leaf's look depends on (see `node_lines`); None for other nodes and marked ones."""
    if (show_saved and "saved" in attributes) or "diff" in attributes or "nonfinite" in attributes:
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
