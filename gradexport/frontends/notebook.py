"""Show an autograd graph inline in Jupyter: `show` a loss, or a model and its inputs, in one call.

`show` returns a `GraphView`. A notebook displays it as a light static
picture: the SVG (rendered by Graphviz on first display) with a caption
saying what it holds. Over `NOTEBOOK_NODES` nodes, a graph that knows its
modules is drawn at the deepest folding of its modules within that many
nodes (`gradexport.tools.fit`), as the interactive viewer opens folded; pass
``depth=`` (or ``fold_modules=``) to choose the folding yourself. The cell
holds no script: ``view.interactive()`` displays the interactive viewer
(`gradexport.to_html`, isolated in an ``<iframe srcdoc>`` so that it runs in
classic Jupyter, JupyterLab and VS Code alike) when you ask for it, and
``view.save("graph.html")`` writes any format, by the file's extension.

Where no Graphviz program exists the cell offers the Mermaid text instead
(which JupyterLab 4.1+ draws natively) and the viewer, for front ends that
draw no Mermaid. Over `gradexport.core.limits.GRAPHVIZ_SLOW_NODES` nodes
without modules to fold, there is no static picture (with a
`gradexport.errors.GraphvizSizeWarning`): the viewer is the display.

Examples:
    >>> import torch, gradexport
    >>> x = torch.ones(2, requires_grad=True)
    >>> view = gradexport.show((x * 3).sum(), params={"x": x})
    >>> view
    GraphView(4 nodes, 3 edges)
    >>> sorted(view._repr_mimebundle_())
    ['text/html', 'text/plain']
    >>> model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh())
    >>> gradexport.show(model, torch.ones(4, 3))  # runs the forward pass with module capture
    GraphView(6 nodes, 5 edges)
"""

from __future__ import annotations

import dataclasses
import html as html_text
import os
import re
import warnings
from functools import cached_property
from pathlib import Path
from typing import Any

import networkx as nx
import torch

from ..analysis.simplify import fit, has_modules
from ..api.export import GraphOrRoots, as_graph, with_steps, write
from ..api.registry import FORMATS
from ..backward.replay_record import Replay
from ..core.errors import ArgumentTypeError, ArgumentValueError, GraphTooLargeError, GraphvizSizeWarning
from ..core.limits import GRAPHVIZ_SLOW_NODES
from ..core.options import DiagramOptions, ExportKeywords, ExportOptions, FoldOptions, RenderOptions, Unpack
from ..core.source import Source
from ..formats import html, svg
from ..tracing.modules import capture_modules

__all__ = ["NOTEBOOK_NODES", "GraphView", "Viewer", "show"]

#: Above this many nodes, a notebook draws a graph that knows its modules folded to within
#: this many, as the interactive viewer opens folded: a cell stays small and readable.
NOTEBOOK_NODES = 150

