"""A `gradexport.diff` as the two graphs Model Explorer puts side by side."""

from __future__ import annotations

from typing import TYPE_CHECKING

import networkx as nx

from ...core.errors import ArgumentValueError

if TYPE_CHECKING:
    pass

__all__ = ["diff_panes"]


def diff_panes(merged: nx.MultiDiGraph, a: nx.MultiDiGraph, b: nx.MultiDiGraph) -> tuple[nx.MultiDiGraph, nx.MultiDiGraph]:
    """The two sides of ``merged = gradexport.diff(a, b)``, for two panes that sync by node id.

    Each pane is the graph itself (``a`` or ``b``: its own attributes,
    edges and graph attributes) with its nodes renamed to the ids of
    ``merged``, so a node and its counterpart have the same id in both panes
    (Model Explorer's "match node id" navigation follows it), and with the
    diff's marks copied onto it: ``diff``, ``changes``, ``a_id``, ``b_id``,
    ``replaces``/``replaced_by`` on nodes, ``diff``/``changes`` on edges.
    Pane ``a`` holds the same, changed and removed nodes; pane ``b`` the
    same, changed and added ones. The graph attribute ``diff`` holds the
    counts; ``roots`` and ``nonfinite`` name the renamed ids.

    Args:
        merged: The result of `gradexport.diff` ``(a, b)``.
        a: The graph before, as given to it.
        b: The graph after.

    Raises:
        ValueError: ``merged`` is not the diff of these graphs.

    Examples:
        >>> import torch, gradexport
        >>> x = torch.ones(3, requires_grad=True)
        >>> a, b = gradexport.to_networkx((x * 2).sum()), gradexport.to_networkx((x * 2).exp().sum())
        >>> pane_a, pane_b = diff_panes(gradexport.diff(a, b), a, b)
        >>> [(node, data["diff"]) for node, data in pane_b.nodes(data=True)]
        [('n0', 'same'), ('n1', 'same'), ('n2', 'added'), ('n3', 'same'), ('n4', 'same')]
        >>> [(node, data["diff"]) for node, data in pane_a.nodes(data=True)]
        [('n0', 'same'), ('n1', 'same'), ('n3', 'same'), ('n4', 'same')]
    """
    return _pane(merged, a, "a_id", "added"), _pane(merged, b, "b_id", "removed")


_NODE_MARKS = ("diff", "changes", "a_id", "b_id", "replaces", "replaced_by")

_EDGE_MARKS = ("diff", "changes")


def _pane(merged: nx.MultiDiGraph, side: nx.MultiDiGraph, id_key: str, other_only: str) -> nx.MultiDiGraph:
    import networkx as nx

    mismatch = f"the diff does not match the graph given as {id_key[0]}: diff_panes takes diff(a, b), a, b"
    renamed = {data[id_key]: node for node, data in merged.nodes(data=True) if id_key in data}
    if set(renamed) != set(side.nodes):
        raise ArgumentValueError(mismatch)
    index = 0 if id_key == "a_id" else 1
    pane: nx.MultiDiGraph = nx.MultiDiGraph()
    for node, data in side.nodes(data=True):
        marks = merged.nodes[renamed[node]]
        changes = marks.get("changes") or {}
        if any(data.get(name) != (changes[name][index] if name in changes else marks.get(name)) for name in ("kind", "op")):
            raise ArgumentValueError(mismatch)
        pane.add_node(renamed[node], **{**data, **{name: marks[name] for name in _NODE_MARKS if name in marks}})
    for source, target, key, data in side.edges(keys=True, data=True):
        edge = (renamed[source], renamed[target], key)
        marks = merged.edges[edge] if merged.has_edge(*edge) else {}
        if marks.get("diff") == other_only:
            raise ArgumentValueError(mismatch)
        pane.add_edge(*edge, **{**data, **{name: marks[name] for name in _EDGE_MARKS if name in marks}})
    pane.graph.update(side.graph)
    if isinstance(side.graph.get("roots"), list):
        pane.graph["roots"] = [dict(entry, node=renamed.get(entry.get("node"), entry.get("node"))) for entry in side.graph["roots"]]
    if isinstance(side.graph.get("nonfinite"), list):
        pane.graph["nonfinite"] = [renamed.get(node, node) for node in side.graph["nonfinite"]]
    pane.graph["diff"] = merged.graph.get("diff")
    return pane
