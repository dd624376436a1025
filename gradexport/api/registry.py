"""The one list of output formats: each format's name, file extension, writer and needs.

`gradexport.write`, the export functions (``to_dot``...), the command
line, the notebook and the MkDocs plugin all look formats up here, and take
their options from `gradexport.core.options`.

To add a format: write its module in this package (NetworkX readwrite style:
``generate_*``, ``to_*``, ``write_*``, reading the graph only through
`gradexport.core.source.Source`), then register it once at the
end of this module:

```python
register(Format(
    name="yaml",
    extension=".yaml",
    description="the graph as YAML",
    text=lambda source, options: yaml.to_yaml(source),
    diagram=False,
))
```

``write()`` and ``--format`` then accept it (the documentation hosts once
`gradexport.frontends.blocks.spec` says how it sits in a page). ``options``
(a `gradexport.core.options.FormatOptions`) declares the options it honours:
by default `DIAGRAM_OPTIONS` for a diagram, `DATA_OPTIONS` for ``diagram=False``.
Every other option is refused for it by name, and ``--help``, the plugin's
list and the reference say where each option applies from these declarations. A format that needs the whole graph before its first byte
says so with ``streams``.

Examples:
    >>> FORMATS["mermaid"].extension, FORMATS["json"].diagram
    ('.mmd', False)
    >>> parse_formats("svg, dot,svg")
    ['svg', 'dot']
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any

import networkx as nx

from ..core.errors import ArgumentTypeError, ArgumentValueError
from ..core.options import DiagramOptions, ExportOptions, FormatOptions, where_it_applies
from ..core.source import Source
from ..formats import dot, html, json, mermaid, model_explorer, svg

__all__ = [
    "DATA_OPTIONS",
    "DEFAULT_FORMATS",
    "DIAGRAM_OPTIONS",
    "FORMATS",
    "Format",
    "honoured_options",
    "option_formats",
    "parse_formats",
    "read_options",
    "register",
]

_NAMING = frozenset({"params", "module"})
_FOLDING = frozenset({"depth", "fold_modules"})
_DRAWING = frozenset(DiagramOptions.names())
# What only a recorded graph holds (record_gradients, replay, find_nonfinite): a trace of roots has none of it.
_RECORDED_ONLY = frozenset({"grad_norms", "exec_order"})

#: What a diagram honours: every diagram option; from roots also the names, less what only a recorded graph holds.
DIAGRAM_OPTIONS = FormatOptions(on_graph=_FOLDING | _DRAWING, on_roots=_NAMING | _FOLDING | (_DRAWING - _RECORDED_ONLY))
#: What a format that writes the graph's data honours: folding; from roots also what the trace records.
DATA_OPTIONS = FormatOptions(on_graph=_FOLDING, on_roots=_NAMING | _FOLDING | {"edge_metadata", "show_none", "show_saved"})
#: What only a trace makes and only some formats show: each compiled region's backward graph (JSON, DOT, SVG, the viewer).
_OPENING = frozenset({"open_compiled"})


def _always(options: ExportOptions) -> bool:
    return True


@dataclass(frozen=True)
class Format:
    """An output format.

    Attributes:
        name: What ``formats=`` and ``--format`` call it.
        extension: The file extension, with its dot.
        description: One line for ``--help`` and the docs.
        text: Draws a `Source` with the call's options, as text.
        write: Writes it to an open text file; default: ``file.write(text(...))``.
        diagram: Whether it draws a diagram, and so takes the diagram options.
        streams: Whether it can draw a one-pass stream with these options
            (else the graph is built first).
        drawn_only: Whether it reads only what `gradexport.formats.diagram`
            draws, so that a stream it draws may leave out the rest (see
            `gradexport.streams.GraphStream`).
        options: The options it honours (default: `DIAGRAM_OPTIONS` or
            `DATA_OPTIONS`, after ``diagram``); every other one is refused for it.
    """

    name: str
    extension: str
    description: str
    text: Callable[[Source, ExportOptions], str]
    write: Callable[[Source, IO[str], ExportOptions], None] | None = None
    diagram: bool = True
    streams: Callable[[ExportOptions], bool] = _always
    drawn_only: bool = False
    options: FormatOptions | None = None

    def __post_init__(self) -> None:
        if self.options is None:
            object.__setattr__(self, "options", DIAGRAM_OPTIONS if self.diagram else DATA_OPTIONS)

    @property
    def honours(self) -> FormatOptions:
        """The options it honours (``options``, filled in from ``diagram`` when not given)."""
        assert self.options is not None  # __post_init__ fills it
        return self.options

    def write_to(self, source: Source, file: IO[str], options: ExportOptions) -> None:
        """Write ``source`` to ``file`` with the format's writer."""
        if self.write is not None:
            self.write(source, file, options)
        else:
            file.write(self.text(source, options))


