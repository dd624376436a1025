"""The loss part of a bad step: its nodes between the loss and the model's outputs, recorded in the training step's own backward.

The flight recorder (`gradexport.backward.recorder`) runs a bad step again from
the model's inputs to its outputs, and the backward from the gradients the
outputs got in training: what the loop did between the model's outputs and
``loss.backward()`` (the loss function) is not run again. So when, at
``loss.backward()``, the loss or a model output already holds NaN or Inf, the
step is bad before its backward has run, while the graph is whole:
`LossPart` traces it from the loss down to the model's outputs, hooks those
nodes for the training step's own backward (`FlowRecording`: torch's own
gradients on every edge), and reads what the graph holds of the forward's
values (the tensors its nodes saved, the model's outputs, the loss) to find
the first node of the loss part whose result was not finite (`loss_origin`).
`LossPart.join` puts it in front of the re-run of the model, at the model's
outputs.

Examples:
    >>> import torch
    >>> weight = torch.ones(3, requires_grad=True)
    >>> out = weight * torch.tensor([1.0, 2.0, 3.0])       # "the model"
    >>> loss = torch.log(-out).sum()                        # NaN: the log of a negative number
    >>> part = LossPart(loss, {(0, 0): ((out.grad_fn, 0), True)}, named=[("weight", weight)])
    >>> loss.backward()
    >>> part.finish()
    >>> sorted(part.result.graph.nodes[node]["op"] for node in part.nodes)
    ['LogBackward0', 'NegBackward0', 'SumBackward0']
    >>> part.origin["cause"], part.origin["candidates"]
    ('unsure', ['LogBackward0', 'SumBackward0'])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import networkx as nx
import torch
from torch.autograd.graph import Node

from ..tracing._torch import saved_getters, saved_is_hook_packed, sequence_nr
from ..tracing.forward_values import nonfinite_values
from ..tracing.graph import Trace, trace
from .record_gradients import FlowRecording
from .replay_record import Replay, ReplayStart, ReplayStep
from .start_gradients import Start, start_gradients

__all__ = ["Edge", "LossPart", "OutputKey", "copies", "loss_origin"]

#: A model output's place in the graph: its backward node and which of the node's outputs it is (``output_nr``).
Edge = tuple[Node, int]
#: A model output as the recorder names it: the ``id`` of the model call and the output's position.
OutputKey = tuple[int, int]


class LossPart:
    """The nodes from ``loss`` down to the model's outputs, hooked for the backward that follows, and where the forward went non-finite.

    Args:
        loss: The tensor ``backward()`` is about to be called on; or, after
            the backward, the loss's node: then only the structure is
            traced (the graph's values are freed), no hook is placed, and
            the joined graph keeps the model's roots, with the gradients
            they got, beside the loss.
        outputs: Each model output, by a key of the caller's: its `Edge` and whether it was finite.
        named: The parameters, by name (to name a leaf the loss uses itself, weight decay say).
        module: The model, to name its parameters and box its nodes (when its forward ran under `gradexport.capture_modules`).
        values_up_to: Gradients with at most this many elements keep their values.

    Attributes:
        result: The trace of the whole graph from the loss (the model's nodes are
            traced too, as ``boundary`` or below it, and left out of the join).
        nodes: Ids of the loss part's nodes (the root's node, the loss function's nodes).
        boundary: The id of each model output's node, mapped to its `Edge`.
        origin: The first node of the loss part whose result was not finite
            (see `loss_origin`), ``None`` when the model's outputs were not
            finite already (the re-run of the model finds that origin) or
            when no output is given (the whole graph is the loss part: a
            forward capture finds the origin).
    """

    def __init__(
        self,
        loss: torch.Tensor | Node,
        outputs: Mapping[OutputKey, tuple[Edge, bool]],
        *,
        named: Sequence[tuple[str, torch.Tensor]] = (),
        module: torch.nn.Module | None = None,
        values_up_to: int = 16,
    ) -> None:
        self.result: Trace = trace(loss, params=list(named), module=module, caller="watch(bad_steps=...)")
        ids = self.result.ids
        self.outputs = dict(outputs)
        self.boundary: dict[str, Edge] = {ids[node]: (node, slot) for (node, slot), _ in outputs.values() if node in ids}
        self.nodes = _above(self.result, set(self.boundary))
        self.received: dict[str, tuple[torch.Tensor | None, ...]] = {}
        self.sent: dict[str, tuple[torch.Tensor | None, ...]] = {}
        self.starts: list[Start] = []
        self.origin: dict[str, Any] | None = None
        self.order: list[str] = []
        self._recording: FlowRecording | None = None
        if isinstance(loss, torch.Tensor):
            self.starts = start_gradients(self.result.roots, None, caller="watch(bad_steps=...)")
            finite = dict(outputs.values())
            self.origin = loss_origin(self.result, self.nodes, finite, loss) if finite and all(finite.values()) else None
            self._recording = FlowRecording(
                self.result,
                self.starts,
                values_up_to=values_up_to,
                pre=lambda node_id, grads: self.received.__setitem__(node_id, copies(grads)),
                post=lambda node_id, grads, _: self.sent.__setitem__(node_id, copies(grads)),
                only=self.nodes,
            )

    def finish(self) -> None:
        """After the backward (or when it never came): remove the hooks, put the gradients on the edges."""
        if self._recording is not None:
            self.order = [node_id for node_id in self._recording.finish() if node_id in self.nodes]

    def renumber(self, model_ids: Mapping[Node, str]) -> None:
        """Give the nodes that ``model_ids`` names those ids, and the others ids after them (``nK``), as `join` numbers a loss part.

        For a graph traced whole from the loss (a closure run again), so that
        the model's nodes have the ids a re-run from the model's outputs gives
        them: the healthy step's, which the divergence is matched by.
        """
        named = {old: model_ids[node] for node, old in self.result.ids.items() if node in model_ids}
        fresh = iter(range(1 + max((int(node_id[1:]) for node_id in model_ids.values()), default=-1), 1 << 62))
        renamed = {old: named[old] if old in named else f"n{next(fresh)}" for old in sorted(self.result.graph, key=lambda node_id: int(node_id[1:]))}
        graph = nx.relabel_nodes(self.result.graph, renamed)
        graph.graph["roots"] = [{**entry, "node": renamed[entry["node"]]} for entry in graph.graph["roots"]]
        self.result = Trace(graph, {node: renamed[old] for node, old in self.result.ids.items()}, self.result.roots)
        self.nodes = {renamed[old] for old in self.nodes}
        self.order = [renamed[old] for old in self.order]
        self.received = {renamed[old]: grads for old, grads in self.received.items()}
        self.sent = {renamed[old]: grads for old, grads in self.sent.items()}

    def join(self, model: Trace, replay: Replay, keys: Sequence[OutputKey]) -> Replay:
        """The re-run of the model (``model``, its ``replay``) with the loss part in front, joined at the model's outputs.

        ``keys`` gives the key (of ``outputs``) of each root of ``model``: the
        model output the re-run started from. The loss part's nodes get ids after the model's
        (``nK``), so the model's keep theirs; a root of the model that the
        loss part feeds is replaced by the loss part's edges into it. Changes
        ``model.graph`` and returns the joined record; the loss part's nodes
        run first.
        """
        graph, part = model.graph, self.result.graph
        first = 1 + max(int(node_id[1:]) for node_id in graph.nodes)
        own = self.nodes | {entry["node"] for entry in part.graph["roots"]}
        renamed = {node_id: f"n{first + index}" for index, node_id in enumerate(sorted(own, key=lambda node_id: int(node_id[1:])))}
        # Each model output of the training step is the node and slot of a root of the re-run.
        rerun_root = {entry["name"]: entry for entry in graph.graph["roots"]}
        target: dict[tuple[str, int], tuple[str, int]] = {}
        fed: set[str] = set()
        for root, key in zip(model.roots, keys, strict=True):
            edge = self.outputs[key][0] if key in self.outputs else None
            if edge is None or self.result.ids.get(edge[0]) not in self.boundary:
                continue
            entry = rerun_root[root.name]
            ((_, into, data),) = list(graph.out_edges(entry["node"], data=True))
            target[(self.result.ids[edge[0]], edge[1])] = (str(into), int(data["input_nr"]))
            if self._recording is not None:  # the loss part's edges carry the gradients the root started with
                fed.add(entry["node"])
        for node_id in own:
            graph.add_node(renamed[node_id], **part.nodes[node_id])
        for source, into, key, data in part.edges(keys=True, data=True):
            if source not in own:
                continue
            if into in own:
                graph.add_edge(renamed[source], renamed[into], key=key, **data)
            elif (into, data.get("input_nr", 0)) in target:
                joined_into, input_nr = target[(into, data.get("input_nr", 0))]
                graph.add_edge(renamed[source], joined_into, key=key, **{**data, "input_nr": input_nr})
        graph.remove_nodes_from(fed)
        roots = [{**entry, "node": renamed[entry["node"]]} for entry in part.graph["roots"]]
        graph.graph["roots"] = roots + [entry for entry in graph.graph["roots"] if entry["node"] not in fed]
        for node_id, data in graph.nodes(data=True):
            if isinstance(data.get("exec_order"), int) and node_id not in renamed.values():
                data["exec_order"] += len(self.order)
        for position, node_id in enumerate(self.order, start=1):
            graph.nodes[renamed[node_id]]["exec_order"] = position

        def joined(node_id: str, slot: int) -> tuple[str, int] | None:
            return (renamed[node_id], slot) if node_id in renamed else target.get((node_id, slot))

        nodes = {node_id: node for node, node_id in self.result.ids.items()}
        steps = []
        for node_id in self.order:
            targets = tuple(None if child is None else joined(self.result.ids[child], slot) for child, slot in nodes[node_id].next_functions)
            steps.append(ReplayStep(renamed[node_id], type(nodes[node_id]).__name__, self.received.get(node_id, ()), self.sent.get(node_id, ()), targets))
        starts = [ReplayStart(start.root.name, renamed[self.result.ids[start.root.node]], start.input_nr, start.grad) for start in self.starts]
        kept = [start for start in replay.starts if start.node not in fed]
        if self.origin is not None and self.origin.get("node") in renamed:
            self.origin = {**self.origin, "node": renamed[self.origin["node"]]}
        return replace(replay, graph=graph, starts=starts + kept, steps=steps + replay.steps)


def _above(result: Trace, boundary: set[str]) -> set[str]:
    """The ids of the nodes reached from the roots without passing a boundary node (the roots' own nodes included)."""
    graph = result.graph
    stack = [entry["node"] for entry in graph.graph["roots"]]
    seen: set[str] = set()
    while stack:
        node_id = stack.pop()
        if node_id in seen or node_id in boundary:
            continue
        seen.add(node_id)
        stack += list(graph.successors(node_id))
    return {node_id for node_id in seen if graph.nodes[node_id].get("kind") != "root"}


def loss_origin(result: Trace, nodes: set[str], outputs: Mapping[Edge, bool], loss: torch.Tensor) -> dict[str, Any] | None:
    """The first node of the loss part whose result the graph shows not finite, as a bundle's forward origin; ``None`` if none does.

    What the graph holds of the forward, before the backward frees it: each
    model output (finite, as ``outputs`` says), the loss, and every tensor a
    node of the loss part saved. A saved tensor is the result of the node
    whose backward node is its ``grad_fn`` (its ``output_nr``-th), so it says
    whether that result was finite; a saved tensor with no ``grad_fn`` (a
    target, a mask) is an input from outside the graph. In the order the
    forward made them (``_sequence_nr``), the first node with a result
    known not finite is the origin: ``cause`` is ``"made"`` when each of
    its inputs is known finite, ``"input"`` when one of them is known not
    finite (a target holding NaN), and ``"unsure"`` when the graph does
    not hold an input's value (no node saved it): the value was made by
    this node or one before it whose inputs were finite, listed in
    ``candidates`` (ops in forward order, the node among them), and only
    a run of the loss under a capture names the one (a loop that passes
    its step to ``optimizer.step(closure)`` is run again through it). The source line is not known:
    the loss function ran outside any capture.

    Examples:
        >>> weight = torch.ones(2, requires_grad=True)
        >>> out = weight * 1.0
        >>> loss = (torch.pow(out - 5, 0.5) * out).sum()  # the product saved the power's NaN result, the power its finite input
        >>> result = trace(loss)
        >>> nodes = {node_id for node, node_id in result.ids.items() if node is not out.grad_fn and node.next_functions}
        >>> origin = loss_origin(result, nodes, {(out.grad_fn, 0): True}, loss)
        >>> origin["op"], origin["cause"]
        ('PowBackward0', 'made')
    """
    ids = result.ids
    known: dict[Edge, bool] = dict(outputs)
    held: dict[Edge, torch.Tensor] = {}  # a non-finite result the graph holds, for its description
    outside: dict[Node, list[bool]] = {}
    by_id = {node_id: node for node, node_id in ids.items()}
    for node_id in nodes:
        node = by_id[node_id]
        for tensor in _saved_tensors(node):
            finite = bool(torch.isfinite(tensor.detach()).all()) if tensor.is_floating_point() or tensor.is_complex() else True
            if tensor.grad_fn is not None:
                edge = (tensor.grad_fn, tensor.output_nr)
                known[edge] = known.get(edge, True) and finite
                if not finite:
                    held[edge] = tensor
            else:
                outside.setdefault(node, []).append(finite)
    if loss.grad_fn is not None:
        known[(loss.grad_fn, loss.output_nr)] = bool(torch.isfinite(loss.detach()).all())
        held[(loss.grad_fn, loss.output_nr)] = loss
    order = sorted((sequence_nr(by_id[node_id]), node_id) for node_id in nodes)
    for _, node_id in order:
        node = by_id[node_id]
        results = [finite for (producer, _), finite in known.items() if producer is node]
        if all(results):
            continue
        inputs = [known.get((child, slot)) for child, slot in node.next_functions if child is not None] + outside.get(node, [])
        if any(finite is False for finite in inputs):
            cause = "input"
            candidates = [type(node).__name__]
        elif all(finite is True for finite in inputs):
            cause = "made"
            candidates = [type(node).__name__]
        else:
            cause = "unsure"
            candidates = [type(by_id[other]).__name__ for _, other in order if other in _unsure_makers(node, known, ids)]
        values = next((tensor for (producer, _), tensor in held.items() if producer is node), None)
        return {
            "op": type(node).__name__,
            "cause": cause,
            "candidates": candidates,
            "source": None,
            "source_code": None,
            "module": None,
            "module_class": None,
            "node": node_id,
            "output": nonfinite_values(values).describe() if values is not None else "not finite",
            "inputs": [],
        }
    return None


def _unsure_makers(node: Node, known: Mapping[Edge, bool], ids: Mapping[Node, str]) -> set[str]:
    """``node`` and the nodes before it, through inputs whose values are not known, down to those whose inputs are."""
    makers: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if current not in ids or ids[current] in makers:
            continue
        makers.add(ids[current])
        stack += [child for child, slot in current.next_functions if child is not None and (child, slot) not in known]
    return makers


def _saved_tensors(node: Node) -> list[torch.Tensor]:
    """The tensors ``node`` saved, read without running a saved-tensor hook (those packed by hooks are left out)."""
    tensors = []
    for getter in saved_getters(type(node)):
        if getter.raw is None or saved_is_hook_packed(getter.raw(node)):
            continue
        try:
            value = getter.read(node)
        except RuntimeError:  # freed, modified in place, or packed by a hook this torch cannot see (SavedHookedError)
            continue
        tensors += [item for item in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(item, torch.Tensor)]
    return tensors


def copies(grads: tuple[torch.Tensor | None, ...]) -> tuple[torch.Tensor | None, ...]:
    """A copy of each gradient a hook was handed (``None`` stays).

    Examples:
        >>> grad = torch.ones(2)
        >>> copied = copies((grad, None))
        >>> copied[0] is not grad and torch.equal(copied[0], grad), copied[1]
        (True, None)
    """
    # Copies: the engine may add into a tensor it handed to a hook later in the pass.
    return tuple(None if grad is None else grad.detach().clone() for grad in grads)
