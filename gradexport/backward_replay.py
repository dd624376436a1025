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

Hooks are found where Python can see them: node hooks (``register_hook``,
``register_prehook``, and so module backward hooks) on every node, and
``Tensor.register_hook`` hooks of the root and leaf tensors. A hook that
``Tensor.register_hook`` put on an intermediate tensor lives in C++ on that
tensor's ``grad_fn`` and cannot be listed from Python: replay does not run it.
Use `gradexport.record_gradients`, which runs the real backward, for
graphs with such hooks.

Other differences, none of which changes a gradient: the replay does not free
the graph's saved tensors (it can run again), never sets ``.grad`` on non-leaf
tensors (``retain_grad``; the steps hold those gradients), and always gives a
custom Function zeros for gradients that did not arrive (torch does unless the
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

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import torch
from torch.autograd.graph import GradientEdge, Node

from .graph import Params, trace
from .roots import Root, Roots
from .saved import tensor_meta

__all__ = ["GradOutputs", "Replay", "ReplayError", "ReplayStart", "ReplayStep", "Start", "gradient_summary", "replay", "start_gradients"]

#: What `replay` and `gradexport.record_gradients` accept as ``grad_outputs``.
GradOutputs = torch.Tensor | Sequence[Any] | Mapping[str, Any] | None

_ERROR_OPS = frozenset({"Error", "NotImplemented"})


class ReplayError(RuntimeError):
    """The replay cannot do what the autograd engine would do at a node.

    Attributes:
        node: The graph id of the node (as `gradexport.to_networkx` gives it).
        op: The node's type name, e.g. ``"MulBackward0"``.
    """

    def __init__(self, node: str, op: str, reason: str):
        super().__init__(f"replay: node {node} ({op}): {reason}")
        self.node = node
        self.op = op


@dataclass(frozen=True)
class Start:
    """A gradient that starts the backward pass: ``grad`` enters input slot ``input_nr`` of ``root.node``."""

    root: Root
    input_nr: int
    grad: torch.Tensor

    @property
    def target(self) -> torch.Tensor | GradientEdge:
        """What `torch.autograd.backward` takes for this start: the root tensor, or its GradientEdge."""
        if self.root.tensor is not None:
            return self.root.tensor
        return GradientEdge(self.root.node, self.input_nr)


@dataclass(frozen=True)
class ReplayStart:
    """A root's starting gradient in a `Replay`: ``grad`` entered slot ``input_nr`` of graph node ``node``."""

    name: str
    node: str
    input_nr: int
    grad: torch.Tensor


@dataclass(frozen=True)
class ReplayStep:
    """One node call of a replay.

    Attributes:
        node: Graph id of the node.
        op: The node's type name (``type(node).__name__``).
        inputs: The gradient that reached each input slot (the sum of all
            arrivals), ``None`` where nothing arrived.
        outputs: What flowed along each ``next_functions`` position, after the
            reduction to the receiving slot's shape and dtype; ``None`` for a
            ``(None, 0)`` position or where the node returned nothing.
        targets: For each ``next_functions`` position, ``(node id, input slot)``
            that received it, or ``None`` for a ``(None, 0)`` position.
    """

    node: str
    op: str
    inputs: tuple[torch.Tensor | None, ...]
    outputs: tuple[torch.Tensor | None, ...]
    targets: tuple[tuple[str, int] | None, ...]


@dataclass
class Replay:
    """The record of a `replay`: the graph, every step in order, and the leaves' ``.grad``.

    Attributes:
        graph: The graph, exactly as `gradexport.to_networkx` builds it
            for the same roots (same node ids).
        steps: One `ReplayStep` per backward and leaf node, in the
            order they ran.
        grads: Each leaf's ``.grad`` after the replay (a copy), keyed by the
            leaf's names (every name of a tied parameter), or by its node id
            when it has none.
        starts: The gradient each root started with, in root order (a bare
            Node root has one per input slot).
    """

    graph: nx.MultiDiGraph
    starts: list[ReplayStart]
    steps: list[ReplayStep]
    grads: dict[str, torch.Tensor | None]

    def step(self, node: str) -> ReplayStep:
        """The step that ran the node with graph id ``node``."""
        for step in self.steps:
            if step.node == node:
                return step
        raise KeyError(f"no step for node {node!r}")

    def label(self, node: str) -> str:
        """``"n3 AccumulateGrad (x)"``: id, op and, for a named leaf, its names."""
        data = self.graph.nodes[node]
        names = data.get("names")
        suffix = f" ({', '.join(names)})" if names else ""
        return f"{node} {data.get('op', data['kind'])}{suffix}"

    def to_text(self, *, precision: int = 4, max_values: int = 16) -> str:
        """A readable account of the replay, one block per step.

        A ``start`` line per root gradient; per step, the node (id, op, leaf
        names), then ``in[k]`` (the gradient that reached input slot k) and
        ``out[i] -> nJ[k]`` (what output position i sent to slot k of node
        nJ; ``None`` where nothing flowed); last a ``grad`` line per leaf.
        Each tensor shows dtype and shape, then its values when it has at
        most ``max_values`` elements (one line per row of the last dimension
        when it has several rows), else its norm, min and max.

        Examples:
            >>> import torch, gradexport
            >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
            >>> print(gradexport.replay((x * 3).sum(), params={"x": x}).to_text(precision=1))
            start output -> n1[0]  float32 []  1.0
            step 1  n1 SumBackward0
              in[0]            float32 []  1.0
              out[0] -> n2[0]  float32 [2]  [1.0, 1.0]
            step 2  n2 MulBackward0
              in[0]            float32 [2]  [1.0, 1.0]
              out[0] -> n3[0]  float32 [2]  [3.0, 3.0]
              out[1]           None
            step 3  n3 AccumulateGrad (x)
              in[0]  float32 [2]  [3.0, 3.0]
            grad x  float32 [2]  [3.0, 3.0]
        """
        lines: list[str] = []
        for start in self.starts:
            prefix = f"start {start.name} -> {start.node}[{start.input_nr}]"
            lines += _tensor_lines(prefix, start.grad, precision, max_values, indent="")
        for number, step in enumerate(self.steps, start=1):
            lines.append(f"step {number}  {self.label(step.node)}")
            width = max([len(_slot_label("out", i, t)) for i, t in enumerate(step.targets)] + [len("in[0]")])
            for slot, grad in enumerate(step.inputs):
                lines += _tensor_lines(f"  {f'in[{slot}]':<{width}}", grad, precision, max_values)
            for position, (grad, target) in enumerate(zip(step.outputs, step.targets, strict=True)):
                lines += _tensor_lines(f"  {_slot_label('out', position, target):<{width}}", grad, precision, max_values)
        for name, grad in self.grads.items():
            lines += _tensor_lines(f"grad {name}", grad, precision, max_values, indent="")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()

    def to_dict(self, *, values_up_to: int = 16) -> dict[str, Any]:
        """A JSON-friendly summary: every tensor as `gradient_summary` describes it.

        Keys: ``roots`` (the graph's root records), ``starts`` (list of
        ``{"name", "node", "input_nr", "grad"}``), ``steps`` (list of ``{"node", "op", "inputs", "outputs"}``;
        ``inputs`` a summary or ``None`` per slot; ``outputs`` per
        ``next_functions`` position ``None`` or ``{"to": [node id, slot],
        "grad": summary or None}``) and ``grads`` (leaf name to summary or ``None``).
        """

        def summary(tensor: torch.Tensor | None) -> dict[str, Any] | None:
            return None if tensor is None else gradient_summary(tensor, values_up_to=values_up_to)

        return {
            "roots": [dict(record) for record in self.graph.graph["roots"]],
            "starts": [
                {"name": start.name, "node": start.node, "input_nr": start.input_nr, "grad": summary(start.grad)}
                for start in self.starts
            ],
            "steps": [
                {
                    "node": step.node,
                    "op": step.op,
                    "inputs": [summary(grad) for grad in step.inputs],
                    "outputs": [
                        None if target is None else {"to": list(target), "grad": summary(grad)}
                        for grad, target in zip(step.outputs, step.targets, strict=True)
                    ],
                }
                for step in self.steps
            ],
            "grads": {name: summary(grad) for name, grad in self.grads.items()},
        }


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
    ``grad_fn``; existing ``.grad`` are added to, as by the engine. See the
    module docstring for what the replay refuses and how it differs. The
    record keeps every gradient of the pass; for graphs tens of thousands of
    nodes deep, run it inside `gradexport.run_with_large_stack`.

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
            (see the module docstring); ``.grad`` of leaves already reached
            may have been updated, as with an engine error.
        gradexport.RootError: for roots that have no graph.
        RuntimeError, ValueError, TypeError: for ``grad_outputs`` that do not
            fit the roots (as torch's own checks).
    """
    result = trace(roots, params=params, module=module, caller="replay")
    graph = result.graph
    nodes = {node_id: node for node, node_id in result.ids.items()}
    starts = start_gradients(result.roots, grad_outputs, caller="replay")
    for node_id, node in nodes.items():
        _check_replayable(node_id, node, graph.nodes[node_id]["op"])
    for start in starts:
        if start.root.tensor is not None and start.root.tensor._backward_hooks:
            node_id = result.ids[start.root.node]
            reason = _hook_message(f"root {start.root.name!r} has tensor hooks (Tensor.register_hook)")
            raise ReplayError(node_id, graph.nodes[node_id]["op"], reason)

    buffers: dict[str, list[torch.Tensor | None]] = {}

    def deliver(node_id: str, slot: int, grad: torch.Tensor) -> None:
        slots = buffers.setdefault(node_id, [None] * _num_inputs(nodes[node_id]))
        previous = slots[slot]
        slots[slot] = grad if previous is None else previous + grad

    with torch.no_grad():
        for start in starts:
            deliver(result.ids[start.root.node], start.input_nr, start.grad)
        steps = [
            _run_step(node_id, nodes[node_id], graph.nodes[node_id]["op"], buffers.pop(node_id, None), result.ids, deliver)
            for node_id in _engine_order(graph, nodes)
        ]
    return Replay(
        graph=graph,
        starts=[ReplayStart(start.root.name, result.ids[start.root.node], start.input_nr, start.grad) for start in starts],
        steps=steps,
        grads=_leaf_grads(graph, nodes),
    )


def start_gradients(roots: list[Root], grad_outputs: GradOutputs, *, caller: str) -> list[Start]:
    """Match ``grad_outputs`` to ``roots`` and build each start gradient as torch does.

    Missing gradients become ones for scalar roots; shapes and complex-ness are
    checked by torch's own ``_make_grads`` (the code behind
    `torch.autograd.backward`), so the messages are torch's.

    Examples:
        >>> import torch
        >>> from gradexport.roots import collect_roots
        >>> x = torch.ones(2, requires_grad=True)
        >>> [s.grad for s in start_gradients(collect_roots((x * 2).sum()), None, caller="demo")]
        [tensor(1.)]
    """
    per_root = _match_grad_outputs(roots, grad_outputs, caller)
    starts: list[Start] = []
    for root, given in zip(roots, per_root, strict=True):
        if root.input_nr is not None:
            slots: list[tuple[int, Any]] = [(root.input_nr, given)]
        else:
            slots = list(enumerate(_node_root_grads(root, given, caller)))
        for slot, grad in slots:
            target: torch.Tensor | GradientEdge = root.tensor if root.tensor is not None else GradientEdge(root.node, slot)
            try:
                (made,) = torch.autograd._make_grads((target,), (grad,), is_grads_batched=False)
            except RuntimeError as error:
                hint = "; pass grad_outputs for it" if grad is None else ""
                raise RuntimeError(f"{caller}: root {root.name!r}: {error}{hint}") from error
            starts.append(Start(root, slot, made))
    return starts


def gradient_summary(tensor: torch.Tensor, *, values_up_to: int = 16) -> dict[str, Any]:
    """Describe a gradient with JSON-friendly values.

    Keys: ``shape`` (list), ``dtype`` (``"float32"``), ``norm`` (2-norm over
    all elements), ``min``, ``max`` (``None`` for complex or empty tensors),
    ``has_nan``, ``has_inf``, and ``values`` (nested lists; complex numbers as
    ``[real, imag]`` pairs) when the tensor has at most ``values_up_to``
    elements. ``norm``, ``min`` and ``max`` are Python floats and may be
    ``nan`` or ``inf``.

    Examples:
        >>> gradient_summary(torch.tensor([3.0, -4.0]))
        {'shape': [2], 'dtype': 'float32', 'norm': 5.0, 'min': -4.0, 'max': 3.0, 'has_nan': False, 'has_inf': False, 'values': [3.0, -4.0]}
    """
    tensor = _plain(tensor)
    real = not tensor.is_complex() and tensor.numel() > 0
    summary: dict[str, Any] = {
        "shape": list(tensor.shape),
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "norm": float(torch.linalg.vector_norm(tensor, dtype=torch.complex128 if tensor.is_complex() else torch.float64)),
        "min": float(tensor.min()) if real else None,
        "max": float(tensor.max()) if real else None,
        "has_nan": bool(torch.isnan(tensor).any()),
        "has_inf": bool(torch.isinf(tensor).any()),
    }
    if tensor.numel() <= values_up_to:
        summary["values"] = (torch.view_as_real(tensor) if tensor.is_complex() else tensor).tolist()
    return summary


# ---------------------------------------------------------------- internals


def _plain(tensor: torch.Tensor) -> torch.Tensor:
    """A dense tensor without lazy conjugate/negative bits, fit for reading values."""
    tensor = tensor.detach().resolve_conj().resolve_neg()
    return tensor.to_dense() if tensor.layout != torch.strided else tensor


def _match_grad_outputs(roots: list[Root], grad_outputs: GradOutputs, caller: str) -> list[Any]:
    names = [root.name for root in roots]
    if grad_outputs is None:
        return [None] * len(roots)
    if isinstance(grad_outputs, torch.Tensor):
        if len(roots) != 1:
            raise ValueError(
                f"{caller}: grad_outputs is one tensor but there are {len(roots)} roots {names}; "
                "pass a sequence in root order or a mapping by root name"
            )
        return [grad_outputs]
    if isinstance(grad_outputs, Mapping):
        unknown = sorted(set(map(str, grad_outputs)) - set(names))
        if unknown:
            raise ValueError(f"{caller}: grad_outputs names {unknown} are not roots; the roots are {names}")
        by_name = {str(key): value for key, value in grad_outputs.items()}
        return [by_name.get(name) for name in names]
    if isinstance(grad_outputs, Sequence) and not isinstance(grad_outputs, (str, bytes)):
        if len(grad_outputs) != len(roots):
            raise ValueError(
                f"{caller}: {len(grad_outputs)} grad_outputs for {len(roots)} roots {names}; "
                "give one per root (None for ones)"
            )
        return list(grad_outputs)
    raise TypeError(
        f"{caller}: grad_outputs must be None, a tensor, a sequence or a mapping, not {type(grad_outputs).__name__}"
    )


def _node_root_grads(root: Root, given: Any, caller: str) -> list[Any]:
    slots = _num_inputs(root.node)
    if given is None:
        return [None] * slots
    if isinstance(given, torch.Tensor):
        given = [given]
    if not isinstance(given, Sequence) or len(given) != slots:
        raise ValueError(
            f"{caller}: root {root.name!r} is a {type(root.node).__name__} node with {slots} input slot(s); "
            "give its grad_outputs entry as a sequence with one gradient (or None) per slot"
        )
    return list(given)


def _num_inputs(node: Node) -> int:
    return len(node._input_metadata)


def _check_replayable(node_id: str, node: Node, op: str) -> None:
    if op in _ERROR_OPS:
        raise ReplayError(node_id, op, f"a {node.name()} node, which raises when backward reaches it (the engine fails too)")
    for kind, register in (("post", node.register_hook), ("pre", node.register_prehook)):
        # Node hooks live in C++ and cannot be listed, but registering a probe hands back
        # a handle on the node's hook dict: any entry besides the probe is a user's hook.
        # (Removing the probe leaves an empty dict on the node, as removing any hook does.)
        handle = register(_probe_hook)
        try:
            hooks = handle.hooks_dict_ref()
            count = 0 if hooks is None else len(hooks) - 1
        finally:
            handle.remove()
        if count:
            raise ReplayError(node_id, op, _hook_message(f"{count} node {kind}-hook(s) registered on it"))
    if op == "AccumulateGrad" and node.variable._backward_hooks:
        raise ReplayError(node_id, op, _hook_message("its leaf tensor has hooks (Tensor.register_hook)"))


def _probe_hook(*_: Any) -> None:
    return None


def _hook_message(what: str) -> str:
    return (
        f"{what}. The engine runs hooks and they may change gradients; replay calls nodes directly and "
        "cannot. Remove the hooks, or use gradexport.record_gradients, which runs the real backward"
    )


def _engine_order(graph: nx.MultiDiGraph, nodes: dict[str, Node]) -> list[str]:
    # Kahn's algorithm (networkx counts every parallel edge as a dependency). Among ready
    # nodes, pick as the engine's ready queue does: AccumulateGrad first (its sequence
    # number is 2**64 - 1), then the most recently created node.
    def priority(node_id: str) -> tuple[int, int, int]:
        node = nodes.get(node_id)
        sequence = -1 if node is None else node._sequence_nr()
        return (node is not None, -sequence, int(node_id[1:]))

    return [node_id for node_id in nx.lexicographical_topological_sort(graph, key=priority) if node_id in nodes]


def _run_step(
    node_id: str,
    node: Node,
    op: str,
    received: list[torch.Tensor | None] | None,
    ids: dict[Node, str],
    deliver: Callable[[str, int, torch.Tensor], None],
) -> ReplayStep:
    inputs = tuple(received) if received is not None else (None,) * _num_inputs(node)
    try:
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            returned = _apply_python_node(node_id, node, op, inputs)
        elif op == "AccumulateGrad":
            # AccumulateGrad may adopt its input as the new .grad, which later backward
            # passes add into in place: hand it a copy so that the record stays intact.
            returned = _as_tuple(node(*(None if grad is None else grad.clone() for grad in inputs)))
        else:
            returned = _as_tuple(node(*inputs))
    except ReplayError:
        raise
    except Exception as error:  # torch's or a custom backward's own error, re-raised naming the node
        raise ReplayError(node_id, op, f"calling it failed: {type(error).__name__}: {error}") from error
    next_functions = node.next_functions
    if len(returned) != len(next_functions):
        raise ReplayError(node_id, op, f"returned {len(returned)} gradients for {len(next_functions)} next_functions")
    outputs: list[torch.Tensor | None] = []
    targets: list[tuple[str, int] | None] = []
    for position, (grad, (child, slot)) in enumerate(zip(returned, next_functions, strict=True)):
        if child is None:
            outputs.append(None)
            targets.append(None)
            continue
        target = ids[child]
        targets.append((target, slot))
        if grad is not None:
            grad = _fit_to_slot(node_id, op, position, grad, child._input_metadata[slot])
            deliver(target, slot, grad)
        outputs.append(grad)
    return ReplayStep(node_id, op, inputs, tuple(outputs), tuple(targets))


def _apply_python_node(
    node_id: str, node: torch.autograd.function.BackwardCFunction, op: str, inputs: tuple[torch.Tensor | None, ...]
) -> tuple[torch.Tensor | None, ...]:
    # The engine materialises zeros for undefined gradients unless the Function called
    # ctx.set_materialize_grads(False); that flag is write-only from Python, so the
    # default is assumed.
    args = [
        grad if grad is not None else torch.zeros(tuple(meta.shape), dtype=meta.dtype, device=meta.device)
        for grad, meta in zip(inputs, node._input_metadata, strict=True)
    ]
    results = _as_tuple(node.apply(*args))
    needs = node.needs_input_grad
    if len(results) > len(needs) and all(grad is None for grad in results[len(needs):]):
        results = results[: len(needs)]
    if len(results) != len(needs):
        raise ReplayError(node_id, op, f"backward returned {len(results)} gradients for {len(needs)} forward inputs")
    # One next_functions entry per tensor argument of forward, (None, 0) for those that
    # need no gradient; so the arguments that need one map, in order, onto the others.
    wanted = [grad for grad, needed in zip(results, needs, strict=True) if needed]
    positions = [index for index, (child, _) in enumerate(node.next_functions) if child is not None]
    if len(wanted) != len(positions):
        raise ReplayError(
            node_id, op, f"{len(wanted)} inputs need a gradient but {len(positions)} next_functions are set"
        )
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
    if grad.shape != shape:
        try:
            grad = grad.sum_to_size(shape)
        except RuntimeError as error:
            raise ReplayError(
                node_id, op, f"output {position} has shape {list(grad.shape)}, not reducible to {list(shape)}"
            ) from error
    if grad.is_complex() and not meta.dtype.is_complex:
        raise ReplayError(node_id, op, f"output {position} is complex ({grad.dtype}) but flows into a real {meta.dtype} slot")
    if grad.dtype != meta.dtype:
        grad = grad.to(meta.dtype)
    if grad.device != meta.device:
        if grad.dim() != 0:
            raise ReplayError(node_id, op, f"output {position} is on {grad.device}, the next node expects {meta.device}")
        grad = grad.to(meta.device)
    return grad


def _leaf_grads(graph: nx.MultiDiGraph, nodes: dict[str, Node]) -> dict[str, torch.Tensor | None]:
    grads: dict[str, torch.Tensor | None] = {}
    for node_id, data in graph.nodes(data=True):
        if data["kind"] != "leaf":
            continue
        grad = nodes[node_id].variable.grad
        snapshot = None if grad is None else grad.detach().clone()
        for name in data["names"] or [node_id]:
            grads[name] = snapshot
    return grads


def _slot_label(kind: str, index: int, target: tuple[str, int] | None) -> str:
    return f"{kind}[{index}]" + ("" if target is None else f" -> {target[0]}[{target[1]}]")


def _tensor_lines(prefix: str, tensor: torch.Tensor | None, precision: int, max_values: int, indent: str = "  ") -> list[str]:
    if tensor is None:
        return [f"{prefix}  None"]
    meta = tensor_meta(tensor)
    head = f"{prefix}  {meta['dtype']} {meta['shape']}"
    if tensor.numel() > max_values:
        stats = gradient_summary(tensor, values_up_to=0)
        numbers = "  ".join(f"{key}={_number(stats[key], precision)}" for key in ("norm", "min", "max") if stats[key] is not None)
        return [f"{head}  {numbers}"]
    rows = _value_rows(_plain(tensor).cpu(), precision)
    if len(rows) == 1:
        return [f"{head}  {rows[0]}"]
    return [head] + [f"{indent}    {row}" for row in rows]


def _value_rows(tensor: torch.Tensor, precision: int) -> list[str]:
    if tensor.dim() == 0:
        return [_number(tensor.item(), precision)]
    matrix = tensor.reshape(-1, tensor.shape[-1]) if tensor.dim() > 1 else tensor.reshape(1, -1)
    cells = [[_number(value, precision) for value in row] for row in matrix.tolist()]
    width = max((len(cell) for row in cells for cell in row), default=0)
    return ["[" + ", ".join(cell.rjust(width) for cell in row) + "]" for row in cells]


def _number(value: Any, precision: int) -> str:
    if isinstance(value, complex):
        return f"{value.real:.{precision}f}{value.imag:+.{precision}f}j"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{precision}f}"
    return str(value)
