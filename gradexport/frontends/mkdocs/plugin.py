"""The MkDocs plugin (entry point ``gradexport``): runs a page's ``gradexport`` blocks at build time and embeds their graphs.

See `gradexport.frontends.mkdocs` for what a page writes and the plugin's options.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, Literal

from mkdocs.config import config_options
from mkdocs.config.base import Config
from mkdocs.exceptions import PluginError
from mkdocs.plugins import BasePlugin
from mkdocs.structure.files import File, Files

from ...core.errors import ExampleError
from ..blocks.cache import PACKAGE_DIR, library_fingerprint, results_key
from ..blocks.runner import BlockResult, BlockRunner, report_warnings
from .blocks import Block, check_formats, find_blocks
from .embed import markdown_for, place_diagrams

__all__ = ["MERMAID_SITE_PATH", "GradexportPlugin", "GradexportPluginConfig", "library_fingerprint"]

log = logging.getLogger("mkdocs.plugins.gradexport")

#: Where the plugin puts mermaid.js in the built site.
MERMAID_SITE_PATH = "js/mermaid.min.js"


class GradexportPluginConfig(Config):
    """The plugin's options in ``mkdocs.yml``."""

    formats = config_options.Type(list, default=["mermaid", "svg"])
    mermaid_js = config_options.Type(str, default="node_modules/mermaid/dist/mermaid.min.js")
    #: Seconds one block (with its diagrams) may run; 0 for no limit. Needs ``isolate``.
    timeout = config_options.Type((int, float), default=60)
    #: Characters of printed output kept per block; 0 keeps everything.
    max_output = config_options.Type(int, default=100_000)
    #: Run each page's blocks in a forked child process (POSIX only).
    isolate = config_options.Type(bool, default=hasattr(os, "fork") and sys.platform != "darwin")
    #: What a warning raised by a block's code becomes: ``show`` (under the block's output, and an
    #: information line of the log) or ``strict`` (a MkDocs warning, which ``--strict`` stops on).
    warnings = config_options.Choice(("show", "strict"), default="show")


_ENGINE = __package__.rpartition(".")[0] + ".blocks"


def _forget_library() -> None:
    """Drop the imported gradexport modules so that the next example imports the edited ones."""
    for name in [name for name in sys.modules if name == "gradexport" or name.startswith("gradexport.")]:
        if not name.startswith((__package__, _ENGINE)):  # this plugin and its block engine stay as MkDocs loaded them
            del sys.modules[name]


