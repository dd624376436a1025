"""Autograd graphs with a size knob, one per shape of graph that stresses an exporter differently.

Each :class:`Generator` builds a graph from its knob (``build(knob)`` returns the
root tensor) and states how many nodes gradexport's graph of it has
(``nodes(knob)``: every ``grad_fn``/``AccumulateGrad`` Node plus the root
tensor), so :func:`Generator.knob_for` can aim at a node count. Tensors are tiny
(a handful of elements): the cost measured is the graph's, not the arithmetic's.
Parameters are plain leaf tensors rather than ``nn.Module``\\ s where that gives
the same ops, because creating 10^5 modules would dominate the run.

Example:
    >>> chain = GENERATORS["chain"]
    >>> chain.knob_for(1000), chain.nodes(chain.knob_for(1000))
    (998, 1000)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["GENERATORS", "Generator"]


@dataclass(frozen=True)
class Generator:
    """A family of autograd graphs whose node count is ``base + per_unit * knob``."""

    name: str
    description: str
    #: Nodes added by one unit of the knob (one step, layer, block, row...).
    per_unit: int
    #: Nodes that do not depend on the knob (root, loss, input leaves...).
    base: int
    build: Callable[[int], torch.Tensor]
    #: Largest node count that is practical to build and measure on a small machine.
    max_nodes: int = 10**5

    def nodes(self, knob: int) -> int:
        return self.base + self.per_unit * knob

    def knob_for(self, target_nodes: int) -> int:
        return max(1, round((target_nodes - self.base) / self.per_unit))


def _leaf(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, requires_grad=True)


def deep_chain(steps: int) -> torch.Tensor:
    # One AddBackward0 per step (its other slot is (None, 0): the constant), one leaf, the root.
    x = torch.zeros(1, requires_grad=True)
    for _ in range(steps):
        x = x + 1
    return x


def wide_fan_in(width: int) -> torch.Tensor:
    # `width` leaves into one StackBackward0, then SumBackward0 and the root.
    return torch.stack([_leaf(1) for _ in range(width)]).sum()


def mlp(layers: int) -> torch.Tensor:
    # Per layer: AddmmBackward0, TBackward0, ReluBackward0 and the weight and bias leaves.
    x = torch.randn(2, 4)
    for _ in range(layers):
        x = F.linear(x, _leaf(4, 4), _leaf(4)).relu()
    return x.sum()


def resnet_cnn(blocks: int) -> torch.Tensor:
    # Per basic block: two convolutions (weight leaves), two batch norms (weight and
    # bias leaves), two ReLUs and the skip addition.
    x = torch.randn(1, 2, 4, 4)
    for _ in range(blocks):
        skip = x
        x = F.batch_norm(F.conv2d(x, _leaf(2, 2, 3, 3), padding=1), None, None, _leaf(2), _leaf(2), training=True)
        x = F.batch_norm(F.conv2d(x.relu(), _leaf(2, 2, 3, 3), padding=1), None, None, _leaf(2), _leaf(2), training=True)
        x = (x + skip).relu()
    return x.sum()


def transformer_encoder(layers: int) -> torch.Tensor:
    # nn.TransformerEncoderLayer as is (attention, feed-forward, layer norms; no dropout so
    # the graph is deterministic): 54 nodes per layer with its 16 parameter leaves.
    x = torch.randn(1, 3, 4)
    for _ in range(layers):
        x = torch.nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True)(x)
    return x.sum()


def lstm_unrolled(steps: int) -> torch.Tensor:
    # One LSTMCell (4 shared parameter leaves) unrolled: 15 nodes per step, and the
    # weights' AccumulateGrad nodes are reached from every step.
    cell = torch.nn.LSTMCell(4, 4)
    h = c = torch.zeros(1, 4)
    x = torch.randn(1, 4)
    for _ in range(steps):
        h, c = cell(x, (h, c))
    return h.sum()


LATTICE_WIDTH = 8


def diamond_lattice(rows: int) -> torch.Tensor:
    # A width-8 ring of cells, each row's cell i the minimum of the previous row's cells
    # i and i+1: every cell is shared by two consumers, so the number of root-to-leaf
    # paths grows exponentially while the node count grows linearly (8 per row, plus
    # root, SumBackward0, StackBackward0, UnbindBackward0 and the leaf).
    row = _leaf(LATTICE_WIDTH).unbind()
    for _ in range(rows):
        row = [torch.minimum(row[i], row[(i + 1) % LATTICE_WIDTH]) for i in range(LATTICE_WIDTH)]
    return torch.stack(row).sum()


GENERATORS: dict[str, Generator] = {
    generator.name: generator
    for generator in (
        Generator("chain", "deep chain of x + 1", 1, 2, deep_chain, max_nodes=10**6),
        Generator("fan_in", "leaves stacked into one node", 1, 3, wide_fan_in, max_nodes=10**6),
        Generator("mlp", "Linear + ReLU layers", 5, 2, mlp, max_nodes=10**6),
        Generator("resnet", "ResNet-style basic blocks (conv, batch norm, skip)", 13, 2, resnet_cnn),
        Generator("transformer", "nn.TransformerEncoderLayer stack", 54, 0, transformer_encoder, max_nodes=10**6),
        Generator("lstm", "LSTMCell unrolled over time", 15, 6, lstm_unrolled),
        Generator("lattice", f"diamond lattice of width {LATTICE_WIDTH} (shared subexpressions)", LATTICE_WIDTH, 5, diamond_lattice, max_nodes=10**6),
    )
}
