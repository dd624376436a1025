"""Where a non-finite gradient started: run a real backward and find the first node that made NaN or Inf.

`find_nonfinite` runs `torch.autograd.backward` with a pre-hook
and a post-hook on every node (see `gradexport.backward.record_gradients.run_observed`), so it
sees exactly what the engine did: the gradient each node received, what it
returned along each edge, and the order the engine called the nodes. An
*origin* is a node that returned a non-finite gradient although everything
it received was finite (``cause="output"``), or one whose input slot holds a
non-finite gradient although everything sent to that slot was finite
(``cause="received"``: a given ``grad_outputs`` entry, a sum of finite
gradients that overflowed, or a ``Tensor.register_hook`` hook that changed
it). Everything downstream of an origin goes non-finite too; the origins are
where to look.

The leaves' ``.grad`` are left as the engine computed them, non-finite
values included, and the graph's buffers are freed, as after any backward.

Why not anomaly mode alone: ``torch.autograd.detect_anomaly()`` raises at the
first node whose output holds NaN, but it ignores Inf (log of 0, division by
0) and it names the op and the position of the output ("returned nan values
in its 0th output"), not the node that output was going to, the parameters or
the other nodes that went non-finite in the same pass. Its forward tracebacks are used here: run
the forward under ``torch.autograd.set_detect_anomaly(True)`` and each origin
carries the line of the forward that created it.

Examples:
    >>> import torch, gradexport
    >>> x = torch.tensor([0.0, 4.0], requires_grad=True)
    >>> report = gradexport.find_nonfinite(x.sqrt().sum(), params={"x": x})
    >>> first = report.first
    >>> first.op, first.cause, first.gradients[0].inf, first.gradients[0].indices, first.parameters
    ('SqrtBackward0', 'output', 1, ((0,),), ('x',))
    >>> x.grad
    tensor([  inf, 0.2500])
"""

from __future__ import annotations

import math
import os
import re
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import networkx as nx
import torch

from ..core.reports import html_block, html_table, in_module, module_label, printable
from ..tracing.forward_values import ForwardOrigin, NonfiniteValues, check_of, nonfinite_values
from ..tracing.graph import Params, Trace, param_pairs, trace
from ..tracing.modules import qualified_names
from ..tracing.roots import Roots
from .gradient_stats import small_values
from .in_place import in_place_error
from .record_gradients import record_flow
from .replay import GradOutputs, start_gradients

__all__ = ["HiddenRegion", "NonfiniteGradient", "NonfiniteOrigin", "NonfiniteReport", "check_command", "find_nonfinite"]

#: How many frames of the forward traceback the text shows (the attribute keeps them all).
TRACEBACK_FRAMES = 4


@dataclass(frozen=True)
class NonfiniteGradient(NonfiniteValues):
    """A gradient with NaN or Inf values, where it went and what it held (the counts are `NonfiniteValues`').

    Attributes:
        slot: For ``cause="output"``, the ``next_functions`` position the
            origin sent it along; for ``cause="received"``, the origin's input
            slot that held it.
        edges: The graph edges ``(source, target, key)`` it travelled: one
            out-edge of the origin, or every edge into the input slot.
    """

    slot: int = 0
    edges: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True)
class NonfiniteOrigin:
    """A node where gradients went non-finite.

    Attributes:
        node: Its graph id (as `gradexport.to_networkx` numbers them).
        op: Its type name, ``"LogBackward0"``.
        module: The qualified name of the module that created it (with
            ``module=`` and `gradexport.capture_modules`), else ``None``.
        exec_order: Its position in the order the engine called the nodes (1 for the first).
        cause: ``"output"``: it received finite gradients and returned
            non-finite ones. ``"received"``: an input slot held a non-finite
            gradient though all that was sent to it was finite (a non-finite
            ``grad_outputs``, an overflowing sum, or a tensor hook).
        gradients: The offending gradients, by slot.
        parameters: Names of the leaves downstream of it that received a
            non-finite gradient (a leaf's graph id when it has no name).
        traceback: The forward stack trace that created the node, when the
            forward ran under ``torch.autograd.set_detect_anomaly(True)``, else ``None``.
        source: The line of the forward that created the node, ``"PATH:LINE"``,
            when the forward ran inside `gradexport.tools.capture_source` (no
            anomaly mode needed), else ``None``.
        source_code: That line's code, stripped, else ``None``.
        region: ``"checkpoint"`` (a reentrant checkpoint) or ``"compiled"``
            (a ``torch.compile`` region) when the node stands for a region
            whose own nodes autograd's graph does not show: the value went
            non-finite somewhere inside it. Else ``None``.
    """

    node: str
    op: str
    module: str | None
    exec_order: int
    cause: Literal["output", "received"]
    gradients: tuple[NonfiniteGradient, ...]
    parameters: tuple[str, ...]
    traceback: str | None
    source: str | None = None
    source_code: str | None = None
    region: str | None = None


