"""Summaries of what a backward node saved for its formula (``_saved_*``).

Reading a saved value is not always harmless: after ``backward()`` the buffers
are freed and torch raises; after an in-place edit the value is stale and torch
raises; and a value packed by saved-tensor hooks (non-reentrant checkpoint,
CPU offloading) is recomputed or moved back when read. :func:`summarize_saved`
reports each of those states instead of raising or triggering work.

Example:
    >>> import torch
    >>> x = torch.ones(2, 3, requires_grad=True)
    >>> summarize_saved((x * x).grad_fn)["self"]
    {'shape': [2, 3], 'dtype': 'float32', 'device': 'cpu'}
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.graph import Node

from ._torch import (
    raw_saved,
    read_saved,
    saved_is_hook_packed,
    saved_names,
    saved_read_failure,
    signed,
)
from .tensors import tensor_meta, type_name

# signed, tensor_meta and type_name have lived here since the first release; they stay importable.
__all__ = ["signed", "summarize_saved", "tensor_meta", "type_name"]


def summarize_saved(node: Node) -> dict[str, Any]:
    """Map each saved attribute of ``node`` to a JSON-friendly summary.

    Tensors become ``{"shape", "dtype", "device"}``; ints, floats, bools and
    strings stay as they are (negative ints fixed, see :func:`signed`); sequences
    become lists; anything else its ``str``. A value that cannot be read safely
    becomes ``{"unavailable": reason}`` with reason ``"freed"`` (backward already
    ran), ``"stale"`` (modified in place since it was saved), ``"hooked"``
    (packed by saved-tensor hooks, as non-reentrant checkpoint does; reading
    it would recompute or reload it) or ``"error"`` with torch's message.
    For a custom ``autograd.Function`` node the entry ``saved_tensors`` lists
    what ``ctx.save_for_backward`` kept.
    """
    summary: dict[str, Any] = {}
    names = saved_names(type(node))
    for name in names:
        summary[name] = _read(node, name)
    if isinstance(node, torch.autograd.function.BackwardCFunction):
        summary["saved_tensors"] = _guarded(lambda: [_value(t) for t in node.saved_tensors])
    return summary


def _read(node: Node, name: str) -> Any:
    raw = raw_saved(node, name)
    if any(saved_is_hook_packed(item) for item in (raw if isinstance(raw, (list, tuple)) else [raw])):
        return {"unavailable": "hooked"}
    return _guarded(lambda: _value(read_saved(node, name)))


def _guarded(read: Any) -> Any:
    try:
        return read()
    except RuntimeError as error:
        failure = saved_read_failure(error)
        if failure is not None:
            return {"unavailable": failure}
        return {"unavailable": "error", "message": str(error).splitlines()[0]}


def _value(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return tensor_meta(value)
    if isinstance(value, bool) or value is None or isinstance(value, (float, str)):
        return value
    if isinstance(value, int):
        return signed(value)
    if isinstance(value, (list, tuple)):
        return [_value(item) for item in value]
    return str(value)
