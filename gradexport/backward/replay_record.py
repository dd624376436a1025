"""The record of a replay: every step's gradients, and their text.

`gradexport.replay` runs the backward pass (see
`gradexport.backward.replay`); what it returns is a `Replay`,
defined here with its steps and starts, and the ways to read it: text
(`Replay.to_text`), a JSON-friendly dict (`Replay.to_dict`), a
short summary as its ``repr`` and an HTML table in Jupyter.

Examples:
    >>> import torch, gradexport
    >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> gradexport.replay((x * 3).sum(), params={"x": x})
    Replay(3 steps from 1 root: n1 SumBackward0 -> n3 AccumulateGrad (x); grads: x)
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import torch

from ..core.errors import ArgumentKeyError
from ..tracing.tensors import plain, tensor_meta
from .gradient_stats import gradient_summary
from .vjp import StepMath

__all__ = ["Replay", "ReplayStart", "ReplayStep"]


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
            arrivals, then the slot's tensor hooks applied: what the node was
            called with), ``None`` where nothing arrived.
        outputs: What flowed along each ``next_functions`` position, after the
            reduction to the receiving slot's shape and dtype; ``None`` for a
            ``(None, 0)`` position or where the node returned nothing.
        targets: For each ``next_functions`` position, ``(node id, input slot)``
            that received it, or ``None`` for a ``(None, 0)`` position.
        math: The formula the node computed, its local derivative and each
            vector–Jacobian product with its values, evaluated from the node's
            saved values (`gradexport.backward.vjp.step_math`; it holds those
            values). ``None`` for a step built by hand.
    """

    node: str
    op: str
    inputs: tuple[torch.Tensor | None, ...]
    outputs: tuple[torch.Tensor | None, ...]
    targets: tuple[tuple[str, int] | None, ...]
    math: StepMath | None = field(default=None, repr=False, compare=False)


@dataclass
class Replay:
    """The record of a `gradexport.replay`: the graph, every step in order, and the leaves' ``.grad``.

    ``repr()`` gives a one-line summary (step and root counts, first and last
    step, the leaves), ``str()`` the full text of `to_text`; in Jupyter
    it shows as an HTML table of its steps (the first 200) and the leaves' ``.grad``.

    Attributes:
        graph: The graph, exactly as `gradexport.to_networkx` builds it
            for the same roots (same node ids), plus the node attribute
            ``exec_order`` (1, 2, ...): the position of the node's step.
        steps: One `ReplayStep` per backward and leaf node, in the
            order they ran.
        grads: Each leaf's ``.grad`` after the replay (a copy), keyed by the
            leaf's names (every name of a tied parameter), or by its node id
            when it has none.
        starts: The gradient each root started with, in root order (a bare
            Node root has one per input slot).
        grads_before: Each leaf's ``.grad`` before the replay, keyed as ``grads``
            (what the stepping viewer shows on a leaf before its step).
    """

    graph: nx.MultiDiGraph
    starts: list[ReplayStart]
    steps: list[ReplayStep]
    grads: dict[str, torch.Tensor | None]
    #: Each leaf's ``.grad`` before the replay (a copy, ``None`` where unset), keyed as ``grads``.
    grads_before: dict[str, torch.Tensor | None] = field(default_factory=dict)

    def step(self, node: str) -> ReplayStep:
        """The step that ran the node with graph id ``node``."""
        for step in self.steps:
            if step.node == node:
                return step
        raise ArgumentKeyError(f"no step for node {node!r}")

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

    def __repr__(self) -> str:
        if self.steps:
            ends = [self.label(self.steps[0].node)]
            if len(self.steps) > 1:
                ends.append(self.label(self.steps[-1].node))
            path = ": " + " -> ".join(ends)
        else:
            path = ""
        roots = len({start.name for start in self.starts})
        return f"Replay({_count(len(self.steps), 'step')} from {_count(roots, 'root')}{path}; grads: {_some(list(self.grads), _REPR_NAMES)})"

    def _repr_html_(self, *, max_steps: int = 200, precision: int = 4, max_values: int = 16) -> str:
        """An HTML table of the steps for Jupyter: per step its node, op, leaf names and the gradients in and out.

        Replays longer than ``max_steps`` show their first ``max_steps`` steps and say how many are left out.

        Examples:
            >>> import torch, gradexport
            >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
            >>> html = gradexport.replay((x * 3).sum(), params={"x": x})._repr_html_()
            >>> html.count("<tr>"), "MulBackward0" in html
            (7, True)
        """

        def cell(lines: list[str]) -> str:
            return "<td><pre>" + html.escape("\n".join(line.strip() for line in lines)) + "</pre></td>"

        def gradients(tensors: tuple[torch.Tensor | None, ...], labels: list[str]) -> str:
            lines: list[str] = []
            for label, tensor in zip(labels, tensors, strict=True):
                lines += _tensor_lines(label, tensor, precision, max_values, indent="")
            return cell(lines)

        head = "<tr><th>step</th><th>node</th><th>op</th><th>names</th><th>in</th><th>out</th></tr>"
        rows = []
        for number, step in enumerate(self.steps[:max_steps], start=1):
            names = self.graph.nodes[step.node].get("names") or []
            rows.append(
                f"<tr><td>{number}</td><td>{html.escape(step.node)}</td><td>{html.escape(step.op)}</td>"
                f"<td>{html.escape(', '.join(names))}</td>"
                + gradients(step.inputs, [f"in[{slot}]" for slot in range(len(step.inputs))])
                + gradients(step.outputs, [_slot_label("out", i, target) for i, target in enumerate(step.targets)])
                + "</tr>"
            )
        starts = "".join(
            f"<tr><td>start</td><td>{html.escape(start.node)}</td><td></td><td>{html.escape(start.name)}</td>"
            + cell(_tensor_lines(f"in[{start.input_nr}]", start.grad, precision, max_values, indent=""))
            + "<td></td></tr>"
            for start in self.starts
        )
        left_out = len(self.steps) - max_steps
        note = f"<p>{left_out} more steps; <code>print(replay)</code> shows them all.</p>" if left_out > 0 else ""
        grads = "".join(
            f"<tr><td>{html.escape(name)}</td>" + cell(_tensor_lines("", grad, precision, max_values, indent="")) + "</tr>" for name, grad in self.grads.items()
        )
        return (
            f"<p><b>{html.escape(repr(self))}</b></p>"
            f"<table>{head}{starts}{''.join(rows)}</table>{note}"
            f"<table><tr><th>leaf</th><th>.grad</th></tr>{grads}</table>"
        )

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
            "starts": [{"name": start.name, "node": start.node, "input_nr": start.input_nr, "grad": summary(start.grad)} for start in self.starts],
            "steps": [
                {
                    "node": step.node,
                    "op": step.op,
                    "inputs": [summary(grad) for grad in step.inputs],
                    "outputs": [
                        None if target is None else {"to": list(target), "grad": summary(grad)} for grad, target in zip(step.outputs, step.targets, strict=True)
                    ],
                }
                for step in self.steps
            ],
            "grads": {name: summary(grad) for name, grad in self.grads.items()},
        }


# ---------------------------------------------------------------- text


#: How many leaf names a Replay's repr lists before it counts the rest.
_REPR_NAMES = 6


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _some(names: list[str], limit: int) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown}, ... ({len(names) - limit} more)"


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
    rows = _value_rows(plain(tensor).cpu(), precision)
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
