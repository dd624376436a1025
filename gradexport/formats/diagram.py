"""What every diagram shows, as writer-neutral records: the projection of the graph model.

The DOT, Mermaid and HTML writers differ only in syntax. `diagram`
turns a graph of `gradexport.tracing.graph` (or a stream of it, see
`gradexport.core.source`) into `DiagramNode` records (id,
label lines from `gradexport.formats.labels`, style from
`gradexport.formats.styles`, module box, and the out-edges with their
`EdgeLook`), so every writer shows the same thing:

- Edge labels ``"{next_index}→{input_nr}"``: ``0→1`` means position 0 of the
  parent's ``next_functions``, arriving at input slot 1 of the child. Optionally
  the shape of the gradient on the edge, and its norm when the edge carries a
  ``grad`` record. An edge that stands for several (after collapsing) adds
  ``×N``.
- None slots drawn from ``none_slots`` get the id ``<id>_none<slot>``.
- `ModuleBoxes` nests the nodes of each module in boxes titled
  ``path: Class`` (see `gradexport.formats.labels.module_title`); the
  model's own box, when the model's ``forward`` itself made nodes (or holds
  folded submodules), holds every other box.

Examples:
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

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from ..core.options import DiagramOptions
from ..core.source import GraphSource, Source
from .labels import DIFF_MARKS, element_id, look_signature, module_title, node_class, node_lines, printable, tensor_text
from .styles import MARK_COLORS, GradScale

__all__ = ["BoxEvent", "Cluster", "DiagramNode", "EdgeLook", "ModuleBoxes", "diagram", "drawn_none_slots"]


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
    ``(target id, look)`` pairs in the graph's order. ``tooltip`` is the
    line of the user's forward that made the node (``PATH:LINE: code``,
    from `gradexport.tools.capture_source`), or None. ``region`` is the
    backward graph inside a compiled region (the node's ``compiled_graph``,
    see `gradexport.tracing.compiled`), or None.
    """

    id: str
    style: str
    lines: tuple[str, ...]
    group: str | None = None
    edges: Sequence[tuple[str, EdgeLook]] = ()
    tooltip: str | None = None
    region: Mapping[str, Any] | None = None


class Cluster(NamedTuple):
    """A module's box: ``id`` is short and safe in every syntax, ``label`` its one-line printable title."""

    id: str
    label: str
    #: The module's qualified name (``""`` for the model).
    path: str = ""


def drawn_none_slots(attributes: Mapping[str, Any], out: Mapping[Any, Mapping[Any, Any]]) -> list[int]:
    """The None slots to draw from ``none_slots``: those without a none-node edge under their key."""
    slots = attributes.get("none_slots")
    if not slots:
        return []
    keys = {key for keyed in out.values() for key in keyed}
    return [slot for slot in slots if slot not in keys]


def _group(attributes: Mapping[str, Any]) -> str | None:
    path = attributes.get("module")
    if not isinstance(path, str):
        return None
    if attributes.get("kind") == "module":
        return path.rpartition(".")[0] if path else None  # a folded module sits in its parent's box
    return path


# A third faster than calling DiagramNode(...), whose generated __new__ is Python.
_new_record = tuple.__new__