@dataclass(frozen=True)
class HiddenRegion:
    """A region that ran as one opaque node while gradients went non-finite: what autograd's graph does not show.

    Attributes:
        node: Its graph id.
        op: ``"CheckpointFunctionBackward"``, ``"CompiledFunctionBackward"``.
        kind: ``"checkpoint"`` or ``"compiled"``.
        source: The user's line that ran the region (with `gradexport.tools.capture_source`), else ``None``.
        parameters: The parameters that got a non-finite ``.grad`` though no
            path of the graph reaches them non-finite, when this region is the
            only one that could have sent it (else they are listed on the report only).
    """

    node: str
    op: str
    kind: str
    source: str | None
    parameters: tuple[str, ...]

    def describe(self) -> str:
        """One line: the node, what kind of region it is and where it ran."""
        where = f" run at {self.source}" if self.source is not None else ""
        return f"{self.node} {self.op}{where}: {_REGION_TEXT[self.kind]}"


#: What each opaque region is, and how to see inside it.
_REGION_TEXT = {
    "checkpoint": "a reentrant checkpoint: its nodes and parameters are not in the graph; use_reentrant=False shows them",
    "compiled": "a torch.compile region: one node for all of it; run the region without torch.compile to see its nodes",
}


@dataclass(frozen=True)
class NonfiniteReport:
    """What `find_nonfinite` found: the origins, in execution order, and the marked graph.

    Attributes:
        origins: Every origin of the pass in the order the engine ran them;
            the first is where to start. Several mean that gradients went
            non-finite independently at several places in one pass.
        graph: The graph of the pass: `gradexport.record_gradients`'s
            (``grad`` on edges, ``exec_order`` on nodes) with the marks
            ``nonfinite`` on nodes and edges and the graph attribute
            ``nonfinite`` (see `gradexport.tracing.graph`); draw it with any writer.
        nodes_run: How many nodes the engine called.
        nonfinite_parameters: The leaves (by name, else graph id) whose
            gradient of this pass is non-finite, in graph order.
        finite_parameters: The leaves the pass reached whose gradient is finite.
        nonfinite_roots: ``(root name, its values)`` of every root (the
            loss) that holds NaN or Inf: reported even when every gradient is finite.
        forward_origin: The first op of the forward whose result held NaN or
            Inf, when the forward ran inside `gradexport.tools.capture_source`;
            ``None`` when it was finite or not captured (see ``forward_captured``).
        forward_captured: Whether the forward that made the graph ran inside
            `gradexport.tools.capture_source` (with its ``values`` check on).
        hidden_parameters: Parameters (named by ``params`` or ``module``)
            whose ``.grad`` went non-finite in this pass though no path of the
            graph reaches them: the path ran inside an opaque region (or
            through ``DistributedDataParallel``'s all-reduce). They
            are in ``nonfinite_parameters`` too.
        regions: The opaque regions (reentrant checkpoints, compiled regions)
            that ran and sent, received or hid a non-finite gradient.
    """

    origins: tuple[NonfiniteOrigin, ...]
    graph: nx.MultiDiGraph = field(repr=False, compare=False)
    nodes_run: int = 0
    nonfinite_parameters: tuple[str, ...] = ()
    finite_parameters: tuple[str, ...] = ()
    nonfinite_roots: tuple[tuple[str, NonfiniteValues], ...] = ()
    forward_origin: ForwardOrigin | None = None
    forward_captured: bool = False
    hidden_parameters: tuple[str, ...] = ()
    regions: tuple[HiddenRegion, ...] = ()

    @property
    def absorbed(self) -> bool:
        """True when non-finite gradients appeared on the way but neither a parameter nor a root holds one (a ReLU or a mask zeroed them)."""
        return not self.nonfinite_parameters and not self.nonfinite_roots

    def verdict(self) -> str:
        """The first line of the text: whether the parameters received non-finite gradients, or all were absorbed."""
        if self.nonfinite_roots and not self.nonfinite_parameters:
            roots = ", ".join(name for name, _ in self.nonfinite_roots)
            return f"the loss is not finite ({roots}) though every parameter's gradient is finite ({_some(self.finite_parameters)})"
        if self.absorbed:
            return (
                "absorbed: a non-finite gradient appeared on the way and was absorbed before the parameters; "
                f"every parameter's gradient is finite ({_some(self.finite_parameters)})"
            )
        return f"parameters received non-finite gradients: {_some(self.nonfinite_parameters)}"

    @property
    def first(self) -> NonfiniteOrigin | None:
        """The origin the engine ran first; ``None`` when every gradient was finite (only a root is not)."""
        return self.origins[0] if self.origins else None

    def to_text(self) -> str:
        """The report as readable text; ``str(report)`` gives the same."""
        lines: list[str] = [self.verdict()]
        first = self.first
        if first is None:
            lines.append(f"backward: every gradient was finite ({self.nodes_run} nodes ran)")
        else:
            lines.append(f"non-finite gradient: first at {_label(first)}, node {first.exec_order} of {self.nodes_run} the engine ran")
            lines += _origin_lines(first, "  ", traceback=self.forward_origin is None)
        if len(self.origins) > 1:
            lines.append(f"{len(self.origins) - 1} more node(s) went non-finite on their own in the same pass, in execution order:")
            for origin in self.origins[1:]:
                lines.append(f"  {_label(origin)}, node {origin.exec_order}")
                lines += _origin_lines(origin, "    ", traceback=False)
        for name, values in self.nonfinite_roots:
            lines.append(f"root {name!r} is not finite: {values.describe()}")
        lines += self._forward_lines()
        if self.hidden_parameters:
            lines.append(
                f"{len(self.hidden_parameters)} parameter(s) got a non-finite .grad by a path the graph does not show: " + _some(self.hidden_parameters)
            )
        for region in self.regions:
            owned = f"; it hid the path to {_some(region.parameters)}" if region.parameters else ""
            lines.append(f"opaque region on the path: {region.describe()}{owned}")
        return "\n".join(lines)

    def _forward_lines(self) -> list[str]:
        if self.forward_origin is not None:
            return self.forward_origin.to_lines()
        if self.forward_captured:
            return ["forward: every op's result was finite (captured by gradexport.tools.capture_source)"]
        return [
            "forward origin: not captured; run the forward inside gradexport.tools.capture_source() (gradexport check"
            " FILE:FN does) to find the op that first made a NaN or Inf, with its inputs and line"
        ]

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        """One line: the verdict, the first origin and how many there are (not the dataclass's fields)."""
        first = "" if self.first is None else f"; first at {_label(self.first)}"
        return f"NonfiniteReport({self.verdict()}{first}; {len(self.origins)} origin(s))"

    def _repr_html_(self) -> str:
        """The report for Jupyter: the verdict, a table of the origins, and the full text (names escaped).

        Examples:
            >>> import torch, gradexport
            >>> x = torch.tensor([0.0, 4.0], requires_grad=True)
            >>> html = gradexport.find_nonfinite(x.sqrt().sum(), params={"<x>": x})._repr_html_()
            >>> "SqrtBackward0" in html, "&lt;x&gt;" in html, "<x>" in html
            (True, True, False)
        """
        rows = [
            [
                origin.node,
                origin.op,
                "" if origin.module is None else module_label(origin.module),
                origin.exec_order,
                origin.cause,
                "; ".join(gradient.describe() for gradient in origin.gradients),
                ", ".join(origin.parameters),
            ]
            for origin in self.origins
        ]
        table = html_table(["node", "op", "module", "engine order", "cause", "gradients", "reaches"], rows)
        return html_block(self.verdict()) + table + html_block("report", self.to_text())


