"""What `gradexport.watch` computes of a step's gradients, in as few torch calls as the gradients allow.

A recorded step needs, per parameter, four numbers of its ``.grad``: the
2-norm, the largest ``|g|``, the sum and the sum of ``|g|``. Called per
tensor, that is four dispatches per parameter, and on a model of many small
parameters (biases, norms) the dispatches cost more than the arithmetic. So:

* the 2-norms come from one ``torch._foreach_norm`` over all gradients (the
  same kernel as ``torch.linalg.vector_norm``, bit for bit);
* the gradients of at most `SMALL_GRADIENT` elements are flattened into one
  zero-padded matrix (``pad_sequence``), whose rows give the other three in
  three calls for all of them: a zero changes neither a sum, a sum of ``|g|``
  nor a largest ``|g|``;
* each larger gradient's ``|g|`` is written into a buffer kept between
  steps (`GradientStatistics`, at most `CHUNK` elements at a time), which
  gives ``amax`` and a sum; a ``|g|`` allocated anew each step cost more
  than the reductions (a block that large comes fresh from the system, and
  each of its pages faults in again).

The numbers reach Python in one conversion (`floats`): on the CPU, where
reading a value costs no synchronisation, tensor by tensor (cheaper than
stacking them); elsewhere through one stacked copy to the host.

Examples:
    >>> import torch
    >>> columns = GradientStatistics().columns([torch.tensor([3.0, -4.0]), torch.full((5000,), -0.5)])
    >>> columns.norm, columns.max_abs, columns.sum, columns.abs_sum
    ([5.0, 35.35533905029297], [4.0, 0.5], [-1.0, -2500.0], [7.0, 2500.0])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch.nn.utils.rnn import pad_sequence

from ..tracing._torch import foreach_norm, full_value

__all__ = ["CHUNK", "SMALL_GRADIENT", "GradientColumns", "GradientStatistics", "floats"]

#: Gradients of at most this many elements share one padded matrix (biases, norms' weights, small
#: layers); above it a gradient's own reductions cost more than their dispatch, and padding every row
#: to the longest would add work.
SMALL_GRADIENT = 4096
#: The most elements of one gradient whose ``|g|`` is held at once (4 MiB of float32): the buffer's bound.
CHUNK = 1 << 20


class GradientColumns(NamedTuple):
    """Per gradient, in the order given: 2-norm, largest ``|g|``, sum and sum of ``|g|`` (NaN where an element is NaN)."""

    norm: list[float]
    max_abs: list[float]
    sum: list[float]
    abs_sum: list[float]


class GradientStatistics:
    """Computes `GradientColumns`, keeping one buffer per dtype and device between calls (at most `CHUNK` elements)."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}

    def columns(self, grads: Sequence[torch.Tensor], norms: Sequence[torch.Tensor] | None = None) -> GradientColumns:
        """The four statistics of every gradient in ``grads`` (non-empty tensors), with one conversion to Python numbers.

        ``norms``, when given, are the gradients' 2-norms as `foreach_norm`
        gave them (a caller that needed them first), and are not computed again.

        Examples:
            >>> GradientStatistics().columns([torch.tensor([[1.0, -2.0]]), torch.tensor([float("nan")])]).max_abs
            [2.0, nan]
        """
        if not grads:
            return GradientColumns([], [], [], [])
        small = [index for index, grad in enumerate(grads) if _paddable(grad, grads[0])]
        large = sorted(set(range(len(grads))) - set(small))
        tensors: list[torch.Tensor] = list(foreach_norm(grads) if norms is None else norms)
        pieces: list[int] = []  # per large gradient, how many (largest, sum of |g|) pairs its pieces gave
        with torch.no_grad():
            if small:
                matrix = pad_sequence([grads[index].reshape(-1) for index in small], batch_first=True)
                magnitudes = matrix.abs()
                tensors += [magnitudes.amax(dim=1), matrix.sum(dim=1), magnitudes.sum(dim=1)]
            for index in large:
                grad = grads[index]
                tensors.append(grad.sum())
                reductions = self._magnitude_reductions(grad)
                pieces.append(len(reductions) // 2)
                tensors += reductions
        numbers = floats(tensors)
        count = len(grads)
        columns = GradientColumns(numbers[:count], [0.0] * count, [0.0] * count, [0.0] * count)
        rows = len(small)
        maxima, sums, abs_sums = numbers[count : count + rows], numbers[count + rows : count + 2 * rows], numbers[count + 2 * rows : count + 3 * rows]
        for position, index in enumerate(small):
            columns.max_abs[index], columns.sum[index], columns.abs_sum[index] = maxima[position], sums[position], abs_sums[position]
        rest = iter(numbers[count + 3 * rows :])
        for index, parts in zip(large, pieces):
            columns.sum[index] = next(rest)
            found = [(next(rest), next(rest)) for _ in range(parts)]
            # max() would skip a NaN that is not first: a NaN anywhere makes the largest |g| NaN, as torch's amax does.
            largest = [high for high, _ in found]
            columns.max_abs[index] = math.nan if any(map(math.isnan, largest)) else max(largest)
            columns.abs_sum[index] = math.fsum(total for _, total in found)
        return columns

    def _magnitude_reductions(self, grad: torch.Tensor) -> list[torch.Tensor]:
        """``|grad|``'s largest element and sum, per `CHUNK` of it written into the kept buffer: ``[max, sum, max, sum...]``.

        Each piece is reduced before the next is written over it (on a GPU, in the stream's order).
        A ``DTensor`` (an FSDP2 gradient) takes no ``out=`` of a plain tensor: its ``|g|`` is reduced whole, and
        `floats` reduces the per-rank results.
        """
        if type(grad) is not torch.Tensor:
            magnitudes = grad.abs()
            return [magnitudes.amax(), magnitudes.sum()]
        flat = grad.reshape(-1)
        key = (flat.dtype, flat.device)
        buffer = self._buffers.get(key)
        size = min(flat.numel(), CHUNK)
        if buffer is None or buffer.numel() < size:
            buffer = self._buffers[key] = torch.empty(size, dtype=flat.dtype, device=flat.device)
        reductions = []
        for start in range(0, flat.numel(), CHUNK):
            piece = flat[start : start + CHUNK]
            magnitudes = torch.abs(piece, out=buffer[: piece.numel()])
            reductions += [magnitudes.amax(), magnitudes.sum()]
        return reductions


def _paddable(grad: torch.Tensor, first: torch.Tensor) -> bool:
    # A DTensor's statistics are reduced over its ranks by `full_value`, one tensor at a time.
    return type(grad) is torch.Tensor and grad.numel() <= SMALL_GRADIENT and grad.dtype == first.dtype and grad.device == first.device


def floats(tensors: Sequence[torch.Tensor]) -> list[float]:
    """The elements of 0-d and 1-d tensors as Python floats, in order, with one transfer to the host.

    A statistic of an FSDP2 gradient (a sharded ``DTensor``) is a partial
    value per rank: it is reduced first (a collective per value, so every
    rank must step), and the history holds the whole gradient's statistics.

    Examples:
        >>> floats([torch.tensor(1.5), torch.tensor([2.0, 3.0])])
        [1.5, 2.0, 3.0]
    """
    if not tensors:
        return []
    tensors = [tensor if type(tensor) is torch.Tensor else full_value(tensor) for tensor in tensors]
    numbers: list[float] = []
    if all(tensor.is_cpu for tensor in tensors):
        for tensor in tensors:
            values = tensor.tolist()
            numbers += values if isinstance(values, list) else [values]
        return [float(number) for number in numbers]
    first = tensors[0]
    same = all(tensor.dtype == first.dtype and tensor.device == first.device for tensor in tensors)
    flat = [tensor.reshape(-1) if same else tensor.reshape(-1).to("cpu", torch.float64) for tensor in tensors]
    return [float(value) for value in torch.cat(flat).tolist()]
