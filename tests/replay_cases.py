"""Graphs for the replay and gradient-flow tests, beyond the graph-model cases in ``cases.py``.

Each builder returns a :class:`cases.Case`; the tests run torch's own backward
on it and compare. Where a case needs gradients for non-scalar roots,
:func:`grad_outputs_for` makes deterministic ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from cases import Case
from torch import nn

from gradexport.tracing.roots import collect_roots


def grad_outputs_for(roots: Any, seed: int = 1) -> list[torch.Tensor | None]:
    """Random gradients for every non-scalar (or complex) root, ``None`` (ones) for real scalars."""
    generator = torch.Generator().manual_seed(seed)
    grads: list[torch.Tensor | None] = []
    for root in collect_roots(roots):
        meta = root.node._input_metadata[root.input_nr] if root.tensor is None else root.tensor
        shape, dtype = tuple(meta.shape), meta.dtype
        scalar = torch.Size(shape).numel() == 1 and not dtype.is_complex
        grads.append(None if scalar else torch.randn(shape, dtype=dtype, generator=generator))
    return grads


def linear_on_batch() -> Case:
    torch.manual_seed(0)
    layer = nn.Linear(3, 2)
    return Case(layer(torch.randn(5, 3)).tanh().sum(), module=layer)


def float32_leaf_in_float64_work() -> Case:
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)
    return Case((x * w).exp().sum(), {"x": x, "w": w})


class ScaleSome(torch.autograd.Function):
    """forward(a, k, b, c) = a * k + b * c, with a Python number and tensors that may not need grad."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, k: float, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(b, c)
        ctx.k = k
        return a * k + b * c

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        b, c = ctx.saved_tensors
        need_a, _, need_b, need_c = ctx.needs_input_grad
        return (grad * ctx.k if need_a else None, None, grad * c if need_b else None, grad * b if need_c else None)


class StraightThrough(torch.autograd.Function):
    """Passes the gradient to its first input only; the second requires grad but gets ``None``."""

    @staticmethod
    def forward(ctx: Any, value: torch.Tensor, ignored: torch.Tensor) -> torch.Tensor:
        return value.round() + ignored.detach()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class TwoOutputs(torch.autograd.Function):
    """Two outputs; the backward is called with zeros for the one that got no gradient."""

    @staticmethod
    def forward(ctx: Any, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return value * 2, value * 3

    @staticmethod
    def backward(ctx: Any, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        return first * 2 + second * 3


def custom_functions() -> Case:
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3)
    c = torch.randn(3, requires_grad=True)
    d = torch.randn(3, requires_grad=True)
    mixed = ScaleSome.apply(a, 2.0, b, c)
    passed = StraightThrough.apply(mixed * 2, d)
    first, _ = TwoOutputs.apply(a)
    return Case((passed * first).sum(), {"a": a, "c": c, "d": d})


def split_outputs_as_roots() -> Case:
    a = torch.randn(6, 4, requires_grad=True)
    first, _, third = (a * 2).split(2)
    values, _ = a.max(dim=1)
    return Case([first, third, values], {"a": a})


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 8), nn.Tanh())
        self.classify = nn.Linear(8, 3)
        self.regress = nn.Linear(8, 1)

    def forward(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.body(inputs)
        return self.classify(hidden), self.regress(hidden)


def mlp_two_heads() -> Case:
    torch.manual_seed(0)
    model = MLP()
    logits, value = model(torch.randn(6, 4))
    target = torch.tensor([0, 1, 2, 0, 1, 2])
    losses = {"classify": nn.functional.cross_entropy(logits, target), "regress": value.pow(2).mean()}
    return Case(losses, module=model)


def transformer_block() -> Case:
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True)
    return Case(model(torch.randn(2, 3, 8)).pow(2).mean(), module=model)


def in_place_on_view() -> Case:
    a = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, requires_grad=True)
    b = a * 1
    b[1].mul_(w)
    b[:, 2] += w[:3]
    return Case(b.pow(2).sum(), {"a": a, "w": w})


#: Every extra case, by name, for parametrised tests.
REPLAY_CASES: dict[str, Callable[[], Case]] = {
    builder.__name__: builder
    for builder in (
        linear_on_batch,
        float32_leaf_in_float64_work,
        custom_functions,
        split_outputs_as_roots,
        mlp_two_heads,
        transformer_block,
        in_place_on_view,
    )
}
