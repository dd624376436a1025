"""JSON for an autograd graph: NetworkX node-link data, byte-stable, round-tripping.

The document is `networkx.node_link_data` with edges under ``"edges"``:
``{"directed": true, "multigraph": true, "graph": {...}, "nodes": [{"id": "n0",
...}], "edges": [{"source": "n0", "target": "n1", "key": 0, ...}]}``, with every
node, edge and graph attribute of `gradexport.graph`. Keys are sorted and
separators fixed, so the same graph always gives the same bytes. The text is
ASCII (other characters as ``\\u`` escapes), so a name with any character,
even a lone surrogate, survives a file. Non-finite floats (a NaN gradient
norm) are written as ``NaN``/``Infinity``, as Python's `json` reads them.

Examples:
    >>> import networkx as nx
    >>> g = nx.MultiDiGraph(roots=[{"name": "loss", "node": "n0", "input_nr": 0}])
    >>> g.add_node("n0", kind="backward", op="AddBackward0")
    >>> g.add_node("n1", kind="leaf", names=["a"])
    >>> _ = g.add_edge("n0", "n1", key=0, next_index=0, input_nr=0)
    >>> _ = g.add_edge("n0", "n1", key=1, next_index=1, input_nr=0)
    >>> text = to_json(g)
    >>> text[:60]
    '{"directed":true,"edges":[{"input_nr":0,"key":0,"next_index"'
    >>> back = from_json(text)
    >>> sorted(back.edges(keys=True)) == sorted(g.edges(keys=True)) and back.graph == g.graph
    True
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from typing import IO, Any

import networkx as nx

from .files import atomic_open
from .source import GraphSource, Source

__all__ = ["from_json", "generate_json", "read_json", "to_json", "write_json"]

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def generate_json(graph: GraphSource) -> Iterator[str]:
    """Yield the JSON text of ``graph`` (a graph or a stream, see `gradexport.formats.source`) in chunks, then a final newline.

    The text is exactly ``json.dumps(networkx.node_link_data(graph,
    edges="edges"), sort_keys=True, separators=(",", ":"))``, produced a
    batch of node or edge records at a time: ``node_link_data`` would first
    build a second copy of the whole graph (2.4 times the memory at a million
    nodes), and ``json.dumps``'s streaming form runs the pure-Python encoder,
    three times slower than the C encoder. Sorted keys put the edges before
    the graph attributes and the nodes, so a stream's nodes are held until
    its end.
    """
    source = Source.of(graph)
    held_nodes: list[tuple[Any, dict[str, Any]]] = []

    def edge_records() -> Iterator[dict[str, Any]]:
        for node, attributes, out in source.records():
            if source.is_stream:
                held_nodes.append((node, attributes))
            for target, keyed in out.items():
                for key, data in keyed.items():
                    yield {**data, "source": node, "target": target, "key": key}

    yield '{"directed":true,"edges":['
    yield from _comma_joined(edge_records())
    yield f'],"graph":{_ENCODER.encode(source.graph_attributes)},"multigraph":true,"nodes":['
    nodes = held_nodes if source.graph is None else source.graph.nodes(data=True)
    yield from _comma_joined({**attributes, "id": node} for node, attributes in nodes)
    yield "]}\n"


_BATCH = 1024


def _comma_joined(records: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The JSON texts of ``records`` joined by commas, in chunks.

    Records are encoded a batch at a time, as a list whose brackets are cut
    off: each call of the encoder sets it up anew, which costs more than
    encoding one small record.
    """
    batch: list[dict[str, Any]] = []
    separator = ""
    for record in records:
        batch.append(record)
        if len(batch) == _BATCH:
            yield separator + _ENCODER.encode(batch)[1:-1]
            separator = ","
            batch = []
    if batch:
        yield separator + _ENCODER.encode(batch)[1:-1]


def to_json(graph: GraphSource) -> str:
    """The JSON text of ``graph``, ending with a newline."""
    return "".join(generate_json(graph))


def write_json(graph: GraphSource, path: str | os.PathLike[str] | IO[str]) -> None:
    """Write the JSON text of ``graph`` to an open text file, or atomically to a path."""
    if hasattr(path, "write"):
        path.writelines(generate_json(graph))
        return
    with atomic_open(path) as file:
        file.writelines(generate_json(graph))


def from_json(text: str | bytes) -> nx.MultiDiGraph:
    """The graph that `to_json` wrote: same nodes, edges with keys, and attributes."""
    data = json.loads(text)
    graph = nx.node_link_graph(data, directed=True, multigraph=True, edges="edges")
    if not isinstance(graph, nx.MultiDiGraph):
        raise ValueError("gradexport JSON describes a directed multigraph; this document does not")
    return graph


def read_json(path: str | os.PathLike[str]) -> nx.MultiDiGraph:
    """Read a graph from a file written by `write_json`."""
    with open(path, encoding="utf-8") as file:
        return from_json(file.read())
