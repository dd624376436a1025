"""Gradient flow: run a real backward and put the gradient of every edge on the graph.

`record_gradients` builds the graph (as `gradexport.to_networkx`),
registers a hook on every node, runs `torch.autograd.backward` and
stores on each edge what flowed along it, so that a writer can label edges or
colour them by magnitude: a vanishing or exploding gradient shows at the edge
where it happens.

The hooks are the engine's own node post-hooks: a node's hook sees what the
node returned per ``next_functions`` position, after the engine reduced it to
the receiving slot's shape and dtype, which is exactly what travels along the
edge. They return ``None``, so gradients are unchanged, and are removed
afterwards, also when backward fails.

Examples:
    >>> import torch, gradexport
    >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> graph = gradexport.record_gradients((x * 3).sum(), params={"x": x})
    >>> [(u, v, d["grad"]["values"]) for u, v, d in graph.edges(data=True)]
    [('n0', 'n1', 1.0), ('n1', 'n2', [1.0, 1.0]), ('n2', 'n3', [3.0, 3.0])]
    >>> x.grad
    tensor([3., 3.])
"""

from __future__ import annotations

from functools import partial
from typing import Any

import networkx as nx
import torch

from .backward_replay import GradOutputs, gradient_summary, start_gradients
from .graph import Params, trace
from .roots import Roots

__all__ = ["GRAD_KEYS", "record_gradients"]

#: Keys of the edge attribute ``grad`` (plus ``"values"`` for small tensors).
GRAD_KEYS = ("shape", "dtype", "norm", "min", "max", "has_nan", "has_inf")


def record_gradients(
    roots: Roots,
    *,
    params: Params | None = None,
    module: torch.nn.Module | None = None,
    grad_outputs: GradOutputs = None,
    values_up_to: int = 16,
    retain_graph: bool = False,
) -> nx.MultiDiGraph:
    """Run ``backward`` from ``roots`` and return the graph with each edge's gradient.

    This is a real `torch.autograd.backward`: the leaves' ``.grad`` are
    accumulated exactly as without recording, and the graph's buffers are
    freed unless ``retain_graph=True``.

    Every edge along which a gradient flowed gets the attribute ``grad``, a
    `gradexport.backward_replay.gradient_summary`: ``{"shape", "dtype", "norm",
    "min", "max", "has_nan", "has_inf"}`` plus ``"values"`` (nested lists)
    for tensors of at most ``values_up_to`` elements. A root edge carries the
    gradient the root started with. Edges along which nothing flowed (the
    engine passed ``None``) have no ``grad``.

    As with `gradexport.to_networkx`, build and drop graphs tens of
    thousands of nodes deep inside `gradexport.run_with_large_stack`.

    Args:
        roots: As for `gradexport.to_networkx`.
        params: Names for leaf tensors.
        module: A module whose parameters and buffers name the leaves.
        grad_outputs: As for `gradexport.replay`: ``None`` (ones for
            scalar roots), a tensor, a sequence in root order or a mapping by
            root name.
        values_up_to: Store the values of gradients with at most this many elements.
        retain_graph: Passed to `torch.autograd.backward`.

    Returns:
        The graph of `gradexport.to_networkx` with ``grad`` on the edges.
    """
    result = trace(roots, params=params, module=module, caller="record_gradients")
    graph = result.graph
    starts = start_gradients(result.roots, grad_outputs, caller="record_gradients")
    summarize = partial(gradient_summary, values_up_to=values_up_to)
    flowed: dict[str, tuple[dict[str, Any] | None, ...]] = {}

    def record(node_id: str, grad_inputs: tuple[torch.Tensor | None, ...], _: Any) -> None:
        # Summarise at once: the engine may later add into these tensors in place.
        flowed[node_id] = tuple(None if grad is None else summarize(grad) for grad in grad_inputs)

    handles = [node.register_hook(partial(record, node_id)) for node, node_id in result.ids.items() if node.next_functions]
    try:
        torch.autograd.backward(
            [start.target for start in starts], [start.grad for start in starts], retain_graph=retain_graph
        )
    finally:
        for handle in handles:
            handle.remove()

    for source, _, index, data in graph.edges(keys=True, data=True):
        summary = flowed.get(source, ())
        if index < len(summary) and summary[index] is not None:
            data["grad"] = summary[index]
    root_ids = {entry["name"]: entry["node"] for entry in graph.graph["roots"]}
    for start in starts:
        root_id = root_ids[start.root.name]
        if graph.nodes[root_id]["kind"] == "root":
            for _, _, data in graph.out_edges(root_id, data=True):
                data["grad"] = summarize(start.grad)
    return graph
