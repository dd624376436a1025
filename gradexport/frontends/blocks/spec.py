"""What a block is and how its options read, whatever page or host it comes from.

A host (the MkDocs plugin, the Sphinx directive, ``gradexport render-md``)
finds a block in its own syntax, then builds its `BlockOptions` with
`read_options` from ``key: value`` text, the same options everywhere.

Examples:
    >>> options = read_options({"formats": "svg", "graph": "loss", "direction": "LR"}, ("mermaid",), "page.md:1")
    >>> sorted(options.show), options.formats, options.graph, options.export, options.warnings
    (['code', 'diagram', 'output'], ('svg',), 'loss', (('direction', 'LR'),), None)
"""

from __future__ import annotations

import importlib
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...core.errors import BlockSyntaxError

__all__ = [
    "BLOCK_OPTIONS",
    "FORMATS",
    "NOT_EMBEDDED",
    "PARTS",
    "WARNING_MODES",
    "Block",
    "BlockOptions",
    "check_formats",
    "option_names",
    "parse_options",
    "read_options",
]

#: The parts a block can show, in the order they appear on the page.
PARTS = ("code", "output", "diagram")

#: The formats a block can show, in the order of their tabs, with the tab titles.
FORMATS = {
    "mermaid": "Mermaid",
    "svg": "Graphviz (SVG)",
    "html": "Interactive viewer",
    "dot": "DOT",
    "json": "JSON",
}

#: Registered formats a page cannot show, and why (a test checks that every format is in one of the two).
NOT_EMBEDDED = {"model-explorer": "a file for Google's Model Explorer app, which a page cannot open"}

#: What becomes of a warning the block's code raises: ``show`` puts it under the block's output and in
#: the build log as information; ``strict`` makes it a warning of the build, which a strict build
#: (``mkdocs build --strict``, ``sphinx-build -W``) stops on.
WARNING_MODES = ("show", "strict")

#: The options of a block that are not export options.
BLOCK_OPTIONS = ("show", "formats", "graph", "warnings")


@dataclass(frozen=True)
class BlockOptions:
    """What a block shows and how; parsed from the fence line or the directive's options."""

    show: frozenset[str]
    formats: tuple[str, ...]
    graph: str | None
    #: Keyword options of the export functions, as ``(name, value)`` pairs.
    export: tuple[tuple[str, Any], ...] = ()
    #: One of `WARNING_MODES`; ``None``: the host's setting.
    warnings: str | None = None


@dataclass(frozen=True)
class Block:
    """One example block of a page."""

    #: Index (0-based) of the block's first line in the page: its fence or its directive.
    start: int
    #: Index just past the block's last line.
    end: int
    #: Indentation of the block, kept for what replaces it (blocks inside admonitions or tabs).
    indent: str
    #: The code, dedented.
    code: str
    options: BlockOptions
    #: Line number (1-based) of the code's first line in the page's file.
    line: int


def option_names() -> list[str]:
    """The export options a block accepts: those that can be written as text."""
    export_options = importlib.import_module("gradexport.core.options")
    return [item.name for _, item, info in export_options.option_table() if info.parse is not None]


def parse_options(info: str, default_formats: tuple[str, ...], where: str) -> BlockOptions:
    """Parse ``key="value"`` pairs, as written after ``gradexport`` on a fence line.

    Raises:
        BlockSyntaxError: text that is not ``key="value"`` pairs, or an option `read_options` refuses.

    Examples:
        >>> parse_options('formats="svg" show="code diagram"', ("mermaid",), "page.md:1").formats
        ('svg',)
    """
    try:
        words = shlex.split(info)
    except ValueError as error:
        raise BlockSyntaxError(f"{where}: cannot read the options {info!r}: {error}") from None
    values: dict[str, str] = {}
    written: dict[str, str] = {}
    for word in words:
        key, equals, value = word.partition("=")
        if not equals:
            raise BlockSyntaxError(f"{where}: unknown option {word!r} on a gradexport block; {_usage()}")
        values[key], written[key] = value, word
    return read_options(values, default_formats, where, written=written)


def read_options(values: Mapping[str, str], default_formats: tuple[str, ...], where: str, *, written: Mapping[str, str] | None = None) -> BlockOptions:
    """The `BlockOptions` of ``name: text`` pairs; ``where`` (``page:line``) starts every error message.

    ``written`` maps a name to the text the page wrote for it, for error messages.

    Raises:
        BlockSyntaxError: an unknown option, a part or format that does not exist, an export
            option with a bad value or that applies to none of the block's formats.
    """
    names = option_names()
    given: dict[str, str] = {}
    for key, value in values.items():
        if key in names:
            given[key] = value
        elif key not in BLOCK_OPTIONS:
            shown = (written or {}).get(key, f"{key}={value}")
            raise BlockSyntaxError(f"{where}: unknown option {shown!r} on a gradexport block; {_usage()}")
    show = frozenset(values["show"].split()) if "show" in values else frozenset(PARTS)
    formats = tuple(values["formats"].split()) if "formats" in values else default_formats
    if not show <= set(PARTS):
        raise BlockSyntaxError(f"{where}: show={values['show']!r}: each part must be one of {', '.join(PARTS)}")
    warning_mode = values.get("warnings")
    if warning_mode is not None and warning_mode not in WARNING_MODES:
        raise BlockSyntaxError(f"{where}: warnings={warning_mode!r}: give one of {', '.join(WARNING_MODES)}")
    check_formats(formats, where)
    try:
        keywords = importlib.import_module("gradexport.core.options").ExportOptions.parse_text(given, caller=where)
        registry = importlib.import_module("gradexport.api.registry")
        try:
            registry.read_options(keywords, formats=formats, from_roots=True, caller=where)
        except TypeError:  # the block's value may be a graph already (record_gradients...), which takes what a graph takes
            registry.read_options(keywords, formats=formats, from_roots=False, caller=where)
    except (TypeError, ValueError) as error:
        raise BlockSyntaxError(str(error)) from None
    graph = values.get("graph") or None
    return BlockOptions(show=show, formats=formats, graph=graph, export=tuple(keywords.items()), warnings=warning_mode)


def check_formats(formats: tuple[str, ...] | list[str], where: str) -> None:
    """Refuse a format no page can show, a repeated one, or none.

    Raises:
        BlockSyntaxError: naming ``where``.
    """
    unknown = [name for name in formats if name not in FORMATS]
    if unknown or not formats or len(set(formats)) != len(formats):
        raise BlockSyntaxError(f"{where}: formats={' '.join(formats)!r}: give one or more of {', '.join(FORMATS)}, each once")


def _usage() -> str:
    return (
        f'use show="code output diagram", formats="mermaid svg", graph="EXPRESSION", warnings="show|strict" or an export option ({", ".join(option_names())})'
    )
