"""Every option of every export, declared once.

An option is a field of one of four frozen dataclasses, grouped by what it
changes:

- `TraceOptions`: how roots are traced into a graph (``params``,
  ``module``, ``edge_metadata``, ``open_compiled``). Only when roots are given.
- `FoldOptions`: how the graph is folded before drawing (``depth``,
  and Mermaid's ``fit``).
- `DiagramOptions`: what a diagram shows (``direction``,
  ``show_none``, ``show_saved``, ``edge_shapes``, ``grad_norms``,
  ``group_modules``). ``show_none`` and ``show_saved`` also make a trace
  record None slots and saved values.
- `RenderOptions`: how a file is rendered (``prog``, the Graphviz
  program for SVG, and ``dot_timeout``, how long it may run).

The field's metadata (made by `option`) says how the option reads from
text (a command-line flag or a MkDocs fence attribute) and its help line.
Which formats honour it is declared by each format, as a `FormatOptions`
in `gradexport.api.registry`. `ExportOptions` reads all four from keyword arguments
(`ExportOptions.from_keywords`), command-line arguments
(`ExportOptions.given_arguments`) or fence attributes
(`ExportOptions.from_text`), and refuses an option that does nothing
for the call with a `TypeError` saying where it applies.

To add an option: add a field with `option` metadata to the class it
belongs to, its typed keyword to `ExportKeywords` (a test checks
the two agree), and its name to the `FormatOptions` of each format
that honours it (a test gives every option to every format). The export functions, ``write()``, the command line, the
notebook, the MkDocs plugin and the reference pages all take it from there.

Examples:
    >>> dot = FormatOptions(on_graph=frozenset({"direction", "depth"}))
    >>> options = ExportOptions.from_keywords({"direction": "LR", "depth": 2}, formats=("dot",), from_roots=False, honoured={"dot": dot})
    >>> options.diagram.direction, options.fold.depth
    ('LR', 2)
    >>> ExportOptions.from_keywords({"fit": False}, formats=("dot",), from_roots=False, honoured={"dot": dot, "mermaid": FormatOptions(frozenset({"fit"}))})
    Traceback (most recent call last):
    ...
    gradexport.errors.ArgumentTypeError: gradexport: fit applies only to mermaid, not to dot: leave it out, or write one of those formats
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypedDict

from .arguments import collection_of, renamed_keyword
from .errors import ArgumentTypeError, ArgumentValueError, OptionWarning

# The export functions type their keyword options with Unpack[ExportKeywords].
if sys.version_info >= (3, 11):
    from typing import Unpack as Unpack
else:  # pragma: no cover
    from typing_extensions import Unpack as Unpack

__all__ = [
    "DIRECTIONS",
    "RENAMED",
    "DiagramOptions",
    "ExportKeywords",
    "ExportOptions",
    "FoldOptions",
    "FormatOptions",
    "OptionInfo",
    "OptionWarning",
    "RenderOptions",
    "TraceOptions",
    "option",
    "option_table",
    "where_it_applies",
]

#: Earlier spellings of options, still taken with a `gradexport.errors.GradexportDeprecationWarning`: old name to new.
RENAMED = {"saved": "show_saved"}

#: Accepted values of `DiagramOptions.direction`.
DIRECTIONS = ("TB", "BT", "LR", "RL")


@dataclass(frozen=True)
class OptionInfo:
    """What an option's field says about it beyond its type and default.

    Attributes:
        help: One line for ``--help``, the plugin docs and the reference.
        parse: Reads the option from text (a fence attribute, a flag's
            value); ``None`` for options that only Python can give.
        flag: The command-line flag; ``None`` keeps it off the command line.
        metavar: The flag's value placeholder, for options that take one.
        aliases: Other spellings of the flag, kept for earlier command lines.
    """

    help: str
    parse: Callable[[str], Any] | None = None
    flag: str | None = None
    metavar: str | None = None
    aliases: tuple[str, ...] = ()


def option(
    default: Any,
    help: str,
    *,
    parse: Callable[[str], Any] | None = None,
    flag: str | None = None,
    metavar: str | None = None,
    aliases: tuple[str, ...] = (),
) -> Any:
    """A dataclass field for an option, carrying its `OptionInfo`."""
    return field(default=default, metadata={"option": OptionInfo(help, parse, flag, metavar, aliases)})


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    raise ArgumentValueError(f"expected true or false, got {text!r}")


def _maybe_boolean(text: str) -> bool | None:
    return None if text.strip().lower() == "none" else _boolean(text)


def _direction(text: str) -> str:
    if text.upper() not in DIRECTIONS:
        raise ArgumentValueError(f"expected one of {', '.join(DIRECTIONS)}, got {text!r}")
    return text.upper()


def _patterns(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise ArgumentValueError(f"expected comma-separated module names or patterns, got {text!r}")
    return names


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise ArgumentValueError(f"expected a number of seconds > 0, got {text!r}") from None
    if not seconds > 0:
        raise ArgumentValueError(f"expected a number of seconds > 0, got {text!r}")
    return seconds


def _depth(text: str) -> int:
    if not text.strip().isdigit():
        raise ArgumentValueError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


@dataclass(frozen=True)
class TraceOptions:
    """How roots are traced (see `gradexport.to_networkx`); not for a graph already built.

    Attributes:
        params: Names for leaf tensors, as ``model.named_parameters()`` gives.
        module: A module that names the leaves and, with a forward pass run in
            `gradexport.capture_modules`, the module of every node.
        edge_metadata: Record the shape, dtype and device of the gradient on every edge.
        open_compiled: Put the backward graph inside each ``torch.compile`` region on its node (torch 2.3 and later).
    """

    params: Any = option(None, "names for leaf tensors, as model.named_parameters() gives them")
    module: Any = option(None, "an nn.Module naming the leaves and, under capture_modules, every node's module")
    edge_metadata: bool = option(False, "record each gradient's shape, dtype and device on its edge", parse=_boolean, flag="--edge-metadata")
    open_compiled: bool = option(False, "show the backward graph inside each torch.compile region", parse=_boolean, flag="--open-compiled")


@dataclass(frozen=True)
class FoldOptions:
    """How the graph is folded before it is drawn.

    Attributes:
        depth: Open this many levels of modules and fold each module below
            into one node (`gradexport.collapse`); ``None`` folds nothing.
        fold_modules: Fold the modules these names or fnmatch patterns name
            into one node each (``["layers.*"]``; `gradexport.collapse`'s ``modules``).
        fit: Mermaid only: when the diagram is over mermaid.js's limits and
            the graph knows its modules, draw the deepest collapse that fits.
    """

    depth: int | None = option(None, "open this many levels of modules and fold each module below into one node", parse=_depth, flag="--depth", metavar="K")
    fold_modules: tuple[str, ...] | None = option(
        None, "fold the modules these comma-separated names or fnmatch patterns name (layers.*)", parse=_patterns, flag="--fold", metavar="NAMES"
    )
    fit: bool = option(True, "fold modules until the diagram is within mermaid.js's limits", parse=_boolean, flag="--fit")

    def __post_init__(self) -> None:
        if isinstance(self.fold_modules, str):  # one name or pattern, as collapse(modules=) takes it
            object.__setattr__(self, "fold_modules", (self.fold_modules,))
        elif self.fold_modules is not None:
            names = collection_of(self.fold_modules, str, caller="gradexport", argument="fold_modules", example="['layers.*']")
            object.__setattr__(self, "fold_modules", names)
        if self.depth is not None and (type(self.depth) is not int or self.depth < 0):
            raise ArgumentValueError(f"depth must be a whole number >= 0 or None, got {self.depth!r}")

    @property
    def folds(self) -> bool:
        """Whether these options fold anything (which needs the whole graph)."""
        return self.depth is not None or self.fold_modules is not None


@dataclass(frozen=True)
class DiagramOptions:
    """What a diagram shows. Every diagram writer takes the same options.

    Attributes:
        direction: Where the gradient flows. ``"TB"`` (default) puts the loss
            at the top and the leaves at the bottom, the order backward runs
            in; ``"BT"`` draws it the other way up (as torchviz does), ``"LR"``
            and ``"RL"`` sideways.
        show_none: Draw None slots (inputs that need no gradient). ``None``
            (default) draws what the graph holds; ``True`` draws them even for
            a graph built without ``show_none``, from the ``none_slots``
            attributes; ``False`` hides them. From roots, ``True`` also
            records them in the graph.
        show_saved: List what each node saved for backward. ``None`` (default)
            shows the ``saved`` attributes the graph holds; ``False`` hides
            them. From roots, ``True`` also records them.
        edge_shapes: Add the shape (and a dtype or device other than
            float32 on cpu) of the gradient on each edge to its label.
        grad_norms: When edges carry a ``grad`` record (``{"norm", "has_nan",
            "has_inf", ...}``), label them with the gradient's norm and colour
            them by its magnitude on a log scale, NaN or infinity in red.
        group_modules: Draw the nodes of each module (the ``module``
            attribute) inside a box labelled with the module's path, nested
            as the modules nest: DOT clusters, Mermaid subgraphs. ``False``
            draws no boxes and adds the module's path under each op.
        box_depth: With ``group_modules``, draw boxes only for modules down
            to this nesting level (0: the model, 1: its children, ...); the
            nodes of deeper modules sit in their ancestor's box at that
            level. ``None`` (default) boxes every level.
        exec_order: Start each node's label with ``#k``, its place in the
            order the engine ran the nodes (the ``exec_order`` attribute).
        saved_bytes: Add a line with the bytes the node's saved tensors hold
            (``saved_bytes``, from a graph traced with ``show_saved=True``).
    """

    direction: str = option("TB", "TB: loss at the top, leaves at the bottom; BT, LR, RL", parse=_direction, flag="--direction", metavar="DIR")
    show_none: bool | None = option(
        None, "draw inputs that need no gradient (None slots); from roots, also record them", parse=_maybe_boolean, flag="--show-none"
    )
    show_saved: bool | None = option(
        None, "list what each node saved for backward; from roots, also record it", parse=_maybe_boolean, flag="--show-saved", aliases=("--saved",)
    )
    edge_shapes: bool = option(False, "label edges with the gradient's shape (records it from roots)", parse=_boolean, flag="--edge-shapes")
    grad_norms: bool = option(True, "label and colour edges by gradient norm when the graph has them", parse=_boolean, flag="--grad-norms")
    group_modules: bool = option(True, "draw each module's nodes inside a box named after it", parse=_boolean, flag="--group-modules")
    exec_order: bool = option(
        False, "number each node by the order the engine ran it (graphs from record_gradients, replay, find_nonfinite)", parse=_boolean, flag="--exec-order"
    )
    saved_bytes: bool = option(False, "show the bytes each node's saved tensors hold; from roots, also record them", parse=_boolean, flag="--saved-bytes")
    box_depth: int | None = option(
        None, "draw module boxes only down to this nesting level (1: the model's children)", parse=_depth, flag="--box-depth", metavar="K"
    )

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ArgumentValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {self.direction!r}")
        if self.box_depth is not None and (type(self.box_depth) is not int or self.box_depth < 0):
            raise ArgumentValueError(f"box_depth must be a whole number >= 0 or None, got {self.box_depth!r}")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names, as keyword arguments of the writers take them."""
        return tuple(item.name for item in fields(cls))


@dataclass(frozen=True)
class RenderOptions:
    """How a file is rendered.

    Attributes:
        prog: The Graphviz program for SVG (see `gradexport.formats.svg`).
        steps: HTML only, from roots: replay the backward pass (`gradexport.replay`)
            without changing any leaf's ``.grad`` and embed every step, for the
            viewer's step bar (see `gradexport.api.export.to_html`).
        dot_timeout: Stop Graphviz after this many seconds with a
            `gradexport.errors.RenderTimeoutError` (``None``, the default: wait).
    """

    prog: str | os.PathLike[str] | None = option(
        None, "Graphviz program for SVG (default: $GRADEXPORT_DOT, dot, graphviz-pure)", parse=str, flag="--prog", metavar="PROG"
    )
    steps: bool = option(False, "replay the backward pass (leaving .grad untouched) and step through it in the viewer", parse=_boolean, flag="--steps")
    dot_timeout: float | None = option(
        None, "stop Graphviz after this many seconds with an error (default: wait)", parse=_seconds, flag="--dot-timeout", metavar="SECONDS"
    )

    def __post_init__(self) -> None:
        timeout = self.dot_timeout
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0):
            raise ArgumentValueError(f"dot_timeout must be a number of seconds > 0 or None, got {timeout!r}")


