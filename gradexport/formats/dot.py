"""Graphviz DOT for an autograd graph.

Legend (the same in every format):

- Green stadium: a root, the tensor backward starts from (its name, shape).
- Grey rounded box: a backward function (``grad_fn``), labelled with its op.
- Orange hexagon: a special node (in-place on a view, custom Function,
  checkpoint, compiled region, backward hook, error); the label says which.
- Blue box: a leaf (``AccumulateGrad``, which writes ``.grad``), labelled with
  its parameter names and shape.
- Dashed ``None``: an input that needs no gradient (``(None, 0)`` in
  ``next_functions``), only when shown.
- Dashed purple box around nodes: the module that created them (when the
  graph has ``module`` attributes), nested as the modules nest.
- Dashed orange box below a compiled region: the backward graph inside it
  (from ``to_networkx(..., open_compiled=True)``): its ops, each with the
  forward op and user line it differentiates, the values it reads (an edge
  from each input to the op), the saved values and incoming gradients as
  ellipses, and ``→ i`` on an op whose result flows along the region's
  ``next_functions[i]``; a dashed edge leads from the region's node into it.
  Its nodes' ids are opaque too (``"n3/op0"``).
- Purple 3-D box: a module folded into one node by `gradexport.collapse`;
  ``×N`` on an edge: it stands for N edges with the same indices.
- Edge label ``i→k``: the parent's ``next_functions[i]`` is ``(child, k)``;
  output ``i`` of the parent's backward flows into input slot ``k`` of the
  child. ``x1 + x2`` after ``x.unbind()`` gives two edges into
  ``UnbindBackward0``, ``0→0`` and ``1→1``; ``a + a`` gives two edges
  ``0→0`` and ``1→0`` into the leaf ``a``.

Edges point the way the gradient flows, from the loss to the leaves; with the
default direction ``TB`` the loss is at the top.

The text is written directly rather than through pydot's object model, which
costs about 25 µs per element (30 s for a million), and streams line by
line. A backward function's look is the default of the ``node`` statement,
so its line holds only its label; other nodes set their class and style. Node ids are opaque quoted ids (``"n3"``); names appear only inside
labels, escaped (``\\``, ``"``, and ``&``, which Graphviz would otherwise read
as the start of an HTML entity).

Examples:
    >>> import networkx as nx
    >>> g = nx.MultiDiGraph()
    >>> g.add_node("n0", kind="backward", op="SumBackward0")
    >>> g.add_node("n1", kind="leaf", op="AccumulateGrad", names=['say "hi"'], shape=[], dtype="float32", device="cpu")
    >>> _ = g.add_edge("n0", "n1", key=0, next_index=0, input_nr=0)
    >>> print(to_dot(g))  # doctest: +ELLIPSIS
    digraph autograd {
      graph [rankdir="TB", ...];
      node [..., class="backward", shape="box", style="rounded,filled", ...];
      ...
      "n0" [label="SumBackward0"];
      "n1" [label="say \\"hi\\"\\n()", class="leaf", ...];
      "n0" -> "n1" [label="0→0"];
    }
"""

from __future__ import annotations

import html
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

from ..core.errors import RenderError
from ..core.options import DiagramOptions
from ..core.source import GraphSource, Source
from .diagram import DiagramNode, EdgeLook, ModuleBoxes, diagram
from .files import TextOutput, text_output
from .labels import printable
from .styles import FONT, GRAD_BAD_COLOR, GRAD_COLORS, STYLES, grad_legend

if TYPE_CHECKING:
    import pydot

__all__ = ["generate_dot", "to_dot", "to_pydot", "write_dot"]

_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "&": "&amp;"})

_SHAPES = {
    "stadium": ('"oval"', '"filled"'),
    "rounded": ('"box"', '"rounded,filled"'),
    "box": ('"box"', '"filled"'),
    "hexagon": ('"hexagon"', '"filled"'),
    "note": ('"box"', '"rounded,filled,dashed"'),
    "subroutine": ('"box3d"', '"filled"'),
}

_STYLE_ATTRIBUTES = {
    name: (
        f'class="{name}", shape={_SHAPES[style.shape][0]}, style={_SHAPES[style.shape][1]}, '
        f'fillcolor="{style.fill}", color="{style.stroke}", fontcolor="{style.text}"'
    )
    for name, style in STYLES.items()
}
# Most nodes are backward functions: their style is the default in the
# ``node [...]`` statement, so their lines carry only a label (a third of the
# text, and of the time to write it, for a large graph).
_DEFAULT_STYLE = "backward"
_NODE_ATTRIBUTES = {name: "" if name == _DEFAULT_STYLE else ", " + text for name, text in _STYLE_ATTRIBUTES.items()}


