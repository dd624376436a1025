"""What every diagram shows, decided once for all writers.

The DOT and Mermaid writers differ only in syntax. This module turns a graph
of :mod:`gradexport.graph` into writer-neutral :class:`DiagramNode` and
:class:`DiagramEdge` records (ids, label lines, style), so both writers show the
same thing:

- Node labels by kind: a root shows its name and tensor; a backward node its op
  (``MulBackward0``), its module path when the graph has one (unless the
  diagram draws module boxes, see :func:`nest`), its special kind
  and, with ``show_saved``, what it saved; a leaf its parameter names and
  tensor; a None slot ``None``; a folded module (from
  :func:`gradexport.collapse`) its path and how many nodes it stands for.
- Edge labels ``"{next_index}→{input_nr}"``: ``0→1`` means position 0 of the
  parent's ``next_functions``, arriving at input slot 1 of the child. Optionally
  the shape of the gradient on the edge, and its norm when the edge carries a
  ``grad`` record. An edge that stands for several (after collapsing) adds
  ``×N``.
- Element ids that are safe in every syntax without quoting: ``n0``, ``n1``...
  for the graph model's ids, ``u<hex>`` for any other id, ``<id>_none<slot>``
  for None slots drawn from ``none_slots``.

Label lines are plain text with control characters shown as escapes (a
newline in a name reads ``\\n``); each writer escapes them for its syntax.

Example:
    >>> import networkx as nx
    >>> g = nx.MultiDiGraph()
    >>> g.add_node("n0", kind="backward", op="MulBackward0", none_slots=[1])
    >>> g.add_node("n1", kind="leaf", op="AccumulateGrad", names=["w"], shape=[3], dtype="float32", device="cpu")
    >>> _ = g.add_edge("n0", "n1", key=0, next_index=0, input_nr=0, shape=[3])
    >>> [(n.id, n.style, n.lines) for n in diagram_nodes(g, DiagramOptions(show_none=True))]
    [('n0', 'backward', ('MulBackward0',)), ('n0_none1', 'none', ('None',)), ('n1', 'leaf', ('w', '(3,)'))]
    >>> [(e.source, e.target, e.lines) for e in diagram_edges(g, DiagramOptions(edge_shapes=True))]
    [('n0', 'n1', ('0→0', '(3,)'))]
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import networkx as nx

__all__ = [
    "DIRECTIONS",
    "NODE_STYLES",
    "Cluster",
    "DiagramEdge",
    "DiagramNode",
    "DiagramOptions",
    "NodeStyle",
    "diagram_edges",
    "diagram_nodes",
    "element_id",
    "nest",
    "printable",
]

#: Accepted values of :attr:`DiagramOptions.direction`.
DIRECTIONS = ("TB", "BT", "LR", "RL")

#: A font whose metrics Graphviz knows without a font library (``monospace`` warns).
FONT = "Helvetica"


@dataclass(frozen=True)
class DiagramOptions:
    """What a diagram shows. Every writer takes the same options.

    Attributes:
        direction: Where the gradient flows. ``"TB"`` (default) puts the loss
            at the top and the leaves at the bottom, the order backward runs
            in; ``"BT"`` draws it the other way up (as torchviz does), ``"LR"``
            and ``"RL"`` sideways.
        show_none: Draw None slots (inputs that need no gradient). ``None``
            (default) draws what the graph holds; ``True`` draws them even for
            a graph built without ``show_none``, from the ``none_slots``
            attributes; ``False`` hides them.
        show_saved: List what each node saved for backward. ``None`` (default)
            shows the ``saved`` attributes the graph holds; ``False`` hides them.
        edge_shapes: Add the shape (and a dtype or device other than
            float32 on cpu) of the gradient on each edge to its label.
        grad_norms: When edges carry a ``grad`` record (``{"norm", "has_nan",
            "has_inf", ...}``), label them with the gradient's norm and colour
            them by its magnitude on a log scale, NaN or infinity in red.
        group_modules: Draw the nodes of each module (the ``module``
            attribute) inside a box labelled with the module's path, nested
            as the modules nest: DOT clusters, Mermaid subgraphs.
    """

    direction: str = "TB"
    show_none: bool | None = None
    show_saved: bool | None = None
    edge_shapes: bool = False
    grad_norms: bool = True
    group_modules: bool = True

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {self.direction!r}")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names, as keyword arguments of the writers take them."""
        return tuple(field.name for field in fields(cls))


class NodeStyle(NamedTuple):
    """How a kind of node looks; writers map ``shape`` to their own syntax."""

    #: ``"stadium"``, ``"rounded"``, ``"box"``, ``"hexagon"``, ``"note"`` or ``"subroutine"``.
    shape: str
    fill: str
    stroke: str
    text: str
    dashed: bool = False