#: Every format, by name, in the order ``--help`` lists them.
FORMATS: dict[str, Format] = {}


def register(spec: Format) -> Format:
    """Add ``spec`` to `FORMATS`.

    Raises:
        ValueError: for a name already registered, or an extension without its dot.
    """
    if spec.name in FORMATS:
        raise ArgumentValueError(f"a format named {spec.name!r} is registered already")
    if not spec.extension.startswith("."):
        raise ArgumentValueError(f"format {spec.name!r}: the extension must start with a dot, got {spec.extension!r}")
    FORMATS[spec.name] = spec
    return spec


def parse_formats(formats: Iterable[str] | str) -> list[str]:
    """Format names in order without repeats, from names or a comma-separated string.

    Raises:
        ValueError: an unknown format, or none at all.
        TypeError: ``formats`` is neither a string nor an iterable of strings.
    """
    if isinstance(formats, str):
        items: list[object] = list(formats.split(","))
    elif isinstance(formats, Iterable):
        items = list(formats)
    else:
        raise ArgumentTypeError(f"formats must be format names or one comma-separated string, got {type(formats).__name__}")
    names = list(dict.fromkeys(str(item).strip().lower() for item in items if str(item).strip()))
    unknown = [name for name in names if name not in FORMATS]
    if unknown or not names:
        raise ArgumentValueError(f"unknown format(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(FORMATS)}")
    return names


def read_options(keywords: Mapping[str, Any], *, formats: Collection[str], from_roots: bool, caller: str = "gradexport") -> ExportOptions:
    """The options of a call that writes ``formats``, checked against what each format honours.

    `gradexport.core.options.ExportOptions.from_keywords` with each
    registered format's ``options``.

    Examples:
        >>> read_options({"direction": "LR"}, formats=["svg"], from_roots=True).diagram.direction
        'LR'
        >>> read_options({"direction": "LR"}, formats=["json"], from_roots=True)
        Traceback (most recent call last):
        ...
        gradexport.errors.ArgumentTypeError: gradexport: direction applies only to dot, svg, mermaid, html, not to json: leave it out, or write one of those formats
    """
    return ExportOptions.from_keywords(keywords, formats=formats, from_roots=from_roots, honoured=honoured_options(), caller=caller)


def honoured_options() -> dict[str, FormatOptions]:
    """Each registered format's `FormatOptions`, by name."""
    return {name: spec.honours for name, spec in FORMATS.items()}


def option_formats(name: str) -> str:
    """Where option ``name`` applies, as ``--help`` and the reference tables say it.

    Examples:
        >>> option_formats("fit")
        'mermaid'
        >>> option_formats("params")
        'dot, svg, mermaid, json, html, model-explorer (only while tracing roots)'
    """
    return where_it_applies(name, honoured_options())


def fitted_mermaid(source: Source, options: ExportOptions) -> str:
    """Mermaid text of ``source``, or of its deepest collapse that mermaid.js draws (``fit``).

    With ``fit`` and a graph over mermaid.js's limits that knows its modules,
    the text is that of the deepest `gradexport.collapse` within the
    limits, with a `MermaidSizeWarning` saying so. Otherwise it is the
    whole graph's text, with the writer's size warning when it is over the
    limits. Each candidate is drawn once, and one with more edges than the
    limit not at all.
    """
    from ..analysis.simplify import GraphTooLargeError, fit, has_modules

    graph = source.graph
    if not options.fold.fit or graph is None or not has_modules(graph):
        return mermaid.to_mermaid(source, options.diagram)
    drawn: list[tuple[nx.MultiDiGraph, mermaid.MermaidText]] = []

    def fits(candidate: nx.MultiDiGraph) -> bool:
        drawn.append((candidate, mermaid.render_mermaid(candidate, options.diagram)))
        return drawn[-1][1].fits

    try:
        chosen = fit(graph, max_edges=mermaid.LIMITS.max_edges, fits=fits)
    except GraphTooLargeError:
        whole = drawn[0][1] if drawn and drawn[0][0] is graph else mermaid.render_mermaid(graph, options.diagram)
        warning = whole.size_warning()
        if warning is not None:
            warnings.warn(warning, stacklevel=4)
        return whole.text
    text = drawn[-1][1].text  # fit returns the first candidate that fits: the last one drawn
    if chosen is not graph:
        warnings.warn(
            mermaid.MermaidSizeWarning(
                f"the full Mermaid diagram ({graph.number_of_nodes():,} nodes, {graph.number_of_edges():,} edges) "
                f"is over mermaid.js's limits, so modules at depth {chosen.graph['collapsed_depth']} and deeper are "
                f"folded into one node each ({chosen.number_of_nodes():,} nodes). Pass depth= to choose the folding, "
                "or use the interactive viewer (format html) for the whole graph."
            ),
            stacklevel=4,
        )
    return text


