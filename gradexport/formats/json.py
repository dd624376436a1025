"""JSON for an autograd graph: NetworkX node-link data, byte-stable, round-tripping.

The document is :func:`networkx.node_link_data` with edges under ``"edges"``:
``{"directed": true, "multigraph": true, "graph": {...}, "nodes": [{"id": "n0",
...}], "edges": [{"source": "n0", "target": "n1", "key": 0, ...}]}``, with every
node, edge and graph attribute of :mod:`gradexport.graph`. Keys are sorted and
separators fixed, so the same graph always gives the same bytes. The text is
ASCII (other characters as ``\\u`` escapes), so a name with any character,
even a lone surrogate, survives a file. Non-finite floats (a NaN gradient
norm) are written as ``NaN``/``Infinity``, as Python's :mod:`json` reads them.

Example:
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
from collections.abc import Iterator
from typing import IO

import networkx as nx

from .files import atomic_open

__all__ = ["from_json", "generate_json", "read_json", "to_json", "write_json"]

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def generate_json(graph: nx.MultiDiGraph) -> Iterator[str]:
    """Yield the JSON text of ``graph`` in chunks, then a final newline.

    The text is exactly ``json.dumps(networkx.node_link_data(graph,
    edges="edges"), sort_keys=True, separators=(",", ":"))``, produced one
    node or edge record at a time: ``node_link_data`` would first build a
    second copy of the whole graph (2.4 times the memory at a million nodes),
    and ``json.dumps``'s streaming form runs the pure-Python encoder, three
    times slower than encoding each small record with the C encoder.
    """
    encode = _ENCODER.encode
    yield '{"directed":true,"edges":['
    separator = ""
    for source, target, key, data in graph.edges(keys=True, data=True):
        yield separator + encode({**data, "source": source, "target": target, "key": key})
        separator = ","
    yield f'],"graph":{encode(graph.graph)},"multigraph":true,"nodes":['
    separator = ""
    for node, data in graph.nodes(data=True):
        yield separator + encode({**data, "id": node})
        separator = ","
    yield "]}\n"


def to_json(graph: nx.MultiDiGraph) -> str:
    """The JSON text of ``graph``, ending with a newline."""
    return "".join(generate_json(graph))


def write_json(graph: nx.MultiDiGraph, path: str | os.PathLike[str] | IO[str]) -> None:
    """Write the JSON text of ``graph`` to an open text file, or atomically to a path."""
    if hasattr(path, "write"):
        path.writelines(generate_json(graph))
        return
    with atomic_open(path) as file:
        file.writelines(generate_json(graph))


def from_json(text: str | bytes) -> nx.MultiDiGraph:
    """The graph that :func:`to_json` wrote: same nodes, edges with keys, and attributes."""
    data = json.loads(text)
    graph = nx.node_link_graph(data, directed=True, multigraph=True, edges="edges")
    if not isinstance(graph, nx.MultiDiGraph):
        raise ValueError("gradexport JSON describes a directed multigraph; this document does not")
    return graph


def read_json(path: str | os.PathLike[str]) -> nx.MultiDiGraph:
    """Read a graph from a file written by :func:`write_json`."""
    with open(path, encoding="utf-8") as file:
        return from_json(file.read())
