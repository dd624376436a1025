"""Show an autograd graph inline in Jupyter, as torchviz's ``make_dot`` does.

`show` returns a `GraphView`, which a notebook displays as the
interactive viewer (`gradexport.to_html`, isolated in an ``<iframe
srcdoc>`` so that it runs in classic Jupyter, JupyterLab and VS Code alike),
with the SVG (rendered by Graphviz on first display) for front ends that run
no scripts. Where no Graphviz program exists it offers the Mermaid text
instead, which JupyterLab 4.1+ draws natively.

Over `gradexport.core.limits.GRAPHVIZ_SLOW_NODES` nodes, where Graphviz
takes seconds to minutes, the SVG draws the deepest folding of the modules
that is within that size (`gradexport.fit`), with a `GraphvizSizeWarning`
saying so; a graph without modules to fold gets no SVG, and the viewer
(which draws any size) is the whole display. Pass ``depth=`` to choose the
folding yourself.

Examples:
    >>> import torch, gradexport
    >>> x = torch.ones(2, requires_grad=True)
    >>> view = gradexport.show((x * 3).sum(), params={"x": x})
    >>> view
    GraphView(4 nodes, 3 edges)
    >>> sorted(view._repr_mimebundle_())
    ['image/svg+xml', 'text/html', 'text/plain']
"""

from __future__ import annotations

import os
import warnings
from functools import cached_property
from typing import Any

import networkx as nx

from ..analysis.simplify import fit, has_modules
from ..api.export import GraphOrRoots, as_graph, with_steps
from ..api.registry import FORMATS
from ..backward.replay_record import Replay
from ..core.errors import GraphTooLargeError, GraphvizSizeWarning
from ..core.limits import GRAPHVIZ_SLOW_NODES
from ..core.options import DiagramOptions, ExportKeywords, ExportOptions, FoldOptions, RenderOptions, Unpack
from ..core.source import Source
from ..formats import html, svg

__all__ = ["GraphView", "record_shown", "show", "start_recording"]

#: The views `show` made since a recorder (`record_shown`) last took them; ``None`` while none listens.
_shown: list[GraphView] | None = None


def start_recording() -> None:
    """From now on `show` keeps its views for `record_shown` (once started, calling it again changes nothing)."""
    global _shown
    if _shown is None:
        _shown = []


def record_shown(*, keep_recording: bool = True) -> list[GraphView]:
    """The views `show` made since the last call (or `start_recording`); ``keep_recording=False`` ends the recording.

    A gallery builder (sphinx-gallery's scraper, `gradexport.frontends.sphinx.gallery`)
    calls it after each block of an example, as matplotlib's scraper asks for
    the open figures. Outside such a build nothing is recorded, so a notebook
    keeps no graph alive.

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> start_recording()
        >>> view = show((x * 2).sum())
        >>> record_shown(keep_recording=False) == [view]
        True
    """
    global _shown
    taken, _shown = _shown or [], [] if keep_recording else None
    return taken