class ExportKeywords(TypedDict, total=False):
    """The keyword options of the export functions, typed (see `ExportOptions`)."""

    params: Any
    module: Any
    edge_metadata: bool
    open_compiled: bool
    depth: int | None
    fold_modules: tuple[str, ...] | None
    fit: bool
    direction: str
    show_none: bool | None
    show_saved: bool | None
    edge_shapes: bool
    grad_norms: bool
    group_modules: bool
    exec_order: bool
    saved_bytes: bool
    box_depth: int | None
    prog: str | os.PathLike[str] | None
    steps: bool
    dot_timeout: float | None


_GROUPS: dict[str, type] = {"trace": TraceOptions, "fold": FoldOptions, "diagram": DiagramOptions, "render": RenderOptions}


def option_table() -> Iterator[tuple[str, Field[Any], OptionInfo]]:
    """``(group, field, info)`` for every option, in declaration order.

    Examples:
        >>> [name for _, name, _ in ((g, f.name, i) for g, f, i in option_table())][:3]
        ['params', 'module', 'edge_metadata']
    """
    for group, cls in _GROUPS.items():
        for item in fields(cls):
            yield group, item, item.metadata["option"]


@dataclass(frozen=True)
class FormatOptions:
    """The options one format honours: its one declaration of them (see `gradexport.api.registry`).

    An option a format does not honour is refused for it with an
    `ArgumentTypeError`, so that no option is silently ignored.

    Attributes:
        on_graph: The options it honours given a graph already built.
        on_roots: Those it honours while tracing roots (``None``: the same as
            ``on_graph``). Trace options (``params``...) are only here; options
            that draw what only a recorded graph holds (``grad_norms``) only in ``on_graph``.

    Examples:
        >>> dot = FormatOptions(frozenset({"direction"}), frozenset({"direction", "params"}))
        >>> dot.honours("params", from_roots=True), dot.honours("params", from_roots=False)
        (True, False)
    """

    on_graph: frozenset[str]
    on_roots: frozenset[str] | None = None

    def __post_init__(self) -> None:
        known = {item.name for _, item, _ in option_table()}
        unknown = sorted((self.on_graph | (self.on_roots or frozenset())) - known)
        if unknown:
            raise ArgumentValueError(f"FormatOptions: unknown option(s) {', '.join(unknown)}; declare only options of gradexport.core.options")

    def honours(self, name: str, *, from_roots: bool) -> bool:
        """Whether the format honours option ``name``, given roots (``from_roots``) or a graph."""
        return name in (self.on_roots if from_roots and self.on_roots is not None else self.on_graph)


