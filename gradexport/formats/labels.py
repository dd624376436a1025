"""What every diagram shows, decided once for all writers.

The DOT and Mermaid writers differ only in syntax. This module turns a graph
of :mod:`gradexport.graph` (or a stream of it, see
:mod:`gradexport.formats.source`) into writer-neutral :class:`DiagramNode`
records (id, label lines, style, module box, and the out-edges with their
:class:`EdgeLook`), so both writers show the same thing:

- Node labels by kind: a root shows its name and tensor; a backward node its op
  (``MulBackward0``), its module path when the graph has one (unless the
  diagram draws module boxes, see :class:`ModuleBoxes`), its special kind
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
    >>> for node in diagram(g, DiagramOptions(show_none=True, edge_shapes=True)):
    ...     print(node.id, node.style, node.lines, [(target, look.lines) for target, look in node.edges])
    n0 backward ('MulBackward0',) [('n1', ('0→0', '(3,)')), ('n0_none1', ('1→0',))]
    n0_none1 none ('None',) []
    n1 leaf ('w', '(3,)') []
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import networkx as nx

from .source import GraphSource, adjacency

__all__ = [
    "DIRECTIONS",
    "NODE_STYLES",
    "Cluster",
    "DiagramNode",
    "DiagramOptions",
    "EdgeLook",
    "ModuleBoxes",
    "NodeStyle",
    "diagram",
    "element_id",
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


class EdgeLook(NamedTuple):
    """How an edge is drawn: its label lines, and ``color`` and ``width`` only for gradient norms.

    Edges that look alike share one EdgeLook, so writers can render each look once.
    """

    lines: tuple[str, ...]
    color: str | None = None
    width: float | None = None


class DiagramNode(NamedTuple):
    """A node as every writer draws it, with its out-edges.

    ``group`` is the module path whose box it sits in; ``edges`` are
    ``(target id, look)`` pairs in the graph's order.
    """

    id: str
    style: str
    lines: tuple[str, ...]
    group: str | None = None
    edges: Sequence[tuple[str, EdgeLook]] = ()


class Cluster(NamedTuple):
    """A module's box: ``id`` is safe in every syntax, ``label`` the module's path."""

    id: str
    label: str


def element_id(node: Any) -> str:
    """An id for ``node`` that DOT and Mermaid accept as is, distinct for distinct nodes.

    The graph model's ids (``n0``, ``n1``...) stay as they are; any other id
    becomes ``u`` followed by the hex of its ``repr``, so that no name,
    keyword or punctuation ever reaches the syntax as an id.

    Example:
        >>> element_id("n12"), element_id("end"), element_id(3)
        ('n12', 'u27656e6427', 'u33')
    """
    if type(node) is str and _model_id(node):
        return node
    return "u" + repr(node).encode("utf-8", "surrogatepass").hex()


_model_id = re.compile("n[0-9]+").fullmatch


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


def _look_signature(kind: Any, attributes: Mapping[str, Any], show_saved: bool, show_module: bool) -> tuple[Any, ...] | None:
    """What a backward node's or a leaf's look depends on (see :func:`_node_lines`); None for other nodes."""
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


def _drawn_none_slots(attributes: Mapping[str, Any], out: Mapping[Any, Mapping[Any, Any]]) -> list[int]:
    """The None slots to draw from ``none_slots``: those without a none-node edge under their key."""
    slots = attributes.get("none_slots")
    if not slots:
        return []
    keys = {key for keyed in out.values() for key in keyed}
    return [slot for slot in slots if slot not in keys]


def _group(attributes: Mapping[str, Any]) -> str | None:
    path = attributes.get("module")
    if path is not None and attributes.get("kind") == "module":
        return path.rpartition(".")[0] if path else None  # a folded module sits in its parent's box
    return path or None  # "" is the model itself: no box around the whole diagram


# A third faster than calling DiagramNode(...), whose generated __new__ is Python.
_new_record = tuple.__new__


def diagram(source: GraphSource, options: DiagramOptions) -> Iterator[DiagramNode]:
    """The nodes to draw with their out-edges, in the graph's order, each None slot drawn from ``none_slots`` after its parent.

    A node's edges come in the graph's order (by target, then ``next_functions``
    position), then those to the None slots drawn from ``none_slots``. This
    loop runs once per node of graphs with a million of them, so it reads the
    adjacency records directly and shares the label lines of backward nodes
    and edges that look alike.
    """
    show_saved = options.show_saved is not False
    show_module = not options.group_modules
    grouped = options.group_modules
    show_none = options.show_none
    hide_none = show_none is False
    edge_shapes = options.edge_shapes
    grad_norms = options.grad_norms
    kinds = source._node if isinstance(source, nx.Graph) else None
    scale: _GradScale | None = None  # computed on the first edge that carries a gradient
    node_looks: dict[tuple[Any, ...], tuple[str, tuple[str, ...]]] = {}
    edge_looks: dict[tuple[Any, Any], EdgeLook] = {}
    # Checking every id costs as much as the rest of the loop: a graph is
    # checked once, and a stream can vouch for its ids (see gradexport.formats.source).
    ids_as_they_are = (
        all(type(node) is str and _model_id(node) for node in source)
        if isinstance(source, nx.Graph)
        else getattr(source, "model_ids", False) is True
    )
    for node, attributes, out in adjacency(source):
        kind = attributes.get("kind")
        if kind == "none" and hide_none:
            continue
        node_id = node if ids_as_they_are else element_id(node)
        signature = _look_signature(kind, attributes, show_saved, show_module)
        look = None
        if signature is not None:
            try:
                look = node_looks.get(signature)
            except TypeError:  # an unhashable value in a user's graph: drawn without the cache
                signature = None
        if look is None:
            look = (_node_class(attributes), _node_lines(attributes, show_saved, show_module))
            if signature is not None:
                node_looks[signature] = look
        group = _group(attributes) if grouped and "module" in attributes else None
        drawn_none = _drawn_none_slots(attributes, out) if show_none else ()
        none_slots = attributes.get("none_slots") or () if hide_none else ()
        edges: list[tuple[str, EdgeLook]] = []
        for target, keyed in out.items():
            if hide_none and (
                kinds[target].get("kind") == "none" if kinds is not None else bool(none_slots) and next(iter(keyed)) in none_slots
            ):
                continue
            target_id = target if ids_as_they_are else element_id(target)
            for data in keyed.values():
                indices = (data.get("next_index", "?"), data.get("input_nr", "?"))
                plain = edge_looks.get(indices)
                if plain is None:
                    plain = edge_looks[indices] = EdgeLook((f"{indices[0]}→{indices[1]}",))
                if not edge_shapes and "count" not in data and not (grad_norms and "grad" in data):
                    edges.append((target_id, plain))
                    continue
                first = plain.lines[0]
                if data.get("count", 1) > 1:
                    first += f" ×{data['count']}"
                lines = [first]
                if edge_shapes and "shape" in data:
                    lines.append(printable(tensor_text(data)))
                grad = data.get("grad") if grad_norms else None
                color = width = None
                if isinstance(grad, Mapping) and "norm" in grad:
                    scale = scale or _GradScale.of(source)
                    lines.append(f"‖g‖ {grad['norm']:.3g}")
                    color, width = scale.style(grad)
                edges.append((target_id, EdgeLook(tuple(lines), color, width)))
        if drawn_none:
            edges.extend((f"{node_id}_none{slot}", EdgeLook((f"{slot}→0",))) for slot in drawn_none)
        yield _new_record(DiagramNode, (node_id, look[0], look[1], group, edges))
        for slot in drawn_none:
            yield DiagramNode(f"{node_id}_none{slot}", "none", ("None",), group)


#: What :meth:`ModuleBoxes.events` yields: a node, or the start or end of a module's box, and the line's indent.
BoxEvent = tuple[str, "DiagramNode | Cluster", str]


class ModuleBoxes:
    """Holds the nodes that sit in module boxes, then gives them back box by box, nested.

    Writers draw nodes without a group as they come and :meth:`add` the
    others; :meth:`events` then yields ``("open", cluster, indent)``,
    ``("node", node, indent)`` and ``("close", cluster, indent)``, each box
    with its own nodes first and then its sub-boxes, in the order their first
    node appeared. A box exists for every path prefix, so
    ``layers.3.linear1`` sits inside ``layers.3``, inside ``layers``.

    Example:
        >>> boxes = ModuleBoxes()
        >>> boxes.add(DiagramNode("n1", "backward", ("Mm",), "a.b"))
        >>> boxes.add(DiagramNode("n2", "backward", ("T",), "a"))
        >>> for event, item, indent in boxes.events():
        ...     print(f"{indent}{event} {item.id}")
          open g0
            node n2
            open g1
              node n1
            close g1
          close g0
    """

    def __init__(self) -> None:
        self.members: dict[str, list[DiagramNode]] = {}
        self.children: dict[str | None, list[str]] = {None: []}

    def add(self, node: DiagramNode) -> None:
        """Put ``node`` in the box of its ``group`` (which must not be None)."""
        if node.group not in self.members:
            parent: str | None = None
            parts = node.group.split(".")
            for depth in range(1, len(parts) + 1):
                prefix = ".".join(parts[:depth])
                if prefix not in self.members:
                    self.members[prefix] = []
                    self.children[prefix] = []
                    self.children[parent].append(prefix)
                parent = prefix
        self.members[node.group].append(node)

    def events(self) -> Iterator[BoxEvent]:
        """The boxes and the nodes added to them, in drawing order, each with the indent of its line."""
        children = self.children
        ids = {path: f"g{index}" for index, path in enumerate(_preorder(children))}
        stack: list[tuple[str, bool]] = [(path, False) for path in reversed(children[None])]
        while stack:
            path, opened = stack.pop()
            cluster = Cluster(ids[path], path)
            indent = "  " * (path.count(".") + 1)  # a top-level box inside the diagram's braces
            if opened:
                yield "close", cluster, indent
                continue
            yield "open", cluster, indent
            for node in self.members[path]:
                yield "node", node, indent + "  "
            stack.append((path, True))
            stack.extend((child, False) for child in reversed(children[path]))


def _preorder(children: dict[str | None, list[str]]) -> Iterator[str]:
    stack = list(reversed(children[None]))
    while stack:
        path = stack.pop()
        yield path
        stack.extend(reversed(children[path]))


class _GradScale:
    """Maps a gradient norm to a colour and line width, on a log scale over the graph's norms."""

    def __init__(self, low: float, high: float):
        self.low = low
        self.high = high

    @classmethod
    def of(cls, source: GraphSource) -> _GradScale:
        if not isinstance(source, nx.Graph):
            raise TypeError(
                "colouring edges by gradient norm needs the whole graph, not a stream of its nodes: "
                "pass the MultiDiGraph, or grad_norms=False"
            )
        grads = [grad for _, _, grad in source.edges(data="grad") if isinstance(grad, Mapping) and "norm" in grad]
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