def find_nonfinite(
    roots: Roots,
    grad_outputs: GradOutputs = None,
    *,
    params: Params | None = None,
    module: torch.nn.Module | None = None,
) -> NonfiniteReport | None:
    """Run the backward pass of ``roots`` and report where a NaN or Inf gradient started.

    A real `torch.autograd.backward` (see `gradexport.backward.nonfinite`): the
    leaves' ``.grad`` are accumulated as without it and the graph is freed.

    Args:
        roots: As for `gradexport.to_networkx`.
        grad_outputs: As for `gradexport.replay`.
        params: Names for leaf tensors; the report names the parameters by them.
        module: A module whose parameters and buffers name the leaves; with
            `gradexport.capture_modules` around the forward, it also
            names each node's module.

    Returns:
        ``None`` when every gradient of the pass and every root was finite,
        else the report. With the forward run inside
        `gradexport.tools.capture_source`, the report's ``forward_origin`` is the
        first op whose result held NaN or Inf.

    Examples:
        >>> import torch
        >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> find_nonfinite((x * x).sum()) is None
        True
    """
    return _find(roots, grad_outputs, params, module)[0]


def _find(roots: Roots, grad_outputs: GradOutputs, params: Params | None, module: torch.nn.Module | None) -> tuple[NonfiniteReport | None, int]:
    """The report (or ``None``) and the number of nodes the engine ran."""
    result = trace(roots, params=params, module=module, caller="find_nonfinite")
    graph = result.graph
    starts = start_gradients(result.roots, grad_outputs, caller="find_nonfinite")
    received: dict[str, dict[int, NonfiniteGradient]] = {}
    sent: dict[str, dict[int, NonfiniteGradient]] = {}
    started: list[str] = []

    def before(node_id: str, grads: tuple[torch.Tensor | None, ...]) -> None:
        started.append(node_id)
        bad = _nonfinite_slots(grads)
        if bad:
            received[node_id] = bad

    def after(node_id: str, grads: tuple[torch.Tensor | None, ...], summaries: list[dict[str, Any] | None]) -> None:
        # The summaries' flags say what _is_nonfinite would, without a second look at each gradient.
        bad = {
            slot: _summary(slot, grad)
            for slot, (grad, summary) in enumerate(zip(grads, summaries, strict=True))
            if grad is not None and summary is not None and (summary["has_nan"] or summary["has_inf"])
        }
        if bad:
            sent[node_id] = bad

    named = _named_leaves(params, module)
    already = {id(tensor) for _, tensor in named if _is_nonfinite(tensor.grad)}
    try:
        order = record_flow(result, starts, pre=before, post=after, values_up_to=0)
    except RuntimeError as error:
        named_error = in_place_error(result, started, error)
        if named_error is None:
            raise
        raise named_error from error
    nodes = {node_id: node for node, node_id in result.ids.items()}
    origins = []
    for node_id in order:
        found = _origin(graph, node_id, received.get(node_id, {}), sent)
        if found is not None:
            cause, gradients = found
            origins.append((node_id, cause, gradients))
    bad_roots = tuple((root.name, nonfinite_values(root.tensor)) for root in result.roots if root.tensor is not None and _is_nonfinite(root.tensor))
    _mark(graph, order, received, sent, [node_id for node_id, _, _ in origins])
    leaves = [(node_id, data) for node_id, data in graph.nodes(data=True) if data["kind"] == "leaf" and "exec_order" in data]
    in_graph = _leaf_names(leaf for leaf in leaves if leaf[1].get("nonfinite") == "reached")
    hidden = tuple(name for name, tensor in named if id(tensor) not in already and name not in in_graph and _is_nonfinite(tensor.grad))
    if not origins and not bad_roots and not hidden:
        return None, len(order)
    check = check_of([*(root.node for root in result.roots), *result.ids])
    report = NonfiniteReport(
        origins=tuple(
            NonfiniteOrigin(
                node=node_id,
                op=graph.nodes[node_id]["op"],
                module=graph.nodes[node_id].get("module"),
                exec_order=graph.nodes[node_id]["exec_order"],
                cause=cause,
                gradients=gradients,
                parameters=_parameters(graph, gradients),
                traceback=_traceback(nodes[node_id]),
                source=graph.nodes[node_id].get("source"),
                source_code=graph.nodes[node_id].get("source_code"),
                region=_region_kind(graph, node_id),
            )
            for node_id, cause, gradients in origins
        ),
        graph=graph,
        nodes_run=len(order),
        nonfinite_parameters=in_graph + hidden,
        finite_parameters=_leaf_names(leaf for leaf in leaves if leaf[1].get("nonfinite") != "reached"),
        nonfinite_roots=bad_roots,
        forward_origin=None if check is None or check.origin is None else _named_origin(check.origin, result, named, module),
        forward_captured=check is not None,
        hidden_parameters=hidden,
        regions=_regions(graph, order, received, sent, hidden),
    )
    return report, len(order)