def where_it_applies(name: str, honoured: Mapping[str, FormatOptions]) -> str:
    """The formats that honour option ``name``, as ``--help`` and the reference say it.

    Examples:
        >>> where_it_applies("params", {"dot": FormatOptions(frozenset(), frozenset({"params"}))})
        'dot (only while tracing roots)'
    """
    by_where: dict[str, list[str]] = {"": [], " (only while tracing roots)": [], " (only given a graph)": []}
    for format_name, spec in honoured.items():
        on_graph, on_roots = spec.honours(name, from_roots=False), spec.honours(name, from_roots=True)
        if on_graph or on_roots:
            by_where["" if on_graph and on_roots else " (only while tracing roots)" if on_roots else " (only given a graph)"].append(format_name)
    return "; ".join(f"{', '.join(names)}{where}" for where, names in by_where.items() if names) or "no format"


def _refusal(name: str, formats: Collection[str], from_roots: bool, honoured: Mapping[str, FormatOptions]) -> str:
    """Why option ``name`` does nothing for ``formats``, and what to do."""
    given = ", ".join(formats)
    if any(honoured[format_name].honours(name, from_roots=not from_roots) for format_name in formats if format_name in honoured):
        if from_roots:
            return f"{name} applies only to a graph already built, not while tracing roots (the trace records nothing it draws): draw the graph of record_gradients, replay or find_nonfinite"
        return f"{name} applies only while tracing roots, and this is a graph already, traced with its own: pass the roots, or build the graph with it"
    elsewhere = [format_name for format_name, spec in honoured.items() if spec.honours(name, from_roots=from_roots)]
    if not elsewhere:
        return f"{name} applies to no format {'while tracing roots' if from_roots else 'given a graph'}: leave it out"
    return f"{name} applies only to {', '.join(elsewhere)}, not to {given}: leave it out, or write one of those formats"


