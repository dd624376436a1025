"""Where the forward first made a NaN or Inf: the check `gradexport.tools.capture_source` runs on each op's result.

Inside `gradexport.tools.capture_source`, every floating-point tensor a torch
function returns to the user's code is checked for NaN and Inf (one
``sum`` per tensor: a finite sum has no NaN or Inf in it; only a non-finite
sum, which an overflow can also give, is checked element by element). The
first call whose result is not finite is kept as a `ForwardOrigin`: the op,
the user's line, the running module, the result's non-finite elements and
every input, with the input's value at the first non-finite position. When
an input was already non-finite (a NaN batch, a NaN weight, the output of a
``torch.compile`` region the capture cannot see into) the origin's
``cause`` is ``"input"`` and the input is named; when every input was
finite, ``cause`` is ``"made"``: that op made it. After the first, nothing
more is checked in the block.

Each block keeps one `ForwardCheck` (its origin, ``None`` while the forward
is finite) in the ``metadata`` of every backward node it tags, under
`CHECK_KEY`: `gradexport.find_nonfinite` reads it from the graph's nodes,
whichever thread ran the forward.

Examples:
    >>> import torch, gradexport
    >>> x = torch.tensor([1.0, 3.0], requires_grad=True)
    >>> with gradexport.tools.capture_source():
    ...     y = torch.sqrt(torch.sqrt(x - 2)).sum()
    >>> origin = gradexport.find_nonfinite(y).forward_origin
    >>> origin.op, origin.cause, origin.output.nan, origin.inputs[0].at_first
    ('sqrt', 'made', 1, -1.0)
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Literal

import torch
from torch.autograd.graph import Node

from ._torch import node_metadata, set_grad_enabled, tensor_leaves
from .tensors import type_name

__all__ = [
    "CHECK_KEY",
    "ForwardCheck",
    "ForwardInput",
    "ForwardOrigin",
    "NonfiniteValues",
    "check_of",
    "first_nonfinite",
    "forward_origin",
    "nonfinite_values",
]

#: How many positions of non-finite elements a `NonfiniteValues` keeps.
MAX_INDICES = 8
#: Key in ``Node.metadata`` under which a `gradexport.tools.capture_source` block keeps its `ForwardCheck`.
CHECK_KEY = "gradexport.forward_check"


@dataclass(frozen=True)
class NonfiniteValues:
    """How many NaN and Inf a tensor holds, its finite range and where the first non-finite elements are.

    Attributes:
        shape: The tensor's shape.
        dtype: Its dtype, ``"float32"``.
        nan: How many elements are NaN.
        inf: How many are +Inf or -Inf (complex: an infinite part, no NaN).
        min: The smallest element that is not NaN (``-inf`` if there is one),
            ``None`` when all are NaN or the tensor is complex.
        max: The largest element that is not NaN, likewise.
        indices: Positions of the first non-finite elements, row-major, at
            most `MAX_INDICES`.
    """

    shape: tuple[int, ...]
    dtype: str
    nan: int
    inf: int
    min: float | None
    max: float | None
    indices: tuple[tuple[int, ...], ...]

    def describe(self) -> str:
        """One line: ``float32 [2, 3]  1 NaN, 2 Inf of 6, first at (0, 1), (1, 0); range -inf .. 3.5``."""
        numel = math.prod(self.shape)
        text = f"{self.dtype} {list(self.shape)}"
        if self.nan or self.inf:
            where = ", ".join(str(index) for index in self.indices)
            more = ", ..." if self.nan + self.inf > len(self.indices) else ""
            text += f"  {self.nan} NaN, {self.inf} Inf of {numel}, first at {where}{more}"
        if self.min is not None and self.max is not None:
            text += f"; range {self.min:.6g} .. {self.max:.6g}"
        return text


def nonfinite_values(tensor: torch.Tensor) -> NonfiniteValues:
    """Count and locate the NaN and Inf of a tensor (sparse ones are made dense first).

    Examples:
        >>> nonfinite_values(torch.tensor([1.0, float("nan"), -float("inf")])).describe()
        'float32 [3]  1 NaN, 1 Inf of 3, first at (1,), (2,); range -inf .. 1'
    """
    tensor = tensor.detach()
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    if not (tensor.is_floating_point() or tensor.is_complex()):
        tensor = tensor.double()
    bad = ~torch.isfinite(tensor)
    nan = int(torch.isnan(tensor).sum())
    low = high = None
    if not tensor.is_complex():
        numbers = tensor[~torch.isnan(tensor)]
        if numbers.numel():
            low, high = float(numbers.min()), float(numbers.max())
    return NonfiniteValues(
        shape=tuple(tensor.shape),
        dtype=type_name(tensor.dtype),
        nan=nan,
        inf=int(bad.sum()) - nan,
        min=low,
        max=high,
        indices=tuple(tuple(index) for index in bad.nonzero()[:MAX_INDICES].tolist()),
    )


@dataclass(frozen=True)
class ForwardInput:
    """One argument of the op a `ForwardOrigin` names.

    Attributes:
        position: ``"0"``, ``"1"``... for positional arguments, the keyword for the others.
        values: For a tensor, its `NonfiniteValues`; ``None`` for anything else.
        text: For anything but a tensor, its ``repr`` (cut at 80 characters); ``""`` for a tensor.
        at_first: The tensor's element at the output's first non-finite
            position, when its shape broadcasts to the output's; else ``None``.
        leaf: The tensor when it is a leaf that requires grad (a parameter,
            which `gradexport.find_nonfinite` names), else ``None``.
        made_by: The type name of the backward node of a non-leaf tensor
            (``"CompiledFunctionBackward"``: made inside a compiled region), else ``None``.
        name: The leaf's parameter name, filled in by `gradexport.find_nonfinite`, else ``None``.
    """

    position: str
    values: NonfiniteValues | None
    text: str = ""
    at_first: float | None = None
    leaf: torch.Tensor | None = field(default=None, repr=False, compare=False)
    made_by: str | None = None
    name: str | None = None

    @property
    def finite(self) -> bool:
        """True unless it is a tensor holding NaN or Inf."""
        return self.values is None or not (self.values.nan or self.values.inf)

    def describe(self) -> str:
        """One line: ``float32 [3]; range -1 .. 2; at the first non-finite position: -1``."""
        if self.values is None:
            return self.text
        text = self.values.describe()
        if self.name is not None:
            text = f"{self.name}: {text}"
        if self.at_first is not None:
            text += f"; at the first non-finite position: {self.at_first:.6g}"
        if self.made_by is not None and not self.finite:
            text += f"; made by {self.made_by}"
        return text


@dataclass(frozen=True)
class ForwardOrigin:
    """The first op of a captured forward whose result held a NaN or Inf.

    Attributes:
        op: The torch function's name: ``"sqrt"``, ``"__sub__"``, ``"linear"``.
        cause: ``"made"``: every input was finite, this op made the value.
            ``"input"``: an input already held it, though no op the capture
            saw had made one (it came from outside the block, a parameter,
            or a region the capture cannot see into: see `ForwardInput.made_by`).
        output: The non-finite result (the first non-finite one of several).
        inputs: The op's arguments, in order.
        source: ``"PATH:LINE"`` of the user's line that called the op, else ``None``.
        source_code: That line, stripped.
        module_class: The class name of the innermost ``nn.Module`` whose
            ``forward`` was running, else ``None``.
        module: Its qualified name, filled in by `gradexport.find_nonfinite`
            when given the model, else ``None``.
        node: The graph id of the result's backward node, filled in by
            `gradexport.find_nonfinite`, else ``None`` (also when the result needs no gradient).
    """

    op: str
    cause: Literal["made", "input"]
    output: NonfiniteValues
    inputs: tuple[ForwardInput, ...]
    source: str | None = None
    source_code: str | None = None
    module_class: str | None = None
    module: str | None = None
    node: str | None = None
    module_object: torch.nn.Module | None = field(default=None, repr=False, compare=False)
    grad_fn: Node | None = field(default=None, repr=False, compare=False)

    def to_lines(self, indent: str = "") -> list[str]:
        """The origin as readable lines: the op and where, what it made, and its inputs."""
        module = ""
        if self.module is not None or self.module_class is not None:
            module = f" in module {self.module!r}" if self.module is not None else " in a module"
            module += f" ({self.module_class})" if self.module_class else ""
        where = f" at {self.source}: {self.source_code}" if self.source is not None else ""
        node = f" (node {self.node})" if self.node is not None else ""
        lines = [f"{indent}forward origin: {self.op}{node}{module}{where}"]
        if self.cause == "made":
            lines.append(f"{indent}  every input was finite; it returned {self.output.describe()}")
        else:
            lines.append(
                f"{indent}  an input already held NaN or Inf (a parameter, the batch, or a value made where the capture"
                f" does not look); it returned {self.output.describe()}"
            )
        for item in self.inputs:
            mark = "" if item.finite else "  <- not finite"
            lines.append(f"{indent}  input {item.position}: {item.describe()}{mark}")
        return lines


@dataclass
class ForwardCheck:
    """What one `gradexport.tools.capture_source` block found: its first non-finite op, ``None`` while there is none."""

    origin: ForwardOrigin | None = None


def check_of(nodes: Iterable[Node]) -> ForwardCheck | None:
    """The check of the block that made the first of ``nodes`` that one made, else ``None`` (the forward was not captured).

    Examples:
        >>> import torch, gradexport
        >>> x = torch.ones(2, requires_grad=True)
        >>> with gradexport.tools.capture_source():
        ...     y = x * 2
        >>> check_of([y.grad_fn]).origin is None, check_of([(x * 2).grad_fn])
        (True, None)
    """
    for node in nodes:
        check = node_metadata(node).get(CHECK_KEY)
        if check is not None:
            return check
    return None


def first_nonfinite(result: Any) -> torch.Tensor | None:
    """The first plain floating-point tensor in ``result`` (a tensor or a tuple or list of them) holding NaN or Inf.

    Tensor subclasses (DTensor, a vmap level's tensor) and tensors on the
    meta device are not read.

    Examples:
        >>> first_nonfinite((torch.ones(2), torch.tensor([1.0, float("inf")])))
        tensor([1., inf])
        >>> first_nonfinite(torch.tensor([float("nan")], dtype=torch.float16).int()) is None
        True
    """
    if type(result) in _PLAIN:
        if not result.is_floating_point() or result.is_meta:
            return None
        try:
            if result.requires_grad and torch.is_grad_enabled():
                # Autograd switched off, not detach() nor no_grad() (an object each, at every op):
                # none makes a node (the sequence numbers stay as they were).
                set_grad_enabled(False)
                try:
                    total = result.sum().item()
                finally:
                    set_grad_enabled(True)
            else:
                total = result.sum().item()
            if math.isfinite(total):
                return None
            return None if bool(torch.isfinite(result.detach()).all()) else result
        except (RuntimeError, NotImplementedError):  # a functorch-wrapped or traced tensor cannot be read as a number
            return None
    if isinstance(result, (tuple, list)):
        for item in result:
            found = first_nonfinite(item)
            if found is not None:
                return found
    return None


_PLAIN = (torch.Tensor, torch.nn.Parameter)


#: Tensors whose Inf was given on purpose (see `forward_origin`): ``id -> weak reference``.
Deliberate = dict[int, "weakref.ref[torch.Tensor]"]


def forward_origin(
    func: Any,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    bad: torch.Tensor,
    frame: FrameType | None,
    source: Mapping[str, Any],
    deliberate: Deliberate,
) -> ForwardOrigin | None:
    """The `ForwardOrigin` of the call ``func(*args, **kwargs)`` whose result ``bad`` is not finite, or ``None``.

    ``None`` when the result holds Inf but no NaN and every infinite input was
    given on purpose: an infinite number among the arguments
    (``torch.full(size, -inf)``, ``masked_fill(mask, -inf)``), a tensor that
    needs no gradient (a mask buffer), or a result already judged so, kept in
    ``deliberate`` (the result joins it). A NaN always counts.

    ``frame`` is the frame that made the call: the innermost ``nn.Module``
    whose ``forward`` runs around it is found there; ``source`` holds the
    user's line, as `gradexport.tracing.lines.source_attributes` gives it.
    """
    tensors = tensor_leaves((args, kwargs))
    numbers = [value for value in (*args, *kwargs.values()) if isinstance(value, (float, int)) and not isinstance(value, bool)]
    kinds = [(tensor, *_kinds(tensor)) for tensor in tensors]
    nan_in = any(nan for _, nan, _ in kinds)
    output = nonfinite_values(bad)
    if not output.nan and not nan_in:
        infinite = [tensor for tensor, _, inf in kinds if inf]
        on_purpose = [tensor for tensor in infinite if not tensor.requires_grad or _is_deliberate(tensor, deliberate)]
        if len(on_purpose) == len(infinite) and (infinite or not all(math.isfinite(number) for number in numbers)):
            deliberate[id(bad)] = weakref.ref(bad)
            return None
    first = output.indices[0] if output.indices else None
    inputs = tuple(_input(str(position), value, first, bad.shape) for position, value in enumerate(args)) + tuple(
        _input(name, value, first, bad.shape) for name, value in kwargs.items()
    )
    inf_in = any(inf for _, _, inf in kinds)
    made = not nan_in if output.nan else not (nan_in or inf_in)
    module = _running_module(frame)
    return ForwardOrigin(
        op=getattr(func, "__name__", str(func)),
        cause="made" if made else "input",
        output=output,
        inputs=inputs,
        source=source.get("source"),
        source_code=source.get("source_code"),
        module_class=type(module).__name__ if module is not None else None,
        module_object=module,
        grad_fn=bad.grad_fn,
    )


def _kinds(tensor: torch.Tensor) -> tuple[bool, bool]:
    """Whether a floating-point tensor holds NaN, and whether it holds Inf."""
    if not (tensor.is_floating_point() or tensor.is_complex()) or type(tensor) not in _PLAIN or tensor.device.type == "meta":
        return False, False
    values = tensor.detach()
    return bool(torch.isnan(values).any()), bool(torch.isinf(values).any())


def _is_deliberate(tensor: torch.Tensor, deliberate: Deliberate) -> bool:
    reference = deliberate.get(id(tensor))
    return reference is not None and reference() is tensor


def _input(position: str, value: Any, first: tuple[int, ...] | None, shape: torch.Size) -> ForwardInput:
    if not isinstance(value, torch.Tensor):
        text = repr(value)
        return ForwardInput(position, None, text if len(text) <= 80 else text[:77] + "...")
    plain = value.detach()
    values = nonfinite_values(plain)
    at_first = None
    if first is not None and plain.dim() <= len(shape) and not plain.is_complex():
        try:
            at_first = float(plain.expand(shape)[first])
        except RuntimeError:  # its shape does not broadcast to the result's (a matmul's operand)
            at_first = None
    leaf = value if value.requires_grad and value.grad_fn is None else None
    made_by = type(value.grad_fn).__name__ if value.grad_fn is not None else None
    return ForwardInput(position, values, "", at_first, leaf, made_by)


def _running_module(frame: FrameType | None) -> torch.nn.Module | None:
    """The innermost module whose ``forward`` (or hook) runs in ``frame`` or a frame around it."""
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, torch.nn.Module):
            return candidate
        frame = frame.f_back
    return None
