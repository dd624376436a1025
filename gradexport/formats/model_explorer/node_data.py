"""Model Explorer *node data*: gradient norms and the graph's marks as values its colour scale shows."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import networkx as nx

from ...core.errors import ArgumentValueError
from ...core.source import GraphSource, adjacency
from ..labels import element_id
from ..styles import GRAD_BAD_COLOR, GRAD_COLORS, MARK_STYLES, STYLES, is_bad

if TYPE_CHECKING:
    from model_explorer.node_data_builder import ModelNodeData

from .graph import GRAPH_ID, model_explorer_package

__all__ = ["DIFF_VALUES", "GRADIENT_METRICS", "MARK_METRICS", "NONFINITE_VALUES", "gradient_node_data", "mark_node_data", "node_data_for"]


#: What `gradient_node_data` can show, by name.
GRADIENT_METRICS = {
    "log10_norm": "log10 of the largest gradient norm a node received (orders of magnitude)",
    "norm": "the largest gradient norm a node received",
    "non_finite": "1 where a node received a gradient with NaN or infinity, else 0",
}

#: Values of the ``nonfinite`` metric: where a NaN or Inf gradient started is the strongest.
NONFINITE_VALUES = {"finite": 0, "reached": 1, "origin": 2}

#: Values of the ``diff`` metric, one per `gradexport.analysis.diff.DIFF_STATES`.
DIFF_VALUES = {"same": 0, "changed": 1, "added": 2, "removed": 3}

#: What `mark_node_data` can show, by name (each needs the node attribute of the same name).
MARK_METRICS = {
    "exec_order": "the position in which the engine ran the node (1 first); roots and nodes that did not run have none",
    "saved_bytes": "bytes of the storages the node's saved tensors are first to keep alive (each storage counted once, so a layer's sum is its memory)",
    "saved_bytes_held": "bytes of every storage the node's saved tensors keep alive, shared ones included (saved_bytes + saved_bytes_shared)",
    "nonfinite": "2 where a NaN or Inf gradient started (origin), 1 where one reached, 0 elsewhere (NONFINITE_VALUES)",
    "diff": "0 same, 1 changed, 2 added, 3 removed (DIFF_VALUES)",
}

#: The node attribute each mark metric reads.
_MARK_ATTRIBUTE = {"saved_bytes_held": "saved_bytes"}


def _received(source: GraphSource) -> dict[str, list[Mapping[str, Any]]]:
    """The ``grad`` records that reached each node (a root: the one it started with)."""
    received: dict[str, list[Mapping[str, Any]]] = {}
    for node, attributes, out in adjacency(source):
        node_id = node if isinstance(node, str) else element_id(node)
        for target, keyed in out.items():
            for data in keyed.values():
                grad = data.get("grad")
                if isinstance(grad, Mapping):
                    target_id = target if isinstance(target, str) else element_id(target)
                    received.setdefault(target_id, []).append(grad)
                    if attributes.get("kind") == "root":
                        received.setdefault(node_id, []).append(grad)
    return received


def _finite_norm(grad: Mapping[str, Any]) -> float | None:
    return None if "norm" not in grad or is_bad(grad) else float(grad["norm"])


def _colour_scale(node_data: Any) -> dict[str, list[Any]]:
    """The blue scale of the gradient edges, smallest value to largest."""
    last = len(GRAD_COLORS) - 1
    return {
        "gradient": [
            node_data.GradientItem(stop=step / last, bgColor=colour, textColor="#ffffff" if step > last // 2 else None)
            for step, colour in enumerate(GRAD_COLORS)
        ]
    }


def _classes(node_data: Any, colours: Mapping[int, tuple[str, str | None]]) -> dict[str, list[Any]]:
    """One colour per value (``{value: (background, text)}``), as thresholds."""
    return {"thresholds": [node_data.ThresholdItem(value=value, bgColor=background, textColor=text) for value, (background, text) in sorted(colours.items())]}


def _model_node_data(node_data: Any, graph_id: str, name: str, results: Mapping[str, float], colours: Mapping[str, Any]) -> ModelNodeData:
    graph_data = node_data.GraphNodeData(results={node: node_data.NodeDataResult(value=value) for node, value in results.items()}, name=name, **colours)
    return node_data.ModelNodeData(graphsData={graph_id: graph_data})


def gradient_node_data(source: GraphSource, metric: str = "log10_norm", *, graph_id: str = GRAPH_ID) -> ModelNodeData:
    """Model Explorer node data from the ``grad`` records of `gradexport.record_gradients`.

    A node's value comes from the gradients it received (its incoming
    edges; a root: the gradient it started with), see `GRADIENT_METRICS`.
    Norms are exact per edge; a node that receives several gradients gets
    the largest. Nodes without a finite norm (no gradient flowed, NaN or
    infinity) get no value in the norm metrics, and ``log10_norm`` leaves out
    zero norms too; ``non_finite`` gives every node that received a gradient
    0 or 1. Layers show Model Explorer's aggregate (min, max, sum, mean) of
    their nodes.

    Args:
        source: A graph from `gradexport.record_gradients` (or a stream of one).
        metric: A key of `GRADIENT_METRICS`.
        graph_id: The id of the graph in Model Explorer (as written).

    Returns:
        A ``model_explorer.node_data_builder.ModelNodeData`` for the graph
        ``graph_id``; ``.to_json_string()`` gives its JSON and
        ``.save_to_file(path)`` writes the file Model Explorer's "node data"
        button loads.

    Raises:
        ValueError: an unknown metric, or a graph without gradients.
        ModelExplorerNotInstalledError: Model Explorer is not installed.

    Examples:
        >>> import torch, gradexport
        >>> x = torch.tensor([3.0, 4.0], requires_grad=True)
        >>> graph = gradexport.record_gradients((x * 10).sum(), params={"x": x})
        >>> data = gradient_node_data(graph, "norm").graphsData["backward"]
        >>> {node: result.value for node, result in data.results.items()}
        {'n1': 1.0, 'n0': 1.0, 'n2': 1.414..., 'n3': 14.14...}
    """
    if metric not in GRADIENT_METRICS:
        raise ArgumentValueError(f"metric must be one of {', '.join(GRADIENT_METRICS)}, got {metric!r}")
    model_explorer_package()
    received = _received(source)
    if not received:
        raise ArgumentValueError("the graph has no gradient records: build it with gradexport.record_gradients to show gradients")
    return _gradient_node_data(received, metric, graph_id)


def _gradient_node_data(received: Mapping[str, list[Mapping[str, Any]]], metric: str, graph_id: str) -> ModelNodeData:
    node_data = model_explorer_package().node_data_builder
    results: dict[str, float] = {}
    for node_id, grads in received.items():
        if metric == "non_finite":
            results[node_id] = int(any(map(is_bad, grads)))
            continue
        norms = [norm for norm in map(_finite_norm, grads) if norm is not None]
        if not norms:
            continue
        largest = max(norms)
        if metric == "norm":
            results[node_id] = largest
        elif largest > 0:
            results[node_id] = math.log10(largest)
    if metric == "non_finite":
        colours = _classes(node_data, {0: (GRAD_COLORS[0], None), 1: (GRAD_BAD_COLOR, "#ffffff")})
    else:
        colours = _colour_scale(node_data)
    return _model_node_data(node_data, graph_id, f"gradient {metric}", results, colours)


def _mark_value(metric: str, attributes: Mapping[str, Any]) -> float | None:
    """A node's value in a mark metric, ``None`` for none."""
    if metric == "nonfinite":
        return NONFINITE_VALUES.get(attributes.get("nonfinite", "finite"))
    if metric == "diff":
        return DIFF_VALUES.get(attributes.get("diff"))  # type: ignore[arg-type]
    value = attributes.get(_MARK_ATTRIBUTE.get(metric, metric))
    if type(value) is not int:
        return None
    if metric == "saved_bytes_held":
        shared = attributes.get("saved_bytes_shared", 0)
        value += shared if type(shared) is int else 0
    return value


