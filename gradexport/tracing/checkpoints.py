"""Inside a reentrant checkpoint: its region's graph, made again on demand.

``torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=True)``
runs ``function`` under ``no_grad`` and leaves one opaque node,
``CheckpointFunctionBackward``, in the graph: what the region did, and the
parameters it used, are not there. Its backward runs ``function`` again with
gradients on and backpropagates through what that builds. `retrace_checkpoint`
runs that recomputation without the backward and hands back the region's
outputs, whose ``grad_fn`` graph every gradexport tool can show
(`gradexport.to_networkx`, `gradexport.write`, the viewer);
`gradexport.tools.unreached` uses it to count the parameters used inside as reached.

What it costs: one more forward of the region (its time, and the memory of the
activations it saves, held as long as the returned outputs live); the region's
side effects happen once more (a ``BatchNorm`` in training mode updates its
running statistics, as the checkpoint's backward will too). The random state
of the forward is restored for the run and the caller's is kept, as the
checkpoint does, so dropout masks match the forward's. It needs the region's
saved inputs: after ``backward()`` (without ``retain_graph``) they are freed
and it raises.

Examples:
    >>> import torch, gradexport
    >>> from torch.utils.checkpoint import checkpoint
    >>> layer = torch.nn.Linear(2, 2)
    >>> loss = checkpoint(layer, torch.ones(1, 2, requires_grad=True), use_reentrant=True).sum()
    >>> def ops(roots):
    ...     graph = gradexport.to_networkx(roots, params=dict(layer.named_parameters()))
    ...     return sorted(" ".join(data.get("names", ())) or data["op"] for _, data in graph.nodes(data=True) if "op" in data)
    >>> ops(loss)                                      # the region is one node; AccumulateGrad is the input's
    ['AccumulateGrad', 'CheckpointFunctionBackward', 'SumBackward0']
    >>> region = gradexport.tools.retrace_checkpoint(loss.grad_fn.next_functions[0][0])
    >>> ops(region.outputs)                            # AccumulateGrad: the input's detached copy
    ['AccumulateGrad', 'AddmmBackward0', 'TBackward0', 'bias', 'weight']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.graph import Node

from ..core.errors import ArgumentTypeError, ArgumentValueError
from ._torch import grad_tensors, is_reentrant_checkpoint, rerun_checkpoint, saved_read_failure

__all__ = ["CheckpointRegion", "Regions", "retrace_checkpoint"]


@dataclass(frozen=True)
class CheckpointRegion:
    """A reentrant checkpoint's region, made again by `retrace_checkpoint`.

    Attributes:
        node: The ``CheckpointFunctionBackward`` node it stands behind.
        outputs: The region's output tensors that need a gradient; their
            ``grad_fn`` graph is the region's contents.
        inputs: The arguments it ran on: detached copies of the saved tensors
            (leaves, ``requires_grad`` as the originals), other arguments as given.
    """

    node: Node
    outputs: tuple[torch.Tensor, ...]
    inputs: tuple[Any, ...]


def retrace_checkpoint(target: Node | torch.Tensor) -> CheckpointRegion:
    """Run a reentrant checkpoint's function again, as its backward would, and return its region.

    Args:
        target: The ``CheckpointFunctionBackward`` node, or the checkpoint's
            output tensor (whose ``grad_fn`` it is).

    Raises:
        ArgumentTypeError: ``target`` is neither a node nor a tensor.
        ArgumentValueError: it is not a reentrant checkpoint's node or output.
        RuntimeError: torch's, when ``backward()`` freed the saved inputs already.

    Run it inside `gradexport.capture_modules` to name the region's modules.

    Examples:
        >>> import torch
        >>> from torch.utils.checkpoint import checkpoint
        >>> weight = torch.ones(2, requires_grad=True)
        >>> out = checkpoint(lambda t: (t * weight).sin(), torch.ones(2, requires_grad=True), use_reentrant=True)
        >>> [tensor.grad_fn.name() for tensor in retrace_checkpoint(out).outputs]
        ['SinBackward0']
    """
    if isinstance(target, torch.Tensor):
        node = target.grad_fn
    elif isinstance(target, Node):
        node = target
    else:
        raise ArgumentTypeError(f"retrace_checkpoint: target must be a CheckpointFunctionBackward node or its output tensor, got {type(target).__name__}")
    if node is None or not is_reentrant_checkpoint(node):
        made_by = "no grad_fn" if node is None else node.name()
        raise ArgumentValueError(
            f"retrace_checkpoint: target is not a reentrant checkpoint's node ({made_by}); "
            "pass the CheckpointFunctionBackward node of checkpoint(..., use_reentrant=True) or its output"
        )
    outputs, inputs = rerun_checkpoint(node)
    return CheckpointRegion(node, tuple(grad_tensors(outputs)), inputs)


class Regions:
    """The regions of the reentrant checkpoints met in one walk, each re-traced once.

    Examples:
        >>> import torch
        >>> from torch.utils.checkpoint import checkpoint
        >>> out = checkpoint(torch.nn.Linear(2, 2), torch.ones(1, 2, requires_grad=True), use_reentrant=True)
        >>> regions = Regions()
        >>> [node.name() for node in regions.open(out.grad_fn)], len(regions.opened), regions.closed
        (['AddmmBackward0'], 1, False)
    """

    def __init__(self) -> None:
        #: The region of every checkpoint node re-traced, by ``id`` of the node (keeps its graph alive).
        self.opened: dict[int, CheckpointRegion] = {}
        #: Whether a checkpoint's region could not be re-traced (its saved inputs freed).
        self.closed = False

    def open(self, node: Node) -> list[Node]:
        """The ``grad_fn`` of each output of ``node``'s region, re-traced the first time; none when it cannot be."""
        region = self.opened.get(id(node))
        if region is None:
            try:
                region = self.opened[id(node)] = retrace_checkpoint(node)
            except RuntimeError as error:
                if saved_read_failure(error) != "freed":
                    raise
                self.closed = True
                return []
        return [tensor.grad_fn for tensor in region.outputs if tensor.grad_fn is not None]