def _named_leaves(params: Params | None, module: torch.nn.Module | None) -> list[tuple[str, torch.Tensor]]:
    """Every parameter named by ``module`` and ``params`` (each tensor once, by its first name)."""
    pairs: list[tuple[str, torch.Tensor]] = []
    seen: set[int] = set()
    for name, tensor in [*(module.named_parameters() if module is not None else ()), *(param_pairs(params, "find_nonfinite") if params is not None else ())]:
        if isinstance(tensor, torch.Tensor) and tensor.requires_grad and id(tensor) not in seen:
            seen.add(id(tensor))
            pairs.append((name, tensor))
    return pairs


def _region_kind(graph: nx.MultiDiGraph, node_id: str) -> str | None:
    special = graph.nodes[node_id].get("special")
    return special if special in _REGION_TEXT else None


def _regions(
    graph: nx.MultiDiGraph,
    order: list[str],
    received: dict[str, dict[int, NonfiniteGradient]],
    sent: dict[str, dict[int, NonfiniteGradient]],
    hidden: tuple[str, ...],
) -> tuple[HiddenRegion, ...]:
    """The opaque regions that ran and touched a non-finite gradient (or could have hidden the path to ``hidden``)."""
    ran = [node_id for node_id in order if _region_kind(graph, node_id) is not None]
    touched = [node_id for node_id in ran if node_id in received or node_id in sent]
    suspects = touched or (ran if hidden else [])
    return tuple(
        HiddenRegion(
            node=node_id,
            op=graph.nodes[node_id]["op"],
            kind=graph.nodes[node_id]["special"],
            source=graph.nodes[node_id].get("source"),
            parameters=hidden if len(suspects) == 1 else (),
        )
        for node_id in suspects
    )


