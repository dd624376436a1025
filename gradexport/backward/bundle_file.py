"""The bundle the flight recorder writes for a bad step, and `load_bundle`, which reads it back as a `Bundle`.

`gradexport.watch` with ``bad_steps=FOLDER`` (see `gradexport.backward.recorder`)
writes one bundle per bad step into FOLDER, named ``bad-step-000017.json``. A
bundle is one JSON object (UTF-8, written to a temporary file and renamed, so
it is whole or absent):

```
{"format": "gradexport-bundle", "version": 1, "jump": 10.0, "divergence": "n7",
 "bad": STEP, "healthy": STEP | null, "healthy_every": 50}
```

and each STEP is ``{"step": 17, "reasons": [...], "loss": 0.31 | NaN | null,
"grad_norm": 2.5, "reproduced": true, "forward_origin": ORIGIN | null, "graph":
GRAPH}``: ``reasons`` says why the step is bad (empty for the healthy one),
``reproduced`` whether the recorder's re-run gave every parameter exactly the
``.grad`` the training step gave, ``graph`` the step's backward graph as
NetworkX's node-link data (as `gradexport.to_json` writes it) with each edge's
gradient under ``grad`` (`gradexport.record_gradients`' summary: shape, dtype,
norm, min, max, NaN and Inf flags, and the values of a gradient of at most 16
elements), and ``forward_origin`` the first forward op whose result held a
NaN or Inf (``op``, ``cause``, ``source``, ``source_code``, ``module``,
``module_class``, ``node``, ``output``, ``inputs``; an origin in the loss
function, found from what the graph held, has ``candidates`` too: see
`gradexport.backward.recorder_loss.loss_origin`). ``divergence`` is the node
of the bad step's graph where the two steps first differ (`divergent_node`:
the first node that sends NaN or Inf, else the forward origin's node, else
the first whose gradient jumped).
Non-finite numbers are written as ``NaN``, ``Infinity`` and ``-Infinity``, as
Python's `json` reads them.

This module knows no torch: the page of `gradexport view BUNDLE` and any
machine without torch read a bundle through it.

Examples:
    >>> import networkx as nx, os, tempfile
    >>> graph = nx.MultiDiGraph(roots=[{"name": "out", "node": "n0", "input_nr": 0}])
    >>> graph.add_node("n0", kind="root")
    >>> graph.add_node("n1", kind="backward", op="SqrtBackward0", exec_order=1)
    >>> _ = graph.add_edge("n0", "n1", key=0, grad={"norm": float("nan"), "has_nan": True, "has_inf": False})
    >>> step = {"step": 3, "reasons": ["the loss is nan"], "loss": float("nan"), "grad_norm": float("nan"),
    ...         "reproduced": True, "forward_origin": None, "graph": graph_data(graph)}
    >>> path = os.path.join(tempfile.mkdtemp(), "bad-step-000003.json")
    >>> write_bundle(path, bad=step, healthy=None, jump=10.0, healthy_every=50)
    >>> bundle = load_bundle(path)
    >>> bundle.bad.step, bundle.healthy, bundle.divergence, bundle.bad.graph.nodes["n1"]["op"]
    (3, None, 'n1', 'SqrtBackward0')
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx

from ..core.errors import GraphFormatError, file_error
from .watch_file import EDGES_KEYWORD, FileMisfit, json_object

__all__ = ["FORMAT", "VERSION", "Bundle", "BundleStep", "bundle_name", "divergent_node", "graph_data", "load_bundle", "write_bundle"]

#: The bundle's ``format`` value.
FORMAT = "gradexport-bundle"
#: The bundle's ``version``.
VERSION = 1

_STEP_FIELDS = {"step", "reasons", "loss", "grad_norm", "reproduced", "forward_origin", "graph"}


def bundle_name(step: int, rank: int | None = None) -> str:
    """The file name of the bundle of ``step``: ``bad-step-000017.json``; under more than one rank, ``bad-step-000017.rank1.json``.

    Examples:
        >>> bundle_name(17), bundle_name(17, rank=1)
        ('bad-step-000017.json', 'bad-step-000017.rank1.json')
    """
    return f"bad-step-{step:06d}.json" if rank is None else f"bad-step-{step:06d}.rank{rank}.json"


def graph_data(graph: nx.MultiDiGraph) -> dict[str, Any]:
    """``graph`` as the node-link data a bundle holds (edges under ``"edges"``)."""
    return dict(nx.node_link_data(graph, **EDGES_KEYWORD))


@dataclass(frozen=True)
class BundleStep:
    """One step of a `Bundle`: the bad one, or the last healthy one the recorder kept.

    Attributes:
        step: The training step (counted from 0, as `gradexport.watch` counts).
        reasons: Why the step is bad, one sentence each; empty for the healthy step.
        loss: The loss ``backward()`` was called on (its sum when it is not a
            scalar), ``None`` when the recorder saw no ``backward()`` call.
        grad_norm: The 2-norm over every parameter's ``.grad``.
        reproduced: For the bad step, whether its re-run gave every
            parameter the very ``.grad`` the training step gave (bit for bit);
            for the healthy step, whether the re-run's gradient norm equals
            the one measured at that step.
        forward_origin: The first forward op whose result held NaN or Inf
            (see the module's docstring for its keys), else ``None``.
        graph: The step's backward graph, each edge's gradient under ``grad``.
    """

    step: int
    reasons: tuple[str, ...]
    loss: float | None
    grad_norm: float | None
    reproduced: bool
    forward_origin: dict[str, Any] | None
    graph: nx.MultiDiGraph


@dataclass(frozen=True)
class Bundle:
    """What the flight recorder kept of a bad step: that step, the last healthy step it kept, and where they diverge.

    Attributes:
        path: The file it was read from.
        bad: The bad step.
        healthy: The last healthy step the recorder kept before it (the first,
            then one every ``healthy_every``), ``None`` when it kept none.
        divergence: The id of the node of ``bad.graph`` where the two steps
            first differ (`divergent_node`), ``None`` when none does.
        jump: The gradient-norm jump factor the recorder judged by.
        healthy_every: How often the recorder kept a healthy step.
    """

    path: str
    bad: BundleStep
    healthy: BundleStep | None
    divergence: str | None
    jump: float
    healthy_every: int

    @property
    def divergence_source(self) -> str | None:
        """``"PATH:LINE: code"``: the forward line that made the divergent node (from either step's graph), else ``None``."""
        if self.divergence is None:
            return None
        for step in (self.bad, self.healthy):
            if step is not None and self.divergence in step.graph:
                data = step.graph.nodes[self.divergence]
                if data.get("source"):
                    return f"{data['source']}: {data.get('source_code', '')}"
        return None

    def describe(self) -> str:
        """A few lines: the bad step and why, the healthy step kept, the divergent node and its line, the forward origin."""
        lines = [f"bad step {self.bad.step}: " + "; ".join(self.bad.reasons)]
        lines.append(f"healthy step kept: {self.healthy.step}" if self.healthy is not None else "healthy step kept: none (no healthy step before it was kept)")
        if self.divergence is not None:
            op = self.bad.graph.nodes[self.divergence].get("op", "?")
            where = self.divergence_source
            lines.append(f"first divergent node: {self.divergence} ({op})" + (f" made at {where}" if where else ""))
        origin = self.bad.forward_origin
        if origin is not None:
            where = f" at {origin['source']}: {origin.get('source_code', '')}" if origin.get("source") else ""
            lines.append(f"forward origin: {origin['op']}{where}")
            if origin.get("cause") == "unsure":
                lines.append(
                    "  in the loss function, made by one of " + ", ".join(origin.get("candidates", [])) + " (the graph did not keep the values"
                    " between them; a loop that passes its step to optimizer.step(closure) has the op and its line)"
                )
        if not self.bad.reproduced:
            lines.append("the re-run did not give the training step's gradients bit for bit (see the recorder's docs)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        healthy = None if self.healthy is None else self.healthy.step
        return f"<Bundle of bad step {self.bad.step} (healthy step {healthy}, divergence {self.divergence}) from {self.path}>"


def _sent(graph: nx.MultiDiGraph, node: str) -> list[dict[str, Any]]:
    return [data["grad"] for _, _, data in graph.out_edges(node, data=True) if isinstance(data.get("grad"), dict)]


def _nonfinite(summaries: Iterable[dict[str, Any]]) -> bool:
    return any(summary.get("has_nan") or summary.get("has_inf") for summary in summaries)


def _largest_norm(summaries: list[dict[str, Any]]) -> float:
    norms = [summary["norm"] for summary in summaries if isinstance(summary.get("norm"), (int, float))]
    return max(norms, default=0.0)


def divergent_node(bad: nx.MultiDiGraph, healthy: nx.MultiDiGraph | None, jump: float, origin: str | None = None) -> str | None:
    """The node of ``bad`` where the bad step first departs from the healthy one, in the order the engine ran them.

    A node (the root's gradient first) departs when a gradient it sends holds
    NaN or Inf while the same node of ``healthy`` (same id and op) sent only
    finite ones; failing that, ``origin`` (the node of the forward origin,
    when it is in ``bad``: a NaN the forward made that the backward carries
    as finite gradients, as a NaN loss does); failing that, the node whose
    largest norm sent is more than ``jump`` times the healthy node's.
    ``None`` when no node departs.

    Examples:
        >>> bad, good = nx.MultiDiGraph(), nx.MultiDiGraph()
        >>> for graph, norm in ((bad, 50.0), (good, 1.0)):
        ...     graph.add_node("n1", op="MulBackward0", exec_order=1)
        ...     graph.add_node("n2", op="ExpBackward0", exec_order=2)
        ...     _ = graph.add_edge("n1", "n2", grad={"norm": 1.0})
        ...     _ = graph.add_edge("n2", "n3", grad={"norm": norm})
        >>> divergent_node(bad, good, jump=10.0), divergent_node(bad, good, jump=100.0)
        ('n2', None)
    """
    roots = [(node, _sent(bad, node)) for node, kind in bad.nodes(data="kind") if kind == "root"]
    for root, summaries in roots:
        if _nonfinite(summaries):
            return next(iter(bad.successors(root)), root)
    ran = sorted((data["exec_order"], node) for node, data in bad.nodes(data=True) if isinstance(data.get("exec_order"), int))

    def twin(node: str) -> str | None:
        if healthy is None or node not in healthy or healthy.nodes[node].get("op") != bad.nodes[node].get("op"):
            return None
        return node

    for _, node in ran:
        sent = _sent(bad, node)
        if _nonfinite(sent):
            other = twin(node)
            if other is None or not _nonfinite(_sent(healthy, other)):  # type: ignore[arg-type]
                return node
    if origin is not None and origin in bad:
        return origin
    if healthy is None:
        return None
    for _, node in ran:
        other = twin(node)
        if other is None:
            continue
        before, now = _largest_norm(_sent(healthy, other)), _largest_norm(_sent(bad, node))
        if before > 0 and math.isfinite(now) and now > jump * before:
            return node
    return None


def write_bundle(path: str | os.PathLike[str], *, bad: dict[str, Any], healthy: dict[str, Any] | None, jump: float, healthy_every: int) -> None:
    """Write a bundle of the steps ``bad`` and ``healthy`` (dicts shaped as the module's docstring says) to ``path``, atomically."""
    bad_graph = _graph(bad["graph"])
    healthy_graph = None if healthy is None else _graph(healthy["graph"])
    divergence = divergent_node(bad_graph, healthy_graph, jump, (bad.get("forward_origin") or {}).get("node"))
    document = {
        "format": FORMAT,
        "version": VERSION,
        "jump": jump,
        "healthy_every": healthy_every,
        "divergence": divergence,
        "bad": bad,
        "healthy": healthy,
    }
    target = Path(path)
    staged = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    staged.write_text(json.dumps(document, separators=(",", ":")), encoding="utf-8")
    os.replace(staged, target)


def load_bundle(path: str | os.PathLike[str]) -> Bundle:
    """Read a bundle that ``gradexport.watch(..., bad_steps=FOLDER)`` wrote.

    Raises:
        MissingFileError: there is no file at ``path``.
        UnreadableFileError: it cannot be read (a folder, no permission).
        GraphFormatError: it is not UTF-8, not JSON, or not shaped as a
            bundle; one line naming the file and the first field that does not fit.

    Examples:
        >>> import os, tempfile, gradexport
        >>> damaged = os.path.join(tempfile.mkdtemp(), "bad-step-000001.json")
        >>> _ = open(damaged, "w").write('{"format": "gradexport-bundle", "version": 1}')
        >>> gradexport.load_bundle(damaged)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        gradexport.errors.GraphFormatError: load_bundle: '.../bad-step-000001.json': bad: missing; ...
    """
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise file_error(error, path, "load_bundle") from error
    try:
        document = _document(data)
        bad = _step(document["bad"], "bad")
        healthy = None if document["healthy"] is None else _step(document["healthy"], "healthy")
    except FileMisfit as misfit:
        raise GraphFormatError(
            f"load_bundle: {os.fspath(path)!r}: {misfit}; a bundle is the JSON object gradexport.watch(bad_steps=...) writes (was it edited or cut?)"
        ) from None
    return Bundle(os.fspath(path), bad, healthy, document["divergence"], float(document["jump"]), int(document["healthy_every"]))


def _graph(data: dict[str, Any]) -> nx.MultiDiGraph:
    graph = nx.node_link_graph(data, **EDGES_KEYWORD)
    if not isinstance(graph, nx.MultiDiGraph):
        raise FileMisfit("graph: expected a directed multigraph")
    return graph


def _document(data: bytes) -> dict[str, Any]:
    document = json_object(data)
    if document.get("format") != FORMAT:
        raise FileMisfit(f"format: expected {FORMAT!r}, got {document.get('format')!r}")
    if document.get("version") != VERSION:
        raise FileMisfit(f"version: this gradexport reads version {VERSION}, the file is version {document.get('version')!r}")
    for name in ("bad", "healthy", "divergence", "jump", "healthy_every"):
        if name not in document:
            raise FileMisfit(f"{name}: missing")
    if document["divergence"] is not None and not isinstance(document["divergence"], str):
        raise FileMisfit(f"divergence: expected a node id or null, got {type(document['divergence']).__name__}")
    for name, kind in (("jump", (int, float)), ("healthy_every", int)):
        if not isinstance(document[name], kind) or isinstance(document[name], bool):
            raise FileMisfit(f"{name}: expected a number, got {type(document[name]).__name__}")
    return document


def _step(data: Any, where: str) -> BundleStep:
    if not isinstance(data, dict):
        raise FileMisfit(f"{where}: expected an object, got {type(data).__name__}")
    missing = sorted(_STEP_FIELDS - set(data))
    if missing:
        raise FileMisfit(f"{where}.{missing[0]}: missing")
    if not isinstance(data["step"], int) or isinstance(data["step"], bool):
        raise FileMisfit(f"{where}.step: expected an integer, got {type(data['step']).__name__}")
    if not isinstance(data["reasons"], list) or not all(isinstance(reason, str) for reason in data["reasons"]):
        raise FileMisfit(f"{where}.reasons: expected a list of strings")
    for name in ("loss", "grad_norm"):
        if data[name] is not None and (not isinstance(data[name], (int, float)) or isinstance(data[name], bool)):
            raise FileMisfit(f"{where}.{name}: expected a number or null, got {type(data[name]).__name__}")
    if not isinstance(data["reproduced"], bool):
        raise FileMisfit(f"{where}.reproduced: expected true or false, got {type(data['reproduced']).__name__}")
    origin = data["forward_origin"]
    if origin is not None and not (isinstance(origin, dict) and isinstance(origin.get("op"), str)):
        raise FileMisfit(f"{where}.forward_origin: expected an object with an op, or null")
    graph = data["graph"]
    if not isinstance(graph, dict) or not isinstance(graph.get("nodes"), list) or not isinstance(graph.get("edges"), list):
        raise FileMisfit(f"{where}.graph: expected node-link data with nodes and edges")
    try:
        read = _graph(graph)
    except (KeyError, TypeError, nx.NetworkXError) as error:
        raise FileMisfit(f"{where}.graph: not node-link data ({type(error).__name__}: {error})") from None
    except FileMisfit as misfit:
        raise FileMisfit(f"{where}.{misfit}") from None
    return BundleStep(data["step"], tuple(data["reasons"]), data["loss"], data["grad_norm"], data["reproduced"], origin, read)