class GraphView:
    """A graph with the options to draw it, displayed by Jupyter's rich display protocol.

    Attributes:
        graph: The graph (from `gradexport.to_networkx`).
        options: How it is drawn.
        prog: Graphviz program for the SVG (see `gradexport.formats.svg`).
        fit: Whether the Mermaid fallback is folded to fit mermaid.js's limits,
            as `gradexport.to_mermaid` folds it (see its ``fit`` option).
        page_graph: What the viewer draws when it differs from ``graph``: the
            graph with a replay's steps (`gradexport.api.export.with_steps`).
        dot_timeout: Seconds Graphviz may run (``None``: no limit).
    """

    def __init__(
        self,
        graph: nx.MultiDiGraph,
        options: DiagramOptions | None = None,
        prog: str | os.PathLike[str] | None = None,
        *,
        fit: bool = True,
        page_graph: nx.MultiDiGraph | None = None,
        dot_timeout: float | None = None,
    ):
        self.graph = graph
        self.page_graph = page_graph
        self.options = options or DiagramOptions()
        self.prog = prog
        self.fit = fit
        self.dot_timeout = dot_timeout

    @cached_property
    def static_graph(self) -> nx.MultiDiGraph | None:
        """What the SVG draws: the graph, or over `GRAPHVIZ_SLOW_NODES` nodes its deepest folding within them (``None``: none is).

        Examples:
            >>> import torch, gradexport
            >>> x = torch.ones(1, requires_grad=True)
            >>> chain = x
            >>> for _ in range(1_200):
            ...     chain = chain * 1.0
            >>> view = gradexport.show(chain.sum(), params={"x": x})
            >>> view.static_graph is None  # no modules to fold: the viewer alone shows it
            True
        """
        graph = self.graph
        nodes = graph.number_of_nodes()
        if nodes <= GRAPHVIZ_SLOW_NODES:
            return graph
        shown: nx.MultiDiGraph | None = None
        if has_modules(graph):
            try:
                shown = fit(graph, max_nodes=GRAPHVIZ_SLOW_NODES, max_edges=None)
            except GraphTooLargeError:
                shown = None
        if shown is None:
            said = "it has no modules to fold (trace with module= inside gradexport.capture_modules())"
        else:
            said = f"the picture folds modules at depth {shown.graph['collapsed_depth']} and deeper ({shown.number_of_nodes():,} nodes)"
        warnings.warn(
            GraphvizSizeWarning(
                f"show(): {nodes:,} nodes is more than Graphviz lays out in a few seconds ({GRAPHVIZ_SLOW_NODES:,}), so {said}; "
                "the interactive viewer shows the whole graph. Pass depth= to choose the folding."
            ),
            stacklevel=4,
        )
        return shown

    @cached_property
    def svg(self) -> str:
        """The SVG text of `static_graph`, rendered once.

        Raises:
            GraphTooLargeError: the graph is too large for Graphviz and has no modules to fold.
        """
        shown = self.static_graph
        if shown is None:
            raise GraphTooLargeError(f"{self.graph.number_of_nodes():,} nodes is too large to lay out quickly; {svg.size_advice()}")
        return svg.to_svg(shown, self.options, self.prog, self.dot_timeout)

    @cached_property
    def html(self) -> str:
        """The interactive viewer's page in an isolating ``<iframe srcdoc>``, made once."""
        return html.notebook_iframe(html.to_html(self.graph if self.page_graph is None else self.page_graph, self.options))

    def _repr_html_(self) -> str:
        return self.html

    def _repr_svg_(self) -> str | None:
        if self.static_graph is None:
            return None
        try:
            return self.svg
        except svg.GraphvizNotFoundError:
            return None

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        bundle = {"text/plain": repr(self), "text/html": self.html}
        if self.static_graph is None:
            return bundle  # too large for Graphviz and for Mermaid, nothing to fold: the viewer alone
        rendered = self._repr_svg_()
        if rendered is None:
            export = ExportOptions(fold=FoldOptions(fit=self.fit), diagram=self.options, render=RenderOptions(prog=self.prog, dot_timeout=self.dot_timeout))
            bundle["text/vnd.mermaid"] = FORMATS["mermaid"].text(Source(self.graph), export)
        else:
            bundle["image/svg+xml"] = rendered
        return bundle

    def __repr__(self) -> str:
        return f"GraphView({self.graph.number_of_nodes()} nodes, {self.graph.number_of_edges()} edges)"


def show(graph_or_roots: GraphOrRoots | Replay, **options: Unpack[ExportKeywords]) -> GraphView:
    """A `GraphView` of roots or a graph; takes the options of `gradexport.to_svg` and `gradexport.to_mermaid`.

    Given a `gradexport.Replay` (or roots with ``steps=True``, replayed
    without touching ``.grad``, as by `gradexport.to_html`), the viewer
    has the step bar to walk through the backward pass.

    Raises:
        GraphvizNotFoundError: ``prog`` was given and names no Graphviz program
            (without ``prog``, a notebook shows Mermaid where Graphviz is missing).

    Examples:
        >>> import torch, gradexport
        >>> x = torch.ones(2, requires_grad=True)
        >>> view = show((x * 2).sum(), params={"x": x})
        >>> view  # a notebook shows it as SVG (Graphviz) or as a Mermaid page
        GraphView(4 nodes, 3 edges)
    """
    page_graph = None
    if isinstance(graph_or_roots, Replay) or options.get("steps"):
        stepped, options = with_steps(graph_or_roots, options, formats=["html"], caller="show")
        options.pop("steps", None)
        assert isinstance(stepped, nx.MultiDiGraph)  # a record, or roots replayed: always a graph
        page_graph = stepped
        graph_or_roots = graph = stepped.copy()
        del graph.graph[html.STEPS_ATTRIBUTE]  # the SVG and Mermaid fallbacks draw the graph alone
    graph, export_options = as_graph(graph_or_roots, ("svg", "mermaid"), caller="show", **options)
    prog = export_options.render.prog
    if prog is not None:
        svg.find_graphviz(prog)
    view = GraphView(
        graph,
        export_options.diagram,
        prog,
        fit=export_options.fold.fit,
        page_graph=page_graph,
        dot_timeout=export_options.render.dot_timeout,
    )
    if _shown is not None:
        _shown.append(view)
    return view
