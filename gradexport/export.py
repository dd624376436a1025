"""From roots or a graph to diagram text and files, in one call.

Every function takes either roots (what :func:`gradexport.to_networkx` takes:
a tensor, a ``grad_fn``, a tuple, list or dict of them) or a graph it built,
plus keyword options:

- Diagram options (:class:`gradexport.formats.labels.DiagramOptions`):
  ``direction`` (``"TB"`` default: loss at the top, leaves at the bottom;
  ``"BT"``, ``"LR"``, ``"RL"``), ``show_none``, ``show_saved``,
  ``edge_shapes``, ``grad_norms``.
- When roots are given: ``params`` (names for leaves, as
  ``model.named_parameters()`` gives) and ``module`` (a module whose
  parameters and buffers name the leaves, and whose submodules name the
  nodes of a forward pass run inside :func:`gradexport.capture_modules`);
  ``edge_metadata=True`` records the shape, dtype and device of the gradient
  on every edge (in JSON; ``edge_shapes`` turns it on for diagrams);
  ``show_none=True`` and ``show_saved=True`` also make the graph record None
  slots and saved values.
- ``depth``: fold every module nested that deep or deeper into one node
  (:func:`gradexport.collapse`) before drawing.
- ``fit`` (Mermaid only, default ``True``): when the diagram is over mermaid.js's
  limits and the graph knows its modules, draw the deepest collapse that fits,
  with a :class:`gradexport.MermaidSizeWarning` saying so; ``fit=False``
  draws everything (and warns that mermaid.js will refuse it).

JSON holds the graph itself, so only the options that shape the graph apply to it.

Example:
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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Union

import networkx as nx

from .formats import dot, json, mermaid, svg
from .formats.files import StagedFiles
from .formats.labels import DiagramOptions
from .formats.source import GraphSource
from .graph import GraphStream, gc_paused
from .roots import Roots
from .simplify import collapse, module_depth

if TYPE_CHECKING:
    import pydot
    from tqdm import tqdm

__all__ = ["DEFAULT_FORMATS", "FORMATS", "GraphOrRoots", "as_graph", "fitted_mermaid", "to_dot", "to_json", "to_mermaid", "to_pydot", "to_svg", "write"]

#: What the functions of this module accept: a graph from :func:`gradexport.to_networkx`, or roots.
GraphOrRoots = Union[nx.MultiDiGraph, Roots]

#: Each format :func:`write` knows, with its file extension.
FORMATS: dict[str, str] = {"dot": ".dot", "svg": ".svg", "mermaid": ".mmd", "json": ".json"}
#: The formats :func:`write` writes unless told otherwise.
DEFAULT_FORMATS = ("dot", "svg", "mermaid", "json")

_MODEL_OPTIONS = ("params", "module", "edge_metadata")
_SHAPE_OPTIONS = ("depth", "fit")


def as_graph(graph_or_roots: GraphOrRoots, *, caller: str = "as_graph", **options: Any) -> tuple[nx.MultiDiGraph, DiagramOptions]:
    """Split ``options`` into diagram and model options, and trace roots into a graph.

    A graph is returned as it is; roots are traced with ``params``,
    ``module``, ``show_none`` and ``show_saved`` (as ``saved``), and with
    the shape of every edge when ``edge_metadata`` or ``edge_shapes`` asks
    for it (it costs a lookup per edge).

    Raises:
        TypeError: for an unknown option, ``params``/``module``/``edge_metadata``
            with a graph, or a graph that is not a ``MultiDiGraph``.

    Example:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> graph, options = as_graph(x * 2, params={"x": x}, direction="LR")
        >>> graph.number_of_nodes(), options.direction
        (3, 'LR')
    """
    graph, diagram = _prepare(graph_or_roots, caller, options, stream=False)
    assert isinstance(graph, nx.MultiDiGraph)  # stream=False
    return graph, diagram


def _prepare(
    graph_or_roots: GraphOrRoots, caller: str, options: dict[str, Any], *, stream: bool
) -> tuple[GraphSource, DiagramOptions]:
    """:func:`as_graph`; with ``stream``, roots that need no collapsing become a :class:`GraphStream`.

    A writer draws a stream while it walks the autograd graph, with no
    MultiDiGraph in between: a third less time, and the graph is never in
    memory twice. The text is the same.
    """
    known = DiagramOptions.names() + _MODEL_OPTIONS + _SHAPE_OPTIONS
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"gradexport.{caller}() got unknown option(s) {', '.join(unknown)}; known: {', '.join(known)}")
    diagram = DiagramOptions(**{name: options[name] for name in DiagramOptions.names() if name in options})
    model = {name: options[name] for name in _MODEL_OPTIONS if name in options}
    depth = options.get("depth")
    if isinstance(graph_or_roots, nx.Graph):
        if not isinstance(graph_or_roots, nx.MultiDiGraph):
            raise TypeError(
                f"gradexport.{caller}() needs a networkx.MultiDiGraph (from gradexport.to_networkx), "
                f"got a {type(graph_or_roots).__name__}, which cannot hold the parallel edges of a + a"
            )
        if model:
            raise TypeError(
                f"gradexport.{caller}(): {' and '.join(model)} apply while tracing roots; "
                "this is a graph already, built with its own"
            )
        return _shaped(graph_or_roots, depth), diagram
    model["edge_metadata"] = bool(model.get("edge_metadata")) or diagram.edge_shapes
    walk = GraphStream(
        graph_or_roots,
        show_none=bool(diagram.show_none),
        saved=bool(diagram.show_saved),
        caller=f"gradexport.{caller}",
        **model,
    )
    if stream and depth is None:
        return walk, diagram
    return _shaped(walk.to_networkx(), depth), diagram


def _shaped(graph: nx.MultiDiGraph, depth: int | None) -> nx.MultiDiGraph:
    return graph if depth is None else collapse(graph, depth)


def _render_mermaid(graph: GraphSource, diagram: DiagramOptions) -> tuple[str, warnings.WarningMessage | None]:
    """The Mermaid text of ``graph`` and the size warning it raised, if any (held back, not shown)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", mermaid.MermaidSizeWarning)
        text = mermaid.to_mermaid(graph, diagram)
    size_warnings = [warning for warning in caught if issubclass(warning.category, mermaid.MermaidSizeWarning)]
    for warning in caught:
        if warning not in size_warnings:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return text, size_warnings[0] if size_warnings else None


