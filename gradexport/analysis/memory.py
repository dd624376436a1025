"""What holds the memory of a backward graph: the bytes of saved tensors, by node and by module.

A graph built with ``saved=True`` carries, on every node, ``saved_bytes``
and ``saved_bytes_shared`` (see `gradexport.tracing.graph`), and the graph
attribute ``saved_bytes``, the total over distinct storages. A storage that
several nodes keep alive (a ReLU's output saved by the ReLU and by the next
matmul, a view of the input) counts once: in ``saved_bytes`` of the first
node that holds it, in id order, and in ``saved_bytes_shared`` of the others.
`saved_memory` ranks them.

Examples:
    >>> import torch, gradexport
    >>> x = torch.ones(256, requires_grad=True)               # 1 KiB
    >>> y = x.exp()                                          # saves its 1 KiB result
    >>> report = gradexport.saved_memory(gradexport.to_networkx((y * y).sum(), saved=True))
    >>> report.total                                          # y's storage once, though three nodes hold it
    1024
    >>> [(entry.op, entry.saved_bytes, entry.shared_bytes) for entry in report.nodes]
    [('MulBackward0', 1024, 0), ('ExpBackward0', 0, 1024)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import networkx as nx
import torch

from ..core.errors import ArgumentValueError
from ..tracing.graph import Params, to_networkx
from ..tracing.roots import Roots

__all__ = ["NodeMemory", "SavedMemory", "saved_memory"]


class NodeMemory(NamedTuple):
    """One node's saved bytes: ``saved_bytes`` first counted here, ``shared_bytes`` counted at an earlier node."""

    node: str
    op: str
    module: str | None
    saved_bytes: int
    shared_bytes: int


@dataclass(frozen=True)
class SavedMemory:
    """The largest holders of saved-tensor memory in a graph.

    Attributes:
        total: Bytes of all distinct storages the graph's saved tensors keep alive.
        nodes: The ``top`` nodes by the bytes they keep alive (their own plus
            shared), largest first; nodes holding nothing are left out.
        modules: ``(module, bytes)`` for the ``top`` modules by the
            ``saved_bytes`` of the nodes they created directly (innermost
            module; ``""`` is the model itself), largest first. Each storage
            counts once, so these add up to at most ``total``.
    """

    total: int
    nodes: list[NodeMemory]
    modules: list[tuple[str, int]]

    def to_text(self) -> str:
        """A readable table; ``str(report)`` gives the same."""
        lines = [f"saved tensors hold {_size(self.total)} in distinct storages"]
        if self.nodes:
            lines.append("top nodes (own + shared with an earlier node):")
            for entry in self.nodes:
                where = f"  [{entry.module or '(model)'}]" if entry.module is not None else ""
                shared = f" + {_size(entry.shared_bytes)} shared" if entry.shared_bytes else ""
                lines.append(f"  {entry.node:>6} {entry.op:<28} {_size(entry.saved_bytes)}{shared}{where}")
        if self.modules:
            lines.append("top modules:")
            lines += [f"  {name or '(model)':<34} {_size(size)}" for name, size in self.modules]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()


def saved_memory(
    graph: nx.MultiDiGraph | Roots,
    top: int = 10,
    *,
    params: Params | None = None,
    module: torch.nn.Module | None = None,
) -> SavedMemory:
    """List the ``top`` nodes and modules of ``graph`` by the bytes their saved tensors hold.

    Args:
        graph: A graph built with ``saved=True``, or roots, for which it is
            built with ``saved=True`` and ``params``/``module``.
        top: How many nodes and modules to list.
        params: Names for leaves, when ``graph`` is roots.
        module: The model, when ``graph`` is roots: with
            `gradexport.capture_modules` around its forward, nodes get
            their module.

    Raises:
        ValueError: for a graph built without ``saved=True``, or ``top < 1``.

    Examples:
        >>> import torch, gradexport
        >>> x = torch.randn(256, requires_grad=True)
        >>> report = saved_memory(x.exp().sin().sum(), params={"x": x})
        >>> [(holder.op, holder.saved_bytes) for holder in report.nodes]  # exp's result, saved by both, counts once
        [('SinBackward0', 1024), ('ExpBackward0', 0)]
    """
    if top < 1:
        raise ArgumentValueError(f"saved_memory: top must be at least 1, got {top}")
    if not isinstance(graph, nx.Graph):
        graph = to_networkx(graph, params=params, module=module, saved=True)
    elif params is not None or module is not None:
        raise ArgumentValueError("saved_memory: params= and module= apply to roots; this graph is already built")
    if "saved_bytes" not in graph.graph:
        raise ArgumentValueError(
            "saved_memory: the graph has no saved_bytes; build it with gradexport.to_networkx(roots, saved=True)"
        )
    entries = [
        NodeMemory(node_id, data["op"], data.get("module"), data["saved_bytes"], data["saved_bytes_shared"])
        for node_id, data in graph.nodes(data=True)
        if data.get("saved_bytes", 0) + data.get("saved_bytes_shared", 0) > 0
    ]
    entries.sort(key=lambda entry: (-(entry.saved_bytes + entry.shared_bytes), int(entry.node[1:])))
    by_module: dict[str, int] = {}
    for entry in entries:
        if entry.module is not None:
            by_module[entry.module] = by_module.get(entry.module, 0) + entry.saved_bytes
    modules = sorted(((name, size) for name, size in by_module.items() if size), key=lambda item: (-item[1], item[0]))
    return SavedMemory(total=graph.graph["saved_bytes"], nodes=entries[:top], modules=modules[:top])


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"