def _named_origin(origin: ForwardOrigin, result: Trace, named: list[tuple[str, torch.Tensor]], module: torch.nn.Module | None) -> ForwardOrigin:
    """The forward origin with its module's qualified name, its node's graph id and its parameters' names."""
    names = {id(tensor): name for name, tensor in named}
    module_name = None
    if module is not None and origin.module_object is not None:
        module_name = qualified_names(module).get(id(origin.module_object))
    return replace(
        origin,
        module=module_name,
        node=result.ids.get(origin.grad_fn) if origin.grad_fn is not None else None,
        inputs=tuple(replace(item, name=names.get(id(item.leaf))) if item.leaf is not None else item for item in origin.inputs),
    )


def _leaf_names(leaves: Iterable[tuple[str, dict[str, Any]]]) -> tuple[str, ...]:
    return tuple(name for node_id, data in leaves for name in (data["names"] or [node_id]))


def check_command(
    roots: Roots,
    grad_outputs: GradOutputs = None,
    *,
    params: Params | None = None,
    module: torch.nn.Module | None = None,
    strict: bool = False,
) -> tuple[int, str]:
    """What ``gradexport check`` prints and exits with: ``(0, one line)`` when all is finite, else the report.

    The status is 1 when a root (the loss) is not finite or a parameter received a non-finite gradient; when
    every non-finite gradient was absorbed on the way (the parameters' are
    finite) it is 0, or 1 with ``strict=True``.

    Examples:
        >>> import torch
        >>> x = torch.tensor([0.0, 1.0], requires_grad=True)
        >>> check_command((x * 2).sum())
        (0, 'all gradients finite: 3 nodes ran')
        >>> status, text = check_command(x.log().sum())
        >>> status, text.splitlines()[:2]
        (1, ['parameters received non-finite gradients: n3', 'non-finite gradient: first at n2 LogBackward0, node 2 of 3 the engine ran'])

    Raises:
        gradexport.errors.InPlaceError: when a saved tensor was modified in place
            (naming the node, its module and the tensor).
    """
    report, nodes_run = _find(roots, grad_outputs, params, module)
    if report is None:
        return 0, f"all gradients finite: {nodes_run} nodes ran"
    return (1 if strict or not report.absorbed else 0), report.to_text()


