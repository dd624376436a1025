"""The two examples of the blog post "Understanding pytorch's autograd with grad_fn and next_functions".

Each function returns ``(roots, names)``: the tensors backward starts from,
and a mapping that names the leaf tensors. That is the shape the command line
reads (see ``gradexport --help``); it ships with the package, so from any folder::

    gradexport gradexport.examples.blog:multiply_then_sum --format dot,svg,mermaid,json --output out/multiply_then_sum
    gradexport gradexport.examples.blog:unbind_then_add --format dot,svg,mermaid,json --output out/unbind_then_add
"""

from __future__ import annotations

import networkx as nx
import torch

from gradexport.backward.replay_record import Replay


def multiply_then_sum() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``l = (x * y).sum()``: SumBackward0 -> MulBackward0 -> one AccumulateGrad per leaf."""
    torch.manual_seed(6)
    x = torch.randn(4, 4, requires_grad=True)
    y = torch.randn(4, 4, requires_grad=True)
    z = x * y
    l = z.sum()
    return {"l": l}, {"x": x, "y": y}


def unbind_then_add() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``l = x1 + x2`` with ``x1, x2 = x.unbind()``: two edges, 0→0 and 1→1, into one UnbindBackward0."""
    torch.manual_seed(6)
    x = torch.randn(2, requires_grad=True)
    x1, x2 = x.unbind()
    l = x1 + x2
    return {"l": l}, {"x": x}


def step_picture(record: Replay, number: int) -> nx.MultiDiGraph:
    """The graph of a replay with the node of step ``number`` boxed and the gradients it sent marked.

    The box is a module box of the diagram writers, named after the step; each
    edge the node sent a gradient along gets that gradient's norm, so the
    writers label it ``‖g‖`` and colour it. Steps count from 1, as
    ``Replay.to_text`` and the viewer's step bar number them. One step per
    picture: two boxes side by side overlap in Mermaid's layout; to see every
    step, open ``gradexport.to_html(record)`` and step through it.

    Examples:
        >>> import gradexport
        >>> roots, names = multiply_then_sum()
        >>> picture = step_picture(gradexport.replay(roots, params=names), 2)
        >>> picture.nodes["n2"]["module"], sorted(round(g["norm"], 2) for *_, g in picture.edges(data="grad") if g)
        ('step 2: MulBackward0 is called', [3.6, 4.54])
    """
    graph = record.graph.copy()
    step = record.steps[number - 1]
    graph.nodes[step.node]["module"] = f"step {number}: {step.op} is called"
    for position, (target, grad) in enumerate(zip(step.targets, step.outputs, strict=True)):
        if target is not None and grad is not None:
            graph.edges[step.node, target[0], position]["grad"] = {"norm": float(grad.norm())}
    return graph
