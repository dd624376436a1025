"""A backward pass written by hand: the blog's loop, made to work on real layers.

`hand_backward` calls every node of the graph itself, the way the blog post
calls ``back_sum`` and ``back_mul``, and fills ``.grad`` of the leaves. It does
what torch's engine does between two node calls and nothing more:

1. count the edges into every node, so that a node runs once all its
   gradients arrived (see docs/concepts/execution-order.md);
2. add up the gradients that arrive at the same input slot;
3. reduce each gradient to the shape and dtype the receiving slot expects:
   ``AddmmBackward0`` returns the bias gradient unreduced, one row per batch
   element, and the engine sums it down (its ``validate_outputs``).

It handles nodes written in C++, which is every node of ordinary layers;
custom ``autograd.Function`` nodes and hooks need more (`gradexport.replay`
does both). Two things have no public API in torch 2.13 and are read from
private attributes: how many input slots a node has, and the shape, dtype of
each (``node._input_metadata``), and the order key (``node._sequence_nr()``).
"""

from __future__ import annotations

import heapq
import itertools

import torch
from torch.autograd.graph import Node


def hand_backward(loss: torch.Tensor) -> None:
    """Fill ``.grad`` of every leaf that ``loss`` depends on by calling the nodes one by one."""
    start = loss.grad_fn
    assert start is not None, "loss must come from a recorded operation"
    count: dict[Node, int] = {start: 1}  # 1. edges into each node (the root's gradient is one)
    stack, seen = [start], {start}
    while stack:
        for child, _ in stack.pop().next_functions:
            if child is not None:
                count[child] = count.get(child, 0) + 1
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
    slots: dict[Node, list[torch.Tensor | None]] = {}
    ready: list[tuple[int, int, Node]] = []
    arrival = itertools.count()  # breaks ties (only AccumulateGrad nodes share a number)

    def deliver(node: Node, slot: int, grad: torch.Tensor | None) -> None:
        inputs = slots.setdefault(node, [None] * len(node._input_metadata))  # private: no public count of slots
        if grad is not None:
            expected = node._input_metadata[slot]  # private: the shape and dtype of the tensor this slot stands for
            grad = grad.sum_to_size(expected.shape).to(expected.dtype)  # 3. reduce, as the engine does
            previous = inputs[slot]
            inputs[slot] = grad if previous is None else previous + grad  # 2. sum per slot
        count[node] -= 1
        if count[node] == 0:  # every edge delivered: ready; the latest-recorded node goes first
            heapq.heappush(ready, (-node._sequence_nr(), next(arrival), node))

    with torch.no_grad():  # so that the gradients are plain tensors, as backward() makes them
        deliver(start, loss.output_nr, torch.ones_like(loss))
        while ready:
            node = heapq.heappop(ready)[-1]
            results = node(*slots.pop(node))  # an AccumulateGrad adds to .grad here
            if not isinstance(results, tuple):
                results = (results,)
            for (child, slot), grad in zip(node.next_functions, results):
                if child is not None:
                    deliver(child, slot, grad)
