"""examples/hand_replay.py (docs/blog/hand-replay.md) against backward() on real layers."""

from __future__ import annotations

import runpy
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn
from torch_versions import needs_input_metadata

#: The hand replay sizes each node's gradients from Node._input_metadata, as the page shows it.
pytestmark = needs_input_metadata

HAND = runpy.run_path(str(Path(__file__).parents[1] / "examples" / "hand_replay.py"))
hand_backward: Callable[[torch.Tensor], None] = HAND["hand_backward"]


def mlp() -> tuple[nn.Module, Callable[[], torch.Tensor]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    inputs, target = torch.randn(3, 4), torch.randn(3, 1)
    return model, lambda: nn.functional.mse_loss(model(inputs), target)


def transformer_layer() -> tuple[nn.Module, Callable[[], torch.Tensor]]:
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True)
    inputs = torch.randn(2, 5, 8)
    return model, lambda: model(inputs).pow(2).mean()


def conv_norm() -> tuple[nn.Module, Callable[[], torch.Tensor]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 3, bias=False), nn.BatchNorm2d(3), nn.GELU(), nn.Flatten(), nn.LazyLinear(2))
    inputs = torch.randn(4, 2, 6, 6)
    model(inputs)  # materialise the lazy layer
    return model, lambda: model(inputs).logsumexp(dim=-1).sum()


def broadcast_and_split() -> tuple[nn.Module, Callable[[], torch.Tensor]]:
    """An intermediate (not a leaf) broadcast in an add, a multi-output node, a tensor used twice."""
    torch.manual_seed(0)
    model = nn.Linear(3, 4)
    inputs = torch.randn(5, 3)

    def loss() -> torch.Tensor:
        hidden = model(inputs)
        row = hidden.mean(dim=0)  # (4,), added to every row of hidden below
        first, second = (hidden + row).unbind(dim=1)[:2]
        return (first * second + first).sum() + row.double().sum()

    return model, loss


@pytest.mark.parametrize("build", [mlp, transformer_layer, conv_norm, broadcast_and_split], ids=lambda build: build.__name__)
def test_hand_backward_matches_backward(build: Callable[[], tuple[nn.Module, Callable[[], torch.Tensor]]]) -> None:
    model, loss = build()
    loss().backward()
    expected = {name: parameter.grad.clone() for name, parameter in model.named_parameters() if parameter.grad is not None}
    assert expected
    model.zero_grad(set_to_none=True)
    hand_backward(loss())
    for name, parameter in model.named_parameters():
        if name in expected:
            assert parameter.grad is not None and parameter.grad.shape == parameter.shape and parameter.grad.dtype == parameter.dtype
            torch.testing.assert_close(parameter.grad, expected[name], rtol=1e-6, atol=1e-7)
        else:
            assert parameter.grad is None


def test_mlp_is_exact() -> None:
    """The same calls in the same order: bit for bit what backward() gives, on an MLP."""
    model, loss = mlp()
    loss().backward()
    expected = [parameter.grad.clone() for parameter in model.parameters()]
    model.zero_grad(set_to_none=True)
    hand_backward(loss())
    assert all(torch.equal(parameter.grad, grad) for parameter, grad in zip(model.parameters(), expected))


def test_without_the_reduction_the_bias_gradient_has_the_batch_dimension() -> None:
    """docs/blog/hand-replay.md: AddmmBackward0 returns (batch, out) for an (out,) bias; the engine sums it."""
    layer = nn.Linear(8, 8)
    out = layer(torch.randn(3, 8))
    addmm = out.grad_fn
    assert type(addmm).__name__ == "AddmmBackward0"
    with torch.no_grad():
        grads = addmm(torch.ones(3, 8))
    bias_edge = [i for i, (child, _) in enumerate(addmm.next_functions) if child is not None and getattr(child, "variable", None) is layer.bias]
    assert bias_edge == [0] and grads[0].shape == (3, 8) and layer.bias.shape == (8,)
