"""Autograd graphs that the tests trace, each built fresh by a plain function.

Every builder returns a :class:`Case`: the roots as a user would pass them,
and the parameter names (if any). The graph-model tests check every case
against torch's own ``next_functions``; other tests may reuse them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils.checkpoint as checkpoint
from torch import nn


@dataclass
class Case:
    roots: Any
    params: dict[str, torch.Tensor] = field(default_factory=dict)
    module: nn.Module | None = None
    #: Tensors the case keeps alive so their graph is not freed early.
    keep: tuple[Any, ...] = ()


def blog_multiply_then_sum() -> Case:
    torch.manual_seed(6)
    x = torch.randn(4, 4, requires_grad=True)
    y = torch.randn(4, 4, requires_grad=True)
    return Case((x * y).sum(), {"x": x, "y": y})


def blog_unbind_then_add() -> Case:
    torch.manual_seed(6)
    x = torch.randn(2, requires_grad=True)
    x1, x2 = x.unbind()
    return Case(x1 + x2, {"x": x})


def add_to_itself() -> Case:
    a = torch.randn(3, requires_grad=True)
    return Case(a + a, {"a": a})


def none_slot() -> Case:
    w = torch.randn(3, requires_grad=True)
    constant = torch.randn(3)
    return Case((w * constant + constant).sum(), {"w": w})


def multi_output() -> Case:
    a = torch.randn(6, 4, requires_grad=True)
    first, second, third = a.split(2)
    left, right = a.chunk(2, dim=1)
    values, _ = a.max(dim=1)
    symmetric = a[:4] @ a[:4].T
    eigenvalues, eigenvectors = torch.linalg.eigh(symmetric)
    u, s, vh = torch.linalg.svd(a)
    loss = first.sum() + third.sum() + left.sum() + values.sum() + eigenvalues.sum() + eigenvectors.abs().sum()
    return Case({"loss": loss, "u": u, "s": s, "vh": vh}, {"a": a})


def copy_slices() -> Case:
    a = torch.randn(4, requires_grad=True)
    b = a.clone()
    b[1:3].mul_(2)
    return Case(b.sum(), {"a": a})


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, value: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(value)
        return value**3 * scale

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (value,) = ctx.saved_tensors
        return 3 * value**2 * grad, None


def custom_function() -> Case:
    a = torch.randn(3, requires_grad=True)
    return Case(Cube.apply(a * 2, torch.ones(3)).sum(), {"a": a})


def checkpoint_reentrant() -> Case:
    layer = nn.Linear(3, 3)
    inputs = torch.randn(2, 3, requires_grad=True)
    out = checkpoint.checkpoint(lambda t: layer(t).relu(), inputs, use_reentrant=True)
    return Case(out.sum(), dict(layer.named_parameters()) | {"inputs": inputs}, layer)


def checkpoint_non_reentrant() -> Case:
    layer = nn.Linear(3, 3)
    inputs = torch.randn(2, 3, requires_grad=True)
    out = checkpoint.checkpoint(lambda t: layer(t).relu(), inputs, use_reentrant=False)
    return Case(out.sum(), dict(layer.named_parameters()) | {"inputs": inputs}, layer)


def double_backward() -> Case:
    x = torch.randn(3, requires_grad=True)
    (grad,) = torch.autograd.grad((x**3).sum(), x, create_graph=True)
    return Case(grad.sum(), {"x": x})


def freed_buffers() -> Case:
    x = torch.randn(3, requires_grad=True)
    loss = (x.exp() * x).sum()
    loss.backward()
    return Case(loss, {"x": x})


def shared_subgraph_roots() -> Case:
    x = torch.randn(3, requires_grad=True)
    hidden = x.sin() * 2
    return Case({"first": hidden.sum(), "second": hidden.cos().mean(), "again": hidden.sum()}, {"x": x}, keep=(hidden,))


class TiedMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8, bias=False)
        self.hidden = nn.Linear(8, 8)
        self.out = nn.Linear(8, 4, bias=False)
        self.out.weight = nn.Parameter(self.embed.weight.T.detach().clone())
        self.unembed = nn.Linear(8, 4, bias=False)
        self.unembed.weight = self.out.weight  # tied: one tensor, two names

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.hidden(self.embed(inputs)))
        return self.out(hidden) + self.unembed(hidden)


def mlp_tied() -> Case:
    torch.manual_seed(0)
    model = TiedMLP()
    return Case(model(torch.randn(5, 4)).pow(2).mean(), module=model)


def lstm() -> Case:
    torch.manual_seed(0)
    model = nn.LSTM(3, 4, num_layers=2)
    output, (hidden, cell) = model(torch.randn(5, 2, 3))
    return Case((output, (hidden, cell)), module=model)


def multihead_attention() -> Case:
    torch.manual_seed(0)
    model = nn.MultiheadAttention(8, 2)
    query = torch.randn(4, 1, 8)
    output, weights = model(query, query, query)
    return Case({"output": output, "weights": weights}, module=model)


def complex_tensors() -> Case:
    z = torch.randn(3, dtype=torch.complex64, requires_grad=True)
    return Case((z * z.conj()).real.sum() + torch.view_as_real(z * 1j).sum(), {"z": z})


def compiled() -> Case:
    torch._dynamo.reset()
    weight = torch.randn(3, requires_grad=True)

    @torch.compile(backend="aot_eager", fullgraph=True)
    def scaled_tanh(value: torch.Tensor) -> torch.Tensor:
        return torch.tanh(value * weight)

    return Case(scaled_tanh(torch.randn(3)).sum() + weight.sum(), {"weight": weight})


def deep_chain(length: int) -> torch.Tensor:
    """``x * 1.5`` applied ``length`` times to a leaf: a graph as deep as it is long.

    Past about 50,000 steps, build and drop it inside
    :func:`gradexport.streams.run_with_large_stack`: torch frees it recursively.
    """
    y = torch.zeros(1, requires_grad=True)
    for _ in range(length):
        y = y * 1.5
    return y


#: Every case, by name, for parametrised tests.
CASES: dict[str, Callable[[], Case]] = {
    builder.__name__: builder
    for builder in (
        blog_multiply_then_sum,
        blog_unbind_then_add,
        add_to_itself,
        none_slot,
        multi_output,
        copy_slices,
        custom_function,
        checkpoint_reentrant,
        checkpoint_non_reentrant,
        double_backward,
        freed_buffers,
        shared_subgraph_roots,
        mlp_tied,
        lstm,
        multihead_attention,
        complex_tensors,
        compiled,
    )
}
