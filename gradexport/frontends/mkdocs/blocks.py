"""The ``gradexport`` fences of a page, read by the block engine (`gradexport.frontends.blocks`), its errors as MkDocs'.

Examples:
    >>> blocks = find_blocks(['# Title', '```gradexport show="code"', 'x = 1', '```'], "page.md")
    >>> [(block.line, block.code, sorted(block.options.show)) for block in blocks]
    [(3, 'x = 1\\n', ['code'])]
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from mkdocs.exceptions import PluginError

from ...core.errors import BlockSyntaxError
from ..blocks import markdown, spec
from ..blocks.spec import PARTS, Block, BlockOptions

__all__ = ["PARTS", "Block", "BlockOptions", "check_formats", "find_blocks", "parse_options"]


@contextlib.contextmanager
def _as_plugin_error() -> Iterator[None]:
    try:
        yield
    except BlockSyntaxError as error:
        raise PluginError(str(error)) from None


def parse_options(info: str, default_formats: tuple[str, ...], where: str) -> BlockOptions:
    """`gradexport.frontends.blocks.spec.parse_options`, raising `mkdocs.exceptions.PluginError`."""
    with _as_plugin_error():
        return spec.parse_options(info, default_formats, where)


def check_formats(formats: tuple[str, ...] | list[str], where: str) -> None:
    """`gradexport.frontends.blocks.spec.check_formats`, raising `mkdocs.exceptions.PluginError`."""
    with _as_plugin_error():
        spec.check_formats(formats, where)


def find_blocks(lines: list[str], where: str, default_formats: tuple[str, ...] = ("mermaid", "svg")) -> list[Block]:
    """`gradexport.frontends.blocks.markdown.find_blocks`, raising `mkdocs.exceptions.PluginError`."""
    with _as_plugin_error():
        return markdown.find_blocks(lines, where, default_formats)
