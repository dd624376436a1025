"""What the writers read: a graph, or the same graph one node at a time.

Every writer takes either a `networkx.MultiDiGraph` of
`gradexport.tracing.graph` or a one-pass stream of *adjacency records*
``(node, attributes, out_edges)``, where ``out_edges`` is
``{target: {key: edge attributes}}``: exactly what the graph holds in
``graph.nodes[node]`` and ``graph.succ[node]``, in the graph's node order.
`gradexport.tracing.graph.GraphStream` is such a stream. A stream lets a
writer draw a graph of a million nodes while it is being walked, without a
second copy of it in memory; the text is the same as for the graph.

`Source` is the one place that tells the two apart: writers call
`Source.of` on what they were given and read only the Source.

A stream sets ``graph_attributes`` (the graph's ``graph`` dict) once it is
exhausted. A stream whose ids are all the graph model's (``n0``, ``n1``...)
says so with ``model_ids = True``, which spares the diagram writers a check
per node and edge (see `gradexport.formats.labels.element_id`); one that
yields no None slot's node (``kind="none"``) says so with ``show_none =
False``, which spares them the test of every edge's target for one.

Examples:
    >>> import networkx as nx
    >>> g = nx.MultiDiGraph(num_nodes=2)
    >>> g.add_node("n0", kind="backward")
    >>> g.add_node("n1", kind="leaf")
    >>> _ = g.add_edge("n0", "n1", key=0, input_nr=0)
    >>> [(node, attributes["kind"], out) for node, attributes, out in adjacency(g)]
    [('n0', 'backward', {'n1': {0: {'input_nr': 0}}}), ('n1', 'leaf', {})]
    >>> Source.of(g).model_ids
    True
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from functools import cached_property
from typing import Any, Protocol, Union

import networkx as nx

from .errors import ArgumentTypeError
from .kinds import is_model_id

__all__ = [
    "Adjacency",
    "AdjacencyStream",
    "GraphSource",
    "KeyedEdges",
    "Source",
    "adjacency",
    "graph_attributes",
    "node_data",
    "predecessors",
    "successors",
]

#: A node's out- or in-edges: ``{neighbour: {key: edge attributes}}``.
KeyedEdges = dict[Any, dict[Any, dict[str, Any]]]

#: One node: its id, its attribute dict and its out-edges ``{target: {key: attributes}}``.
Adjacency = tuple[Any, dict[str, Any], KeyedEdges]


class AdjacencyStream(Protocol):
    """A one-pass stream of `Adjacency` records with the graph attributes at its end.

    It may also have ``model_ids = True`` when every id is ``n`` followed by digits,
    and ``show_none = False`` when no node is a None slot's.
    """

    #: The graph attributes, complete once the stream is exhausted.
    graph_attributes: dict[str, Any]

    def __iter__(self) -> Iterator[Adjacency]: ...


#: What a writer accepts.
GraphSource = Union[nx.MultiDiGraph, AdjacencyStream, "Source"]


class Source:
    """A graph or a stream, read the same way by every writer.

    Attributes:
        graph: The whole graph, or ``None`` for a stream.
    """

    def __init__(self, graph: nx.MultiDiGraph | None, stream: AdjacencyStream | None = None):
        self.graph = graph
        self._stream = stream

    @classmethod
    def of(cls, source: GraphSource) -> Source:
        """``source`` as a Source (a Source is returned as it is).

        Raises:
            TypeError: for a graph that is not a MultiDiGraph, or anything
                that is neither a graph nor a stream.
        """
        if isinstance(source, Source):
            return source
        if isinstance(source, nx.Graph):
            if not isinstance(source, nx.MultiDiGraph):
                raise ArgumentTypeError(
                    f"the writers need a networkx.MultiDiGraph (from gradexport.to_networkx), got a "
                    f"{type(source).__name__}, which cannot hold the parallel edges of a + a"
                )
            return cls(source)
        if not hasattr(source, "graph_attributes"):
            raise ArgumentTypeError(
                f"the writers need a networkx.MultiDiGraph or a stream of adjacency records with "
                f"graph_attributes (such as gradexport.tracing.graph.GraphStream), got {type(source).__name__}"
            )
        return cls(None, source)

    @property
    def is_stream(self) -> bool:
        """Whether the records can be read only once, as they are walked."""
        return self.graph is None

    def records(self) -> Iterator[Adjacency]:
        """The adjacency records, in node order (a stream: once)."""
        if self.graph is not None:
            out = successors(self.graph)
            return ((node, attributes, out[node]) for node, attributes in node_data(self.graph).items())
        assert self._stream is not None
        return iter(self._stream)

    @property
    def graph_attributes(self) -> dict[str, Any]:
        """The graph attributes (for a stream: complete only once it is exhausted)."""
        if self.graph is not None:
            return self.graph.graph
        assert self._stream is not None
        return self._stream.graph_attributes

    @cached_property
    def model_ids(self) -> bool:
        """Whether every id is the graph model's, so writers can use ids as they are.

        Checking every id costs as much as drawing: a graph is checked once,
        and a stream vouches for its own ids (``model_ids = True``).
        """
        if self.graph is not None:
            return all(type(node) is str and is_model_id(node) for node in self.graph)
        return getattr(self._stream, "model_ids", False) is True

    @cached_property
    def marked(self) -> bool:
        """Whether nodes and edges carry marks: a diff's states or a non-finite report's (whole graphs only)."""
        return self.graph is not None and ("diff" in self.graph.graph or "nonfinite" in self.graph.graph)

    @cached_property
    def none_nodes(self) -> bool:
        """Whether some nodes may be None slots' (``kind="none"``): not in a stream that says ``show_none = False``."""
        return self.graph is not None or getattr(self._stream, "show_none", True) is not False

    def to_none_node(self, attributes: Mapping[str, Any], target: Hashable, keyed: Mapping[Any, Any]) -> bool:
        """Whether the edges ``keyed`` from a node with ``attributes`` to ``target`` lead to a None slot's node.

        A graph knows the target's kind; a stream does not know it yet, but the
        parent lists its None slots, which are the keys of those edges.
        """
        if self.graph is not None:
            return node_data(self.graph)[target].get("kind") == "none"
        none_slots = attributes.get("none_slots")
        if not none_slots:
            return False
        return next(iter(keyed)) in none_slots

    def whole(self, purpose: str) -> nx.MultiDiGraph:
        """The whole graph, for work that needs it before drawing the first node.

        Raises:
            TypeError: for a stream, saying that ``purpose`` needs the graph.
        """
        if self.graph is None:
            raise ArgumentTypeError(f"{purpose} needs the whole graph, not a stream of its nodes: pass the MultiDiGraph")
        return self.graph


