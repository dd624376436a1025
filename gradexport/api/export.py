"""From roots or a graph to diagram text and files, in one call.

Every function takes either roots (what `gradexport.to_networkx` takes:
a tensor, a ``grad_fn``, a tuple, list or dict of them) or a graph it built,
plus keyword options, each declared once in `gradexport.core.options`:

- Trace options, only with roots: ``params`` (names for leaves, as
  ``model.named_parameters()`` gives), ``module`` (a module whose parameters
  and buffers name the leaves, and whose submodules name the nodes of a
  forward pass run inside `gradexport.capture_modules`),
  ``edge_metadata`` (the shape, dtype and device of the gradient on every edge),
  ``open_compiled`` (JSON, DOT, SVG and HTML: the backward graph inside each
  ``torch.compile`` region, see `gradexport.tracing.compiled`).
- Fold options: ``depth`` (fold every module nested that deep or deeper into
  one node, see `gradexport.collapse`); ``fit`` (Mermaid only, default
  ``True``: when the diagram is over mermaid.js's limits and the graph knows
  its modules, draw the deepest collapse that fits, with a
  `gradexport.errors.MermaidSizeWarning` saying so).
- Diagram options (`gradexport.options.DiagramOptions`): ``direction``,
  ``show_none``, ``show_saved``, ``edge_shapes``, ``grad_norms``,
  ``group_modules``. ``show_none`` and ``show_saved`` also make a trace
  record None slots and saved values; ``edge_shapes`` records edge shapes.
- Render options: ``prog`` (SVG only: the Graphviz program).

An option that does nothing for the call is a `TypeError` naming
where it applies: ``to_dot(x, fit=False)``, ``to_json(x, direction="LR")``,
``to_dot(graph, params=...)``.

Every call traces roots once, whatever the formats, and draws the graph
while it walks it (a `gradexport.streams.GraphStream`, with no MultiDiGraph
in between) wherever no format needs the whole graph. Formats are listed in
`gradexport.api.registry`.

Examples:
    >>> import torch, gradexport
    >>> torch.manual_seed(6)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> x = torch.randn(2, requires_grad=True)
    >>> x1, x2 = x.unbind()
    >>> dot = gradexport.to_dot(x1 + x2, params={"x": x})
    >>> [line.strip() for line in dot.splitlines() if "->" in line]
    ['"n0" -> "n1" [label="0→0"];', '"n1" -> "n2" [label="0→0"];', '"n1" -> "n2" [label="1→1"];', '"n2" -> "n3" [label="0→0"];']
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx

from ..analysis.simplify import collapse, has_modules
from ..backward.bundle_file import Bundle
from ..backward.replay_record import Replay
from ..backward.steps import replay_keeping_grads, step_data
from ..backward.watch_file import WatchHistory
from ..core.arguments import collection_of
from ..core.collector import gc_paused
from ..core.errors import ArgumentTypeError, ArgumentValueError
from ..core.options import ExportKeywords, ExportOptions, OptionWarning, Unpack
from ..core.source import Source
from ..formats import dot, html, model_explorer
from ..formats.files import StagedFiles
from ..formats.html import STEPS_ATTRIBUTE
from ..tracing.graph import GraphStream
from ..tracing.roots import Roots
from .registry import DEFAULT_FORMATS, FORMATS, Format, parse_formats, read_options

if TYPE_CHECKING:
    import pydot
    from model_explorer.graph_builder import GraphCollection
    from tqdm import tqdm

__all__ = [
    "DEFAULT_FORMATS",
    "FORMATS",
    "GraphOrRoots",
    "as_graph",
    "prepare",
    "render",
    "to_dot",
    "to_html",
    "to_json",
    "to_mermaid",
    "to_model_explorer",
    "to_pydot",
    "to_svg",
    "write",
]

#: What the functions of this module accept: a graph from `gradexport.to_networkx`, or roots.
GraphOrRoots = nx.MultiDiGraph | Roots


def with_steps(graph_or_roots: GraphOrRoots | Replay, keywords: ExportKeywords, *, formats: Sequence[str], caller: str) -> tuple[GraphOrRoots, ExportKeywords]:
    """A replay record, or roots with ``steps=True``, as a graph that carries its steps for the html writer.

    A record gives a copy of its graph with `step_data` as the graph
    attribute `STEPS_ATTRIBUTE`. Roots with ``steps=True`` are replayed first
    with `gradexport.backward.steps.replay_keeping_grads`, which leaves
    every ``.grad`` as it was (``params`` and ``module`` go to the replay).
    Anything else passes through.

    Raises:
        ArgumentTypeError: ``steps=True`` with a graph (it holds no steps).
        StepsUnavailableError: roots the replay cannot run without side effects.
    """
    keywords = ExportKeywords(**keywords)
    wanted = keywords.get("steps", False)
    if wanted and "html" not in formats:
        read_options({"steps": True}, formats=formats, from_roots=True, caller=f"gradexport.{caller}")  # raises, naming html
    if isinstance(graph_or_roots, Replay):
        record = graph_or_roots
    elif not wanted:
        return graph_or_roots, keywords
    elif isinstance(graph_or_roots, nx.Graph):
        read_options({"steps": True}, formats=formats, from_roots=False, caller=f"gradexport.{caller}")  # raises: a graph holds no steps
    else:
        if keywords.get("edge_metadata"):
            raise ArgumentTypeError(
                f"gradexport.{caller}: edge_metadata does not combine with steps=True: the page's steps carry every gradient's shape and dtype already"
            )
        keywords.pop("edge_metadata", None)
        record = replay_keeping_grads(graph_or_roots, params=keywords.pop("params", None), module=keywords.pop("module", None), caller=f"gradexport.{caller}")
    keywords.pop("steps", None)
    graph = record.graph.copy()
    graph.graph[STEPS_ATTRIBUTE] = step_data(record)
    return graph, keywords


def prepare(
    graph_or_roots: GraphOrRoots, formats: Sequence[str], keywords: ExportKeywords, *, caller: str, whole: bool = False
) -> tuple[Source, ExportOptions]:
    """Read the options for ``formats``, then trace roots once and fold as asked.

    The result is a stream when roots are drawn in one format that can draw
    one, nothing is folded and ``whole`` is false; otherwise it is the whole graph.

    Raises:
        TypeError: an unknown option or one that does not apply (see
            `gradexport.core.options.ExportOptions.from_keywords`), or a
            graph that is not a ``MultiDiGraph``.
    """
    specs = [FORMATS[name] for name in formats]
    options = read_options(keywords, formats=formats, from_roots=not isinstance(graph_or_roots, nx.Graph), caller=f"gradexport.{caller}")
    diagram = options.diagram
    if isinstance(graph_or_roots, nx.Graph):
        source = Source.of(graph_or_roots)
        if diagram.edge_shapes and any(spec.diagram for spec in specs):
            _warn_without_shapes(graph_or_roots, caller)
    else:
        streams = not whole and len(specs) == 1 and not options.fold.folds and specs[0].streams(options)
        walk = GraphStream(
            graph_or_roots,
            params=options.trace.params,
            module=options.trace.module,
            show_none=bool(diagram.show_none),
            show_saved=bool(diagram.show_saved) or diagram.saved_bytes,
            edge_metadata=options.trace.edge_metadata or diagram.edge_shapes,
            open_compiled=options.trace.open_compiled,
            drawn_only=streams and specs[0].drawn_only,
            caller=f"gradexport.{caller}",
        )
        source = Source(None, walk) if streams else Source(walk.to_networkx())
    if options.fold.folds:
        graph = source.whole("folding modules (depth=, fold_modules=)")
        if not has_modules(graph):
            warnings.warn(
                OptionWarning(
                    f"gradexport.{caller}: depth= and fold_modules= fold nothing, since no node of this graph has a "
                    "module: run the forward pass inside gradexport.capture_modules() and pass module=model"
                ),
                stacklevel=3,
            )
        source = Source(collapse(graph, options.fold.depth, modules=options.fold.fold_modules))
    return source, options


def _warn_without_shapes(graph: nx.MultiDiGraph, caller: str) -> None:
    if graph.number_of_edges() and not any("shape" in data for _, _, data in graph.edges(data=True)):
        warnings.warn(
            OptionWarning(
                f"gradexport.{caller}: edge_shapes=True draws no shapes, since this graph's edges have none: "
                "build it with gradexport.to_networkx(..., edge_metadata=True), or pass the roots"
            ),
            stacklevel=4,
        )


def as_graph(
    graph_or_roots: GraphOrRoots, formats: Sequence[str] = ("dot",), *, caller: str = "as_graph", **options: Unpack[ExportKeywords]
) -> tuple[nx.MultiDiGraph, ExportOptions]:
    """The whole graph of roots or a graph, folded as asked, with the options read for ``formats``.

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> graph, options = as_graph(x * 2, params={"x": x}, direction="LR")
        >>> graph.number_of_nodes(), options.diagram.direction
        (3, 'LR')
    """
    source, export_options = prepare(graph_or_roots, formats, options, caller=caller, whole=True)
    return source.whole(caller), export_options


def _text(name: str, graph_or_roots: GraphOrRoots, keywords: ExportKeywords) -> str:
    source, options = prepare(graph_or_roots, [name], keywords, caller=f"to_{name}")
    with gc_paused():
        return FORMATS[name].text(source, options)


def to_dot(graph_or_roots: GraphOrRoots, **options: Unpack[ExportKeywords]) -> str:
    """Graphviz DOT text (see `gradexport.formats.dot` for the legend).

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> text = to_dot((x * 2).sum(), params={"x": x})
        >>> text.splitlines()[0], "MulBackward0" in text, '"0→0"' in text
        ('digraph autograd {', True, True)
    """
    return _text("dot", graph_or_roots, options)


def to_pydot(graph_or_roots: GraphOrRoots, **options: Unpack[ExportKeywords]) -> pydot.Dot:
    """The DOT of `to_dot` as a `pydot.Dot` (parsing costs time on large graphs).

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> graph = to_pydot((x * 2).sum(), params={"x": x})
        >>> type(graph).__name__, graph.get_name()
        ('Dot', 'autograd')
    """
    source, export_options = prepare(graph_or_roots, ["dot"], options, caller="to_pydot")
    return dot.to_pydot(source, export_options.diagram)


def to_mermaid(graph_or_roots: GraphOrRoots, **options: Unpack[ExportKeywords]) -> str:
    """Mermaid flowchart text, collapsed to fit mermaid.js's limits where it can (see ``fit``); warns otherwise.

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> text = to_mermaid((x * 2).sum(), params={"x": x})
        >>> text.splitlines()[0], [line.strip() for line in text.splitlines() if "-->" in line][:2]
        ('flowchart TB', ['n0 -->|"0→0"| n1', 'n1 -->|"0→0"| n2'])
    """
    return _text("mermaid", graph_or_roots, options)


def to_svg(graph_or_roots: GraphOrRoots, **options: Unpack[ExportKeywords]) -> str:
    """SVG text rendered by Graphviz; ``prog`` picks the program (see `gradexport.formats.svg`).

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> svg = to_svg((x * 2).sum(), params={"x": x})  # needs Graphviz's dot
        >>> svg.lstrip().startswith("<?xml"), "<svg" in svg, "MulBackward0" in svg
        (True, True, True)
    """
    return _text("svg", graph_or_roots, options)


def to_json(graph_or_roots: GraphOrRoots, **options: Unpack[ExportKeywords]) -> str:
    """Node-link JSON of the graph; `gradexport.from_json` reads it back to an equal graph.

    From roots it is the JSON of ``to_networkx(roots)`` with the same
    options; ``edge_metadata=True`` adds each edge's shape, dtype and device.

    Examples:
        >>> import json, torch, gradexport
        >>> x = torch.ones(2, requires_grad=True)
        >>> text = to_json((x * 2).sum(), params={"x": x})
        >>> [edge["next_index"] for edge in json.loads(text)["edges"]], gradexport.from_json(text).number_of_nodes()
        ([0, 0, 0], 4)
    """
    return _text("json", graph_or_roots, options)


def to_html(graph_or_roots: GraphOrRoots | Replay | WatchHistory | Bundle, *, title: str | None = None, **options: Unpack[ExportKeywords]) -> str:
    """The interactive viewer: one self-contained HTML page that loads nothing (see `gradexport.formats.html`).

    It opens folded to about 150 visible nodes (modules, or linear runs and
    fans of leaves), lays out only what is shown, in a Web Worker, and has
    the script API ``window.gradexportViewer``. ``title`` names the page
    (default: the roots' names). Given a `gradexport.records.WatchHistory`, it draws
    the graph traced by `gradexport.watch` with the last recorded step's
    gradient norms on the edges that enter each module. Given a `gradexport.records.Bundle`
    (what `gradexport.load_bundle` reads), it shows the bad step and the healthy step
    side by side, the bad step's backward step by step, the first node where they diverge
    selected in both (see `bundle_page_graphs`). ``write(..., formats="html")`` writes it to
    a file; ``gradexport view TARGET`` writes and opens it.

    Given a `gradexport.records.Replay` (what `gradexport.replay` returns), or
    roots with ``steps=True``, the page also holds every step of the backward
    pass and has a step bar (see ``docs/guides/viewer.md``). ``steps=True``
    replays with `gradexport.backward.steps.replay_keeping_grads`: each
    leaf's ``.grad`` is swapped for a copy during the replay and put back
    after, so it keeps its object and values.

    Raises:
        ViewerTooLargeError: a graph too large even for the viewer, before anything is built.
        ArgumentTypeError: ``steps=True`` with a graph (it holds no steps).
        StepsUnavailableError: ``steps=True`` with leaves that
            have post-accumulate-grad hooks (the replay would run them).

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> page = to_html((x * 2).sum(), params={"x": x})
        >>> page.startswith("<!DOCTYPE html>"), "gradexportViewer" in page
        (True, True)
    """
    if isinstance(graph_or_roots, Bundle):
        bad, healthy, summary = bundle_page_graphs(graph_or_roots)
        options.setdefault("grad_norms", True)
        _, export_options = prepare(bad, ["html"], options, caller="to_html")
        page_title = title or f"bad step {graph_or_roots.bad.step}"
        return "".join(html.generate_bundle_html(bad, healthy, summary, export_options.diagram, title=page_title))
    if isinstance(graph_or_roots, WatchHistory):
        history = graph_or_roots
        step = history.steps[-1] if history.steps else None
        graph_or_roots = _watch_page_graph(history, step)
        options.setdefault("grad_norms", True)
        title = title or f"gradient norms at module outputs, step {step}"
    graph_or_roots, options = with_steps(graph_or_roots, options, formats=["html"], caller="to_html")
    source, export_options = prepare(graph_or_roots, ["html"], options, caller="to_html")
    with gc_paused():
        return html.to_html(source, export_options.diagram, title=title)


def bundle_page_graphs(bundle: Bundle) -> tuple[nx.MultiDiGraph, nx.MultiDiGraph | None, dict[str, Any]]:
    """The two graphs of a bundle's page and the summary its header shows.

    The bad step's graph gets the divergent node as its non-finite origin mark
    (graph attribute ``nonfinite``, node attribute ``nonfinite="origin"``), so
    that its viewer opens with the node shown, selected and marked.

    Examples:
        >>> import networkx as nx
        >>> from gradexport.records import Bundle, BundleStep
        >>> graph = nx.MultiDiGraph()
        >>> graph.add_node("n1", kind="backward", op="SqrtBackward0", exec_order=4, source="train.py:9", source_code="y = x.sqrt()")
        >>> step = BundleStep(7, ("the loss is nan",), float("nan"), 1.0, True, None, graph)
        >>> bad, healthy, summary = bundle_page_graphs(Bundle("b.json", step, None, "n1", 10.0, 50))
        >>> bad.graph["nonfinite"], summary["divergence_source"], summary["divergence_step"]
        (['n1'], 'train.py:9: y = x.sqrt()', 3)
    """
    bad = bundle.bad.graph.copy()
    divergence = bundle.divergence
    summary: dict[str, Any] = {
        "bad_step": bundle.bad.step,
        "reasons": list(bundle.bad.reasons),
        "healthy_step": None if bundle.healthy is None else bundle.healthy.step,
        "healthy_every": bundle.healthy_every,
        "divergence": divergence,
        "divergence_op": None,
        "divergence_source": bundle.divergence_source,
        "divergence_step": None,
        "healthy_divergence_step": None,
        "forward_origin": bundle.bad.forward_origin,
        "reproduced": bundle.bad.reproduced,
    }
    if divergence is not None and divergence in bad:
        bad.graph["nonfinite"] = [divergence]
        bad.nodes[divergence]["nonfinite"] = "origin"
        summary["divergence_op"] = bad.nodes[divergence].get("op")
        summary["divergence_step"] = _step_of(bad, divergence)
        summary["healthy_divergence_step"] = None if bundle.healthy is None else _step_of(bundle.healthy.graph, divergence)
    return bad, None if bundle.healthy is None else bundle.healthy.graph, summary


def _step_of(graph: nx.MultiDiGraph, node: str) -> int | None:
    """The position of ``node`` in the graph's recorded backward (0 for the first node run), else ``None``."""
    order = graph.nodes[node].get("exec_order") if node in graph else None
    return order - 1 if isinstance(order, int) else None


def _watch_page_graph(history: WatchHistory, step: int | None) -> nx.MultiDiGraph:
    """The history's graph at ``step``, with what the viewer's step scrubber needs (gradexport/viewer/src/watch.js)."""
    graph = history.graph(step)
    table = history.module_table()
    modules = {name: table.column(name) for name in table.columns}
    graph.graph["watch_steps"] = list(history.steps)
    graph.graph["watch_modules"] = modules
    norms = history.param_table("norm")
    graph.graph["watch_params"] = {name: norms.column(name) for name in norms.columns}
    flags = history.flags(step) if history.steps else {}
    graph.graph["watch_flags"] = flags
    for _, data in graph.nodes(data=True):
        reasons = flags.get(data.get("module", object()))
        if reasons:
            data["watch_flag"] = sorted({reason.split(":")[0] for reason in reasons})
    for _, target, data in graph.edges(data=True):
        if "grad_norm" in data:
            data["watch_norms"] = modules[graph.nodes[target]["module"]]
    return graph


def to_model_explorer(graph_or_roots: GraphOrRoots, **options: Unpack[ExportKeywords]) -> GraphCollection:
    """The graph built with Google Model Explorer's own classes (``pip install gradexport[explorer]``).

    See `gradexport.formats.model_explorer` for the mapping; ``write(...,
    formats="model-explorer")`` writes the file Model Explorer loads.

    Raises:
        ModelExplorerNotInstalledError: the ``explorer`` extra is not installed.

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> collection = to_model_explorer((x * 2).sum(), params={"x": x})
        >>> [len(graph.nodes) for graph in collection.graphs]
        [4]
    """
    source, export_options = prepare(graph_or_roots, ["model-explorer"], options, caller="to_model_explorer")
    with gc_paused():
        return model_explorer.to_model_explorer(source, export_options.diagram)


def _per_format(graph_or_roots: GraphOrRoots | Replay, names: Sequence[str], options: ExportKeywords, *, caller: str) -> tuple[Source, Source, ExportOptions]:
    """`prepare` after `with_steps`: the source for the html page, the one for every other format, and the options.

    Only the html page takes a replay's steps; every other format draws the record's graph as it is.
    """
    graph_or_roots, options = with_steps(graph_or_roots, options, formats=names, caller=caller)
    source, export_options = prepare(graph_or_roots, names, options, caller=caller)
    if not (isinstance(graph_or_roots, nx.Graph) and STEPS_ATTRIBUTE in graph_or_roots.graph):
        return source, source, export_options
    plain_graph = source.whole(caller).copy()
    del plain_graph.graph[STEPS_ATTRIBUTE]
    return source, Source.of(plain_graph), export_options


def watch_node_data(history: WatchHistory, metric: str = "norm", *, steps: Iterable[int] | None = None) -> dict[int, Any]:
    """Model Explorer node data per recorded step of a `gradexport.watch` history (``pip install gradexport[explorer]``).

    Each step's `gradexport.records.WatchHistory.graph` carries the module-output
    gradient norms on the edges entering each module; its node data is
    `gradexport.formats.model_explorer.node_data.gradient_node_data` of it
    (``metric``: ``norm``, ``log10_norm``, ``non_finite``), for the graph that
    ``to_model_explorer(history.graph())`` writes. Returns ``{step: ModelNodeData}``;
    ``.save_to_file(path)`` writes a file Model Explorer's "node data" button loads.

    Examples:
        >>> import torch, gradexport
        >>> model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
        >>> with gradexport.watch(model) as w:
        ...     for _ in range(2):
        ...         model(torch.ones(4, 3)).sum().backward()
        ...         w.step()
        >>> sorted(gradexport.records.watch_node_data(w.history))
        [0, 1]
    """
    from ..formats.model_explorer.node_data import gradient_node_data

    chosen = list(history.steps) if steps is None else collection_of(steps, int, caller="watch_node_data", argument="steps", example="[0, 10]")
    return {step: gradient_node_data(history.graph(step), metric) for step in chosen}


def render(graph_or_roots: GraphOrRoots | Replay, formats: Iterable[str] | str, **options: Unpack[ExportKeywords]) -> dict[str, str]:
    """The text of each format, from one trace (what the MkDocs plugin embeds).

    A `gradexport.records.Replay` (or roots with ``steps=True``) gives the html
    page its steps, as `to_html` does; the other formats draw its graph.

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> sorted(render((x * 2).sum(), "dot,json", params={"x": x}))
        ['dot', 'json']
    """
    names = parse_formats(formats)
    source, plain_source, export_options = _per_format(graph_or_roots, names, options, caller="render")
    with gc_paused():
        return {name: FORMATS[name].text(source if name == "html" else plain_source, export_options) for name in names}


def write(
    graph_or_roots: GraphOrRoots | Replay,
    folder: str | os.PathLike[str],
    formats: Iterable[str] | str = DEFAULT_FORMATS,
    *,
    stem: str = "graph",
    progress: bool | tqdm = False,
    **options: Unpack[ExportKeywords],
) -> dict[str, Path]:
    """Write one file per format into ``folder`` (created as needed), named ``stem`` plus the extension.

    Formats and their extensions are in `gradexport.api.registry`
    (``.dot``, ``.svg``, ``.mmd``, ``.json``...). Roots are traced once; one
    format that can be drawn while the graph is walked is. The files appear
    only once all of them were written: if one fails (say, no Graphviz for
    the SVG), none changes and no temporary file remains.

    Args:
        graph_or_roots: A graph from `gradexport.to_networkx`, or roots.
        folder: Where to write.
        formats: Format names, or one comma-separated string.
        stem: The file name without extension.
        progress: Show a progress bar on stderr (``True``), or advance this
            tqdm bar by one step per file.
        **options: Trace, fold, diagram and render options (see `gradexport.api.export`).

    Returns:
        The path written for each format, in the order given.

    Raises:
        ValueError: an unknown format or a stem that is not a plain file name.
        TypeError: an option that does not apply to any of the formats.
        OutputError: a folder or file cannot be written.
        GraphvizNotFoundError, RenderError: SVG could not be rendered.

    Examples:
        >>> import tempfile, torch, gradexport
        >>> x = torch.ones(3, requires_grad=True)
        >>> paths = gradexport.write((x * x).sum(), tempfile.mkdtemp(), "dot,json", params={"x": x})
        >>> sorted((name, path.name) for name, path in paths.items())
        [('dot', 'graph.dot'), ('json', 'graph.json')]
    """
    names = parse_formats(formats)
    if not is_plain_name(stem):
        raise ArgumentValueError(f"gradexport.write: stem must be a plain file name, got {stem!r}")
    source, plain_source, export_options = _per_format(graph_or_roots, names, options, caller="write")
    specs: list[Format] = [FORMATS[name] for name in names]
    paths = {spec.name: Path(folder) / f"{stem}{spec.extension}" for spec in specs}
    with _progress_bar(progress, len(specs)) as bar, StagedFiles() as staged, gc_paused():
        for spec in specs:
            bar.set_description(f"gradexport: writing {paths[spec.name].name}")
            spec.write_to(source if spec.name == "html" else plain_source, staged.open(paths[spec.name]), export_options)
            bar.update()
    return paths


def is_plain_name(stem: object) -> bool:
    """Whether ``stem`` names a file in a folder without leaving it: no separator, not ``.`` or ``..``.

    Examples:
        >>> is_plain_name("graph"), is_plain_name("../escape"), is_plain_name("")
        (True, False, False)
    """
    return isinstance(stem, str) and stem not in ("", ".", "..") and not any(separator in stem for separator in ("/", "\\", "\0"))


@contextmanager
def _progress_bar(progress: bool | tqdm, total: int) -> Iterator[tqdm]:
    from tqdm import tqdm

    if isinstance(progress, tqdm):
        yield progress
        return
    # delay: nothing appears for graphs written in under half a second.
    with tqdm(total=total, unit="file", file=sys.stderr, delay=0.5, leave=False, disable=not progress) as bar:
        yield bar