# Graphviz's SVG starts with an XML declaration, a DOCTYPE and comments, which an HTML cell does not take.
_SVG_PROLOGUE = re.compile(r"\A(?:\s*(?:<\?xml[^>]*\?>|<!DOCTYPE[^>]*>|<!--.*?-->))*\s*", re.DOTALL)


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
        fold: Whether the picture may fold modules to within `NOTEBOOK_NODES`
            nodes (``False`` when the caller chose a folding with ``depth=``).
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
        fold: bool = True,
    ):
        self.graph = graph
        self.fold = fold
        self.page_graph = page_graph
        self.options = options or DiagramOptions()
        self.prog = prog
        self.fit = fit
        self.dot_timeout = dot_timeout

    @cached_property
    def static_graph(self) -> nx.MultiDiGraph | None:
        """What the picture draws (``None``: no picture, the viewer alone).

        The graph itself up to `NOTEBOOK_NODES` nodes; above, when it knows its
        modules (and ``fold``), the deepest folding within `NOTEBOOK_NODES`
        nodes; else the graph up to `GRAPHVIZ_SLOW_NODES` nodes, over which the
        deepest folding within those, or none, with a `GraphvizSizeWarning`.

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
        if self.fold and nodes > NOTEBOOK_NODES and has_modules(graph):
            try:
                return fit(graph, max_nodes=NOTEBOOK_NODES, max_edges=None)
            except GraphTooLargeError:
                pass  # even the whole model as one node is over: draw as Graphviz allows
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
                f"show: {nodes:,} nodes is more than Graphviz lays out in a few seconds ({GRAPHVIZ_SLOW_NODES:,}), so {said}; "
                "view.interactive() shows the whole graph. Pass depth= to choose the folding."
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
        """The interactive viewer's page in an isolating ``<iframe srcdoc>``, made once (what `interactive` displays)."""
        return html.notebook_iframe(html.to_html(self.graph if self.page_graph is None else self.page_graph, self.options))

    def caption(self) -> str:
        """One line saying what the picture holds and how to see the rest."""
        shown = self.static_graph
        size = f"{self.graph.number_of_nodes():,} nodes, {self.graph.number_of_edges():,} edges"
        if shown is not None and shown is not self.graph and "collapsed_depth" in shown.graph:
            size += f", drawn with modules folded from depth {shown.graph['collapsed_depth']} ({shown.number_of_nodes():,} nodes; depth= chooses)"
        return f"{size}. view.interactive() opens the interactive viewer; view.save('graph.html') writes it, or any format."

    def interactive(self) -> Viewer:
        """The interactive viewer of the whole graph, which a notebook displays (the page of `gradexport.to_html`)."""
        return Viewer(self.html)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the graph, drawn with this view's options, in the format the file's extension names; returns the path.

        The whole graph is written (the picture's folding is for the cell
        only); a replay's steps go to an html page. Extensions:
        ``.dot``, ``.svg``, ``.mmd`` (Mermaid), ``.json``, ``.html`` and Model Explorer's.

        Raises:
            ArgumentValueError: an extension that names no format.

        Examples:
            >>> import tempfile, torch, gradexport
            >>> x = torch.ones(2, requires_grad=True)
            >>> path = gradexport.show((x * 2).sum(), params={"x": x}).save(os.path.join(tempfile.mkdtemp(), "x.json"))
            >>> gradexport.from_json(path.read_text()).number_of_nodes()
            4
        """
        target = Path(path)
        by_extension = {spec.extension: spec for spec in FORMATS.values()}
        spec = next((by_extension[ending] for ending in sorted(by_extension, key=len, reverse=True) if target.name.endswith(ending)), None)
        if spec is None:
            raise ArgumentValueError(f"GraphView.save: {target.name} has no extension of a format: end it with one of {', '.join(by_extension)}")
        graph = self.page_graph if spec.name == "html" and self.page_graph is not None else self.graph
        chosen = {**_changed(self.options), **_changed(RenderOptions(prog=self.prog, dot_timeout=self.dot_timeout)), **_changed(FoldOptions(fit=self.fit))}
        keywords = {name: value for name, value in chosen.items() if spec.honours.honours(name, from_roots=False)}
        stem = target.name[: -len(spec.extension)]
        return write(graph, target.parent, spec.name, stem=stem, **keywords)[spec.name]

    def _repr_html_(self) -> str:
        return self._repr_mimebundle_()["text/html"]

    def _repr_svg_(self) -> str | None:
        if self.static_graph is None:
            return None
        try:
            return self.svg
        except svg.GraphvizNotFoundError:
            return None

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        """The picture with its caption, as HTML that holds no script; without Graphviz, the Mermaid text and the viewer."""
        bundle = {"text/plain": repr(self)}
        if self.static_graph is None:
            bundle["text/html"] = self.html  # too large for Graphviz and for Mermaid, nothing to fold: the viewer alone
            return bundle
        rendered = self._repr_svg_()
        if rendered is None:
            export = ExportOptions(fold=FoldOptions(fit=self.fit), diagram=self.options, render=RenderOptions(prog=self.prog, dot_timeout=self.dot_timeout))
            bundle["text/vnd.mermaid"] = FORMATS["mermaid"].text(Source(self.graph), export)  # folded to fit as to_mermaid folds it
            bundle["text/html"] = self.html  # for front ends that draw no Mermaid
            return bundle
        bundle["text/html"] = (
            f'<figure class="gradexport" style="margin: 0">{_SVG_PROLOGUE.sub("", rendered, count=1)}'
            f'<figcaption style="font-size: smaller">{html_text.escape(self.caption())}</figcaption></figure>'
        )
        return bundle

    def __repr__(self) -> str:
        return f"GraphView({self.graph.number_of_nodes()} nodes, {self.graph.number_of_edges()} edges)"


class Viewer:
    """The interactive viewer's page, in an isolating iframe, displayed by a notebook (see `GraphView.interactive`).

    Attributes:
        html: The ``<iframe srcdoc>`` holding the page.
    """

    def __init__(self, html: str):
        self.html = html

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return f"Viewer({len(self.html):,} characters)"


def _changed(options: Any) -> dict[str, Any]:
    """The fields of an options dataclass that differ from their defaults."""
    return {item.name: getattr(options, item.name) for item in dataclasses.fields(options) if getattr(options, item.name) != item.default}


def show(graph_or_roots: GraphOrRoots | Replay | torch.nn.Module, inputs: Any = None, /, **options: Unpack[ExportKeywords]) -> GraphView:
    """A `GraphView` of roots, a graph, or a model run on ``inputs``; takes the options of `gradexport.to_svg` and `gradexport.to_mermaid`.

    Given a model, ``show(model, inputs)`` runs its forward pass inside
    `gradexport.capture_modules` and shows the graph behind the output, with
    every node's module (``module=model``): ``inputs`` is one tensor, a tuple
    of positional arguments or a dict of keyword arguments.

    Given a `gradexport.records.Replay` (or roots with ``steps=True``, replayed
    without touching ``.grad``, as by `gradexport.to_html`), the viewer
    has the step bar to walk through the backward pass.

    Raises:
        ArgumentTypeError: ``inputs`` without a model, or a model without them.
        GraphvizNotFoundError: ``prog`` was given and names no Graphviz program
            (without ``prog``, a notebook shows Mermaid where Graphviz is missing).

    Examples:
        >>> import torch, gradexport
        >>> x = torch.ones(2, requires_grad=True)
        >>> view = show((x * 2).sum(), params={"x": x})
        >>> view  # a notebook shows the SVG (Graphviz) or Mermaid; view.interactive() the viewer
        GraphView(4 nodes, 3 edges)
    """
    shown: GraphOrRoots | Replay
    if isinstance(graph_or_roots, torch.nn.Module):
        shown, options = _run_forward(graph_or_roots, inputs, options)
    elif inputs is not None:
        raise ArgumentTypeError(
            f"show: inputs are for a model (show(model, inputs)), not for a {type(graph_or_roots).__name__}: pass the loss alone, show(loss)"
        )
    else:
        shown = graph_or_roots
    page_graph = None
    if isinstance(shown, Replay) or options.get("steps"):
        stepped, options = with_steps(shown, options, formats=["html"], caller="show")
        assert isinstance(stepped, nx.MultiDiGraph)  # a record, or roots replayed: always a graph
        page_graph = stepped
        shown = graph = stepped.copy()
        del graph.graph[html.STEPS_ATTRIBUTE]  # the SVG and Mermaid fallbacks draw the graph alone
    assert not isinstance(shown, Replay)  # with_steps made a record a graph
    graph, export_options = as_graph(shown, ("svg", "mermaid"), caller="show", **options)
    prog = export_options.render.prog
    if prog is not None:
        svg.find_graphviz(prog)
    return GraphView(
        graph,
        export_options.diagram,
        prog,
        fit=export_options.fold.fit,
        page_graph=page_graph,
        dot_timeout=export_options.render.dot_timeout,
        fold=not export_options.fold.folds,
    )


def _run_forward(model: torch.nn.Module, inputs: Any, options: ExportKeywords) -> tuple[Any, ExportKeywords]:
    """The output of ``model`` on ``inputs``, run inside `capture_modules`, and the options with ``module=model``."""
    if inputs is None:
        raise ArgumentTypeError("show: a model needs its inputs, show(model, inputs): a tensor, a tuple of arguments or a dict of keyword arguments")
    if "module" in options and options["module"] is not model:
        raise ArgumentTypeError("show: module= names another model than the one shown: leave module= out, show(model, inputs) names it")
    with capture_modules():
        if isinstance(inputs, dict):
            output = model(**inputs)
        elif isinstance(inputs, tuple):
            output = model(*inputs)
        else:
            output = model(inputs)
    return output, ExportKeywords(**{**options, "module": model})
