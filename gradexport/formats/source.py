"""What the writers read: a graph, or the same graph one node at a time.

Every writer takes either a :class:`networkx.MultiDiGraph` of
:mod:`gradexport.graph` or a one-pass stream of *adjacency records*
``(node, attributes, out_edges)``, where ``out_edges`` is
``{target: {key: edge attributes}}``: exactly what the graph holds in
``graph.nodes[node]`` and ``graph.succ[node]``, in the graph's node order.
:class:`gradexport.graph.GraphStream` is such a stream. A stream lets a
writer draw a graph of a million nodes while it is being walked, without a
second copy of it in memory; the text is the same as for the graph.

A stream sets ``graph_attributes`` (the graph's ``graph`` dict) once it is
exhausted; only the JSON writer reads it. A stream whose ids are all the
graph model's (``n0``, ``n1``...) says so with ``model_ids = True``, which
spares the diagram writers a check per node and edge (see
:func:`gradexport.formats.labels.element_id`).

Example:
    >>> import networkx as nx
    >>> g = nx.MultiDiGraph(num_nodes=2)
    >>> g.add_node("n0", kind="backward")
    >>> g.add_node("n1", kind="leaf")
    >>> _ = g.add_edge("n0", "n1", key=0, input_nr=0)
    >>> [(node, attributes["kind"], out) for node, attributes, out in adjacency(g)]
    [('n0', 'backward', {'n1': {0: {'input_nr': 0}}}), ('n1', 'leaf', {})]
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any, Protocol, Union

import networkx as nx

__all__ = ["Adjacency", "AdjacencyStream", "GraphSource", "adjacency", "graph_attributes"]

#: One node: its id, its attribute dict and its out-edges ``{target: {key: attributes}}``.
Adjacency = tuple[Hashable, dict[str, Any], dict[Hashable, dict[Any, dict[str, Any]]]]


class AdjacencyStream(Protocol):
    """A one-pass stream of :data:`Adjacency` records with the graph attributes at its end.

    It may also have ``model_ids = True`` when every id is ``n`` followed by digits.
    """

    #: The graph attributes, complete once the stream is exhausted.
    graph_attributes: dict[str, Any]

    def __iter__(self) -> Iterator[Adjacency]: ...


#: What a writer accepts.
GraphSource = Union[nx.MultiDiGraph, AdjacencyStream]


def adjacency(source: GraphSource) -> Iterator[Adjacency]:
    """The adjacency records of ``source``, in node order."""
    if isinstance(source, nx.Graph):
        if not isinstance(source, nx.MultiDiGraph):
            raise TypeError(
                f"the writers need a networkx.MultiDiGraph (from gradexport.to_networkx), got a "
                f"{type(source).__name__}, which cannot hold the parallel edges of a + a"
            )
        successors = source._succ
        return ((node, attributes, successors[node]) for node, attributes in source._node.items())
    if not hasattr(source, "graph_attributes"):
        raise TypeError(
            f"the writers need a networkx.MultiDiGraph or a stream of adjacency records with "
            f"graph_attributes (such as gradexport.graph.GraphStream), got {type(source).__name__}"
        )
    return iter(source)


def graph_attributes(source: GraphSource) -> dict[str, Any]:
    """The graph attributes of ``source`` (for a stream: only once it is exhausted)."""
    return source.graph if isinstance(source, nx.Graph) else source.graph_attributes
