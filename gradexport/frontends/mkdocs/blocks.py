"""Finding the ``gradexport`` fenced blocks of a page and reading their options.

Examples:
    >>> blocks = find_blocks(['# Title', '```gradexport show="code"', 'x = 1', '```'], "page.md")
    >>> [(block.line, block.code, sorted(block.options.show)) for block in blocks]
    [(3, 'x = 1\\n', ['code'])]
"""

from __future__ import annotations

import importlib
import re
import shlex
from dataclasses import dataclass
from typing import Any

from mkdocs.exceptions import PluginError

from .embed import FORMATS

__all__ = ["PARTS", "Block", "BlockOptions", "check_formats", "find_blocks", "parse_options"]

#: The parts a block can show, in the order they appear on the page.
PARTS = ("code", "output", "diagram")

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>.*)$")

@dataclass(frozen=True)
class BlockOptions:
    """What a block shows and how; parsed from the fence line."""

    show: frozenset[str]
    formats: tuple[str, ...]
    graph: str | None
    #: Keyword options of the export functions, as ``(name, value)`` pairs.
    export: tuple[tuple[str, Any], ...] = ()

@dataclass(frozen=True)
class Block:
    """A ``gradexport`` fenced block found in a page's Markdown."""

    #: Index of the opening fence line in the page's lines.
    start: int
    #: Index just past the closing fence line.
    end: int
    #: Indentation of the fence, kept for what replaces it (blocks inside admonitions or tabs).
    indent: str
    #: The code, dedented by the fence's indentation.
    code: str
    options: BlockOptions
    #: Line number (1-based) of the code's first line in the Markdown file.
    line: int

def parse_options(info: str, default_formats: tuple[str, ...], where: str) -> BlockOptions:
    """Parse the ``key="value"`` pairs after ``gradexport`` on a fence line.

    Examples:
        >>> options = parse_options('formats="svg" graph="loss" direction="LR"', ("mermaid",), "page.md:1")
        >>> sorted(options.show), options.formats, options.graph, options.export
        (['code', 'diagram', 'output'], ('svg',), 'loss', (('direction', 'LR'),))
    """
    export_options = importlib.import_module("gradexport.core.options")
    option_names = [item.name for _, item, info in export_options.option_table() if info.parse is not None]
    try:
        words = shlex.split(info)
    except ValueError as error:
        raise PluginError(f"{where}: cannot read the options {info!r}: {error}") from None
    values: dict[str, str] = {}
    given: dict[str, str] = {}
    for word in words:
        key, equals, value = word.partition("=")
        if equals and key in option_names:
            given[key] = value
        elif equals and key in ("show", "formats", "graph"):
            values[key] = value
        else:
            raise PluginError(
                f"{where}: unknown option {word!r} on a gradexport block; use show=\"code output diagram\", "
                f'formats="mermaid svg", graph="EXPRESSION" or an export option ({", ".join(option_names)})'
            )
    show = frozenset(values["show"].split()) if "show" in values else frozenset(PARTS)
    formats = tuple(values["formats"].split()) if "formats" in values else default_formats
    if not show <= set(PARTS):
        raise PluginError(f"{where}: show={values['show']!r}: each part must be one of {', '.join(PARTS)}")
    check_formats(formats, where)
    try:
        keywords = export_options.ExportOptions.parse_text(given, caller=where)
        importlib.import_module("gradexport.api.registry").read_options(keywords, formats=formats, from_roots=True, caller=where)
    except (TypeError, ValueError) as error:
        raise PluginError(str(error)) from None
    graph = values.get("graph") or None
    return BlockOptions(show=show, formats=formats, graph=graph, export=tuple(keywords.items()))

def check_formats(formats: tuple[str, ...] | list[str], where: str) -> None:
    unknown = [name for name in formats if name not in FORMATS]
    if unknown or not formats or len(set(formats)) != len(formats):
        raise PluginError(f"{where}: formats={' '.join(formats)!r}: give one or more of {', '.join(FORMATS)}, each once")