def _mark_colours(node_data: Any, metric: str) -> dict[str, list[Any]]:
    if metric == "nonfinite":
        origin = MARK_STYLES["nonfinite"]
        return _classes(node_data, {0: (GRAD_COLORS[0], None), 1: (origin.fill, None), 2: (origin.stroke, "#ffffff")})
    if metric == "diff":
        same = STYLES["backward"]
        return _classes(
            node_data,
            {DIFF_VALUES[state]: (same.fill if state == "same" else MARK_STYLES[state].fill, None) for state in DIFF_VALUES},
        )
    return _colour_scale(node_data)


def mark_node_data(source: GraphSource, metric: str, *, graph_id: str = GRAPH_ID) -> ModelNodeData:
    """Model Explorer node data from a mark of the graph model (see `MARK_METRICS`).

    ``nonfinite`` (a `gradexport.find_nonfinite` report's ``.graph``)
    gives every node a value of `NONFINITE_VALUES`, shown in the reds
    of the other diagrams, darkest where the NaN or Inf started. ``diff`` (a
    `gradexport.diff` graph, or a pane of `diff_panes`) gives
    every node a value of `DIFF_VALUES`, in the colours of the other
    diagrams: grey same, orange changed, green added, red removed.
    ``saved_bytes``, ``saved_bytes_held`` (a graph traced with ``show_saved=True``)
    and ``exec_order`` (from `gradexport.record_gradients`,
    `gradexport.replay` or `gradexport.find_nonfinite`) colour
    nodes on the blue scale of the gradients, smallest to largest. Model
    Explorer shows each layer's aggregate: the sum of ``saved_bytes`` is the
    layer's share of the saved memory.

    Args:
        source: A graph (or a stream of one) whose nodes carry the metric's attribute.
        metric: A key of `MARK_METRICS`.
        graph_id: The id of the graph in Model Explorer (as written).

    Returns:
        A ``model_explorer.node_data_builder.ModelNodeData``, as `gradient_node_data`'s.

    Raises:
        ValueError: an unknown metric, or a graph without the mark.
        ModelExplorerNotInstalledError: Model Explorer is not installed.

    Examples:
        >>> import torch, gradexport
        >>> x = torch.tensor([0.0, 4.0], requires_grad=True)
        >>> report = gradexport.find_nonfinite(x.sqrt().sum(), params={"x": x})
        >>> data = mark_node_data(report.graph, "nonfinite").graphsData["backward"]
        >>> {report.graph.nodes[node]["op"]: result.value for node, result in data.results.items() if node != "n0"}
        {'SumBackward0': 0, 'SqrtBackward0': 2, 'AccumulateGrad': 1}
    """
    if metric not in MARK_METRICS:
        raise ArgumentValueError(f"metric must be one of {', '.join(MARK_METRICS)}, got {metric!r}")
    node_data = model_explorer_package().node_data_builder
    attribute = _MARK_ATTRIBUTE.get(metric, metric)
    results: dict[str, float] = {}
    marked = False
    for node, attributes, _ in adjacency(source):
        marked = marked or attribute in attributes
        value = _mark_value(metric, attributes)
        if value is not None:
            results[node if isinstance(node, str) else element_id(node)] = value
    if not marked:
        raise ArgumentValueError(f"no node has the attribute {attribute!r}: {MARK_METRICS[metric]} needs it ({_MAKERS[metric]})")
    return _model_node_data(node_data, graph_id, metric, results, _mark_colours(node_data, metric))