_REGION_ATTRIBUTES = f'labeljust="l"; style="rounded,dashed"; color="{STYLES["special"].stroke}"; fontsize="10";'
_REGION_INPUT_ATTRIBUTES = 'shape="ellipse", style="dashed"'
_CLUSTER_ATTRIBUTES = 'labeljust="l"; style="rounded,dashed"; color="#9575cd"; fontcolor="#4527a0"; fontsize="10";'


def quote(lines: Sequence[str]) -> str:
    """A DOT quoted string showing ``lines`` literally, one per line.

    Examples:
        >>> print(quote(["a\\\\b", "<i>&amp;"]))
        "a\\\\b\\n<i>&amp;amp;"
    """
    if len(lines) == 1:  # most labels: no generator to set up
        return f'"{lines[0].translate(_ESCAPES)}"'
    return '"' + "\\n".join(line.translate(_ESCAPES) for line in lines) + '"'


def generate_dot(graph: GraphSource, options: DiagramOptions | None = None) -> Iterator[str]:
    """Yield the DOT text of ``graph`` (a graph or a stream, see `gradexport.core.source`) line by line, without newlines.

    Nodes come first, as the graph orders them (module boxes after the nodes
    outside any box), then the edges, which are held until the nodes are
    written: an edge inside a cluster's braces would pull both its ends into
    that cluster.
    """
    options = options or DiagramOptions()
    yield "digraph autograd {"
    yield f'  graph [rankdir="{options.direction}", fontname="{FONT}", nodesep="0.3", ranksep="0.4"];'
    yield f'  node [fontname="{FONT}", fontsize="11", margin="0.12,0.04", height="0.3", {_STYLE_ATTRIBUTES[_DEFAULT_STYLE]}];'
    # Edge labels carry the i→k numbers the diagrams are about: the same size as node text.
    yield f'  edge [fontname="{FONT}", fontsize="11", color="#616161", fontcolor="#424242", arrowsize="0.7"];'
    edge_lines: list[str] = []
    # With module boxes, a leaf (a parameter's AccumulateGrad) sits on the
    # rank of the first node that feeds it, not one rank below: hanging below,
    # it shares a rank with the next module's first nodes, and as two boxes
    # cannot overlap Graphviz sets each module beside the one before, a
    # diagonal staircase. Measured with dot 2.43 (see docs/performance.md):
    # a resnet18-like model 10,034 x 3,583 pt becomes 1,341 x 6,820 pt, a
    # GPT-2-like one 14,394 x 25,868 pt becomes 868 x 28,336 pt. Without
    # boxes it makes the picture wider, so it is only done with them.
    leaves: list[str] = []
    leaf_parents: dict[str, str] = {}
    # Many nodes and edges look alike (the same op, the same 0→0): the text
    # of each look is made once.
    node_texts: dict[tuple[str, tuple[str, ...]], str] = {}
    edge_texts: dict[EdgeLook, str] = {}
    regions: list[tuple[str, Mapping[str, Any]]] = []

    def node_line(node: DiagramNode, indent: str) -> str:
        look = node[1:3]  # (style, lines)
        text = node_texts.get(look)
        if text is None:
            text = node_texts[look] = f"label={quote(node.lines)}{_NODE_ATTRIBUTES[node.style]}"
        if node.tooltip is not None:  # the line that made it (capture_source): an SVG hover text
            return f'{indent}"{node.id}" [{text}, tooltip={quote([node.tooltip])}];'
        return f'{indent}"{node.id}" [{text}];'

    source = Source.of(graph)
    boxes = ModuleBoxes(source.graph_attributes.get("module_classes"))
    for node in diagram(source, options):
        node_id = node.id
        if node.style == "leaf":
            leaves.append(node_id)
        for target, edge_look in node.edges:
            leaf_parents.setdefault(target, node_id)
            text = edge_texts.get(edge_look)
            if text is None:
                text = edge_texts[edge_look] = _edge_text(edge_look)
            edge_lines.append(f'  "{node_id}" -> "{target}" [{text}];')
        if node.group is None:
            yield node_line(node, "  ")
        else:
            boxes.add(node)
        if node.region is not None:
            regions.append((node_id, node.region))
    for event, item, indent in boxes.events():
        if isinstance(item, DiagramNode):
            yield node_line(item, indent)
        elif event == "open":
            yield f'{indent}subgraph "cluster_{item.id}" {{'
            yield f"{indent}  label={quote([item.label])}; {_CLUSTER_ATTRIBUTES}"
        else:
            yield f"{indent}}}"
    for node_id, region in regions:
        yield from _region_lines(node_id, region, edge_lines)
    yield from edge_lines
    if boxes.drawn:
        # newrank: rank="same" across boxes (dot's older ranking ignores it there).
        yield '  graph [newrank="true"];'
        for leaf in leaves:
            parent = leaf_parents.get(leaf)
            if parent is not None:
                yield f'  {{rank="same"; "{parent}"; "{leaf}";}}'
    if any(look.color in GRAD_COLORS for look in edge_texts):
        yield f'  label={_grad_legend()}; labelloc="b"; labeljust="l"; fontsize="11";'
    yield "}"


