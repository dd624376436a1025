"""The vector–Jacobian product a backward node computes, as a formula with its values: what the stepping viewer shows.

A backward node never builds the Jacobian of its forward operation: given the
gradient ``dz`` that arrived for its output, it returns ``dzᵀ J`` per input,
from a formula. `step_math` writes that formula for one call of a node (the
local derivative, then one product per ``next_functions`` position) and
evaluates it with torch from the node's own saved values, so each product's
value can be held against what the node returned.

The forward operation is written with its inputs named ``x`` and ``y`` (``x``
and ``w`` for a matrix product) and its output ``z``; ``dz`` is the gradient
that reached the node's input slot (``dz0``, ``dz1``, ... for an operation with
several outputs). `OPS` lists the operations that have a formula; any other
node gets a `StepMath` whose ``note`` says there is none, and the viewer shows
only what torch returned.

Examples:
    >>> import torch
    >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> y = torch.tensor([3.0, 4.0], requires_grad=True)
    >>> node = (x * y).grad_fn
    >>> math = step_math(node, "MulBackward0", (torch.ones(2),))
    >>> math.forward, math.local
    ('z = x · y', '∂z/∂x = y,  ∂z/∂y = x')
    >>> [(product.text, product.value) for product in math.products]
    [('dx = dz · y', tensor([3., 4.])), ('dy = dz · x', tensor([1., 2.]))]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.graph import Node

from ..tracing._torch import read_saved, signed

__all__ = ["OPS", "Product", "StepMath", "Term", "step_math"]


@dataclass(frozen=True)
class Term:
    """A named value a product uses: the gradient that arrived (``dz``) or a value the node saved (``y``)."""

    symbol: str
    value: torch.Tensor


@dataclass(frozen=True)
class Product:
    """One vector–Jacobian product: what the node sends along ``next_functions[position]``."""

    #: The ``next_functions`` position it goes to (the forward input it is the gradient of).
    position: int
    #: The formula, e.g. ``"dx = dz · y"``.
    text: str
    #: The values the formula uses, in the order it names them.
    terms: tuple[Term, ...]
    #: The formula evaluated by torch from those values, reduced to the input's shape as the engine does (the
    #: tensor the node sent along that position itself where the two are equal, element for element).
    value: torch.Tensor


@dataclass(frozen=True)
class StepMath:
    """The formula of one node call: the forward operation, its local derivative, one `Product` per position."""

    forward: str
    local: str
    products: tuple[Product, ...]
    #: Set where no formula is shown: why (an operation outside `OPS`, a saved value that cannot be read).
    note: str = ""


_Saved = Callable[[str], Any]
_Grads = Sequence[torch.Tensor | None]
#: A rule: the node's saved values and its input gradients → the forward, the local derivative and, per
#: position, the formula, its terms and a function computing it.
_Rule = Callable[[_Saved, _Grads], tuple[str, str, list[tuple[int, str, list[Term], Callable[[], torch.Tensor]]]]]


def _number(value: Any) -> str:
    return repr(value.item() if isinstance(value, torch.Tensor) else value)


def _grad(grads: _Grads) -> Term:
    """``dz``: the gradient that reached the node's one input slot."""
    if grads[0] is None:
        raise _NoGradient
    return Term("dz", grads[0])


class _NoGradient(Exception):
    """A slot the formula needs received nothing (the node was called with None there)."""


def _add(sign: str) -> _Rule:
    def rule(saved: _Saved, grads: _Grads) -> Any:
        dz = _grad(grads)
        alpha = saved("alpha")
        factor = -alpha if sign == "−" else alpha
        scaled = "" if alpha == 1 else f"{_number(alpha)} · "
        second = "dy = dz" if factor == 1 else "dy = −dz" if factor == -1 else f"dy = {_number(factor)} · dz"
        return (
            f"z = x {sign} {scaled}y",
            f"∂z/∂x = 1,  ∂z/∂y = {_number(factor)}",
            [
                (0, "dx = dz", [dz], lambda: dz.value),
                (1, second, [dz], lambda: dz.value * factor),
            ],
        )

    return rule


def _mul(saved: _Saved, grads: _Grads) -> Any:
    dz = _grad(grads)
    return (
        "z = x · y",
        "∂z/∂x = y,  ∂z/∂y = x",
        [
            (0, "dx = dz · y", [dz, Term("y", saved("other"))], lambda: dz.value * saved("other")),
            (1, "dy = dz · x", [dz, Term("x", saved("self"))], lambda: dz.value * saved("self")),
        ],
    )


def _div(saved: _Saved, grads: _Grads) -> Any:
    dz = _grad(grads)
    return (
        "z = x / y",
        "∂z/∂x = 1 / y,  ∂z/∂y = −x / y²",
        [
            (0, "dx = dz / y", [dz, Term("y", saved("other"))], lambda: dz.value / saved("other")),
            (1, "dy = −dz · x / y²", [dz, Term("x", saved("self")), Term("y", saved("other"))], lambda: -dz.value * saved("self") / saved("other") ** 2),
        ],
    )


def _sizes(saved: _Saved) -> list[int]:
    return [int(size) for size in saved("self_sym_sizes")]


