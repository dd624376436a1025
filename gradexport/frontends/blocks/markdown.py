"""Finding the ``gradexport`` fenced blocks of a Markdown page (for MkDocs and ``gradexport render-md``).

MyST Markdown's ```` ```{gradexport} ```` fences are the Sphinx directive's,
read by MyST itself (`gradexport.frontends.sphinx`).

Examples:
    >>> blocks = find_blocks(['# Title', '```gradexport show="code"', 'x = 1', '```'], "page.md")
    >>> [(block.line, block.code, sorted(block.options.show)) for block in blocks]
    [(3, 'x = 1\\n', ['code'])]
"""

from __future__ import annotations

import re

from ...core.errors import BlockSyntaxError
from .spec import Block, parse_options

__all__ = ["fenced", "find_blocks"]

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>.*)$")


def find_blocks(lines: list[str], where: str, default_formats: tuple[str, ...] = ("mermaid", "svg")) -> list[Block]:
    """Find the ``gradexport`` fenced blocks that Markdown shows as fences, at the top level or in a container.

    ``where`` names the page in error messages. Only a fence that Markdown
    renders as a fence is an example: one inside another fence (say a
    ````` ````markdown ````` fence that documents the syntax), inside an
    indented code block (4 spaces deeper than its container after a blank
    line), or inside an HTML comment that starts a line (``<!--`` ... ``-->``)
    is text. Admonitions (``!!!``, ``???``), content tabs (``===``), list
    items and definitions (``:   ``) are containers whose content is indented by 4.

    Raises:
        BlockSyntaxError: a block never closed, or options `parse_options` refuses.

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
                raise BlockSyntaxError(f"{where}:{index + 1}: the gradexport block opened here is never closed")
            indent_text = opening["indent"]
            body = [line[len(indent_text) :] if line.startswith(indent_text) else line.lstrip() for line in lines[index + 1 : closing]]
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


def fenced(text: str, info: str) -> str:
    """``text`` as a fenced code block with info string ``info``, its fence longer than any run of backticks in it.

    Examples:
        >>> print(fenced("```inner```", "text"))
        ````text
        ```inner```
        ````
    """
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (longest + 1)
    return f"{fence}{info}\n{text.rstrip()}\n{fence}"