# NetworkX keeps a graph in plain dicts (``_node``, ``_succ``, ``_pred``) behind the
# views ``graph.nodes``, ``graph.succ`` and ``graph.pred``; reading the dicts skips a
# view's call per lookup, which the walks over 10^5+ nodes pay for every node.
def node_data(graph: nx.MultiDiGraph) -> dict[Any, dict[str, Any]]:
    """The dict of node attribute dicts that ``graph.nodes`` views."""
    return graph._node  # type: ignore[attr-defined]


def successors(graph: nx.MultiDiGraph) -> dict[Any, KeyedEdges]:
    """The dict of out-edges that ``graph.succ`` views."""
    return graph._succ  # type: ignore[attr-defined]


def predecessors(graph: nx.MultiDiGraph) -> dict[Any, KeyedEdges]:
    """The dict of in-edges that ``graph.pred`` views."""
    return graph._pred  # type: ignore[attr-defined]


def adjacency(source: GraphSource) -> Iterator[Adjacency]:
    """The adjacency records of ``source``, in node order (see `Source.records`)."""
    return Source.of(source).records()


def graph_attributes(source: GraphSource) -> dict[str, Any]:
    """The graph attributes of ``source`` (for a stream: only once it is exhausted)."""
    return Source.of(source).graph_attributes
