"""Replay a backward pass by calling each ``grad_fn`` directly, and record every step.

The seed blog computes ``x.grad`` by hand: call ``l.grad_fn`` with ``dl``, route
what it returns through ``next_functions`` to the right input slot of the next
node, and so on until the ``AccumulateGrad`` nodes fill ``.grad``.
`replay` does that for any graph, in dependency order, and keeps what
each node received and returned, so that the docs can show a graph next to
the gradients that flowed through it.

A direct call is not what the engine does, and `replay` closes the gaps:

* every node runs under `torch.no_grad` (otherwise ``.grad`` gets a
  ``grad_fn``, as in the blog's own output);
* gradients that reach the same input slot are summed, and ``None`` is passed
  where nothing arrives;
* each returned gradient is reduced to the receiving slot's shape (summing
  broadcast dimensions) and cast to its dtype, as the engine's
  ``validate_outputs`` does: otherwise a ``Linear`` bias gets an unreduced
  gradient and a float32 leaf fed by float64 work gets a float64 ``.grad``;
* Python nodes (custom `torch.autograd.Function`, reentrant checkpoint,
  ``torch.compile`` regions, module backward hooks) run through ``.apply`` with
  zeros where nothing arrived, and their per-argument results are mapped onto
  ``next_functions``.

Where it cannot match the engine, `replay` raises `ReplayError`
naming the node instead of returning different gradients: hooks (checked
before any node runs), ``Error`` nodes (also checked first), freed or stale
saved tensors and ops without a derivative (when the node fails).

Hooks that Python can see are refused before anything runs: node hooks
(``register_hook``, ``register_prehook``, and so module backward hooks) on
every node, and ``Tensor.register_hook`` hooks of the root and leaf tensors.
A hook that ``Tensor.register_hook`` put on an intermediate tensor (and
``retain_grad``) lives in C++ on that tensor's ``grad_fn`` and cannot be
listed from Python, so replay has the engine run it: before calling a node,
it hands the node's gradients to the engine's own tensor-hook step (see
`gradexport.tracing._torch.run_tensor_hooks`), which runs those hooks exactly
as ``backward()`` does, in the same order, and sets ``.grad`` of retained
tensors. A step's ``inputs`` are what the node was called with, after them.
``register_post_accumulate_grad_hook`` hooks run inside ``AccumulateGrad``,
so calling it runs them too.

A ``torch.compile`` region whose compiled backward donates its saved buffers
(inductor's, once a ``backward()`` or AOTAutograd's cache compiled it so) runs
only while the graph is freed; replay calls it as ``backward()`` does, inside
the engine without ``retain_graph`` (see
`gradexport.tracing._torch.apply_with_graph_freed`), so that region's saved
tensors are freed, as after ``backward()``.

Other differences, none of which changes a gradient: the replay does not free
the graph's other saved tensors (it can run again), and always gives a custom
Function zeros for gradients that did not arrive (torch does unless the
Function called ``ctx.set_materialize_grads(False)``, a flag Python cannot read).

Examples:
    The blog's first example:

    >>> import torch, gradexport
    >>> _ = torch.manual_seed(6)
    >>> x = torch.randn(4, 4, requires_grad=True)
    >>> y = torch.randn(4, 4, requires_grad=True)
    >>> record = gradexport.replay((x * y).sum(), params={"x": x, "y": y})
    >>> [(step.node, step.op) for step in record.steps]
    [('n1', 'SumBackward0'), ('n2', 'MulBackward0'), ('n3', 'AccumulateGrad'), ('n4', 'AccumulateGrad')]
    >>> record.grads["x"][0]
    tensor([-1.4801, -1.0631,  0.3630,  0.3995])
    >>> torch.equal(x.grad, y.detach()) and x.grad.grad_fn is None
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.autograd.graph import Node

from ..core.collector import gc_paused
from ..core.errors import ReplayError
from ..core.source import node_data
from ..tracing._torch import (
    INPUT_METADATA_TORCH,
    apply_with_graph_freed,
    call_node,
    donates_saved_buffers,
    input_metadata,
    leaf_variable,
    node_hook_counts,
    num_inputs,
    require_torch,
    run_tensor_hooks,
    sequence_nr,
    tensor_hook_count,
)
from ..tracing.graph import Params, trace
from ..tracing.roots import Roots
from .engine_queue import engine_order
from .gradient_stats import gradient_summary
from .replay_record import Replay, ReplayStart, ReplayStep
from .start_gradients import GradOutputs, Start, start_gradients
from .vjp import step_math

# The record, the starts and the statistics live in their own modules; their names stay importable from here.
__all__ = ["GradOutputs", "Replay", "ReplayError", "ReplayStart", "ReplayStep", "Start", "gradient_summary", "replay", "start_gradients"]

_ERROR_OPS = frozenset({"Error", "NotImplemented"})


def replay(
    roots: Roots,
    grad_outputs: GradOutputs = None,
    *,
    params: Params | None = None,
    module: torch.nn.Module | None = None,
) -> Replay:
    """Run the backward pass of ``roots`` by calling every node directly, and record it.

    Afterwards the leaves' ``.grad`` hold what ``torch.autograd.backward(roots,
    grad_outputs)`` would have accumulated (values and dtypes), without a
    ``grad_fn``; existing ``.grad`` are added to, as by the engine. See
    `gradexport.backward.replay` for what the replay refuses and how it differs. The
    record keeps every gradient of the pass; for graphs tens of thousands of
    nodes deep, run it inside `gradexport.streams.run_with_large_stack`.

    Args:
        roots: As for `gradexport.to_networkx`: a tensor, a ``grad_fn``
            Node, a ``GradientEdge``, or a (nested) sequence or mapping of them.
        grad_outputs: The gradient each root starts with. ``None`` means ones
            for every scalar root (an error for others, as in torch). Else a
            tensor (one root), a sequence matched to the roots in order, or a
            mapping from root name to tensor; ``None`` entries mean ones. A bare
            Node root takes a sequence with one gradient per input slot.
        params: Names for leaf tensors (``model.named_parameters()``); they
            key `Replay.grads`.
        module: A module whose parameters and buffers name the leaves.

    Returns:
        The `Replay` record.

    Raises:
        ReplayError: at a node whose engine behaviour the replay cannot match
            (see `gradexport.backward.replay`); ``.grad`` of leaves already reached
            may have been updated, as with an engine error.
        gradexport.errors.RootError: for roots that have no graph.
        RuntimeError, ValueError, TypeError: for ``grad_outputs`` that do not
            fit the roots (as torch's own checks).

    Examples:
        >>> import torch, gradexport
        >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> record = gradexport.replay((x * x).sum(), params={"x": x})
        >>> [(step.node, step.op) for step in record.steps]
        [('n1', 'SumBackward0'), ('n2', 'MulBackward0'), ('n3', 'AccumulateGrad')]
        >>> record.grads["x"], x.grad
        (tensor([2., 4.]), tensor([2., 4.]))
    """
    # The collector would rescan the growing record's tensors again and again: measured
    # 6.6 s against 4.7 s for a 10^5-node MLP with it running.
    require_torch(INPUT_METADATA_TORCH, "replay")
    with gc_paused():
        return _replay(roots, grad_outputs, params, module)


def _replay(roots: Roots, grad_outputs: GradOutputs, params: Params | None, module: torch.nn.Module | None) -> Replay:
    result = trace(roots, params=params, module=module, caller="replay")
    graph = result.graph
    ids = result.ids
    nodes = {node_id: node for node, node_id in ids.items()}
    attributes = node_data(graph)
    ops = {node_id: attributes[node_id]["op"] for node_id in nodes}
    starts = start_gradients(result.roots, grad_outputs, caller="replay")
    for node_id, node in nodes.items():
        _check_replayable(node_id, node, ops[node_id])
    for start in starts:
        if start.root.tensor is not None and tensor_hook_count(start.root.tensor):
            node_id = ids[start.root.node]
            reason = _hook_message(f"root {start.root.name!r} has tensor hooks (Tensor.register_hook)")
            raise ReplayError(node_id, ops[node_id], reason)

    leaves = {node_id: attributes[node_id]["names"] for node_id, op in ops.items() if op == "AccumulateGrad"}
    grads_before = _leaf_grads(leaves, nodes)
    buffers: dict[str, list[torch.Tensor | None]] = {}

    def deliver(node_id: str, slot: int, grad: torch.Tensor) -> None:
        slots = buffers.get(node_id)
        if slots is None:
            slots = buffers[node_id] = [None] * num_inputs(nodes[node_id])
        previous = slots[slot]
        slots[slot] = grad if previous is None else previous + grad

    with torch.no_grad():
        for start in starts:
            deliver(ids[start.root.node], start.input_nr, start.grad)
        steps = [_run_step(node_id, nodes[node_id], ops[node_id], buffers.pop(node_id, None), ids, deliver) for node_id in _engine_order(starts, ids)]
    for position, step in enumerate(steps, start=1):  # the replay's own order, stored as record_gradients stores the engine's
        attributes[step.node]["exec_order"] = position
    return Replay(
        graph=graph,
        starts=[ReplayStart(start.root.name, ids[start.root.node], start.input_nr, start.grad) for start in starts],
        steps=steps,
        grads=_leaf_grads(leaves, nodes),
        grads_before=grads_before,
    )


# ---------------------------------------------------------------- internals


def _check_replayable(node_id: str, node: Node, op: str) -> None:
    if op in _ERROR_OPS:
        raise ReplayError(node_id, op, f"a {node.name()} node, which raises when backward reaches it (the engine fails too)")
    hooks = node_hook_counts(node)
    if hooks.pre or hooks.post:
        kind, count = ("pre", hooks.pre) if hooks.pre else ("post", hooks.post)
        raise ReplayError(node_id, op, _hook_message(f"{count} node {kind}-hook(s) registered on it"))
    if op == "AccumulateGrad" and tensor_hook_count(leaf_variable(node)):
        raise ReplayError(node_id, op, _hook_message("its leaf tensor has hooks (Tensor.register_hook)"))


def _hook_message(what: str) -> str:
    return (
        f"{what}. The engine runs hooks and they may change gradients; replay calls nodes directly and "
        "cannot. Remove the hooks, or use gradexport.record_gradients, which runs the real backward"
    )


def _engine_order(starts: list[Start], ids: dict[Node, str]) -> list[str]:
    # The engine's own ready queue, ported (see engine_queue's docstring for the rule and its checks).
    order = engine_order([start.root.node for start in starts], lambda node: [child for child, _ in node.next_functions], sequence_nr)
    return [ids[node] for node in order]


def _run_step(
    node_id: str,
    node: Node,
    op: str,
    received: list[torch.Tensor | None] | None,
    ids: dict[Node, str],
    deliver: Callable[[str, int, torch.Tensor], None],
) -> ReplayStep:
    inputs = tuple(received) if received is not None else (None,) * num_inputs(node)
    try:
        inputs = run_tensor_hooks(node, inputs)
    except Exception as error:  # the user's hook, re-raised naming the node
        raise ReplayError(node_id, op, f"a tensor hook on its input failed: {type(error).__name__}: {error}") from error
    try:
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            returned = _apply_python_node(node_id, node, op, inputs)
        elif op == "AccumulateGrad":
            # AccumulateGrad may adopt its input as the new .grad, which later backward
            # passes add into in place: hand it a copy so that the record stays intact.
            returned = _as_tuple(call_node(node, *(None if grad is None else grad.clone() for grad in inputs)))
        else:
            returned = _as_tuple(call_node(node, *inputs))
    except ReplayError:
        raise
    except Exception as error:  # torch's or a custom backward's own error, re-raised naming the node
        raise ReplayError(node_id, op, f"calling it failed: {type(error).__name__}: {error}") from error
    next_functions = node.next_functions
    if len(returned) != len(next_functions):
        raise ReplayError(node_id, op, f"returned {len(returned)} gradients for {len(next_functions)} next_functions")
    outputs: list[torch.Tensor | None] = [None] * len(next_functions)
    targets: list[tuple[str, int] | None] = [None] * len(next_functions)
    for position, (child, slot) in enumerate(next_functions):
        if child is None:
            continue
        target = ids[child]
        targets[position] = (target, slot)
        grad = returned[position]
        if grad is not None:
            grad = outputs[position] = _fit_to_slot(node_id, op, position, grad, input_metadata(child)[slot])
            deliver(target, slot, grad)
    return ReplayStep(node_id, op, inputs, tuple(outputs), tuple(targets), step_math(node, op, inputs, outputs))


def _apply_python_node(
    node_id: str, node: torch.autograd.function.BackwardCFunction, op: str, inputs: tuple[torch.Tensor | None, ...]
) -> tuple[torch.Tensor | None, ...]:
    # The engine materialises zeros for undefined gradients unless the Function called
    # ctx.set_materialize_grads(False); that flag is write-only from Python, so the
    # default is assumed.
    args = [
        grad if grad is not None else torch.zeros(tuple(meta.shape), dtype=meta.dtype, device=meta.device)
        for grad, meta in zip(inputs, input_metadata(node), strict=True)
    ]
    if donates_saved_buffers(node):
        results = _as_tuple(apply_with_graph_freed(node, *args))
    else:
        results = _as_tuple(node.apply(*args))
    needs = node.needs_input_grad
    if len(results) > len(needs) and all(grad is None for grad in results[len(needs) :]):
        results = results[: len(needs)]
    if len(results) != len(needs):
        raise ReplayError(node_id, op, f"backward returned {len(results)} gradients for {len(needs)} forward inputs")
    # One next_functions entry per tensor argument of forward, (None, 0) for those that
    # need no gradient; so the arguments that need one map, in order, onto the others.
    wanted = [grad for grad, needed in zip(results, needs, strict=True) if needed]
    positions = [index for index, (child, _) in enumerate(node.next_functions) if child is not None]
    if len(wanted) != len(positions):
        raise ReplayError(node_id, op, f"{len(wanted)} inputs need a gradient but {len(positions)} next_functions are set")
    mapped: list[torch.Tensor | None] = [None] * len(node.next_functions)
    for position, grad in zip(positions, wanted, strict=True):
        mapped[position] = grad
    return tuple(mapped)


def _as_tuple(value: Any) -> tuple[Any, ...]:
    if isinstance(value, tuple):
        return value
    if isinstance(value, list):
        return tuple(value)
    return (value,)


def _fit_to_slot(node_id: str, op: str, position: int, grad: torch.Tensor, meta: Any) -> torch.Tensor:
    # What the engine's validate_outputs does to each gradient before the next node sees it.
    if not isinstance(grad, torch.Tensor):
        raise ReplayError(node_id, op, f"output {position} is a {type(grad).__name__}, not a tensor or None")
    if meta.is_nested_tensor:
        return grad
    shape = torch.Size(meta.shape)
    dtype = meta.dtype
    if grad.dtype == dtype and grad.shape == shape and grad.device == meta.device:
        return grad  # the common case, nothing to do: the checks below would all pass
    if grad.shape != shape:
        try:
            grad = grad.sum_to_size(shape)
        except RuntimeError as error:
            raise ReplayError(node_id, op, f"output {position} has shape {list(grad.shape)}, not reducible to {list(shape)}") from error
    if grad.is_complex() and not dtype.is_complex:
        raise ReplayError(node_id, op, f"output {position} is complex ({grad.dtype}) but flows into a real {dtype} slot")
    if grad.dtype != dtype:
        grad = grad.to(dtype)
    if grad.device != meta.device:
        if grad.dim() != 0:
            raise ReplayError(node_id, op, f"output {position} is on {grad.device}, the next node expects {meta.device}")
        grad = grad.to(meta.device)
    return grad


def _leaf_grads(leaves: dict[str, list[str]], nodes: dict[str, Node]) -> dict[str, torch.Tensor | None]:
    # leaves: the names of each leaf node (its graph attribute), by node id.
    grads: dict[str, torch.Tensor | None] = {}
    for node_id, names in leaves.items():
        grad = leaf_variable(nodes[node_id]).grad
        snapshot = None if grad is None else grad.detach().clone()
        for name in names or [node_id]:
            grads[name] = snapshot
    return grads