#: What puts each mark on a graph, for the error of a graph without it.
_MAKERS = {
    "exec_order": "gradexport.record_gradients, replay or find_nonfinite",
    "saved_bytes": "trace with show_saved=True",
    "saved_bytes_held": "trace with show_saved=True",
    "nonfinite": "the .graph of gradexport.find_nonfinite's report",
    "diff": "gradexport.diff",
}

#: The order `node_data_for` adds metrics in: Model Explorer shows the last one added.
_SHOWN_LAST = ("exec_order", "saved_bytes_held", "saved_bytes", "nonfinite", "diff")


def node_data_for(graph: nx.MultiDiGraph, *, graph_id: str = GRAPH_ID) -> dict[str, ModelNodeData]:
    """Every node data that ``graph`` can give, by name, the most telling last.

    The gradient metrics (``gradient log10_norm``...) when it has ``grad``
    records, and each mark metric whose attribute some node has. Model
    Explorer colours by the last node data added: the ``diff``, else the
    ``nonfinite`` marks, else ``saved_bytes``, else ``gradient log10_norm``
    (``exec_order`` only when it is all there is).

    Raises:
        ModelExplorerNotInstalledError: Model Explorer is not installed.

    Examples:
        >>> import torch, gradexport
        >>> x = torch.ones(3, requires_grad=True)
        >>> list(node_data_for(gradexport.record_gradients((x * 2).sum())))
        ['exec_order', 'gradient non_finite', 'gradient norm', 'gradient log10_norm']
    """
    found: dict[str, ModelNodeData] = {}
    present = {name for _, attributes in graph.nodes(data=True) for name in attributes}
    metrics = [metric for metric in _SHOWN_LAST if _MARK_ATTRIBUTE.get(metric, metric) in present]
    if metrics[:1] == ["exec_order"]:
        found["exec_order"] = mark_node_data(graph, "exec_order", graph_id=graph_id)
        metrics = metrics[1:]
    received = _received(graph)
    if received:
        for metric in reversed(GRADIENT_METRICS):
            found[f"gradient {metric}"] = _gradient_node_data(received, metric, graph_id)
    for metric in metrics:
        found[metric] = mark_node_data(graph, metric, graph_id=graph_id)
    return found