def _adding(options: FormatOptions, names: set[str]) -> FormatOptions:
    """``options`` with ``names`` honoured too, given a graph and from roots."""
    return FormatOptions(options.on_graph | names, (options.on_roots or options.on_graph) | names)


def _from_roots(options: FormatOptions, names: frozenset[str]) -> FormatOptions:
    """``options`` with ``names`` honoured too, from roots only (what a trace makes: a graph already built has it or not)."""
    return FormatOptions(options.on_graph, (options.on_roots or options.on_graph) | names)


def _drawn(draw: Callable[[Source, DiagramOptions], str]) -> Callable[[Source, ExportOptions], str]:
    """A writer's ``to_*(source, diagram_options)`` as a format's ``text``."""
    return lambda source, options: draw(source, options.diagram)


def _drawn_to(write: Callable[[Source, IO[str], DiagramOptions], None]) -> Callable[[Source, IO[str], ExportOptions], None]:
    """A writer's ``write_*(source, file, diagram_options)`` as a format's ``write``."""
    return lambda source, file, options: write(source, file, options.diagram)


register(
    Format(
        "dot",
        ".dot",
        "Graphviz DOT text",
        text=_drawn(dot.to_dot),
        write=_drawn_to(dot.write_dot),
        drawn_only=True,
        options=_from_roots(DIAGRAM_OPTIONS, _OPENING),
    )
)
register(
    Format(
        "svg",
        ".svg",
        "SVG laid out by Graphviz",
        text=lambda source, options: svg.to_svg(source, options.diagram, options.render.prog, options.render.dot_timeout),
        write=lambda source, file, options: svg.write_svg(source, file, options.diagram, options.render.prog, options.render.dot_timeout),
        drawn_only=True,
        options=_from_roots(_adding(DIAGRAM_OPTIONS, {"prog", "dot_timeout"}), _OPENING),
    )
)
register(
    Format(
        "mermaid",
        ".mmd",
        "Mermaid flowchart text, folded to fit mermaid.js's limits",
        text=fitted_mermaid,
        # Fitting folds modules, which needs the whole graph; only a trace with module= has them.
        streams=lambda options: not (options.fold.fit and options.trace.module is not None),
        drawn_only=True,
        options=_adding(DIAGRAM_OPTIONS, {"fit"}),
    )
)
register(
    Format(
        "json",
        ".json",
        "the graph model as node-link JSON (gradexport.from_json reads it back)",
        text=lambda source, options: json.to_json(source),
        write=lambda source, file, options: json.write_json(source, file),
        diagram=False,
        options=_from_roots(DATA_OPTIONS, _OPENING),
    )
)
register(
    Format(
        "html",
        ".html",
        "the interactive viewer: one self-contained page, opened folded, that lays out what is shown",
        text=_drawn(html.to_html),
        write=_drawn_to(html.write_html),
        # The viewer folds and boxes modules itself (box_depth: not yet); its side panel shows the recorded edge data.
        options=FormatOptions(
            on_graph=DIAGRAM_OPTIONS.on_graph - {"box_depth"},
            on_roots=(DIAGRAM_OPTIONS.on_roots or frozenset()) - {"box_depth"} | {"edge_metadata", "steps"} | _OPENING,
        ),
    )
)
register(
    Format(
        "model-explorer",
        model_explorer.EXTENSION,
        "the graph for Google's Model Explorer (pip install gradexport[explorer])",
        text=_drawn(lambda source, diagram: "".join(model_explorer.generate_model_explorer(source, diagram))),
        write=_drawn_to(model_explorer.write_model_explorer),
        diagram=False,
    )
)

#: The formats `gradexport.write` and the command line write unless told otherwise.
DEFAULT_FORMATS = ("dot", "svg", "mermaid", "json")