def _dims(saved: _Saved, rank: int) -> list[int]:
    dims = saved("dim")
    return sorted(signed(int(dim)) % rank for dim in (dims if isinstance(dims, (list, tuple)) else [dims]))


def _spread(dz: torch.Tensor, saved: _Saved, sizes: list[int]) -> torch.Tensor:
    """``dz`` of a reduction over ``dim`` put back on the reduced dimensions, then expanded to ``sizes``."""
    if not saved("keepdim"):
        for dim in _dims(saved, len(sizes)):
            dz = dz.unsqueeze(dim)
    return dz.expand(sizes)


def _sum(saved: _Saved, grads: _Grads) -> Any:
    dz, sizes = _grad(grads), _sizes(saved)
    return "z = Σ x", "∂z/∂xᵢ = 1", [(0, f"dx = dz · ones{tuple(sizes)}", [dz], lambda: dz.value.expand(sizes))]


def _sum_dims(saved: _Saved, grads: _Grads) -> Any:
    dz, sizes = _grad(grads), _sizes(saved)
    dims = _dims(saved, len(sizes))
    return f"z = Σ x over dim {dims}", "∂z/∂xᵢ = 1", [(0, f"dx = dz repeated along dim {dims}", [dz], lambda: _spread(dz.value, saved, sizes))]


def _mean(saved: _Saved, grads: _Grads) -> Any:
    dz, sizes = _grad(grads), _sizes(saved)
    count = math.prod(sizes)
    return f"z = (Σ x) / {count}", f"∂z/∂xᵢ = 1/{count}", [(0, f"dx = dz / {count} · ones{tuple(sizes)}", [dz], lambda: (dz.value / count).expand(sizes))]


def _mean_dims(saved: _Saved, grads: _Grads) -> Any:
    dz, sizes = _grad(grads), _sizes(saved)
    dims = _dims(saved, len(sizes))
    count = math.prod(sizes[dim] for dim in dims)
    return (
        f"z = (Σ x over dim {dims}) / {count}",
        f"∂z/∂xᵢ = 1/{count}",
        [(0, f"dx = dz / {count}, repeated along dim {dims}", [dz], lambda: _spread(dz.value / count, saved, sizes))],
    )


def _pow(saved: _Saved, grads: _Grads) -> Any:
    dz, p = _grad(grads), saved("exponent")
    x = Term("x", saved("self"))
    return (
        f"z = x^{_number(p)}",
        f"∂z/∂x = {_number(p)} · x^{_number(p - 1)}",
        [
            (0, f"dx = dz · {_number(p)} · x^{_number(p - 1)}", [dz, x], lambda: dz.value * p * x.value ** (p - 1)),
        ],
    )