def find_blocks(lines: list[str], where: str, default_formats: tuple[str, ...] = ("mermaid", "svg")) -> list[Block]:
    """Find the ``gradexport`` fenced blocks that Markdown shows as fences, at the top level or in a container.

    ``where`` names the page in error messages. Only a fence that Markdown
    renders as a fence is an example: one inside another fence (say a
    ````` ````markdown ````` fence that documents the syntax), inside an
    indented code block (4 spaces deeper than its container after a blank
    line), or inside an HTML comment that starts a line (``<!--`` ... ``-->``)
    is text. Admonitions (``!!!``, ``???``), content tabs (``===``), list
    items and definitions (``:   ``) are containers whose content is indented by 4.

    Examples:
        >>> lines = ["<!--", "```gradexport", "hidden = 1", "```", "-->", "", "    ```gradexport", "    shown_as_code = 1", "    ```"]
        >>> find_blocks(lines, "page.md")
        []
    """
    blocks: list[Block] = []
    index = 0
    containers: list[int] = []  # content indentation of the containers around the current line
    after_blank = True  # an indented code block starts only after a blank line (or a block)
    in_code = False
    while index < len(lines):
        line = lines[index]
        if not line.strip():
            after_blank = True
            index += 1
            continue
        indent = _width(line)
        while containers and indent < containers[-1]:
            containers.pop()
        depth = indent - (containers[-1] if containers else 0)
        if depth >= 4 and (after_blank or in_code):
            in_code, after_blank = True, False
            index += 1
            continue
        in_code = after_blank = False
        if depth < 4 and line.lstrip().startswith("<!--"):
            index = _comment_end(lines, index) + 1
            after_blank = True
            continue
        opening = _FENCE.match(line)
        if opening is None:
            if _CONTAINER.match(line):
                containers.append(indent + 4)
            index += 1
            continue
        closing = _find_closing(lines, index + 1, opening)
        language, _, info = opening["info"].strip().partition(" ")
        if language == "gradexport":
            if closing == len(lines):
                raise PluginError(f"{where}:{index + 1}: the gradexport block opened here is never closed")
            indent_text = opening["indent"]
            body = [
                line[len(indent_text) :] if line.startswith(indent_text) else line.lstrip() for line in lines[index + 1 : closing]
            ]
            options = parse_options(info, default_formats, f"{where}:{index + 1}")
            blocks.append(Block(index, closing + 1, indent_text, "".join(f"{line}\n" for line in body), options, index + 2))
        index = closing + 1
        after_blank = True
    return blocks

# Lines that open a container whose content is indented by 4: admonitions, content tabs, list
# items and definitions (``:   `` of the def_list extension).
_CONTAINER = re.compile(r"^[ \t]*(?:(?:!!!|\?\?\?\+?)[ \t]+\S|===[+!]?[ \t]+\"|[-*+:][ \t]+\S|\d+[.)][ \t]+\S)")

def _width(line: str) -> int:
    """The indentation of ``line`` in columns, a tab reaching the next multiple of 4 (as Python-Markdown reads it)."""
    width = 0
    for character in line:
        if character == " ":
            width += 1
        elif character == "\t":
            width += 4 - width % 4
        else:
            break
    return width

def _comment_end(lines: list[str], start: int) -> int:
    """The index of the line that closes the HTML comment opened on ``lines[start]`` (the last line if none does)."""
    after_opening = lines[start].split("<!--", 1)[1]
    if "-->" in after_opening:
        return start
    for index in range(start + 1, len(lines)):
        if "-->" in lines[index]:
            return index
    return len(lines) - 1

def _find_closing(lines: list[str], start: int, opening: re.Match[str]) -> int:
    fence = opening["fence"]
    for index in range(start, len(lines)):
        match = _FENCE.match(lines[index])
        if match and match["fence"][0] == fence[0] and len(match["fence"]) >= len(fence) and not match["info"].strip():
            return index
    return len(lines)
