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

from functools import partial
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
__all__ = ["StorageKey", "saved_storages", "signed", "storage_key", "summarize_and_count", "summarize_saved", "tensor_meta", "type_name"]


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
    names = saved_names(type(node))
    for name in names:
        summary[name] = _read(node, name)
    if isinstance(node, torch.autograd.function.BackwardCFunction):
        if _hooked(raw_saved(node, "tensors")):  # ctx.save_for_backward's tensors
            summary["saved_tensors"] = {"unavailable": "hooked"}
        else:
            summary["saved_tensors"] = _guarded(lambda: [_value(t) for t in node.saved_tensors])
    return summary


def summarize_and_count(node: Node) -> tuple[dict[str, Any], dict[StorageKey, int]]:
    """`summarize_saved` and `saved_storages` of ``node`` at once, reading each saved value once.

    Each read of ``_saved_<name>`` makes a new Python tensor: reading once
    instead of twice (and the packed value once instead of twice) was a
    third of tracing with ``saved=True``.

    Examples:
        >>> import torch
        >>> x = torch.ones(4, requires_grad=True)
        >>> summary, storages = summarize_and_count((x * x).grad_fn)
        >>> summary == summarize_saved((x * x).grad_fn), list(storages.values())
        (True, [16])
    """
    summary: dict[str, Any] = {}
    found: dict[StorageKey, int] = {}
    readers: list[tuple[str, Any]] = [(name, partial(read_saved, node, name)) for name in saved_names(type(node))]
    custom = isinstance(node, torch.autograd.function.BackwardCFunction)
    if isinstance(node, torch.autograd.function.BackwardCFunction):
        function_node = node
        readers.append(("tensors", lambda: function_node.saved_tensors))  # ctx.save_for_backward's tensors
    for name, read in readers:
        key = "saved_tensors" if custom and name == "tensors" else name
        if _hooked(raw_saved(node, name)):
            summary[key] = {"unavailable": "hooked"}
            continue
        try:
            value = read()
        except RuntimeError as error:
            summary[key] = _failure(error)
            continue
        try:
            summary[key] = [_value(item) for item in value] if key == "saved_tensors" else _value(value)
        except RuntimeError as error:
            summary[key] = _failure(error)
        for tensor in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(tensor, torch.Tensor):
                _add_storage(found, tensor)
    return summary, found


def _read(node: Node, name: str) -> Any:
    if _hooked(raw_saved(node, name)):
        return {"unavailable": "hooked"}
    return _guarded(lambda: _value(read_saved(node, name)))


def _hooked(raw: Any) -> bool:
    """Whether a raw saved value (or any item of a list of them) was packed by saved-tensor hooks."""
    return any(saved_is_hook_packed(item) for item in (raw if isinstance(raw, (list, tuple)) else [raw]))


def _guarded(read: Any) -> Any:
    try:
        return read()
    except RuntimeError as error:
        return _failure(error)


def _failure(error: RuntimeError) -> dict[str, str]:
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


#: Identity of a storage: device and address of its first byte.
StorageKey = tuple[str, int]


def saved_storages(node: Node) -> dict[StorageKey, int]:
    """The storages that ``node``'s saved tensors keep alive, each once, with their size in bytes.

    A storage is named by device and address, so that views and several
    saved tensors on one buffer count once. Values that cannot be read
    safely are skipped: freed ones (they hold nothing), stale ones, and
    those packed by saved-tensor hooks (a non-reentrant checkpoint keeps
    only what it needs to recompute them; reading them would recompute).

    Examples:
        >>> import torch
        >>> x = torch.ones(4, requires_grad=True)   # 16 bytes
        >>> list(saved_storages((x * x).grad_fn).values())   # saved twice, one storage
        [16]
    """
    found: dict[StorageKey, int] = {}
    readers = {name: (lambda name=name: read_saved(node, name)) for name in saved_names(type(node))}
    if isinstance(node, torch.autograd.function.BackwardCFunction):
        readers["tensors"] = lambda: node.saved_tensors  # ctx.save_for_backward's tensors
    for name, read in readers.items():
        if _hooked(raw_saved(node, name)):
            continue
        value = _guarded(read)
        for tensor in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(tensor, torch.Tensor):
                _add_storage(found, tensor)
    return found


def _add_storage(found: dict[StorageKey, int], tensor: torch.Tensor) -> None:
    key = storage_key(tensor)
    if key is not None:
        found[key] = tensor.untyped_storage().nbytes()


def storage_key(tensor: torch.Tensor) -> StorageKey | None:
    """The `StorageKey` of ``tensor``'s storage, or ``None`` for a layout without one (sparse).

    Examples:
        >>> import torch
        >>> base = torch.ones(4)
        >>> storage_key(base) == storage_key(base[1:])
        True
    """
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse and other layouts without one storage
        return None
    return (type_name(tensor.device), storage.data_ptr())
