"""Turn what a user passes as "the graph" into a flat, named list of roots.

A root is where backward starts: a tensor (through its ``grad_fn``, or its
AccumulateGrad node for a leaf), a ``grad_fn`` Node, or a
`torch.autograd.graph.GradientEdge`. Collections (tuples, lists, dicts,
model outputs) are flattened depth-first, in their own order, and every root
gets a stable name from its position: ``"output"`` for a lone root, the index
or key for collection items, joined by ``.`` when nested (``"hidden.0"``).

Names must be distinct: when two roots would get the same name (keys ``1``
and ``"1"``, or ``{"a.b": y, "a": {"b": z}}``), `collect_roots` refuses
them with a `RootError` naming both places, rather than inventing a
name the caller would not recognise. A collection that contains itself
(``l = [y]; l.append(l)``) is refused too, and so are collections with more
than `MAX_ROOT_ITEMS` items in all (``range(10**18)``), before any is read:
their ``len()`` is checked first.

Examples:
    >>> import torch
    >>> x = torch.ones(2, requires_grad=True)
    >>> [(r.name, type(r.node).__name__, r.input_nr) for r in collect_roots({"loss": (x * 2).sum()})]
    [('loss', 'SumBackward0', 0)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.graph import Node

from ..core.errors import RootError
from ._torch import GradientEdge, gradient_edge, is_orphaned_function_node
from .tensors import type_name

__all__ = ["MAX_ROOT_ITEMS", "Root", "RootError", "Roots", "collect_roots", "described_type"]

#: The most items the root collections may hold in all (every level counted): a
#: larger one (``range(10**18)`` took 15 s to exhaust 3 GiB) is refused before it is read.
MAX_ROOT_ITEMS = 1_000_000

#: What the public functions accept as roots.
Roots = torch.Tensor | Node | GradientEdge | Sequence[Any] | Mapping[Any, Any]


@dataclass(frozen=True)
class Root:
    """One named starting point of the backward pass.

    Attributes:
        name: The root's name: ``"output"``, a collection index or key path.
        node: The autograd Node that receives the root's gradient.
        input_nr: The input slot of ``node`` that receives it (the tensor's
            ``output_nr``), or ``None`` for a bare Node root, whose every
            input slot is a start.
        tensor: The root tensor, or ``None`` when a Node or GradientEdge was given.
    """

    name: str
    node: Node
    input_nr: int | None
    tensor: torch.Tensor | None

    @property
    def is_leaf_tensor(self) -> bool:
        """True when the root is a leaf tensor, represented by its AccumulateGrad node alone."""
        return self.tensor is not None and self.tensor.grad_fn is None


def described_type(value: object) -> str:
    """The type of ``value`` with its article, for messages: ``an int``, ``a list``.

    Examples:
        >>> described_type(3), described_type([])
        ('an int', 'a list')
    """
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def collect_roots(roots: Roots, *, caller: str = "gradexport") -> list[Root]:
    """Flatten ``roots`` into named `Root` records, in a deterministic order.

    Raises:
        RootError: for an empty collection, a non-tensor, or a tensor that has
            no autograd graph; the message names the offending root.

    Examples:
        >>> import torch
        >>> a = torch.ones(3, requires_grad=True)
        >>> first, second = torch.split(a * 2, [1, 2])
        >>> [(r.name, r.input_nr) for r in collect_roots([first, second])]
        [('0', 0), ('1', 1)]
    """
    found: list[Root] = []
    places: dict[str, str] = {}  # root name -> where it came from, as Python subscripts
    open_collections: set[int] = set()  # id()s of the collections being flattened, to detect a cycle
    # An explicit stack rather than recursion keeps arbitrarily nested outputs safe;
    # a None entry closes the collection whose id() it carries.
    pending: list[tuple[str, str, Any] | tuple[None, None, int]] = [("output", "", roots)]
    budget = MAX_ROOT_ITEMS  # items the collections may still hold
    while pending:
        path, place, value = pending.pop()
        if path is None or place is None:
            open_collections.discard(value)
            continue
        if isinstance(value, (torch.Tensor, Node, GradientEdge)):
            if path in places:
                raise RootError(
                    f"{caller}: two roots are both named {path!r} (roots{places[path]} and roots{place}); "
                    "root names are the keys joined by '.': rename a key so that every root has its own name"
                )
            places[path] = place
            found.append(_root_of(path, value, caller))
            continue
        if isinstance(value, Mapping) or (isinstance(value, Sequence) and not isinstance(value, (str, bytes))):
            budget -= _size(value, path, budget, caller)
            items = list(value.items()) if isinstance(value, Mapping) else list(enumerate(value))
        else:
            raise RootError(
                f"{caller}: root {path!r} is {described_type(value)}, not a tensor, grad_fn Node "
                "or GradientEdge; pass the tensor (or a tuple/list/dict of tensors) whose graph you want"
            )
        if not items:
            raise RootError(f"{caller}: root {path!r} is an empty {type(value).__name__}; pass at least one tensor that requires grad")
        if id(value) in open_collections:
            raise RootError(f"{caller}: root {path!r} (roots{place}) is a {type(value).__name__} that contains itself; pass a collection without cycles")
        open_collections.add(id(value))
        pending.append((None, None, id(value)))
        prefix = "" if path == "output" else path + "."
        pending.extend((prefix + str(key), f"{place}[{key!r}]", item) for key, item in reversed(items))
    return found


def _size(collection: Sequence[Any] | Mapping[Any, Any], path: str, budget: int, caller: str) -> int:
    """``len(collection)``, or a `RootError` when it exceeds what is left of `MAX_ROOT_ITEMS`."""
    try:
        size = len(collection)
        shown = f"{size:,} items"
    except OverflowError:  # len() over sys.maxsize (range(10**30))
        size, shown = budget + 1, "more items than len() can count"
    if size > budget:
        raise RootError(
            f"{caller}: root {path!r} is {described_type(collection)} of {shown}; the root collections may hold "
            f"{MAX_ROOT_ITEMS:,} items in all: pass the tensors whose graph you want"
        )
    return size


def _root_of(path: str, value: torch.Tensor | Node | GradientEdge, caller: str) -> Root:
    if isinstance(value, GradientEdge):
        return Root(path, value.node, value.output_nr, None)
    if isinstance(value, Node):
        if is_orphaned_function_node(value):
            raise RootError(
                f"{caller}: root {path!r} is the node of a custom autograd.Function whose output tensors were all freed, "
                f"and torch {torch.__version__} keeps nothing of its graph then; pass the output tensor (or keep it alive) instead of its grad_fn"
            )
        return Root(path, value, None, None)
    if not value.requires_grad:
        raise RootError(
            f"{caller}: root {path!r} is a tensor that does not require grad "
            f"(shape {list(value.shape)}, dtype {type_name(value.dtype)}), so it has no "
            "autograd graph. It was computed under torch.no_grad(), detached, has an integer dtype, or "
            "comes from inputs without requires_grad=True; build it from tensors with requires_grad=True"
        )
    node, slot = gradient_edge(value)
    return Root(path, node, slot, value)