#: Style of each node class. A node's class is its ``kind``, or ``"special"``
#: for backward nodes with a ``special`` attribute.
NODE_STYLES: dict[str, NodeStyle] = {
    "root": NodeStyle("stadium", "#c8e6c9", "#2e7d32", "#1b1b1b"),
    "backward": NodeStyle("rounded", "#eeeeee", "#616161", "#1b1b1b"),
    "special": NodeStyle("hexagon", "#ffe0b2", "#e65100", "#1b1b1b"),
    "leaf": NodeStyle("box", "#bbdefb", "#1565c0", "#1b1b1b"),
    "none": NodeStyle("note", "#ffffff", "#9e9e9e", "#757575", dashed=True),
    "module": NodeStyle("subroutine", "#ede7f6", "#5e35b1", "#1b1b1b"),
}

#: Edge colours for gradient norms, smallest to largest (log scale), and for NaN/inf.
GRAD_COLORS = ("#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b")
GRAD_BAD_COLOR = "#d32f2f"


class DiagramNode(NamedTuple):
    """A node as every writer draws it; ``group`` is the module path whose box it sits in."""

    id: str
    style: str
    lines: tuple[str, ...]
    group: str | None = None


class Cluster(NamedTuple):
    """A module's box: ``id`` is safe in every syntax, ``label`` the module's path."""

    id: str
    label: str


class DiagramEdge(NamedTuple):
    """An edge as every writer draws it; ``color`` and ``width`` only for gradient norms."""

    source: str
    target: str
    lines: tuple[str, ...]
    color: str | None = None
    width: float | None = None


def element_id(node: Any) -> str:
    """An id for ``node`` that DOT and Mermaid accept as is, distinct for distinct nodes.

    The graph model's ids (``n0``, ``n1``...) stay as they are; any other id
    becomes ``u`` followed by the hex of its ``repr``, so that no name,
    keyword or punctuation ever reaches the syntax as an id.

    Example:
        >>> element_id("n12"), element_id("end"), element_id(3)
        ('n12', 'u27656e6427', 'u33')
    """
    if type(node) is str and node[:1] == "n" and node[1:].isascii() and node[1:].isdigit():
        return node
    return "u" + repr(node).encode("utf-8", "surrogatepass").hex()


# Control characters, line and paragraph separators, lone surrogates and the
# noncharacters U+FFFE/U+FFFF would break a label line, the file's UTF-8 or the
# SVG's XML, so they are shown as escapes.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with control characters written as escapes, so that it is one visible line.

    Example:
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

    Example:
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


def _saved_text(value: Any) -> str:
    if isinstance(value, Mapping) and "shape" in value:
        return tensor_text(value)
    if isinstance(value, Mapping) and "unavailable" in value:
        return f"unavailable ({value['unavailable']})"
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= _SAVED_VALUE_CHARS else text[: _SAVED_VALUE_CHARS - 1] + "…"


def _node_class(attributes: Mapping[str, Any]) -> str:
    kind = attributes.get("kind", "backward")
    if kind == "backward" and attributes.get("special"):
        return "special"
    return kind if kind in NODE_STYLES else "backward"


def _node_lines(attributes: Mapping[str, Any], show_saved: bool, show_module: bool) -> tuple[str, ...]:
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
        lines.extend(f"{name}: {_saved_text(value)}" for name, value in attributes.get("saved", {}).items())
    return tuple(printable(line) for line in lines if line)


def _drawn_none_slots(graph: nx.MultiDiGraph, node: Any, attributes: Mapping[str, Any]) -> list[int]:
    """The None slots of ``node`` to draw from ``none_slots``: those the graph has no none-node for."""
    slots = attributes.get("none_slots")
    if not slots:
        return []
    keys = {key for keyed in graph.succ[node].values() for key in keyed}
    return [slot for slot in slots if slot not in keys]


def _group(attributes: Mapping[str, Any], grouped: bool) -> str | None:
    path = attributes.get("module") if grouped else None
    if path is not None and attributes.get("kind") == "module":
        return path.rpartition(".")[0] if path else None  # a folded module sits in its parent's box
    return path or None  # "" is the model itself: no box around the whole diagram


def diagram_nodes(graph: nx.MultiDiGraph, options: DiagramOptions) -> Iterator[DiagramNode]:
    """The nodes to draw, in the graph's order, each None slot drawn from ``none_slots`` after its parent."""
    show_saved = options.show_saved is not False
    for node, attributes in graph.nodes(data=True):
        if attributes.get("kind") == "none" and options.show_none is False:
            continue
        node_id = element_id(node)
        group = _group(attributes, options.group_modules)
        lines = _node_lines(attributes, show_saved, show_module=not options.group_modules)
        yield DiagramNode(node_id, _node_class(attributes), lines, group)
        if options.show_none:
            for slot in _drawn_none_slots(graph, node, attributes):
                yield DiagramNode(f"{node_id}_none{slot}", "none", ("None",), group)


#: What :func:`nest` yields: a node, or the start or end of a module's box.
NestEvent = tuple[str, "DiagramNode | Cluster"]


