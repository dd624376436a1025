"""``python -m benchmarks.replay_hooks``: what running the tensor-hook step before every node costs replay.

:func:`gradexport.replay` hands each node's gradients to the engine's tensor-hook
step (:func:`gradexport.tracing._torch.run_tensor_hooks`) before calling it, so that
hooks on intermediate tensors run as under ``backward()``. This times a replay
of a chain with that step and with it replaced by the identity (what replay did
before), and the step alone on one node. Each figure is the minimum over
repeats, in microseconds per node; on shared cores, compare figures of one run
only.

Example::

    python -m benchmarks.replay_hooks --length 5000 --repeats 5
"""

from __future__ import annotations

import argparse
import time
import timeit
from collections.abc import Callable, Sequence
from typing import Any

import torch

import gradexport
from gradexport.backward import replay as backward_replay
from gradexport.tracing import _torch


def _chain(length: int) -> torch.Tensor:
    y = torch.zeros(1, requires_grad=True)
    for _ in range(length):
        y = y * 1.5
    return y.sum()


def _per_node(run: Callable[[], Any], nodes: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best / nodes * 1e6


def measure(length: int, repeats: int) -> dict[str, float]:
    """Microseconds per node: replay with the hook step, without it, and the step alone."""
    root = _chain(length)
    nodes = length + 2  # the nodes replay calls: the chain's, SumBackward0 and the leaf's AccumulateGrad
    hooked = backward_replay.run_tensor_hooks
    with_step = _per_node(lambda: gradexport.replay(root), nodes, repeats)

    def identity(node: Any, grads: Sequence[torch.Tensor | None]) -> tuple[torch.Tensor | None, ...]:
        return tuple(grads)

    backward_replay.run_tensor_hooks = identity
    try:
        without_step = _per_node(lambda: gradexport.replay(root), nodes, repeats)
    finally:
        backward_replay.run_tensor_hooks = hooked
    node, grads = root.grad_fn.next_functions[0][0], [torch.ones(1)]
    step = min(timeit.repeat(lambda: _torch.run_tensor_hooks(node, grads), number=2000, repeat=repeats)) / 2000 * 1e6
    return {"replay": with_step, "replay without the hook step": without_step, "hook step alone": step}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for name, value in gradexport.streams.run_with_large_stack(measure, args.length, args.repeats).items():
        print(f"{name:30} {value:8.1f} µs/node")


if __name__ == "__main__":
    main()
