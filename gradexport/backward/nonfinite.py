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
from dataclasses import dataclass, field
from typing import Any, Literal

import networkx as nx
import torch

from ..core.reports import html_block, html_table
from ..tracing.graph import Params, trace
from ..tracing.roots import Roots
from ..tracing.saved import type_name
from .gradient_stats import small_values
from .in_place import in_place_error
from .record_gradients import record_flow
from .replay import GradOutputs, start_gradients

__all__ = ["NonfiniteGradient", "NonfiniteOrigin", "NonfiniteReport", "check_command", "find_nonfinite"]

#: How many positions of non-finite elements a `NonfiniteGradient` keeps.
MAX_INDICES = 8
#: How many frames of the forward traceback the text shows (the attribute keeps them all).
TRACEBACK_FRAMES = 4


@dataclass(frozen=True)
class NonfiniteGradient:
    """A gradient with NaN or Inf values, where it went and what it held.

    Attributes:
        slot: For ``cause="output"``, the ``next_functions`` position the
            origin sent it along; for ``cause="received"``, the origin's input
            slot that held it.
        edges: The graph edges ``(source, target, key)`` it travelled: one
            out-edge of the origin, or every edge into the input slot.
        shape: The gradient's shape.
        dtype: Its dtype, ``"float32"``.
        nan: How many elements are NaN.
        inf: How many are +Inf or -Inf (complex: an infinite part, no NaN).
        min: The smallest element that is not NaN (``-inf`` if there is one),
            ``None`` when all are NaN or the tensor is complex.
        max: The largest element that is not NaN, likewise.
        indices: Positions of the first non-finite elements, row-major, at
            most `MAX_INDICES`.
    """

    slot: int
    edges: tuple[tuple[str, str, int], ...]
    shape: tuple[int, ...]
    dtype: str
    nan: int
    inf: int
    min: float | None
    max: float | None
    indices: tuple[tuple[int, ...], ...]

    def describe(self) -> str:
        """One line: ``float32 [2, 3]  1 NaN, 2 Inf of 6, first at (0, 1), (1, 0); range -inf .. 3.5``."""
        where = ", ".join(str(index) for index in self.indices)
        more = ", ..." if self.nan + self.inf > len(self.indices) else ""
        numel = 1
        for size in self.shape:
            numel *= size
        text = f"{self.dtype} {list(self.shape)}  {self.nan} NaN, {self.inf} Inf of {numel}, first at {where}{more}"
        if self.min is not None and self.max is not None:
            text += f"; range {self.min:.6g} .. {self.max:.6g}"
        return text


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
            when the forward ran inside `gradexport.capture_source` (no
            anomaly mode needed), else ``None``.
        source_code: That line's code, stripped, else ``None``.
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
    """

    origins: tuple[NonfiniteOrigin, ...]
    graph: nx.MultiDiGraph = field(repr=False, compare=False)
    nodes_run: int = 0
    nonfinite_parameters: tuple[str, ...] = ()
    finite_parameters: tuple[str, ...] = ()

    @property
    def absorbed(self) -> bool:
        """True when non-finite gradients appeared on the way but no parameter received one (a ReLU or a mask zeroed them)."""
        return not self.nonfinite_parameters

    def verdict(self) -> str:
        """The first line of the text: whether the parameters received non-finite gradients, or all were absorbed."""
        if self.absorbed:
            return (
                "absorbed: a non-finite gradient appeared on the way and was absorbed before the parameters; "
                f"every parameter's gradient is finite ({_some(self.finite_parameters)})"
            )
        return f"parameters received non-finite gradients: {_some(self.nonfinite_parameters)}"

    @property
    def first(self) -> NonfiniteOrigin:
        """The origin the engine ran first."""
        return self.origins[0]

    def to_text(self) -> str:
        """The report as readable text; ``str(report)`` gives the same."""
        lines: list[str] = [self.verdict()]
        first = self.first
        lines.append(
            f"non-finite gradient: first at {_label(first)}, node {first.exec_order} of {self.nodes_run} the engine ran"
        )
        lines += _origin_lines(first, "  ")
        if len(self.origins) > 1:
            lines.append(f"{len(self.origins) - 1} more node(s) went non-finite on their own in the same pass, in execution order:")
            for origin in self.origins[1:]:
                lines.append(f"  {_label(origin)}, node {origin.exec_order}")
                lines += _origin_lines(origin, "    ", traceback=False)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        """One line: the verdict, the first origin and how many there are (not the dataclass's fields)."""
        return f"NonfiniteReport({self.verdict()}; first at {_label(self.first)}; {len(self.origins)} origin(s))"

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
                "" if origin.module is None else origin.module or "(model)",
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
        ``None`` when every gradient of the pass was finite, else the report.

    Examples:
        >>> import torch
        >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> find_nonfinite((x * x).sum()) is None
        True
    """
    return _find(roots, grad_outputs, params, module)[0]


def _find(
    roots: Roots, grad_outputs: GradOutputs, params: Params | None, module: torch.nn.Module | None
) -> tuple[NonfiniteReport | None, int]:
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

    try:
        order = record_flow(result, starts, pre=before, post=after, values_up_to=0)
    except RuntimeError as error:
        named = in_place_error(result, started, error)
        if named is None:
            raise
        raise named from error
    nodes = {node_id: node for node, node_id in result.ids.items()}
    origins = []
    for node_id in order:
        found = _origin(graph, node_id, received.get(node_id, {}), sent)
        if found is not None:
            cause, gradients = found
            origins.append((node_id, cause, gradients))
    if not origins:
        return None, len(order)
    _mark(graph, order, received, sent, [node_id for node_id, _, _ in origins])
    leaves = [(node_id, data) for node_id, data in graph.nodes(data=True) if data["kind"] == "leaf" and "exec_order" in data]
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
            )
            for node_id, cause, gradients in origins
        ),
        graph=graph,
        nodes_run=len(order),
        nonfinite_parameters=_leaf_names(leaf for leaf in leaves if leaf[1].get("nonfinite") == "reached"),
        finite_parameters=_leaf_names(leaf for leaf in leaves if leaf[1].get("nonfinite") != "reached"),
    )
    return report, len(order)


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

    The status is 1 when a parameter received a non-finite gradient; when
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
        gradexport.InPlaceError: when a saved tensor was modified in place
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
    grad = grad.detach()
    if grad.layout != torch.strided:
        grad = grad.to_dense()
    bad = ~torch.isfinite(grad)
    nan = int(torch.isnan(grad).sum())
    low = high = None
    if not grad.is_complex():
        numbers = grad[~torch.isnan(grad)]
        if numbers.numel():
            low, high = float(numbers.min()), float(numbers.max())
    return NonfiniteGradient(
        slot=slot,
        edges=(),
        shape=tuple(grad.shape),
        dtype=type_name(grad.dtype),
        nan=nan,
        inf=int(bad.sum()) - nan,
        min=low,
        max=high,
        indices=tuple(tuple(index) for index in bad.nonzero()[:MAX_INDICES].tolist()),
    )


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
        arriving = [
            (source, node_id, key)
            for source, _, key, data in graph.in_edges(node_id, keys=True, data=True)
            if data.get("input_nr") == slot
        ]
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
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown}, ... ({len(names) - limit} more)"


def _label(origin: NonfiniteOrigin) -> str:
    module = f" in module {origin.module!r}" if origin.module is not None else ""
    return f"{origin.node} {origin.op}{module}"


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
    if origin.parameters:
        lines.append(f"{indent}reaches the parameters: {', '.join(origin.parameters)}")
    if origin.source is not None:
        lines.append(f"{indent}made at {origin.source}: {origin.source_code or ''}")
    if traceback:
        if origin.traceback is None and origin.source is not None:
            pass  # the line above says where, without anomaly mode
        elif origin.traceback is None:
            lines.append(
                f"{indent}forward traceback: not recorded; run the forward under torch.autograd.set_detect_anomaly(True)"
            )
        else:
            frames = _user_frames(origin.traceback)
            lines.append(f"{indent}forward traceback (anomaly mode; the last {len(frames)} frames outside torch, gradexport and Python's standard library):")
            lines += [f"{indent}  {line}" for frame in frames for line in frame.rstrip().splitlines()]
    return lines
