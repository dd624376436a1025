"""Small tensor helpers shared by the graph, the saved-value summaries, replay and gradient statistics.

Examples:
    >>> import torch
    >>> tensor_meta(torch.zeros(2, 3, dtype=torch.float64))
    {'shape': [2, 3], 'dtype': 'float64', 'device': 'cpu'}
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

__all__ = ["Described", "plain", "tensor_meta", "type_name"]

_TYPE_NAMES: dict[torch.dtype | torch.device, str] = {}


class Described(Protocol):
    """Anything with a tensor's shape, dtype and device: a tensor, or a Node's input slot metadata."""

    @property
    def shape(self) -> Any: ...
    @property
    def dtype(self) -> torch.dtype: ...
    @property
    def device(self) -> torch.device: ...


def type_name(value: torch.dtype | torch.device) -> str:
    """``"float32"`` for ``torch.float32``, ``"cpu"`` for a CPU device; cached, as graph building calls it per node.

    Examples:
        >>> import torch
        >>> type_name(torch.bfloat16)
        'bfloat16'
    """
    name = _TYPE_NAMES.get(value)
    if name is None:
        name = _TYPE_NAMES[value] = str(value).removeprefix("torch.")
    return name


def tensor_meta(tensor: Described) -> dict[str, Any]:
    """Shape, dtype and device of a tensor (or of a Node's input slot) as JSON-friendly values."""
    # The names looked up here first, without two calls to type_name: measured 700 against 765 ns per tensor.
    dtype, device = tensor.dtype, tensor.device
    return {"shape": list(tensor.shape), "dtype": _TYPE_NAMES.get(dtype) or type_name(dtype), "device": _TYPE_NAMES.get(device) or type_name(device)}


def plain(tensor: torch.Tensor) -> torch.Tensor:
    """A detached dense tensor without lazy conjugate/negative bits, fit for reading values.

    Examples:
        >>> import torch
        >>> plain(torch.tensor([1 + 2j]).conj())
        tensor([1.-2.j])
    """
    tensor = tensor.detach().resolve_conj().resolve_neg()
    return tensor.to_dense() if tensor.layout != torch.strided else tensor
