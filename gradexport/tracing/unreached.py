"""Why a parameter gets no gradient: the trainable tensors no root reaches, each with its reason.

A parameter gets no ``.grad`` from ``backward()`` exactly when no path of
``next_functions`` leads from the roots to its ``AccumulateGrad`` node.
`unreached` walks the roots' graph for that, then asks what the forward did,
as recorded by `gradexport.capture_modules` (which module ran, under
``no_grad`` or not, and what it returned) and `gradexport.tools.capture_source`
(every call that took a tensor needing a gradient and returned one that needs
none), to say why. The reasons, in the order they are tried (`REASONS`):

``"module_not_called"``
    Its module's forward never ran (a skipped branch, a layer never used).
``"no_grad"``
    Its module ran under ``torch.no_grad()``, or (with `capture_source`) a
    call that used it did.
``"detached"``
    (with `capture_source`) a ``detach()`` cut the path; the record names the line.
``"non_differentiable"``
    (with `capture_source`) a call returned an integer or boolean tensor
    (an integer cast, ``argmax``, a comparison), which carries no gradient.
``"other_root"``
    The model's own output reaches it, but not the roots given (a second
    output or loss left out of ``backward``).
``"output_unused"``
    Its module's output reaches it, but that output does not reach the roots.
``"unused_in_forward"``
    Its module ran with gradients on but its output does not depend on it.
``"behind_checkpoint"``
    The roots' graph holds a reentrant checkpoint (``use_reentrant=True``)
    whose region could not be re-traced (see below) because ``backward()``
    freed its saved inputs: backward, which recomputes the region, may have
    reached it. Every other reason agrees with ``.grad is None`` after
    ``backward()``; this one is a doubt, gone when `unreached` runs before
    ``backward()``.
``"unknown"``
    The forward was not captured: run it inside `gradexport.capture_modules`
    (and `gradexport.tools.capture_source` for the lines).

Parameters with ``requires_grad=False`` are listed apart (`UnreachedReport.frozen`).
An FSDP2 (``fully_shard``) parameter is checked through the unsharded
parameter its forward used, which the graph holds in its stead.

A reentrant checkpoint (``torch.utils.checkpoint.checkpoint(..., use_reentrant=True)``)
is one opaque ``CheckpointFunctionBackward`` node: the parameters used inside
are not in the graph, and backward reaches them only by running the region
again. `unreached` does what that backward does: it runs the checkpointed
function once more under ``enable_grad`` on detached copies of its saved
inputs, with the forward's random state (see
`gradexport.tools.retrace_checkpoint`), and walks the graph
that makes. A parameter found there is reached, and named in
`UnreachedReport.through_checkpoint`. That costs one more forward of each
region, with its activations held until `unreached` returns, and repeats
the region's side effects, as backward will (a ``BatchNorm`` in training
mode updates its running statistics once more).

Examples:
    >>> import torch, gradexport
    >>> model = torch.nn.ModuleDict({"used": torch.nn.Linear(2, 2), "skipped": torch.nn.Linear(2, 2)})
    >>> with gradexport.capture_modules():
    ...     loss = model["used"](torch.ones(1, 2)).sum()
    >>> report = gradexport.tools.unreached(loss, module=model)
    >>> [(record.name, record.reason) for record in report.unreached]
    [('skipped.weight', 'module_not_called'), ('skipped.bias', 'module_not_called')]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch.autograd.graph import Node

from ..core.errors import ArgumentTypeError
from ..core.reports import module_label, printable
from ._torch import fsdp_unsharded, is_reentrant_checkpoint, leaf_variable
from .checkpoints import Regions
from .graph import Params, param_pairs
from .lines import CUTS, Cut, source_attributes
from .modules import CALLS
from .roots import Roots, collect_roots

__all__ = ["REASONS", "Unreached", "UnreachedReport", "unreached"]

#: Every reason, with the sentence that explains it.
REASONS = {
    "module_not_called": "its module's forward never ran",
    "no_grad": "it was used under torch.no_grad()",
    "detached": "a detach() cut it off",
    "non_differentiable": "a non-differentiable op (integer cast, argmax, comparison) is on the way",
    "other_root": "only another output of the model reaches it, not the roots",
    "output_unused": "its module's output does not reach the roots",
    "unused_in_forward": "its module ran but its output does not depend on it",
    "behind_checkpoint": "a reentrant checkpoint in the graph hides what it uses; backward may still reach it",
    "unknown": "the forward was not captured (run it inside gradexport.capture_modules() and capture_source())",
}


@dataclass(frozen=True)
class Unreached:
    """A trainable tensor that no root reaches.

    Attributes:
        name: Its name (from ``module.named_parameters()`` or ``params=``).
        module: The qualified name of the module that owns it (``""`` for the
            model itself), or ``None`` for a tensor given in ``params=``.
        reason: One of `REASONS`.
        op: The op that cut it off (``"argmax"``, ``"detach"``), when known.
        source: The line that did it (``"PATH:LINE"``, with `gradexport.tools.capture_source`), when known.
    """

    name: str
    module: str | None
    reason: str
    op: str | None = None
    source: str | None = None

    def describe(self) -> str:
        """One line: name, module, reason, and where (each name through `gradexport.core.reports.printable`)."""
        owner = "" if self.module is None else f" (module {module_label(self.module)})"
        text = f"{printable(self.name)}{owner}: {REASONS[self.reason]}"
        if self.op is not None:
            text += f" [{printable(self.op)}]"
        if self.source is not None:
            text += f" at {printable(self.source)}"
        return text


@dataclass(frozen=True)
class UnreachedReport:
    """What `unreached` found.

    Attributes:
        unreached: Every tensor requiring grad that no root reaches, in ``named_parameters`` order.
        frozen: The names of the parameters with ``requires_grad=False``.
        reached: How many tensors requiring grad the roots reach.
        through_checkpoint: The names of those reached only through a
            reentrant checkpoint's region, found by re-tracing it.
    """

    unreached: tuple[Unreached, ...]
    frozen: tuple[str, ...]
    reached: int
    through_checkpoint: tuple[str, ...] = ()

    def to_text(self) -> str:
        """The report as readable text; ``str(report)`` gives the same."""
        if not self.unreached:
            lines = [f"all {self.reached} trainable parameter(s) are reached by the roots"]
            if self.through_checkpoint:
                lines[0] += f" ({len(self.through_checkpoint)} through a reentrant checkpoint, re-traced)"
        else:
            lines = [f"{len(self.unreached)} trainable parameter(s) get no gradient from the roots:"]
            lines += [f"  {record.describe()}" for record in self.unreached]
        if self.frozen:
            lines.append(f"{len(self.frozen)} parameter(s) need no gradient (requires_grad=False): {', '.join(map(printable, self.frozen))}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()


def unreached(roots: Roots, *, module: torch.nn.Module | None = None, params: Params | None = None) -> UnreachedReport:
    """The parameters of ``module`` (and the tensors of ``params``) that need a gradient no root gives, with the reason.

    Run the forward inside `gradexport.capture_modules` (module reasons) and
    `gradexport.tools.capture_source` (the cut's kind and line); see the module
    docstring for the reasons. It reads the graph only, before or after
    ``backward()``, except for a reentrant checkpoint's region, which it runs
    again to see inside (one more forward of the region; see the module
    docstring): call it before ``backward()`` for those.

    Args:
        roots: As for `gradexport.to_networkx`: the loss (or losses) you call backward on.
        module: The model whose parameters are checked and named.
        params: More tensors to check, by name (a mapping or pairs).

    Examples:
        >>> import torch, gradexport
        >>> layer = torch.nn.Linear(2, 1)
        >>> with gradexport.capture_modules(), gradexport.tools.capture_source():
        ...     out = layer(torch.ones(1, 2))
        ...     loss = out.argmax().float()
        >>> [(r.name, r.reason, r.op) for r in gradexport.tools.unreached(loss.requires_grad_(), module=layer).unreached]
        [('weight', 'non_differentiable', 'argmax'), ('bias', 'non_differentiable', 'argmax')]
    """
    if module is not None and not isinstance(module, torch.nn.Module):
        raise ArgumentTypeError(f"unreached: module must be a torch.nn.Module, got {type(module).__name__}")
    candidates: list[tuple[str, torch.Tensor, str | None]] = []
    seen: set[int] = set()
    unsharded: dict[int, torch.Tensor] = {}
    if module is not None:
        unsharded = fsdp_unsharded(module)
        for name, parameter in module.named_parameters():
            candidates.append((name, parameter, name.rpartition(".")[0]))
            seen.add(id(parameter))
    if params is not None:
        for name, tensor in param_pairs(params, "unreached"):
            if id(tensor) not in seen:
                candidates.append((name, tensor, None))
                seen.add(id(tensor))
    regions = Regions()
    root_nodes = [root.node for root in collect_roots(roots, caller="unreached")]
    reached_ids = _leaves(root_nodes, regions)
    direct_ids = _leaves(root_nodes) if regions.opened else reached_ids
    frozen = tuple(name for name, tensor, _ in candidates if not tensor.requires_grad)
    found: list[Unreached] = []
    through: list[str] = []
    reached = 0
    explain = _Explainer(module, regions)
    for name, tensor, owner in candidates:
        if not tensor.requires_grad:
            continue
        # An FSDP2 parameter: the graph holds its unsharded twin (see _torch.fsdp_unsharded).
        tensor = unsharded.get(id(tensor), tensor)
        if id(tensor) in reached_ids:
            reached += 1
            if id(tensor) not in direct_ids:
                through.append(name)
            continue
        record = explain(name, tensor, owner)
        if regions.closed and record.reason != "module_not_called":
            record = Unreached(name, owner, "behind_checkpoint")
        found.append(record)
    return UnreachedReport(tuple(found), frozen, reached, tuple(through))


class _Explainer:
    def __init__(self, model: torch.nn.Module | None, regions: Regions) -> None:
        self.model = model
        self.regions = regions
        self.cut_leaves: dict[int, set[int]] = {}
        self.call_leaves: dict[int, set[int]] = {}

    def __call__(self, name: str, tensor: torch.Tensor, owner: str | None) -> Unreached:
        submodule = self.model.get_submodule(owner) if self.model is not None and owner is not None else None
        if not CALLS and not CUTS:
            return Unreached(name, owner, "unknown")
        call = CALLS.get(submodule) if submodule is not None else None
        if submodule is not None and CALLS and call is None:
            return Unreached(name, owner, "module_not_called")
        if call is not None and not call.grad_enabled:
            return Unreached(name, owner, "no_grad")
        cut = self.cut_of(tensor)
        if cut is not None:
            return Unreached(name, owner, cut.kind, cut.op, source_attributes(cut.where).get("source"))
        top = CALLS.get(self.model) if self.model is not None else None
        if top is not None and id(tensor) in self.reached_by(top.outputs, id(self.model)):
            return Unreached(name, owner, "other_root")
        if call is not None and id(tensor) in self.reached_by(call.outputs, id(submodule)):
            return Unreached(name, owner, "output_unused")
        if call is not None:
            return Unreached(name, owner, "unused_in_forward")
        return Unreached(name, owner, "unknown")

    def cut_of(self, tensor: torch.Tensor) -> Cut | None:
        for index, cut in enumerate(CUTS):
            if id(tensor) in cut.leaves:
                return cut
            leaves = self.cut_leaves.get(index)
            if leaves is None:
                leaves = self.cut_leaves[index] = _leaves(cut.inputs, self.regions)
            if id(tensor) in leaves:
                return cut
        return None

    def reached_by(self, nodes: tuple[Node, ...], key: int) -> set[int]:
        leaves = self.call_leaves.get(key)
        if leaves is None:
            leaves = self.call_leaves[key] = _leaves(nodes, self.regions)
        return leaves


def _leaves(nodes: Iterable[Node], regions: Regions | None = None) -> set[int]:
    """``id`` of every leaf tensor whose AccumulateGrad node the nodes reach (each node visited once).

    With ``regions``, a reentrant checkpoint's node leads on into its re-traced region.
    """
    stack = list(nodes)
    # The nodes themselves, not their ids: older torch (2.1) keeps a Node's Python wrapper only while
    # something references it, so a wrapper dropped here could die and its id go to another node.
    seen = set(stack)
    found: set[int] = set()
    while stack:
        node = stack.pop()
        if type(node).__name__ == "AccumulateGrad":
            found.add(id(leaf_variable(node)))
            continue
        following = [child for child, _ in node.next_functions]
        if regions is not None and is_reentrant_checkpoint(node):
            following += regions.open(node)
        for child in following:
            if child is not None and child not in seen:
                seen.add(child)
                stack.append(child)
    return found