def _region_lines(node_id: str, region: Mapping[str, Any], edge_lines: list[str]) -> Iterator[str]:
    """The cluster of a compiled region's backward graph (see `gradexport.tracing.compiled`), its edges added to ``edge_lines``.

    Its nodes have opaque ids, as the graph's do: ``"<region node id>/in<k>"`` for
    the region's k-th input and ``"<region node id>/op<k>"`` for its k-th op.
    """
    elements: dict[str, str] = {}
    for number, value in enumerate(region.get("inputs", ())):
        elements[value["id"]] = f'"{node_id}/in{number}"'
    for number, op in enumerate(region.get("ops", ())):
        elements[op["id"]] = f'"{node_id}/op{number}"'
    yield f'  subgraph "cluster_{node_id}_compiled" {{'
    yield f"    label={quote(['inside the compiled region'])}; {_REGION_ATTRIBUTES}"
    returned = {output["id"]: output["next_index"] for output in region.get("outputs", ())}
    for value in region.get("inputs", ()):
        yield f"    {elements[value['id']]} [label={quote([printable(value['id']), value['role']])}, {_REGION_INPUT_ATTRIBUTES}];"
        if value["role"] == "gradient":
            edge_lines.append(f'  "{node_id}" -> {elements[value["id"]]} [style="dashed", color="{STYLES["special"].stroke}"];')
    for op in region.get("ops", ()):
        lines = [op["op"]]
        if "forward_op" in op or "source" in op:
            lines.append(" ".join(str(op[key]) for key in ("forward_op", "source") if key in op))
        if op["id"] in returned:
            lines.append(f"→ {returned[op['id']]}")
        tooltip = f", tooltip={quote([printable(op['source'] + ': ' + op.get('source_code', ''))])}" if "source" in op else ""
        yield f"    {elements[op['id']]} [label={quote([printable(line) for line in lines])}{tooltip}];"
        edge_lines.extend(f"  {elements[value]} -> {elements[op['id']]};" for value in op["inputs"] if value in elements)
    yield "  }"


def _grad_legend() -> str:
    """The fixed gradient-norm scale as an HTML-like label: one swatch line per step, then NaN or Inf."""
    rows = [(text, colour, width) for text, colour, width in grad_legend()] + [("NaN or Inf", GRAD_BAD_COLOR, 2.5)]
    cells = "".join(
        f'<tr><td width="28" height="{max(2, round(width))}" bgcolor="{colour}"></td><td align="left">{html.escape(text)}</td></tr>'
        for text, colour, width in rows
    )
    return f'<<table border="0" cellspacing="2" cellpadding="1"><tr><td colspan="2" align="left">‖g‖ on an edge</td></tr>{cells}</table>>'


def _edge_text(look: EdgeLook) -> str:
    if look.color is None:
        return f"label={quote(look.lines)}"
    if look.color in GRAD_COLORS:  # the line carries the scale; its label stays dark enough to read
        return f'label={quote(look.lines)}, color="{look.color}", penwidth="{look.width:g}"'
    return f'label={quote(look.lines)}, color="{look.color}", fontcolor="{look.color}", penwidth="{look.width:g}"'


def to_dot(graph: GraphSource, options: DiagramOptions | None = None) -> str:
    """The DOT text of ``graph``, ending with a newline (see `generate_dot`)."""
    return "\n".join(chain(generate_dot(graph, options), ("",)))  # the final newline without copying the text


def write_dot(graph: GraphSource, path: TextOutput, options: DiagramOptions | None = None) -> None:
    """Write the DOT text of ``graph`` to an open text file, or atomically to a path."""
    with text_output(path) as file:
        file.writelines(line + "\n" for line in generate_dot(graph, options))


def to_pydot(graph: GraphSource, options: DiagramOptions | None = None) -> pydot.Dot:
    """``graph`` as a `pydot.Dot`, parsed from `to_dot` (slow for large graphs)."""
    import pydot

    parsed = pydot.graph_from_dot_data(to_dot(graph, options))
    if not parsed:
        raise RenderError("pydot could not parse the DOT text")  # a bug in this writer, never the user's input
    return parsed[0]
