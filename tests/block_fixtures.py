"""What the tests of the documentation hosts (Sphinx, sphinx-gallery, render-md) share: a block's code and torch's nodes for it."""

from __future__ import annotations

from typing import Any

#: A block's code whose graph the tests compare with torch's own.
CHAIN = """\
import torch
x = torch.ones(3, requires_grad=True)
print("printed by the block")
(x.exp() * 2).sum()
"""


def node_names(code: str) -> set[str]:
    """The class names of the backward nodes of ``code``'s last value, as torch makes them here (leaves, whose
    ``AccumulateGrad`` node a diagram draws as the tensor, left out)."""
    namespace: dict[str, Any] = {}
    *body, last = code.strip().split("\n")
    exec("\n".join(body), namespace)
    stack, names = [eval(last, namespace).grad_fn], set()
    while stack:
        node = stack.pop()
        if not hasattr(node, "variable"):
            names.add(type(node).__name__)
        stack += [following for following, _ in node.next_functions if following is not None]
    return names
