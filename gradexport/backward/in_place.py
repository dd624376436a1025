"""Which node an in-place error stopped at: its module, the saved tensor that was modified, and the versions.

When backward reaches a node whose saved tensor was changed in place after
it was saved, torch raises a ``RuntimeError`` that names the tensor's type and
versions but not the node that needed it. `in_place_error` finds that node
among those the engine had started (the last one that cannot read a saved
tensor for that reason) and turns torch's error into a `gradexport.errors.InPlaceError`.

Examples:
    >>> import torch
    >>> from gradexport.tracing.graph import trace
    >>> x = torch.ones(3, requires_grad=True)
    >>> hidden = x.exp()
    >>> _ = hidden.mul_(2)               # ExpBackward0 saved its result, now changed
    >>> traced = trace(hidden.sum())
    >>> try:
    ...     hidden.sum().backward()
    ... except RuntimeError as torch_error:
    ...     error = in_place_error(traced, list(traced.ids.values()), torch_error)
    >>> error.node, error.op, error.saved, error.tensor, error.saved_version, error.version
    ('n3', 'ExpBackward0', 'result', 'float32 [3], output 0 of Exp...', 0, 1)
"""

from __future__ import annotations

from collections.abc import Sequence

from torch.autograd.graph import Node

from ..core.errors import InPlaceError
from ..tracing._torch import in_place_versions, read_saved, saved_names, saved_read_failure
from ..tracing.graph import Trace

__all__ = ["in_place_error"]


def in_place_error(result: Trace, started: Sequence[str], error: RuntimeError) -> InPlaceError | None:
    """The `InPlaceError` for torch's ``error``, or ``None`` when it is not an in-place error.

    Args:
        result: The traced graph backward ran on.
        started: Node ids in the order the engine began calling them; the
            last one holding a modified saved tensor is the one that failed.
        error: What torch raised.
    """
    if saved_read_failure(error) != "stale":
        return None
    message = " ".join(str(error).split())
    versions = in_place_versions(message)
    nodes = {node_id: node for node, node_id in result.ids.items()}
    node_id, saved = _stale_node(nodes, started)
    if node_id is None:
        node_id = started[-1] if started else "?"
    data = result.graph.nodes[node_id] if node_id in result.graph else {}
    return InPlaceError(
        node_id,
        str(data.get("op", "?")),
        data.get("module"),
        saved,
        versions.tensor if versions else "",
        versions.saved_version if versions else None,
        versions.version if versions else None,
        message.split(" Hint:")[0],
    )


def _stale_node(nodes: dict[str, Node], started: Sequence[str]) -> tuple[str | None, str | None]:
    for node_id in reversed(started):
        node = nodes.get(node_id)
        if node is None:
            continue
        for name in saved_names(type(node)):
            try:
                read_saved(node, name)
            except RuntimeError as failure:
                if saved_read_failure(failure) == "stale":
                    return node_id, name
    return None, None