@dataclass(frozen=True)
class ExportOptions:
    """The four option groups of one export call.

    Examples:
        >>> mermaid = FormatOptions(frozenset({"direction", "show_none"}))
        >>> options = ExportOptions.from_text({"direction": "lr", "show_none": "true"}, formats=("mermaid",), honoured={"mermaid": mermaid})
        >>> options.diagram.direction, options.diagram.show_none
        ('LR', True)
    """

    trace: TraceOptions = field(default_factory=TraceOptions)
    fold: FoldOptions = field(default_factory=FoldOptions)
    diagram: DiagramOptions = field(default_factory=DiagramOptions)
    render: RenderOptions = field(default_factory=RenderOptions)

    @classmethod
    def from_keywords(
        cls,
        keywords: Mapping[str, Any],
        *,
        formats: Collection[str],
        from_roots: bool,
        honoured: Mapping[str, FormatOptions],
        caller: str = "gradexport",
    ) -> ExportOptions:
        """Read keyword options for an export to ``formats``.

        ``honoured`` holds each format's `FormatOptions`
        (`gradexport.api.registry.read_options` passes the registered ones);
        an option is taken when one of ``formats`` honours it.

        Raises:
            TypeError: an unknown option, or one that applies to none of
                ``formats`` (or only to roots, given a graph), naming where it applies.
            ValueError: a value the option does not accept.
        """
        keywords = dict(keywords)
        for old, new in RENAMED.items():
            if old in keywords:
                keywords[new] = renamed_keyword(keywords.pop(old), keywords.get(new), caller=caller, old=old, new=new)
        known = {item.name: (group, info) for group, item, info in option_table()}
        unknown = sorted(set(keywords) - set(known))
        if unknown:
            raise ArgumentTypeError(f"{caller}() got unknown option(s) {', '.join(unknown)}; known: {', '.join(known)}")
        groups: dict[str, dict[str, Any]] = {group: {} for group in _GROUPS}
        for name, value in keywords.items():
            group, _ = known[name]
            if not any(format_name in honoured and honoured[format_name].honours(name, from_roots=from_roots) for format_name in formats):
                raise ArgumentTypeError(f"{caller}: {_refusal(name, formats, from_roots, honoured)}")
            groups[group][name] = value
        return cls(**{group: _GROUPS[group](**values) for group, values in groups.items()})

    @classmethod
    def from_text(
        cls, values: Mapping[str, str], *, formats: Collection[str], honoured: Mapping[str, FormatOptions], caller: str = "gradexport"
    ) -> ExportOptions:
        """Read options given as text (MkDocs fence attributes), with each option's own parser.

        Raises:
            TypeError: an unknown option, one that only Python can give, or one
                that does not apply (see `from_keywords`).
            ValueError: a value the option cannot read, naming the option.
        """
        return cls.from_keywords(cls.parse_text(values, caller=caller), formats=formats, from_roots=True, honoured=honoured, caller=caller)

    @staticmethod
    def parse_text(values: Mapping[str, str], *, caller: str = "gradexport") -> dict[str, Any]:
        """Options given as text, read into keyword arguments (unknown names are kept, for `from_keywords` to name).

        Examples:
            >>> ExportOptions.parse_text({"depth": "2", "show_none": "none"})
            {'depth': 2, 'show_none': None}
        """
        parsers = {item.name: info.parse for _, item, info in option_table()}
        keywords: dict[str, Any] = {}
        for name, text in values.items():
            parse = parsers.get(name)
            if name in parsers and parse is None:
                raise ArgumentTypeError(f"{caller}: {name} can only be given from Python")
            if parse is None:
                keywords[name] = text  # unknown: from_keywords names it
                continue
            try:
                keywords[name] = parse(text)
            except ValueError as error:
                raise ArgumentValueError(f"{caller}: {name}={text!r}: {error}") from None
        return keywords

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser | Any, honoured: Mapping[str, FormatOptions]) -> None:
        """Add a flag for every option that has one to an argparse parser (or argument group).

        Boolean options get ``--name/--no-name``; their default stays ``None``
        (not given) so that only what the user typed reaches the options. Each
        help line ends with the formats that honour the option (`where_it_applies`).
        """
        for _, item, info in option_table():
            if info.flag is None:
                continue
            where = f" [{where_it_applies(item.name, honoured)}]"
            if info.metavar is None:  # a switch
                suffix = "" if item.default is None else f" (default: {'on' if item.default else 'off'})"
                parser.add_argument(
                    info.flag, *info.aliases, dest=item.name, action=argparse.BooleanOptionalAction, default=None, help=info.help + suffix + where
                )
            else:
                parser.add_argument(
                    info.flag,
                    *info.aliases,
                    dest=item.name,
                    type=_argument_type(item.name, info),
                    default=None,
                    metavar=info.metavar,
                    help=info.help + where,
                )

    @staticmethod
    def given_arguments(namespace: argparse.Namespace) -> dict[str, Any]:
        """The options the user typed on the command line (see `add_arguments`), as keywords."""
        return {
            item.name: getattr(namespace, item.name)
            for _, item, info in option_table()
            if info.flag is not None and getattr(namespace, item.name, None) is not None
        }


def _argument_type(name: str, info: OptionInfo) -> Callable[[str], Any]:
    parse = info.parse or str

    def parsed(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"{error}") from None

    parsed.__name__ = name  # argparse names the type in its messages
    return parsed