def fitted_mermaid(graph: GraphSource, diagram: DiagramOptions, fit: bool = True) -> str:
    """Mermaid text of ``graph``, or of its deepest :func:`gradexport.collapse` that mermaid.js draws.

    With ``fit`` and a graph over mermaid.js's limits that knows its modules,
    the text is that of the deepest collapse within the limits, with a
    :class:`gradexport.MermaidSizeWarning` saying so. Otherwise it is the
    whole graph's text, with the writer's size warning when it is over the
    limits. Each candidate is rendered once; a graph with more edges than
    the limit is not rendered whole unless no collapse fits. A stream (see
    :mod:`gradexport.formats.source`) is drawn whole.
    """
    has_modules = fit and isinstance(graph, nx.Graph) and any(path is not None for _, path in graph.nodes(data="module"))
    full: tuple[str, warnings.WarningMessage | None] | None = None
    if not has_modules or graph.number_of_edges() <= mermaid.MAX_EDGES:
        full = _render_mermaid(graph, diagram)
        if full[1] is None or not has_modules:
            return _shown(*full)
    for depth in range(module_depth(graph), -1, -1):
        candidate = collapse(graph, depth)
        text, too_large = _render_mermaid(candidate, diagram)
        if too_large is None:
            warnings.warn(
                mermaid.MermaidSizeWarning(
                    f"the full Mermaid diagram ({graph.number_of_nodes():,} nodes, {graph.number_of_edges():,} edges) "
                    f"is over mermaid.js's limits, so modules at depth {depth} and deeper are folded into one node "
                    f"each ({candidate.number_of_nodes():,} nodes). Pass depth= to choose the folding, or use SVG "
                    "for the whole graph."
                ),
                stacklevel=3,
            )
            return text
    return _shown(*(full or _render_mermaid(graph, diagram)))


def _shown(text: str, size_warning: warnings.WarningMessage | None) -> str:
    if size_warning is not None:
        warnings.warn(size_warning.message, stacklevel=4)
    return text


def to_dot(graph_or_roots: GraphOrRoots, **options: Any) -> str:
    """Graphviz DOT text (see :mod:`gradexport.formats.dot` for the legend)."""
    source, diagram = _prepare(graph_or_roots, "to_dot", options, stream=True)
    with gc_paused():
        return dot.to_dot(source, diagram)


def to_pydot(graph_or_roots: GraphOrRoots, **options: Any) -> pydot.Dot:
    """The DOT of :func:`to_dot` as a :class:`pydot.Dot` (parsing costs time on large graphs)."""
    source, diagram = _prepare(graph_or_roots, "to_pydot", options, stream=True)
    return dot.to_pydot(source, diagram)


def to_mermaid(graph_or_roots: GraphOrRoots, **options: Any) -> str:
    """Mermaid flowchart text, collapsed to fit mermaid.js's limits where it can (see ``fit``); warns otherwise."""
    fit = options.get("fit", True)
    # Only a graph traced with module= has modules to fold, and folding needs the whole graph.
    source, diagram = _prepare(graph_or_roots, "to_mermaid", options, stream=not (fit and "module" in options))
    with gc_paused():
        return fitted_mermaid(source, diagram, fit)


