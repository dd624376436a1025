"""Starting gradients: match ``grad_outputs`` to the roots and build each as torch does.

Both `gradexport.replay` and `gradexport.record_gradients` start
the backward pass here, so that they accept the same ``grad_outputs`` and fail
with the same messages as `torch.autograd.backward`.

Examples:
    >>> import torch
    >>> from gradexport.tracing.roots import collect_roots
    >>> x = torch.ones(2, requires_grad=True)
    >>> roots = collect_roots({"loss": (x * 2).sum(), "aux": (x * 3).sum()})
    >>> [(s.root.name, s.grad.item()) for s in start_gradients(roots, {"aux": torch.tensor(0.5)}, caller="demo")]
    [('loss', 1.0), ('aux', 0.5)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..core.errors import ArgumentTypeError, ArgumentValueError, StartGradientError
from ..tracing._torch import GradientEdge, make_grad, num_inputs
from ..tracing.roots import Root

__all__ = ["GradOutputs", "Start", "start_gradients"]

#: What `gradexport.replay` and `gradexport.record_gradients` accept as ``grad_outputs``.
GradOutputs = torch.Tensor | Sequence[Any] | Mapping[str, Any] | None


@dataclass(frozen=True)
class Start:
    """A gradient that starts the backward pass: ``grad`` enters input slot ``input_nr`` of ``root.node``."""

    root: Root
    input_nr: int
    grad: torch.Tensor
    #: Whether ``grad`` came from ``grad_outputs`` (False: the ones torch makes for a scalar root itself).
    given: bool = True

    @property
    def engine_grad(self) -> torch.Tensor | None:
        """What to pass `torch.autograd.backward` for this start: ``None`` where torch makes the same ones.

        A gradient tensor there makes torch's ``_make_grads`` import
        ``torch.fx.experimental.symbolic_shapes`` and with it sympy: measured
        0.4 to 0.6 s on the first backward of a process.
        """
        return self.grad if self.given else None

    @property
    def target(self) -> torch.Tensor | GradientEdge:
        """What `torch.autograd.backward` takes for this start: the root tensor, or its GradientEdge."""
        if self.root.tensor is not None:
            return self.root.tensor
        return GradientEdge(self.root.node, self.input_nr)


def start_gradients(roots: list[Root], grad_outputs: GradOutputs, *, caller: str) -> list[Start]:
    """Match ``grad_outputs`` to ``roots`` and build each start gradient as torch does.

    Missing gradients become ones for scalar roots; shapes and complex-ness are
    checked by torch's own ``_make_grads`` (the code behind
    `torch.autograd.backward`, see `gradexport.tracing._torch.make_grad`),
    so the messages are torch's.

    Examples:
        >>> import torch
        >>> from gradexport.tracing.roots import collect_roots
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
                made = make_grad(target, grad)
            except RuntimeError as error:
                hint = "; pass grad_outputs for it" if grad is None else ""
                raise StartGradientError(f"{caller}: root {root.name!r}: {error}{hint}") from error
            starts.append(Start(root, slot, made, given=grad is not None))
    return starts


def _match_grad_outputs(roots: list[Root], grad_outputs: GradOutputs, caller: str) -> list[Any]:
    names = [root.name for root in roots]
    if grad_outputs is None:
        return [None] * len(roots)
    if isinstance(grad_outputs, torch.Tensor):
        if len(roots) != 1:
            raise ArgumentValueError(
                f"{caller}: grad_outputs is one tensor but there are {len(roots)} roots {names}; pass a sequence in root order or a mapping by root name"
            )
        return [grad_outputs]
    if isinstance(grad_outputs, Mapping):
        unknown = sorted(set(map(str, grad_outputs)) - set(names))
        if unknown:
            raise ArgumentValueError(f"{caller}: grad_outputs names {unknown} are not roots; the roots are {names}")
        by_name = {str(key): value for key, value in grad_outputs.items()}
        return [by_name.get(name) for name in names]
    if isinstance(grad_outputs, Sequence) and not isinstance(grad_outputs, (str, bytes)):
        if len(grad_outputs) != len(roots):
            raise ArgumentValueError(f"{caller}: {len(grad_outputs)} grad_outputs for {len(roots)} roots {names}; give one per root (None for ones)")
        return list(grad_outputs)
    raise ArgumentTypeError(f"{caller}: grad_outputs must be None, a tensor, a sequence or a mapping, not {type(grad_outputs).__name__}")


def _node_root_grads(root: Root, given: Any, caller: str) -> list[Any]:
    slots = num_inputs(root.node)
    if given is None:
        return [None] * slots
    if isinstance(given, torch.Tensor):
        given = [given]
    if not isinstance(given, Sequence) or len(given) != slots:
        raise ArgumentValueError(
            f"{caller}: root {root.name!r} is a {type(root.node).__name__} node with {slots} input slot(s); "
            "give its grad_outputs entry as a sequence with one gradient (or None) per slot"
        )
    return list(given)