class GradexportPlugin(BasePlugin[GradexportPluginConfig]):
    """Run ``gradexport`` fenced blocks at build time; see `gradexport.frontends.mkdocs`."""

    def __init__(self) -> None:
        # The plugin defines on_startup, so MkDocs keeps this one object across
        # the rebuilds of `mkdocs serve`: the cache lives as long as the server.
        self._cache: dict[str, list[BlockResult]] = {}
        self._fingerprint: str | None = None
        self._pending: dict[str, dict[str, str]] = {}
        self._tabbed = False
        self._titled_fences = False
        self._runner = BlockRunner(isolate=False)

    def on_startup(self, *, command: Literal["build", "gh-deploy", "serve"], dirty: bool) -> None:
        """Mark the plugin persistent across ``mkdocs serve`` rebuilds."""

    def on_config(self, config: Any) -> Any:
        check_formats(self.config.formats, "plugins.gradexport.formats")
        for name in ("timeout", "max_output"):
            if self.config[name] < 0:
                raise PluginError(f"plugins.gradexport.{name}: give a number >= 0 (0 turns it off), got {self.config[name]}")
        if self.config.isolate and not hasattr(os, "fork"):
            raise PluginError("plugins.gradexport.isolate: this system cannot fork a child process; set isolate: false")
        self._tabbed = "pymdownx.tabbed" in config.markdown_extensions
        self._titled_fences = "pymdownx.superfences" in config.markdown_extensions
        fingerprint = library_fingerprint()
        if self._fingerprint is not None and fingerprint != self._fingerprint:
            log.info("gradexport: the library changed; re-importing it and re-running the examples")
            _forget_library()
            self._cache.clear()
        self._fingerprint = fingerprint
        # A new child per build: it has the library as this build imported it.
        self._runner.close()
        self._runner = BlockRunner(timeout=self.config.timeout, max_output=self.config.max_output, isolate=self.config.isolate, setting="plugin option {}")
        if self.config.mermaid_js:
            source = self._mermaid_source(config)
            if not source.is_file():
                raise PluginError(
                    f"gradexport: mermaid.js not found at {source}: run `npm ci` (package.json lists "
                    "mermaid 11), or point the plugin option mermaid_js at a local mermaid.min.js"
                )
            # Material loads `extra.polyfills` in <head>, before its own bundle, which
            # then finds a global `mermaid` and does not fetch one from a CDN.
            scripts = config.extra.setdefault("polyfills", []) if config.theme.name == "material" else config.extra_javascript
            if MERMAID_SITE_PATH not in scripts:
                scripts.insert(0, MERMAID_SITE_PATH)
        return config

    def _mermaid_source(self, config: Any) -> Path:
        return Path(config.config_file_path).resolve().parent / self.config.mermaid_js

    def on_files(self, files: Files, *, config: Any) -> Files:
        if self.config.mermaid_js:
            files.append(File.generated(config, MERMAID_SITE_PATH, abs_src_path=str(self._mermaid_source(config))))
        return files

    def on_serve(self, server: Any, *, config: Any, builder: Any) -> Any:
        server.watch(str(PACKAGE_DIR))
        return server

    def on_page_markdown(self, markdown: str, *, page: Any, config: Any, files: Files) -> str:
        lines = markdown.split("\n")
        where = page.file.src_uri
        blocks = find_blocks(lines, where, tuple(self.config.formats))
        if not blocks:
            return markdown
        if not self._tabbed and any(len(block.options.formats) > 1 and "diagram" in block.options.show for block in blocks):
            raise PluginError(
                f"{where}: a gradexport block shows two formats, which needs content tabs: add "
                "`pymdownx.tabbed: {alternate_style: true}` to markdown_extensions, or give one format"
            )
        results = self._results(blocks, page)
        placeholders = self._pending[where] = {}
        for block, result in reversed(list(zip(blocks, results, strict=True))):
            lines[block.start : block.end] = self._markdown_for(block, result, placeholders)
        return "\n".join(lines)

    def _results(self, blocks: list[Block], page: Any) -> list[BlockResult]:
        key = results_key(blocks, page.file.src_uri, self.config.max_output, self._fingerprint)
        if key not in self._cache:
            path = str(Path(page.file.abs_src_path).resolve()) if page.file.abs_src_path else page.file.src_uri
            try:
                results = self._runner.run(blocks, path, page.file.src_uri)
            except ExampleError as error:
                raise PluginError(str(error)) from None
            self._cache[key] = results
        # Every build reports them, cached or not, so that a strict build stops on each.
        for block, result in zip(blocks, self._cache[key], strict=True):
            strict = (block.options.warnings or self.config.warnings) == "strict"
            report_warnings(block, result, page.file.src_uri, strict=strict, inform=log.info, warn=log.warning)
        return self._cache[key]

    def _markdown_for(self, block: Block, result: BlockResult, placeholders: dict[str, str]) -> list[str]:
        show = block.options.show
        code = block.code if "code" in show else None
        output = result.output if "output" in show else None
        return markdown_for(code, output, result.diagrams, block.indent, placeholders, titled_fences=self._titled_fences)

    def on_post_build(self, *, config: Any) -> None:
        self._runner.close()

    def on_build_error(self, *, error: Exception) -> None:
        self._runner.close()

    def on_page_content(self, html_text: str, *, page: Any, config: Any, files: Files) -> str:
        return place_diagrams(html_text, self._pending.pop(page.file.src_uri, {}), page.file.src_uri)