def _of_result(forward: str, local: str, text: str, compute: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> _Rule:
    def rule(saved: _Saved, grads: _Grads) -> Any:
        dz, z = _grad(grads), Term("z", saved("result"))
        return forward, local, [(0, text, [dz, z], lambda: compute(dz.value, z.value))]

    return rule


def _log(saved: _Saved, grads: _Grads) -> Any:
    dz, x = _grad(grads), Term("x", saved("self"))
    return "z = log x", "∂z/∂x = 1 / x", [(0, "dx = dz / x", [dz, x], lambda: dz.value / x.value)]


def _mm(saved: _Saved, grads: _Grads) -> Any:
    dz, x, w = _grad(grads), Term("x", saved("self")), Term("w", saved("mat2"))
    return (
        "z = x @ w",
        "∂zᵢⱼ/∂xᵢₖ = wₖⱼ,  ∂zᵢⱼ/∂wₖⱼ = xᵢₖ",
        [
            (0, "dx = dz @ wᵀ", [dz, w], lambda: dz.value @ w.value.mT),
            (1, "dw = xᵀ @ dz", [x, dz], lambda: x.value.mT @ dz.value),
        ],
    )


def _view(saved: _Saved, grads: _Grads) -> Any:
    dz, sizes = _grad(grads), _sizes(saved)
    return (
        f"z = x.view(…) (x of shape {tuple(sizes)})",
        "the identity, element by element",
        [
            (0, f"dx = dz.reshape{tuple(sizes)}", [dz], lambda: dz.value.reshape(sizes)),
        ],
    )


def _expand(saved: _Saved, grads: _Grads) -> Any:
    dz, sizes = _grad(grads), _sizes(saved)
    return (
        f"z = x.expand(…) (x of shape {tuple(sizes)})",
        "each zᵢ is a copy of one xⱼ: ∂zᵢ/∂xⱼ = 1",
        [
            (0, f"dx = dz summed over the copies, to shape {tuple(sizes)}", [dz], lambda: dz.value.sum_to_size(sizes)),
        ],
    )


def _transpose(saved: _Saved, grads: _Grads) -> Any:
    dz = _grad(grads)
    return "z = xᵀ", "the identity, transposed", [(0, "dx = dzᵀ", [dz], lambda: dz.value.mT)]


def _neg(saved: _Saved, grads: _Grads) -> Any:
    dz = _grad(grads)
    return "z = −x", "∂z/∂x = −1", [(0, "dx = −dz", [dz], lambda: -dz.value)]


def _unbind(saved: _Saved, grads: _Grads) -> Any:
    dim = signed(int(saved("dim")))
    arrived = [Term(f"dz{slot}", grad) for slot, grad in enumerate(grads) if grad is not None]
    if not arrived:
        raise _NoGradient
    like = arrived[0].value
    names = ", ".join(f"dz{slot}" if grad is not None else "0" for slot, grad in enumerate(grads))
    return (
        f"z0, z1, … = x.unbind({dim})",
        f"zₖ is slice k of x along dim {dim}: ∂zₖ/∂x is 1 on that slice, 0 elsewhere",
        [(0, f"dx = stack([{names}], dim={dim})", arrived, lambda: torch.stack([torch.zeros_like(like) if grad is None else grad for grad in grads], dim))],
    )


#: Each operation with a formula, by the node's type name, with its rule.
_RULES: dict[str, _Rule] = {
    "AddBackward0": _add("+"),
    "SubBackward0": _add("−"),
    "MulBackward0": _mul,
    "DivBackward0": _div,
    "SumBackward0": _sum,
    "SumBackward1": _sum_dims,
    "MeanBackward0": _mean,
    "MeanBackward1": _mean_dims,
    "PowBackward0": _pow,
    "ExpBackward0": _of_result("z = exp x", "∂z/∂x = exp x = z", "dx = dz · z", lambda dz, z: dz * z),
    "LogBackward0": _log,
    "ReluBackward0": _of_result("z = relu x", "∂z/∂x = 1 where z > 0, else 0", "dx = dz · (z > 0)", lambda dz, z: dz * (z > 0)),
    "TanhBackward0": _of_result("z = tanh x", "∂z/∂x = 1 − tanh² x = 1 − z²", "dx = dz · (1 − z²)", lambda dz, z: dz * (1 - z * z)),
    "SigmoidBackward0": _of_result("z = σ(x)", "∂z/∂x = σ(x) · (1 − σ(x)) = z · (1 − z)", "dx = dz · z · (1 − z)", lambda dz, z: dz * z * (1 - z)),
    "MmBackward0": _mm,
    "ViewBackward0": _view,
    "UnsafeViewBackward0": _view,
    "ExpandBackward0": _expand,
    "TBackward0": _transpose,
    "NegBackward0": _neg,
    "UnbindBackward0": _unbind,
}

#: The node types whose steps show a formula (``AccumulateGrad`` says what it does with its input).
OPS: tuple[str, ...] = (*_RULES, "AccumulateGrad")

#: What an ``AccumulateGrad`` step says instead of a product.
ACCUMULATE = (
    "AccumulateGrad is the leaf's sink, not an operation: it adds the gradient that arrived to the leaf's .grad (or sets .grad to it when .grad is None)"
)


def step_math(node: Node, op: str, inputs: Sequence[torch.Tensor | None], outputs: Sequence[torch.Tensor | None] | None = None) -> StepMath:
    """The formula of the call of ``node`` (type name ``op``) with ``inputs``, evaluated from its saved values.

    ``outputs`` (what the call sent along each ``next_functions`` position; ``None`` for nothing) keeps
    only the products of positions that carried a gradient and gives each its shape, as the engine
    reduces it (a broadcast input's gradient summed to the input's shape). Without it every position is shown.
    Never raises for the node: an operation outside `OPS`, a saved value it cannot read or a slot that
    received nothing gives a `StepMath` with only a ``note``.
    """
    if op == "AccumulateGrad":
        return StepMath("", "", (), note=ACCUMULATE)
    rule = _RULES.get(op)
    if rule is None:
        return StepMath(
            "",
            "",
            (),
            note=f"gradexport has no formula for {op}: the values shown are what torch's own backward returned (the operations with one are listed in docs/guides/viewer.md)",
        )
    try:
        with torch.no_grad():
            return _evaluate(rule, node, inputs, outputs)
    except _NoGradient:
        return StepMath("", "", (), note=f"{op} was called with None in a slot its formula needs: nothing arrived there")
    except (RuntimeError, AttributeError) as error:  # a saved value freed, modified in place, packed by a hook, or not kept by this torch
        return StepMath("", "", (), note=f"{op}'s saved values cannot be read ({str(error).splitlines()[0]}): no formula shown")


def _evaluate(rule: _Rule, node: Node, inputs: Sequence[torch.Tensor | None], outputs: Sequence[torch.Tensor | None] | None) -> StepMath:
    forward, local, rows = rule(lambda name: read_saved(node, name), inputs)
    products = []
    for position, text, terms, compute in rows:
        target = None if outputs is None or position >= len(outputs) else outputs[position]
        if outputs is not None and target is None:
            continue
        value = compute()
        if target is not None:
            if value.shape != target.shape:
                value, text = value.sum_to_size(target.shape), f"{text}, summed to shape {tuple(target.shape)}"
            value = value.to(target.dtype)
            if torch.equal(value, target):
                value = target  # the very tensor the node sent: a page stores it once
        products.append(Product(position, text, tuple(terms), value))
    return StepMath(forward, local, tuple(products))
