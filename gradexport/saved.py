"""Summaries of what a backward node saved for its formula (``_saved_*``).

Reading a saved value is not always harmless: after ``backward()`` the buffers
are freed and torch raises; after an in-place edit the value is stale and torch
raises; and a value packed by saved-tensor hooks (non-reentrant checkpoint,
CPU offloading) is recomputed or moved back when read. `summarize_saved`
reports each of those states instead of raising or triggering work.

Examples:
    >>> import torch
    >>> x = torch.ones(2, 3, requires_grad=True)
    >>> summarize_saved((x * x).grad_fn)["self"]
    {'shape': [2, 3], 'dtype': 'float32', 'device': 'cpu'}
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch
from torch.autograd.graph import Node

__all__ = ["signed", "summarize_saved", "tensor_meta", "type_name"]

_SAVED = "_saved_"
_RAW = "_raw_saved_"


def signed(value: int) -> int:
    """Undo torch's unsigned read-back of negative saved ints (``dim=-1`` reads as 2**64 - 1)."""
    return value - 2**64 if 2**63 <= value < 2**64 else value


_TYPE_NAMES: dict[torch.dtype | torch.device, str] = {}


def type_name(value: torch.dtype | torch.device) -> str:
    """``"float32"`` for ``torch.float32``, ``"cpu"`` for a CPU device; cached, as graph building calls it per node."""
    name = _TYPE_NAMES.get(value)
    if name is None:
        name = _TYPE_NAMES[value] = str(value).removeprefix("torch.")
    return name


def tensor_meta(tensor: torch.Tensor) -> dict[str, Any]:
    """Shape, dtype and device of a tensor as JSON-friendly values."""
    return {"shape": list(tensor.shape), "dtype": type_name(tensor.dtype), "device": type_name(tensor.device)}


@lru_cache(maxsize=None)
def _saved_names(node_type: type) -> tuple[str, ...]:
    return tuple(attr[len(_SAVED):] for attr in dir(node_type) if attr.startswith(_SAVED))


def summarize_saved(node: Node) -> dict[str, Any]:
    """Map each saved attribute of ``node`` to a JSON-friendly summary.

    Tensors become ``{"shape", "dtype", "device"}``; ints, floats, bools and
    strings stay as they are (negative ints fixed, see `signed`); sequences
    become lists; anything else its ``str``. A value that cannot be read safely
    becomes ``{"unavailable": reason}`` with reason ``"freed"`` (backward already
    ran), ``"stale"`` (modified in place since it was saved), ``"hooked"``
    (packed by saved-tensor hooks, as non-reentrant checkpoint does; reading
    it would recompute or reload it) or ``"error"`` with torch's message.
    For a custom ``autograd.Function`` node the entry ``saved_tensors`` lists
    what ``ctx.save_for_backward`` kept.
    """
    summary: dict[str, Any] = {}
    names = _saved_names(type(node))
    for name in names:
        summary[name] = _read(node, name)
    if isinstance(node, torch.autograd.function.BackwardCFunction):
        summary["saved_tensors"] = _guarded(lambda: [_value(t) for t in node.saved_tensors])
    return summary


def _read(node: Node, name: str) -> Any:
    raw = getattr(node, _RAW + name, None)
    hooked = [item for item in (raw if isinstance(raw, (list, tuple)) else [raw]) if _is_hooked(item)]
    if hooked:
        return {"unavailable": "hooked"}
    return _guarded(lambda: _value(getattr(node, _SAVED + name)))


def _is_hooked(raw: Any) -> bool:
    try:
        return getattr(raw, "unpack_hook", None) is not None
    except RuntimeError:  # a freed SavedVariable; _guarded reports it when read
        return False


def _guarded(read: Any) -> Any:
    try:
        return read()
    except RuntimeError as error:
        message = str(error)
        if "freed" in message or "backward through the graph a second time" in message:
            return {"unavailable": "freed"}
        if "modified by an inplace operation" in message or "is at version" in message:
            return {"unavailable": "stale"}
        return {"unavailable": "error", "message": message.splitlines()[0]}


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
