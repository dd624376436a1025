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

from collections.abc import Callable, Iterable
from contextlib import suppress
from functools import cache, partial
from typing import Any

import torch
from torch.autograd.graph import Node

from ._torch import (
    function_saved_tensors,
    raw_saved,
    read_saved,
    saved_getters,
    saved_is_hook_packed,
    saved_names,
    saved_read_failure,
    signed,
)
from .tensors import tensor_meta, type_name

# signed, tensor_meta and type_name have lived here since the first release; they stay importable.
__all__ = [
    "SavedTally",
    "StorageKey",
    "add_storage",
    "may_hold_storages",
    "saved_storages",
    "signed",
    "storage_key",
    "summarize_and_count",
    "summarize_saved",
    "tensor_meta",
    "type_name",
]


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
        if saved_is_hook_packed(raw_saved(node, "tensors")):  # ctx.save_for_backward's tensors
            summary["saved_tensors"] = {"unavailable": "hooked"}
        else:
            summary["saved_tensors"] = _guarded(lambda: [_value(t) for t in function_saved_tensors(node)])
    return summary


def summarize_and_count(node: Node) -> tuple[dict[str, Any], dict[StorageKey, int]]:
    """`summarize_saved` and `saved_storages` of ``node`` at once, reading each saved value once.

    Each read of ``_saved_<name>`` makes a new Python tensor: reading once
    instead of twice (and the packed value once instead of twice) was a
    third of tracing with ``show_saved=True``.

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
        readers.append(("tensors", lambda: function_saved_tensors(function_node)))  # ctx.save_for_backward's tensors
    for name, read in readers:
        key = "saved_tensors" if custom and name == "tensors" else name
        if saved_is_hook_packed(raw_saved(node, name)):
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
        _add_storages(found, value)
    return summary, found


def _read(node: Node, name: str) -> Any:
    if saved_is_hook_packed(raw_saved(node, name)):
        return {"unavailable": "hooked"}
    return _guarded(lambda: _value(read_saved(node, name)))


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


class SavedTally:
    """The saved storages of a graph's nodes, counted in id order, and split into parameters, buffers and activations.

    A storage counts in the ``saved_bytes`` of the first node that holds it
    and in the ``saved_bytes_shared`` of every later one (see
    `gradexport.tracing.graph`); `split` tells the storages of parameters
    (leaves, added to `leaf_storages` as they are found) and buffers from
    activations once every leaf is known.

    Examples:
        >>> tally = SavedTally()
        >>> tally.count("n1", {("cpu", 1): 16}), tally.count("n2", {("cpu", 1): 16, ("cpu", 2): 8})
        ((16, 0), (8, 16))
        >>> tally.leaf_storages[("cpu", 2)] = 8
        >>> tally.split()
        {'saved_bytes': 24, 'saved_bytes_parameters': 8, 'saved_bytes_buffers': 0, 'saved_bytes_activations': 16, 'saved_weights': {'n2': [8, 0]}}
    """

    def __init__(self, buffers: Iterable[torch.Tensor] = ()):
        self.total = 0
        #: The storages counted so far, for a first node.
        self.seen: set[StorageKey] = set()
        #: Every storage of every node, as counted: key, bytes, node id, and whether the node held it first.
        self.counted: list[tuple[StorageKey, int, str, bool]] = []
        #: The leaves' storages (see `add_storage`).
        self.leaf_storages: dict[StorageKey, int] = {}
        self.buffer_storages = {key for buffer in buffers if (key := storage_key(buffer)) is not None}

    def count(self, node_id: str, storages: dict[StorageKey, int]) -> tuple[int, int]:
        """Count the storages of the node ``node_id`` (the next in id order): its own bytes and its shared ones."""
        fresh = shared = 0
        seen, counted = self.seen, self.counted
        for key, nbytes in storages.items():
            if key in seen:
                shared += nbytes
                counted.append((key, nbytes, node_id, False))
            else:
                seen.add(key)
                fresh += nbytes
                counted.append((key, nbytes, node_id, True))
        self.total += fresh
        return fresh, shared

    def split(self) -> dict[str, Any]:
        """The graph attributes ``saved_bytes``, ``saved_bytes_parameters``, ``saved_bytes_buffers``, ``saved_bytes_activations`` and ``saved_weights``."""
        parameters = set(self.leaf_storages)
        buffers = self.buffer_storages - parameters
        weighty = parameters | buffers
        totals = {"parameters": 0, "buffers": 0}
        weights: dict[str, list[int]] = {}
        for key, nbytes, node_id, first in self.counted:
            if key in weighty and nbytes:
                held = weights.get(node_id)
                if held is None:
                    held = weights[node_id] = [0, 0]
                held[0 if first else 1] += nbytes
                if first:
                    totals["parameters" if key in parameters else "buffers"] += nbytes
        return {
            "saved_bytes": self.total,
            "saved_bytes_parameters": totals["parameters"],
            "saved_bytes_buffers": totals["buffers"],
            "saved_bytes_activations": self.total - totals["parameters"] - totals["buffers"],
            "saved_weights": weights,
        }


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
    for read, raw in _storage_readers(type(node)):
        if saved_is_hook_packed(raw(node)):
            continue
        try:
            value = read(node)
        except RuntimeError:  # freed or stale
            continue
        _add_storages(found, value)
    if isinstance(node, torch.autograd.function.BackwardCFunction) and not saved_is_hook_packed(raw_saved(node, "tensors")):
        with suppress(RuntimeError):  # freed or stale
            _add_storages(found, function_saved_tensors(node))  # ctx.save_for_backward's tensors
    return found


def may_hold_storages(node_type: type) -> bool:
    """Whether nodes of this type can save tensors: `saved_storages` of the others is always empty.

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> may_hold_storages(type(x.exp().grad_fn)), may_hold_storages(type(x.sum().grad_fn))
        (True, False)
    """
    return bool(_storage_readers(node_type)) or issubclass(node_type, torch.autograd.function.BackwardCFunction)


@cache
def _storage_readers(node_type: type) -> tuple[tuple[Callable[[Node], Any], Callable[[Node], Any]], ...]:
    """The value and raw getters of the saved values of this type that can be tensors.

    Only saved values with a raw getter are tensors or lists of them (see
    `gradexport.tracing._torch.SavedGetter`): the others (sizes, scalars,
    flags) are not read: measured 3.3 µs against 5.1 µs per node of an MLP.
    """
    return tuple((getter.read, getter.raw) for getter in saved_getters(node_type) if getter.raw is not None)


def _add_storages(found: dict[StorageKey, int], value: Any) -> None:
    """Add the storage of ``value``, or of each tensor in a list of them, to ``found``; other values hold none."""
    if isinstance(value, torch.Tensor):
        add_storage(found, value)
    elif isinstance(value, (list, tuple)):
        for tensor in value:
            if isinstance(tensor, torch.Tensor):
                add_storage(found, tensor)


def add_storage(found: dict[StorageKey, int], tensor: torch.Tensor) -> None:
    """Add ``tensor``'s storage, by its `StorageKey`, with its size in bytes to ``found`` (nothing for a layout without one)."""
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse and other layouts without one storage
        return
    # tensor.is_cpu first: measured 0.12 µs against 0.3 µs per tensor for the device's name.
    found["cpu" if tensor.is_cpu else type_name(tensor.device), storage.data_ptr()] = storage.nbytes()


def storage_key(tensor: torch.Tensor) -> StorageKey | None:
    """The `StorageKey` of ``tensor``'s storage, or ``None`` for a layout without one (sparse).

    Examples:
        >>> import torch
        >>> base = torch.ones(4)
        >>> storage_key(base) == storage_key(base[1:])
        True
    """
    found: dict[StorageKey, int] = {}
    add_storage(found, tensor)
    return next(iter(found), None)
