"""A replay's steps as compact, JSON-friendly data: what the stepping viewer embeds.

`step_data` turns a `gradexport.records.Replay` into the ``steps`` block of a viewer
page (see ``docs/guides/viewer.md``, "Stepping through a replay"). Every
tensor of the pass (a start gradient, a slot's input, an output, a leaf's
``.grad``) is stored once in a table and referenced by number, so a gradient
that one step returns and the next receives costs its bytes once:

* ``metas``: ``[shape, dtype]`` pairs, each stored once;
* ``tensors``: ``[meta, text]`` for a tensor of at most ``values_up_to``
  elements, ``text`` being how torch prints it (``repr``, computed here by
  torch itself); else ``[meta, norm, min, max, mean, nonfinite]``, numbers to
  5 significant digits (``"NaN"``, ``"Infinity"`` where not finite; ``min``,
  ``max``, ``mean`` ``None`` for complex tensors);
* ``starts``: ``[node, slot, tensor]`` per root gradient;
* ``before``: ``[node, tensor]`` per leaf whose ``.grad`` was set before the replay;
* ``steps``: ``[node, inputs, outputs]`` in the order the engine runs them
  (`gradexport.backward.engine_queue`), ``inputs`` one tensor number (or
  ``None``) per input slot as the node was called (arrivals summed),
  ``outputs`` one per ``next_functions`` position (``None`` for nothing); an
  ``AccumulateGrad`` step has a fourth item, the leaf's ``.grad`` after it;
* ``math``: per step, the formula the node computed (`gradexport.backward.vjp`):
  ``[forward, local, products, note]``, each product ``[position, text,
  [[symbol, tensor], ...], tensor]`` (its terms, then its value); ``None`` for
  a step without one (a record built by hand). Its words are numbers into
  ``texts``, each text stored once (the steps of a 12-layer model repeat a few).

Node ids ``"nK"`` are stored as the number ``K``. Which edges feed a slot and
where an output goes are the graph's own edges (``next_index``, ``input_nr``).

Examples:
    >>> import torch, gradexport
    >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> data = step_data(gradexport.replay((x * 3).sum(), params={"x": x}))
    >>> data["steps"]
    [[1, [0], [1]], [2, [1], [2, None]], [3, [2], [], 2]]
    >>> data["tensors"][2]
    [1, 'tensor([3., 3.])']
    >>> [data["texts"][i] for i in (*data["math"][1][:2], data["math"][1][2][0][1])]
    ['z = x · y', '∂z/∂x = y,  ∂z/∂y = x', 'dx = dz · y']
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch.autograd.graph import Node

from ..core.errors import StepsUnavailableError
from ..tracing._torch import leaf_variable, post_accumulate_hook_count, sequence_nr
from ..tracing.graph import Params, trace
from ..tracing.roots import Roots
from ..tracing.tensors import plain, type_name
from .replay import replay
from .replay_record import Replay
from .start_gradients import GradOutputs

__all__ = ["VALUES_UP_TO", "name_nodes", "replay_keeping_grads", "step_data"]

#: Tensors with at most this many elements are stored with their values, larger ones as statistics.
VALUES_UP_TO = 16


def step_data(record: Replay, *, values_up_to: int = VALUES_UP_TO) -> dict[str, Any]:
    """The steps of ``record`` as the viewer page stores them (see the module docstring)."""
    metas: dict[tuple[tuple[int, ...], str], int] = {}
    tensors: list[list[Any]] = []
    by_object: dict[int, int] = {}
    by_text: dict[tuple[int, str], int] = {}
    keep: list[torch.Tensor] = []  # holds every tensor seen, so that no id() is reused while encoding

    def number(tensor: torch.Tensor | None) -> int | None:
        if tensor is None:
            return None
        known = by_object.get(id(tensor))
        if known is not None:
            return known
        keep.append(tensor)
        value = plain(tensor).detach()
        meta_key = (tuple(value.shape), type_name(value.dtype))
        meta = metas.setdefault(meta_key, len(metas))
        if value.numel() <= values_up_to:
            text = repr(value)
            index = by_text.get((meta, text))
            if index is None:
                index = by_text[meta, text] = len(tensors)
                tensors.append([meta, text])
        else:
            index = len(tensors)
            tensors.append([meta, *_statistics(value)])
        by_object[id(tensor)] = index
        return index

    texts: dict[str, int] = {}

    def text(words: str) -> int:
        return texts.setdefault(words, len(texts))

    leaf_grads = _leaf_grads(record, record.grads)
    before = [[_node(node), number(grad)] for node, grad in _leaf_grads(record, record.grads_before).items() if grad is not None]
    starts = [[_node(start.node), start.input_nr, number(start.grad)] for start in record.starts]
    steps: list[list[Any]] = []
    maths: list[list[Any] | None] = []
    for step in record.steps:
        row: list[Any] = [_node(step.node), [number(grad) for grad in step.inputs], [number(grad) for grad in step.outputs]]
        if step.node in leaf_grads:
            row.append(number(leaf_grads[step.node]))
        steps.append(row)
        formula = step.math
        if formula is None:
            maths.append(None)
            continue
        products = [[p.position, text(p.text), [[text(t.symbol), number(t.value)] for t in p.terms], number(p.value)] for p in formula.products]
        maths.append([text(formula.forward), text(formula.local), products, text(formula.note)])
    return {
        "version": 1,
        "values_up_to": values_up_to,
        "metas": [[list(shape), dtype] for shape, dtype in metas],
        "tensors": tensors,
        "starts": starts,
        "before": before,
        "steps": steps,
        "math": maths,
        "texts": list(texts),
    }


def name_nodes(record: Replay, namespace: Mapping[str, Any]) -> Replay:
    """``record`` with the node attribute ``variables`` on each node of its graph that a name of ``namespace`` holds.

    What a page's blocks call ``back_mul = back_sum.next_functions[0][0]`` is
    then on the node in the stepping viewer. A name holding an autograd
    ``Node`` is matched to the record's graph by structure: a node whose type
    and ``sequence_nr`` only one node of the graph has is matched directly,
    and from each matched node its ``next_functions`` are followed along the
    graph's edges (position ``i`` to the edge with ``next_index`` ``i``), which
    also matches the ``AccumulateGrad`` nodes (they share one ``sequence_nr``).
    A node of another graph (one built again since) matches nothing. Names
    that start with ``_`` are left out; the record itself is not changed.

    Examples:
        >>> import torch, gradexport
        >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> loss = (x * 3).sum()
        >>> record = gradexport.replay(loss, params={"x": x})
        >>> back_sum = loss.grad_fn
        >>> back_x = back_sum.next_functions[0][0].next_functions[0][0]
        >>> named = name_nodes(record, {"back_sum": back_sum, "back_x": back_x, "x": x})
        >>> sorted((node, data["variables"]) for node, data in named.graph.nodes(data=True) if "variables" in data)
        [('n1', ['back_sum']), ('n3', ['back_x'])]
    """
    graph = record.graph
    wanted: dict[Node, list[str]] = {}
    for name, value in namespace.items():
        if isinstance(value, Node) and not name.startswith("_"):
            wanted.setdefault(value, []).append(name)
    if not wanted:
        return record
    anchors: dict[tuple[str, int], list[str]] = {}
    for node_id, data in graph.nodes(data=True):
        if "torch_name" in data and data.get("sequence_nr", -1) >= 0:
            anchors.setdefault((data["torch_name"], data["sequence_nr"]), []).append(node_id)
    found: dict[Node, str] = {}
    for start in wanted:
        matches = anchors.get((start.name(), sequence_nr(start)), [])
        if start in found or len(matches) != 1:
            continue
        stack = [(start, matches[0])]
        while stack:
            node, node_id = stack.pop()
            if node in found:
                continue
            found[node] = node_id
            by_position = {data["next_index"]: child for _, child, data in graph.out_edges(node_id, data=True)}
            for position, (child, _) in enumerate(node.next_functions):
                child_id = by_position.get(position)
                if child is not None and child_id is not None and graph.nodes[child_id].get("torch_name") == child.name():
                    stack.append((child, child_id))
    if not any(node in found for node in wanted):
        return record
    named = graph.copy()
    for node, names in wanted.items():
        if node in found:
            named.nodes[found[node]]["variables"] = names
    return dataclasses.replace(record, graph=named)


def replay_keeping_grads(
    roots: Roots,
    grad_outputs: GradOutputs = None,
    *,
    params: Params | None = None,
    module: torch.nn.Module | None = None,
    caller: str = "replay_keeping_grads",
) -> Replay:
    """`gradexport.replay` that leaves every leaf's ``.grad`` as it was: what ``to_html(roots, steps=True)`` runs.

    How: before the replay, each leaf whose ``.grad`` is set gets a copy of it
    in its place (``AccumulateGrad`` adds into ``.grad`` in place, so the
    original must not be there); afterwards every leaf gets back the very
    object it had (or ``None``). The saved tensors stay (a replay does not free
    them), so a later ``backward()`` runs as before.

    Refused with `gradexport.errors.StepsUnavailableError` where that cannot hold: a
    leaf with ``register_post_accumulate_grad_hook`` hooks (the replay would run
    them, with effects no copy can undo, such as an optimizer step). Whatever
    `gradexport.replay` refuses (node hooks, tensor hooks on roots and
    leaves) it refuses too. Not undone: ``.grad`` of intermediate tensors that
    called ``retain_grad()`` is set, as ``backward()`` would set it (Python
    cannot list them).

    Examples:
        >>> import torch
        >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> record = replay_keeping_grads((x * 3).sum(), params={"x": x})
        >>> x.grad is None, record.grads["x"]
        (True, tensor([3., 3.]))
    """
    result = trace(roots, params=params, module=module, caller=caller)
    accumulators = {node_id: leaf_variable(node) for node, node_id in result.ids.items() if type(node).__name__ == "AccumulateGrad"}
    leaves = list(accumulators.values())
    for node_id, leaf in accumulators.items():
        if post_accumulate_hook_count(leaf):
            names = result.graph.nodes[node_id].get("names")
            raise StepsUnavailableError(
                f"{caller}: steps=True cannot replay without side effects: a leaf{f' ({names})' if names else ''} of shape "
                f"{list(leaf.shape)} has post-accumulate-grad hooks, which the replay would run; remove them, or run "
                "gradexport.replay yourself and pass its record"
            )
    originals = [leaf.grad for leaf in leaves]
    try:
        for leaf, grad in zip(leaves, originals, strict=True):
            if grad is not None:
                leaf.grad = grad.detach().clone()
        return replay(roots, grad_outputs, params=params, module=module)
    finally:
        for leaf, grad in zip(leaves, originals, strict=True):
            leaf.grad = grad


def _leaf_grads(record: Replay, by_name: dict[str, torch.Tensor | None]) -> dict[str, torch.Tensor | None]:
    grads: dict[str, torch.Tensor | None] = {}
    for node, data in record.graph.nodes(data=True):
        if data.get("kind") == "leaf":
            names = data.get("names") or [node]
            grads[node] = by_name.get(names[0])
    return grads


def _node(node_id: str) -> int | str:
    return int(node_id[1:]) if node_id[:1] == "n" and node_id[1:].isdigit() and str(int(node_id[1:])) == node_id[1:] else node_id


def _statistics(tensor: torch.Tensor) -> list[Any]:
    wide = torch.complex128 if tensor.is_complex() else torch.float64
    norm = float(torch.linalg.vector_norm(tensor, dtype=wide)) if tensor.numel() else 0.0
    finite_count = int(torch.isfinite(tensor).sum()) if tensor.is_floating_point() or tensor.is_complex() else tensor.numel()
    real = not tensor.is_complex() and tensor.numel() > 0
    low = float(tensor.min()) if real else None
    high = float(tensor.max()) if real else None
    mean = float(tensor.to(torch.float64).mean()) if real else None
    return [_short(norm), _short(low), _short(high), _short(mean), tensor.numel() - finite_count]


def _short(value: float | None) -> float | str | None:
    if value is None:
        return None
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(f"{value:.5g}")