def nest(nodes: Iterable[DiagramNode]) -> Iterator[NestEvent]:
    """Order ``nodes`` into nested module boxes: ``("open", cluster)``, ``("node", node)``, ``("close", cluster)``.

    Nodes without a group stream through as they come; grouped nodes are held
    until the end and drawn box by box, each box with its own nodes first and
    then its sub-boxes, in the order their first node appeared. A box exists
    for every path prefix, so ``layers.3.linear1`` sits inside ``layers.3``,
    inside ``layers``.

    Example:
        >>> nodes = [DiagramNode("n0", "root", ("loss",)), DiagramNode("n1", "backward", ("Mm",), "a.b"),
        ...          DiagramNode("n2", "backward", ("T",), "a")]
        >>> [(event, item.id) for event, item in nest(nodes)]
        [('node', 'n0'), ('open', 'g0'), ('node', 'n2'), ('open', 'g1'), ('node', 'n1'), ('close', 'g1'), ('close', 'g0')]
    """
    members: dict[str, list[DiagramNode]] = {}
    children: dict[str | None, list[str]] = {None: []}
    for node in nodes:
        if node.group is None:
            yield "node", node
            continue
        if node.group not in members:
            _add_path(node.group, members, children)
        members[node.group].append(node)
    ids = {path: f"g{index}" for index, path in enumerate(_preorder(children))}
    stack: list[tuple[str, bool]] = [(path, False) for path in reversed(children[None])]
    while stack:
        path, opened = stack.pop()
        cluster = Cluster(ids[path], path)
        if opened:
            yield "close", cluster
            continue
        yield "open", cluster
        for node in members[path]:
            yield "node", node
        stack.append((path, True))
        stack.extend((child, False) for child in reversed(children[path]))


def _add_path(path: str, members: dict[str, list[DiagramNode]], children: dict[str | None, list[str]]) -> None:
    parts = path.split(".")
    parent: str | None = None
    for depth in range(1, len(parts) + 1):
        prefix = ".".join(parts[:depth])
        if prefix not in members:
            members[prefix] = []
            children[prefix] = []
            children[parent].append(prefix)
        parent = prefix


def _preorder(children: dict[str | None, list[str]]) -> Iterator[str]:
    stack = list(reversed(children[None]))
    while stack:
        path = stack.pop()
        yield path
        stack.extend(reversed(children[path]))


def diagram_edges(graph: nx.MultiDiGraph, options: DiagramOptions) -> Iterator[DiagramEdge]:
    """The edges to draw: the graph's, in its order (by parent, then ``next_functions`` position), then None slots drawn from ``none_slots``."""
    scale: _GradScale | None = None  # computed on the first edge that carries a gradient
    hide_none = options.show_none is False
    node_attributes = graph.nodes
    ids = {node: element_id(node) for node in graph}
    # The adjacency dicts directly rather than graph.edges(data=True): this loop
    # runs once per edge of graphs with a million of them.
    for source, targets in graph.succ.items():
        for target, keyed in targets.items():
            if hide_none and node_attributes[target].get("kind") == "none":
                continue
            for data in keyed.values():
                first = f"{data.get('next_index', '?')}→{data.get('input_nr', '?')}"
                if data.get("count", 1) > 1:
                    first += f" ×{data['count']}"
                grad = data.get("grad") if options.grad_norms else None
                if grad is None and not options.edge_shapes:
                    yield DiagramEdge(ids[source], ids[target], (first,))
                    continue
                lines = [first]
                if options.edge_shapes and "shape" in data:
                    lines.append(printable(tensor_text(data)))
                color = width = None
                if isinstance(grad, Mapping) and "norm" in grad:
                    scale = scale or _GradScale.of(graph)
                    lines.append(f"‖g‖ {grad['norm']:.3g}")
                    color, width = scale.style(grad)
                yield DiagramEdge(ids[source], ids[target], tuple(lines), color, width)
    if options.show_none:
        for node, attributes in graph.nodes(data=True):
            node_id = element_id(node)
            for slot in _drawn_none_slots(graph, node, attributes):
                yield DiagramEdge(node_id, f"{node_id}_none{slot}", (f"{slot}→0",))


class _GradScale:
    """Maps a gradient norm to a colour and line width, on a log scale over the graph's norms."""

    def __init__(self, low: float, high: float):
        self.low = low
        self.high = high

    @classmethod
    def of(cls, graph: nx.MultiDiGraph) -> _GradScale:
        grads = [grad for _, _, grad in graph.edges(data="grad") if isinstance(grad, Mapping) and "norm" in grad]
        logs = [math.log10(grad["norm"]) for grad in grads if not _is_bad(grad) and grad["norm"] > 0]
        return cls(min(logs, default=0.0), max(logs, default=0.0))

    def style(self, grad: Mapping[str, Any]) -> tuple[str, float]:
        if _is_bad(grad):
            return GRAD_BAD_COLOR, 2.5
        norm = grad["norm"]
        if norm <= 0:
            position = 0.0
        elif self.high == self.low:
            position = 0.5
        else:
            position = (math.log10(norm) - self.low) / (self.high - self.low)
        step = round(position * (len(GRAD_COLORS) - 1))
        return GRAD_COLORS[step], 1.0 + 2.0 * step / (len(GRAD_COLORS) - 1)


def _is_bad(grad: Mapping[str, Any]) -> bool:
    norm = grad.get("norm")
    return bool(grad.get("has_nan") or grad.get("has_inf")) or not (isinstance(norm, (int, float)) and math.isfinite(norm))