def diagram(graph: GraphSource, options: DiagramOptions) -> Iterator[DiagramNode]:
    """The nodes to draw with their out-edges, in the graph's order, each None slot drawn from ``none_slots`` after its parent.

    A node's edges come in the graph's order (by target, then ``next_functions``
    position), then those to the None slots drawn from ``none_slots``. This
    loop runs once per node of graphs with a million of them, so it reads the
    adjacency records directly and shares the label lines of backward nodes
    and edges that look alike.
    """
    source = Source.of(graph)
    classes = source.graph_attributes.get("module_classes")
    show_saved = options.show_saved is not False
    show_module = not options.group_modules
    grouped = options.group_modules
    box_depth = options.box_depth
    show_none = options.show_none
    hide_none = show_none is False
    hide_none_nodes = hide_none and source.none_nodes
    edge_shapes = options.edge_shapes
    grad_norms = options.grad_norms
    exec_order, saved_bytes = options.exec_order, options.saved_bytes
    marked = source.marked
    plain_edges = not edge_shapes and not marked  # and an edge without "count" or a drawn "grad": its look is its indices
    scale: GradScale | None = None  # computed on the first edge that carries a gradient
    node_looks: dict[tuple[Any, ...], tuple[str, tuple[str, ...]]] = {}
    edge_looks: dict[tuple[Any, Any], EdgeLook] = {}
    ids_as_they_are = source.model_ids
    for node, attributes, out in source.records():
        kind = attributes.get("kind")
        if kind == "none" and hide_none:
            continue
        node_id = node if ids_as_they_are else element_id(node)
        signature = None if exec_order or saved_bytes else look_signature(kind, attributes, show_saved, show_module)
        look = None
        if signature is not None:
            try:
                look = node_looks.get(signature)
            except TypeError:  # an unhashable value in a user's graph: drawn without the cache
                signature = None
        if look is None:
            look = (node_class(attributes), node_lines(attributes, show_saved, show_module, exec_order, saved_bytes, classes))
            if signature is not None:
                node_looks[signature] = look
        group = _group(attributes) if grouped and "module" in attributes else None
        if box_depth is not None and group:
            group = ".".join(group.split(".")[:box_depth])
        drawn_none = drawn_none_slots(attributes, out) if show_none else ()
        edges: list[tuple[str, EdgeLook]] = []
        for target, keyed in out.items():
            if hide_none_nodes and source.to_none_node(attributes, target, keyed):
                continue
            target_id = target if ids_as_they_are else element_id(target)
            for data in keyed.values():
                indices = (data.get("next_index", "?"), data.get("input_nr", "?"))
                plain = edge_looks.get(indices)
                if plain is None:
                    plain = edge_looks[indices] = EdgeLook((f"{indices[0]}→{indices[1]}",))
                if plain_edges and "count" not in data and not (grad_norms and "grad" in data):
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
                    scale = scale or GradScale.of(source)
                    lines.append(f"‖g‖ {grad['norm']:.3g}")
                    color, width = scale.style(grad)
                if marked:
                    mark = data.get("diff")
                    if mark in DIFF_MARKS:
                        lines[0] += f" {DIFF_MARKS[mark][0]}"  # the sign alone: + − ~
                    else:
                        mark = data.get("nonfinite")
                    if mark in MARK_COLORS and color is None:
                        color, width = MARK_COLORS[mark], 2.0
                edges.append((target_id, EdgeLook(tuple(lines), color, width)))
        if drawn_none:
            edges.extend((f"{node_id}_none{slot}", EdgeLook((f"{slot}→0",))) for slot in drawn_none)
        where = attributes.get("source")
        tooltip = printable(f"{where}: {attributes.get('source_code', '')}") if isinstance(where, str) else None
        yield _new_record(DiagramNode, (node_id, look[0], look[1], group, edges, tooltip, attributes.get("compiled_graph")))
        for slot in drawn_none:
            yield DiagramNode(f"{node_id}_none{slot}", "none", ("None",), group)


#: What `ModuleBoxes.events` yields: a node, or the start or end of a module's box, and the line's indent.
BoxEvent = tuple[str, "DiagramNode | Cluster", str]


class ModuleBoxes:
    """Holds the nodes that sit in module boxes, then gives them back box by box, nested.

    Writers draw nodes without a group as they come and `add` the
    others; `events` then yields ``("open", cluster, indent)``,
    ``("node", node, indent)`` and ``("close", cluster, indent)``, each box
    with its own nodes first and then its sub-boxes, in the order their first
    node appeared. A box exists for every path prefix, so
    ``layers.3.linear1`` sits inside ``layers.3``, inside ``layers``; when the
    model itself (``""``) has a box, every other box sits inside it. Boxes
    are titled by `gradexport.formats.labels.module_title` with
    ``classes`` (the graph's ``module_classes``).

    Examples:
        >>> boxes = ModuleBoxes({"": "Net", "a": "Block", "a.b": "Linear"})
        >>> boxes.add(DiagramNode("n1", "backward", ("Mm",), "a.b"))
        >>> boxes.add(DiagramNode("n2", "backward", ("T",), "a"))
        >>> boxes.add(DiagramNode("n3", "backward", ("View",), ""))
        >>> for event, item, indent in boxes.events():
        ...     print(f"{indent}{event} {item.id}", item.label if event == "open" else "")
          open g0 Net
            node n3
            open g1 a: Block
              node n2
              open g2 a.b: Linear
                node n1
              close g2
            close g1
          close g0
    """

    def __init__(self, classes: Mapping[str, str] | None = None) -> None:
        self.classes = classes if isinstance(classes, Mapping) else None
        self.members: dict[str, list[DiagramNode]] = {}
        self.children: dict[str | None, list[str]] = {None: []}

    @property
    def drawn(self) -> bool:
        """Whether any node sits in a box."""
        return bool(self.members)

    def add(self, node: DiagramNode) -> None:
        """Put ``node`` in the box of its ``group`` (which must not be None)."""
        assert node.group is not None
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
        children = dict(self.children)
        if "" in self.members:  # the model's box holds every other box
            children[""] = [path for path in children[None] if path != ""]
            children[None] = [""]
        ids = {path: f"g{index}" for index, path in enumerate(_preorder(children))}
        stack: list[tuple[str, int, bool]] = [(path, 1, False) for path in reversed(children[None])]
        while stack:
            path, level, opened = stack.pop()
            cluster = Cluster(ids[path], module_title(path, self.classes), path)
            indent = "  " * level  # a top-level box inside the diagram's braces
            if opened:
                yield "close", cluster, indent
                continue
            yield "open", cluster, indent
            for node in self.members[path]:
                yield "node", node, indent + "  "
            stack.append((path, level, True))
            stack.extend((child, level + 1, False) for child in reversed(children[path]))


def _preorder(children: dict[str | None, list[str]]) -> Iterator[str]:
    stack = list(reversed(children[None]))
    while stack:
        path = stack.pop()
        yield path
        stack.extend(reversed(children[path]))
