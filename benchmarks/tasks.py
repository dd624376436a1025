"""What is timed: two floors, gradexport's construction and writers, and torchviz.

The floors are what any exporter must pay at least: ``walk`` visits every Node
once through ``next_functions`` (iteratively: a recursive walk dies near 1,000
levels), and ``walk_nx`` is the same walk also building a
:class:`networkx.MultiDiGraph` with gradexport's string ids, one attribute per
node and two per edge. Everything else is measured against them.

Example:
    >>> import torch
    >>> x = torch.ones(2, requires_grad=True)
    >>> loss = (x * x).sum()
    >>> walk(loss)
    3
    >>> graph = walk_multidigraph(loss)
    >>> graph.number_of_nodes(), graph.number_of_edges()
    (4, 4)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import torch
import torchviz

import gradexport
from gradexport.tracing.graph import GraphStream

__all__ = ["TASKS", "Subject", "Task", "walk", "walk_multidigraph"]


@dataclass
class Subject:
    """The root tensor of one generated graph, and gradexport's graph of it for the writer tasks."""

    root: torch.Tensor
    graph: nx.MultiDiGraph | None = field(default=None, repr=False)

    def built_graph(self) -> nx.MultiDiGraph:
        if self.graph is None:
            self.graph = gradexport.to_networkx(self.root)
        return self.graph


@dataclass(frozen=True)
class Task:
    """One measured operation on a :class:`Subject`; what it returns is dropped untimed."""

    name: str
    label: str
    group: str
    run: Callable[[Subject], Any]
    #: Skipped above this many nodes: SVG because Graphviz's layout is super-linear, the
    #: others to keep the full run short (their cost per node is flat by then).
    max_nodes: int | None = None
    #: Also measure its peak memory (in a forked child, see :mod:`benchmarks.worker`).
    memory: bool = False
    #: Recurses once per graph level: run at the default recursion limit first, then raised.
    recursive: bool = False
    #: Reads ``Subject.graph``, which is built before timing starts.
    needs_graph: bool = False
    #: Seconds after which the programs it started are killed (Graphviz can take hours).
    timeout: float | None = None


def walk(root: torch.Tensor) -> int:
    """Floor 1: visit every Node reachable from ``root.grad_fn`` once; return how many."""
    start = root.grad_fn
    seen = {start}
    stack = [start]
    while stack:
        for child, _ in stack.pop().next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                stack.append(child)
    return len(seen)


def walk_multidigraph(root: torch.Tensor) -> nx.MultiDiGraph:
    """Floor 2: the breadth-first walk gradexport does, building the bare MultiDiGraph.

    The root tensor is a node, as in gradexport's graph; each node gets ``op`` only,
    each edge ``next_index`` and ``input_nr`` under key ``next_index``.
    """
    graph = nx.MultiDiGraph()
    start = root.grad_fn
    graph.add_node("n0", op="root")
    graph.add_node("n1", op=type(start).__name__)
    graph.add_edge("n0", "n1", key=0, next_index=0, input_nr=root.output_nr)
    ids = {start: "n1"}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        source = ids[node]
        for index, (child, input_nr) in enumerate(node.next_functions):
            if child is None:
                continue
            target = ids.get(child)
            if target is None:
                target = ids[child] = f"n{len(ids) + 1}"
                graph.add_node(target, op=type(child).__name__)
                queue.append(child)
            graph.add_edge(source, target, key=index, next_index=index, input_nr=input_nr)
    return graph


TASKS: tuple[Task, ...] = (
    Task("walk", "bare walk (floor 1)", "floor", lambda s: walk(s.root)),
    Task("walk_nx", "walk + MultiDiGraph (floor 2)", "floor", lambda s: walk_multidigraph(s.root), memory=True),
    Task("construct", "to_networkx, defaults", "graph", lambda s: gradexport.to_networkx(s.root), memory=True),
    Task("stream", "GraphStream walked, no graph", "graph", lambda s: deque(GraphStream(s.root), maxlen=0)),
    Task(
        "construct_meta",
        "to_networkx(edge_metadata=True)",
        "graph",
        lambda s: gradexport.to_networkx(s.root, edge_metadata=True),
    ),
    Task("construct_saved", "to_networkx(show_saved=True)", "graph", lambda s: gradexport.to_networkx(s.root, show_saved=True)),
    Task(
        "record_gradients",
        "record_gradients (runs backward)",
        "graph",
        lambda s: gradexport.record_gradients(s.root, retain_graph=True),
        max_nodes=10**4,
    ),
    Task("dot", "graph → DOT", "writer", lambda s: gradexport.to_dot(s.graph), max_nodes=10**5, needs_graph=True),
    Task("mermaid", "graph → Mermaid", "writer", lambda s: gradexport.to_mermaid(s.graph), max_nodes=10**5, needs_graph=True),
    Task("json", "graph → JSON", "writer", lambda s: gradexport.to_json(s.graph), max_nodes=10**5, needs_graph=True),
    Task("root_dot", "root → DOT", "end to end", lambda s: gradexport.to_dot(s.root), memory=True),
    Task("root_mermaid", "root → Mermaid", "end to end", lambda s: gradexport.to_mermaid(s.root), memory=True),
    Task("root_json", "root → JSON", "end to end", lambda s: gradexport.to_json(s.root), memory=True),
    Task(
        "root_json_meta",
        "root → JSON with edge metadata",
        "end to end",
        lambda s: gradexport.to_json(s.root, edge_metadata=True),
    ),
    Task(
        "torchviz",
        "torchviz make_dot().source",
        "reference",
        lambda s: torchviz.make_dot(s.root).source,
        memory=True,
        recursive=True,
    ),
    Task("svg", "graph → SVG (dot)", "writer", lambda s: gradexport.to_svg(s.graph), max_nodes=2000, needs_graph=True, timeout=60),
)