# ---------------------------------------------------------------- internals


def _is_nonfinite(grad: torch.Tensor | None) -> bool:
    if grad is None:
        return False
    read = small_values(grad)
    if read is not None:
        return not all(map(math.isfinite, read[1]))
    if not (grad.is_floating_point() or grad.is_complex()):
        return False
    if grad.layout != torch.strided:
        grad = grad.to_dense()
    if grad.is_floating_point() and math.isfinite(float(grad.sum())):
        # A finite sum has no NaN or Inf in it (one op instead of two, 8 µs against 32 µs on a
        # small gradient); only a non-finite sum, which an overflow can also give, needs the test.
        return False
    return not bool(torch.isfinite(grad).all())


def _nonfinite_slots(grads: tuple[torch.Tensor | None, ...]) -> dict[int, NonfiniteGradient]:
    # Summarised inside the hook: the engine may later add into these tensors in place.
    return {slot: _summary(slot, grad) for slot, grad in enumerate(grads) if grad is not None and _is_nonfinite(grad)}


def _summary(slot: int, grad: torch.Tensor) -> NonfiniteGradient:
    return NonfiniteGradient(**nonfinite_values(grad).__dict__, slot=slot)


def _with_edges(gradient: NonfiniteGradient, edges: list[tuple[str, str, int]]) -> NonfiniteGradient:
    return NonfiniteGradient(**{**gradient.__dict__, "edges": tuple(edges)})


def _origin(
    graph: nx.MultiDiGraph,
    node_id: str,
    bad_inputs: dict[int, NonfiniteGradient],
    sent: dict[str, dict[int, NonfiniteGradient]],
) -> tuple[Literal["output", "received"], tuple[NonfiniteGradient, ...]] | None:
    if not bad_inputs:
        bad_outputs = sent.get(node_id)
        if not bad_outputs:
            return None
        edges = {key: (node_id, target, key) for _, target, key in graph.out_edges(node_id, keys=True)}
        gradients = tuple(_with_edges(gradient, [edges[slot]]) for slot, gradient in bad_outputs.items() if slot in edges)
        return ("output", gradients) if gradients else None
    unexplained = []
    for slot, gradient in bad_inputs.items():
        arriving = [(source, node_id, key) for source, _, key, data in graph.in_edges(node_id, keys=True, data=True) if data.get("input_nr") == slot]
        # A root's start gradient is not a node's output: when it is the culprit, this node is the origin.
        if not any(key in sent.get(source, {}) for source, _, key in arriving):
            unexplained.append(_with_edges(gradient, arriving))
    return ("received", tuple(unexplained)) if unexplained else None


def _parameters(graph: nx.MultiDiGraph, gradients: tuple[NonfiniteGradient, ...]) -> tuple[str, ...]:
    downstream: set[str] = set()
    for gradient in gradients:
        for _, target, _ in gradient.edges:
            downstream.add(target)
            downstream |= nx.descendants(graph, target)
    names: list[str] = []
    for node_id in sorted(downstream, key=lambda node: int(node[1:])):
        data = graph.nodes[node_id]
        if data["kind"] == "leaf" and data.get("nonfinite") == "reached":
            names += data["names"] or [node_id]
    return tuple(names)


def _traceback(node: Any) -> str | None:
    stack = node.metadata.get("traceback_")
    if not stack:
        return None
    return "".join(stack) if isinstance(stack, (list, tuple)) else str(stack)


