"""NetworkX's node-link functions with the edges under ``"edges"``, on every networkx pyproject.toml allows.

NetworkX 3.4 renamed their ``link=`` keyword to ``edges=``; ``make test-lowest`` runs the tests on 3.2.
"""

from __future__ import annotations

import inspect
from typing import Any

import networkx as nx

EDGES_KEYWORD = "edges" if "edges" in inspect.signature(nx.node_link_data).parameters else "link"


def node_link_data(graph: nx.Graph) -> dict[str, Any]:
    return nx.node_link_data(graph, **{EDGES_KEYWORD: "edges"})


def node_link_graph(data: dict[str, Any]) -> nx.Graph:
    return nx.node_link_graph(data, **{EDGES_KEYWORD: "edges"})
