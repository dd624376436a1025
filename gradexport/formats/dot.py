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
- Purple 3-D box: a module folded into one node by :func:`gradexport.collapse`;
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
line. Node ids are opaque quoted ids (``"n3"``); names appear only inside
labels, escaped (``\\``, ``"``, and ``&``, which Graphviz would otherwise read
as the start of an HTML entity).

Example:
    >>> import networkx as nx
    >>> g = nx.MultiDiGraph()
    >>> g.add_node("n0", kind="backward", op="SumBackward0")
    >>> g.add_node("n1", kind="leaf", op="AccumulateGrad", names=['say "hi"'], shape=[], dtype="float32", device="cpu")
    >>> _ = g.add_edge("n0", "n1", key=0, next_index=0, input_nr=0)
    >>> print(to_dot(g))  # doctest: +ELLIPSIS
    digraph autograd {
      graph [rankdir="TB", ...];
      ...
      "n0" [label="SumBackward0", class="backward", ...];
      "n1" [label="say \\"hi\\"\\n()", class="leaf", ...];
      "n0" -> "n1" [label="0→0"];
    }
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING

import networkx as nx

from .files import atomic_open
from .labels import (
    FONT,
    NODE_STYLES,
    DiagramOptions,
    diagram_edges,
    diagram_nodes,
    nest,
)

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

_NODE_ATTRIBUTES = {
    name: (
        f'class="{name}", shape={_SHAPES[style.shape][0]}, style={_SHAPES[style.shape][1]}, '
        f'fillcolor="{style.fill}", color="{style.stroke}", fontcolor="{style.text}"'
    )
    for name, style in NODE_STYLES.items()
}


_CLUSTER_ATTRIBUTES = 'labeljust="l"; style="rounded,dashed"; color="#9575cd"; fontcolor="#4527a0"; fontsize="10";'


def quote(lines: Iterable[str]) -> str:
    """A DOT quoted string showing ``lines`` literally, one per line.

    Example:
        >>> print(quote(["a\\\\b", "<i>&amp;"]))
        "a\\\\b\\n<i>&amp;amp;"
    """
    return '"' + "\\n".join(line.translate(_ESCAPES) for line in lines) + '"'


def generate_dot(graph: nx.MultiDiGraph, options: DiagramOptions | None = None) -> Iterator[str]:
    """Yield the DOT text of ``graph`` line by line (without newlines)."""
    options = options or DiagramOptions()
    yield "digraph autograd {"
    yield f'  graph [rankdir="{options.direction}", fontname="{FONT}", nodesep="0.3", ranksep="0.4"];'
    yield f'  node [fontname="{FONT}", fontsize="11", margin="0.12,0.04", height="0.3"];'
    yield f'  edge [fontname="{FONT}", fontsize="9", color="#616161", fontcolor="#424242", arrowsize="0.7"];'
    depth = 1
    for event, item in nest(diagram_nodes(graph, options)):
        if event == "node":
            yield f'{"  " * depth}"{item.id}" [label={quote(item.lines)}, {_NODE_ATTRIBUTES[item.style]}];'
        elif event == "open":
            yield f'{"  " * depth}subgraph "cluster_{item.id}" {{'
            depth += 1
            yield f'{"  " * depth}label={quote([item.label])}; {_CLUSTER_ATTRIBUTES}'
        else:
            depth -= 1
            yield f'{"  " * depth}}}'
    for edge in diagram_edges(graph, options):
        extra = "" if edge.color is None else f', color="{edge.color}", fontcolor="{edge.color}", penwidth="{edge.width:g}"'
        yield f'  "{edge.source}" -> "{edge.target}" [label={quote(edge.lines)}{extra}];'
    yield "}"


def to_dot(graph: nx.MultiDiGraph, options: DiagramOptions | None = None) -> str:
    """The DOT text of ``graph``, ending with a newline (see :func:`generate_dot`)."""
    return "".join(line + "\n" for line in generate_dot(graph, options))


def write_dot(graph: nx.MultiDiGraph, path: str | os.PathLike[str] | IO[str], options: DiagramOptions | None = None) -> None:
    """Write the DOT text of ``graph`` to an open text file, or atomically to a path."""
    if hasattr(path, "write"):
        path.writelines(line + "\n" for line in generate_dot(graph, options))
        return
    with atomic_open(path) as file:
        file.writelines(line + "\n" for line in generate_dot(graph, options))


def to_pydot(graph: nx.MultiDiGraph, options: DiagramOptions | None = None) -> pydot.Dot:
    """``graph`` as a :class:`pydot.Dot`, parsed from :func:`to_dot` (slow for large graphs)."""
    import pydot

    parsed = pydot.graph_from_dot_data(to_dot(graph, options))
    if not parsed:
        raise ValueError("pydot could not parse the DOT text")  # a bug in this writer, never the user's input
    return parsed[0]