def _mark(
    graph: nx.MultiDiGraph,
    order: list[str],
    received: dict[str, dict[int, NonfiniteGradient]],
    sent: dict[str, dict[int, NonfiniteGradient]],
    origins: list[str],
) -> None:
    for node_id in received:
        graph.nodes[node_id]["nonfinite"] = "reached"
    for node_id in origins:
        graph.nodes[node_id]["nonfinite"] = "origin"
    for source, slots in sent.items():
        for _, _, key, data in graph.out_edges(source, keys=True, data=True):
            if key in slots:
                data["nonfinite"] = "origin" if source in origins else "path"
    graph.graph["nonfinite"] = [node_id for node_id in order if node_id in origins]


#: gradexport's own folder: its frames (the MkDocs plugin's runner, run_with_large_stack) are not the user's.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


#: Python's standard library (a thread's ``threading.py`` frames), and the folders of installed
#: packages, which can lie inside it and whose frames stay.
_STDLIB_DIR = sysconfig.get_paths()["stdlib"]
_PACKAGES_DIRS = tuple({sysconfig.get_paths()[kind] for kind in ("purelib", "platlib")})


def _user_frames(stack: str) -> list[str]:
    """The innermost `TRACEBACK_FRAMES` frames of a formatted stack, leaving out torch's, gradexport's and the standard library's."""
    frames = ["  File " + frame for frame in re.split(r"(?m)^  File ", stack) if frame.strip()]
    start = tuple(f'  File "{folder}{os.sep}' for folder in (os.path.dirname(torch.__file__), _PACKAGE_DIR))
    stdlib = f'  File "{_STDLIB_DIR}{os.sep}'
    packages = tuple(f'  File "{folder}{os.sep}' for folder in _PACKAGES_DIRS)
    kept = [frame for frame in frames if not frame.startswith(start) and not (frame.startswith(stdlib) and not frame.startswith(packages))]
    return (kept or frames)[-TRACEBACK_FRAMES:]


def _some(names: tuple[str, ...], limit: int = 8) -> str:
    if not names:
        return "no parameters reached"
    shown = ", ".join(map(printable, names[:limit]))
    return shown if len(names) <= limit else f"{shown}, ... ({len(names) - limit} more)"


def _label(origin: NonfiniteOrigin) -> str:
    return f"{origin.node} {printable(origin.op)}{in_module(origin.module)}"


def _origin_lines(origin: NonfiniteOrigin, indent: str, *, traceback: bool = True) -> list[str]:
    lines: list[str] = []
    if origin.cause == "output":
        lines.append(f"{indent}every gradient it received was finite; it returned:")
        for gradient in origin.gradients:
            for _, target, _ in gradient.edges:
                lines.append(f"{indent}  out[{gradient.slot}] -> {target}  {gradient.describe()}")
    else:
        lines.append(f"{indent}its input held a non-finite gradient though every gradient sent to it was finite")
        lines.append(f"{indent}(a non-finite grad_outputs, a sum that overflowed, or a tensor hook):")
        for gradient in origin.gradients:
            lines.append(f"{indent}  in[{gradient.slot}]  {gradient.describe()}")
    if origin.region is not None:
        lines.append(f"{indent}the value went non-finite somewhere inside it: it is {_REGION_TEXT[origin.region]}")
    if origin.parameters:
        lines.append(f"{indent}reaches the parameters: {', '.join(map(printable, origin.parameters))}")
    if origin.source is not None:
        lines.append(f"{indent}made at {printable(origin.source)}: {printable(origin.source_code or '')}")
    if traceback:
        if origin.traceback is None and origin.source is not None:
            pass  # the line above says where, without anomaly mode
        elif origin.traceback is None:
            lines.append(f"{indent}forward traceback: not recorded; run the forward under torch.autograd.set_detect_anomaly(True)")
        else:
            frames = _user_frames(origin.traceback)
            lines.append(f"{indent}forward traceback (anomaly mode; the last {len(frames)} frames outside torch, gradexport and Python's standard library):")
            lines += [f"{indent}  {printable(line)}" for frame in frames for line in frame.rstrip().splitlines()]
    return lines