def to_svg(graph_or_roots: GraphOrRoots, *, prog: str | os.PathLike[str] | None = None, **options: Any) -> str:
    """SVG text rendered by Graphviz; ``prog`` picks the program (see :mod:`gradexport.formats.svg`)."""
    source, diagram = _prepare(graph_or_roots, "to_svg", options, stream=True)
    return svg.to_svg(source, diagram, prog)


def to_json(graph_or_roots: GraphOrRoots, **options: Any) -> str:
    """Node-link JSON of the graph; :func:`gradexport.from_json` reads it back to an equal graph.

    From roots it is the JSON of ``to_networkx(roots)`` with the same
    options; ``edge_metadata=True`` adds each edge's shape, dtype and device.
    """
    source, _ = _prepare(graph_or_roots, "to_json", options, stream=True)
    with gc_paused():
        return json.to_json(source)


def write(
    graph_or_roots: GraphOrRoots,
    folder: str | os.PathLike[str],
    formats: Iterable[str] | str = DEFAULT_FORMATS,
    *,
    stem: str = "graph",
    prog: str | os.PathLike[str] | None = None,
    progress: bool | tqdm = False,
    **options: Any,
) -> dict[str, Path]:
    """Write one file per format into ``folder`` (created as needed), named ``stem`` plus the extension.

    Extensions are in :data:`FORMATS` (``.dot``, ``.svg``, ``.mmd``, ``.json``).
    The files appear only once all of them were written: if one fails (say,
    no Graphviz for the SVG), none changes and no temporary file remains.

    Args:
        graph_or_roots: A graph from :func:`gradexport.to_networkx`, or roots.
        folder: Where to write.
        formats: Names from :data:`FORMATS`, or one comma-separated string.
        stem: The file name without extension.
        prog: Graphviz program for SVG (see :mod:`gradexport.formats.svg`).
        progress: Show a progress bar on stderr (``True``), or advance this
            tqdm bar by one step per file.
        **options: Diagram and model options (see the module docstring).

    Returns:
        The path written for each format, in the order given.

    Raises:
        ValueError: an unknown format or a stem that is not a plain file name.
        OutputError: a folder or file cannot be written.
        GraphvizNotFoundError, RenderError: SVG could not be rendered.

    Example:
        >>> import tempfile, torch, gradexport
        >>> x = torch.ones(3, requires_grad=True)
        >>> paths = gradexport.write((x * x).sum(), tempfile.mkdtemp(), "dot,json", params={"x": x})
        >>> sorted((name, path.name) for name, path in paths.items())
        [('dot', 'graph.dot'), ('json', 'graph.json')]
    """
    names = parse_formats(formats)
    if not stem or stem in (".", "..") or any(separator in stem for separator in ("/", "\\", "\0")):
        raise ValueError(f"gradexport.write: stem must be a plain file name, got {stem!r}")
    graph, diagram = as_graph(graph_or_roots, caller="write", **options)
    paths = {name: Path(folder) / f"{stem}{FORMATS[name]}" for name in names}
    writers: dict[str, Callable[[IO[str]], None]] = {
        "dot": lambda file: dot.write_dot(graph, file, diagram),
        "svg": lambda file: svg.write_svg(graph, file, diagram, prog),
        "mermaid": lambda file: file.write(fitted_mermaid(graph, diagram, options.get("fit", True))),
        "json": lambda file: json.write_json(graph, file),
    }
    with _progress_bar(progress, len(names)) as bar, StagedFiles() as staged:
        for name in names:
            bar.set_description(f"gradexport: writing {paths[name].name}")
            writers[name](staged.open(paths[name]))
            bar.update()
    return paths


def parse_formats(formats: Iterable[str] | str) -> list[str]:
    """Format names in order without repeats, from names or a comma-separated string.

    Example:
        >>> parse_formats("svg, dot,svg")
        ['svg', 'dot']
    """
    items = formats.split(",") if isinstance(formats, str) else list(formats)
    names = list(dict.fromkeys(str(item).strip().lower() for item in items if str(item).strip()))
    unknown = [name for name in names if name not in FORMATS]
    if unknown or not names:
        raise ValueError(f"unknown format(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(FORMATS)}")
    return names


@contextmanager
def _progress_bar(progress: bool | tqdm, total: int) -> Iterator[tqdm]:
    from tqdm import tqdm

    if isinstance(progress, tqdm):
        yield progress
        return
    # delay: nothing appears for graphs written in under half a second.
    with tqdm(total=total, unit="file", file=sys.stderr, delay=0.5, leave=False, disable=not progress) as bar:
        yield bar
