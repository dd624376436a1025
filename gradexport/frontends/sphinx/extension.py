"""The ``gradexport`` directive and the build events that run its blocks (see `gradexport.frontends.sphinx`).

The directive only records its block in the doctree (a `block_node`); once
the page is read (``doctree-read``), all of its blocks run together, in order
in one namespace, and each node is replaced by what the block shows.

Examples:
    >>> {"show", "formats", "graph", "warnings", "direction"} <= set(GradexportDirective.option_spec)
    True
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import sys
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.errors import ConfigError, SphinxError
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.fileutil import copy_asset_file

from ...core.errors import BlockSyntaxError, ExampleError
from ..blocks.cache import ResultStore, results_key
from ..blocks.embed import diagram_html
from ..blocks.runner import BlockResult, BlockRunner, report_warnings
from ..blocks.spec import BLOCK_OPTIONS, FORMATS, WARNING_MODES, Block, check_formats, option_names, read_options

__all__ = ["BlockFailedError", "GradexportDirective", "block_node", "setup"]

log = logging.getLogger(__name__)

#: Where mermaid.js goes in the built site, under its ``_static`` folder.
MERMAID_STATIC_PATH = "gradexport/mermaid.min.js"

#: Draws the page's Mermaid diagrams once it has loaded. Mermaid's light theme in dark themes too: the
#: diagrams sit on a light panel (`_STYLE`), since the writers' node colours are light in both.
_MERMAID_START = (
    "document.addEventListener('DOMContentLoaded', function () {"
    " mermaid.initialize({startOnLoad: false, theme: 'default'});"
    " mermaid.run({querySelector: '.gradexport-diagram pre.mermaid'});"
    "});"
)

#: Where the diagrams' style goes in the built site, under ``_static``.
STYLE_STATIC_PATH = "gradexport/gradexport.css"

#: A diagram keeps its natural size and scrolls in its box (its text never shrinks), on a light panel
#: whatever the theme (furo's and pydata-sphinx-theme's dark modes included), with dark text.
_STYLE = """\
.gradexport-diagram { margin: 1em 0; overflow: auto; max-height: 80vh; display: flex; justify-content: safe center;
  align-items: flex-start; background: #ffffff; color: #1b1b1b; border-radius: 0.2rem; padding: 0.5em; }
.gradexport-diagram > * { flex: none; margin: 0; }
.gradexport-diagram pre.mermaid { background: #ffffff; border: none; }
.gradexport-svg svg { max-width: none; }
.gradexport-svg svg g.edge text { fill: #424242; }
.gradexport-format { font-weight: bold; margin-bottom: 0; }
"""

#: The key of `env.metadata` that marks a page with a Mermaid diagram.
_HAS_MERMAID = "gradexport_mermaid"


class BlockFailedError(ExampleError, SphinxError):
    """A ``gradexport`` block failed (raised, ran too long, ended its process) or cannot be read; the build stops.

    The message names the page, the block's line and, for a block that raised,
    the traceback of its own frames.
    """

    category = "gradexport block failed"


class block_node(nodes.General, nodes.Element):
    """A block in a read page, until its results replace it: ``code``, ``options`` and the lines ``start`` and ``line``."""


class _EveryOption(dict[str, Any]):
    """An option spec that takes every name, so that an unknown option stops the build (`read_options` names the
    known ones) rather than docutils or MyST logging an error and building the page without the block."""

    def __missing__(self, name: str) -> Any:
        return directives.unchanged


class GradexportDirective(SphinxDirective):
    """``.. gradexport::`` (reST) or ```` ```{gradexport} ```` (MyST): a block whose code runs at build time."""

    has_content = True
    option_spec: ClassVar[dict[str, Any]] = _EveryOption.fromkeys((*BLOCK_OPTIONS, *option_names()), directives.unchanged)

    def run(self) -> list[nodes.Node]:
        source, line = self.get_source_info()
        where = f"{_shown_as(self.env, source)}:{line}"
        try:
            given = {name: value or "" for name, value in self.options.items()}
            written = {name: f":{name}: {value}".rstrip() for name, value in given.items()}
            options = read_options(given, tuple(self.config.gradexport_formats), where, written=written)
        except BlockSyntaxError as error:
            raise BlockFailedError(str(error)) from None
        node = block_node()
        node["code"] = "".join(f"{text}\n" for text in self.content)
        node["options"] = options
        node["start"] = line - 1
        node["line"] = _content_line(source, line, list(self.content))
        self.set_source_info(node)
        return [node]


def _content_line(source: str, directive_line: int, content: list[str]) -> int:
    """The line (1-based) of the file where the block's code starts: the first after the directive's line that
    reads as the code's first line (MyST gives no line numbers for a fence's content, and takes option lines out of it)."""
    if not content:
        return directive_line + 1
    with contextlib.suppress(OSError, UnicodeDecodeError):
        lines = Path(source).read_text(encoding="utf-8").splitlines()
        for index in range(directive_line, len(lines)):
            if lines[index].strip() == content[0].strip():
                return index + 1
    return directive_line + 1


def _shown_as(env: Any, source: str) -> str:
    """The page's file as the build names it: relative to the source folder."""
    try:
        return Path(source).resolve().relative_to(Path(env.srcdir).resolve()).as_posix()
    except ValueError:
        return source


class _Host:
    """One build's runner and result store; a reading process forked by ``-j`` gets its own child."""

    def __init__(self, app: Any):
        config = app.config
        self.runner = BlockRunner(
            timeout=config.gradexport_timeout,
            max_output=config.gradexport_max_output,
            isolate=config.gradexport_isolate,
            setting="conf.py setting gradexport_{}",
        )
        self.store = ResultStore(Path(app.doctreedir) / "gradexport")


def _host(app: Any) -> _Host:
    if not hasattr(app, "_gradexport_host"):
        app._gradexport_host = _Host(app)
    host: _Host = app._gradexport_host
    return host


def run_page_blocks(app: Any, doctree: nodes.document) -> None:
    """``doctree-read``: run the page's blocks (or take their stored results) and put what they show in their place."""
    found = list(doctree.findall(block_node))
    if not found:
        return
    source = found[0].source or app.env.doc2path(app.env.docname)
    shown_as = _shown_as(app.env, source)
    blocks = [Block(node["start"], node["start"] + 1, "", node["code"], node["options"], node["line"]) for node in found]
    host = _host(app)
    key = results_key(blocks, shown_as, app.config.gradexport_max_output)
    results = host.store.get(key)
    if results is None:
        try:
            results = host.runner.run(blocks, str(Path(source).resolve()), shown_as)
        except ExampleError as error:
            raise BlockFailedError(str(error)) from None
        host.store.put(key, results)
    for block, result in zip(blocks, results, strict=True):
        strict = (block.options.warnings or app.config.gradexport_warnings) == "strict"
        report_warnings(block, result, shown_as, strict=strict, inform=log.info, warn=log.warning)
    for node, block, result in zip(found, blocks, results, strict=True):
        node.replace_self(_shown(block, result))
    if any("mermaid" in result.diagrams for result in results):
        app.env.metadata[app.env.docname][_HAS_MERMAID] = True


def _shown(block: Block, result: BlockResult) -> list[nodes.Node]:
    """The nodes that show a block: its code, its output, its diagrams (each titled when there are several)."""
    shown: list[nodes.Node] = []
    if "code" in block.options.show:
        shown.append(nodes.literal_block(block.code, block.code.rstrip("\n"), language="python"))
    if "output" in block.options.show and result.output:
        output = nodes.literal_block(result.output, result.output.rstrip("\n"), language="text", classes=["gradexport-output"])
        shown.append(output)
    for name, text in result.diagrams.items():
        title = f'<p class="gradexport-format">{FORMATS[name]}</p>' if len(result.diagrams) > 1 else ""
        shown.append(nodes.raw("", title + diagram_html(name, text, mermaid_code=False), format="html"))
    return shown


def check_config(app: Any, config: Any) -> None:
    """``config-inited``: refuse settings that cannot work, naming the setting."""
    try:
        check_formats(list(config.gradexport_formats), "conf.py setting gradexport_formats")
    except BlockSyntaxError as error:
        raise ConfigError(str(error)) from None
    for name in ("gradexport_timeout", "gradexport_max_output"):
        if config[name] < 0:
            raise ConfigError(f"conf.py setting {name}: give a number >= 0 (0 turns it off), got {config[name]}")
    if config.gradexport_warnings not in WARNING_MODES:
        raise ConfigError(f"conf.py setting gradexport_warnings: give one of {', '.join(WARNING_MODES)}, got {config.gradexport_warnings!r}")
    if config.gradexport_isolate and not hasattr(os, "fork"):
        raise ConfigError("conf.py setting gradexport_isolate: this system cannot fork a child process; set it to False")
    if config.gradexport_mermaid_js and not _mermaid_source(app).is_file():
        raise ConfigError(
            f"gradexport: mermaid.js not found at {_mermaid_source(app)}: run `npm install mermaid@11`, or point the "
            'conf.py setting gradexport_mermaid_js at a local mermaid.min.js ("" to load mermaid.js yourself)'
        )


def _mermaid_source(app: Any) -> Path:
    return Path(app.confdir) / app.config.gradexport_mermaid_js


def add_mermaid(app: Any, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    """``html-page-context``: a page with a Mermaid diagram loads the site's mermaid.js and draws them."""
    if app.config.gradexport_mermaid_js and app.env.metadata.get(pagename, {}).get(_HAS_MERMAID):
        app.add_js_file(MERMAID_STATIC_PATH)
        app.add_js_file(None, body=_MERMAID_START)


def finish(app: Any, exception: BaseException | None) -> None:
    """``build-finished``: end the child process; write the diagrams' style and copy mermaid.js into ``_static``."""
    if hasattr(app, "_gradexport_host"):
        app._gradexport_host.runner.close()
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    (static / STYLE_STATIC_PATH).parent.mkdir(parents=True, exist_ok=True)
    (static / STYLE_STATIC_PATH).write_text(_STYLE, encoding="utf-8")
    if app.config.gradexport_mermaid_js:
        copy_asset_file(str(_mermaid_source(app)), str(static / MERMAID_STATIC_PATH))


def setup(app: Any) -> dict[str, Any]:
    """Register the directive, its settings and the build's events (Sphinx calls it for ``extensions = ["gradexport.sphinx"]``)."""
    app.add_config_value("gradexport_formats", ["mermaid", "svg"], "env", list)
    app.add_config_value("gradexport_mermaid_js", "node_modules/mermaid/dist/mermaid.min.js", "html", str)
    app.add_config_value("gradexport_timeout", 60, "env", (int, float))
    app.add_config_value("gradexport_max_output", 100_000, "env", int)
    app.add_config_value("gradexport_isolate", hasattr(os, "fork") and sys.platform != "darwin", "env", bool)
    app.add_config_value("gradexport_warnings", "show", "env", str)
    app.add_node(block_node)
    app.add_directive("gradexport", GradexportDirective)
    app.add_css_file(STYLE_STATIC_PATH)
    app.connect("config-inited", check_config)
    app.connect("doctree-read", run_page_blocks)
    app.connect("html-page-context", add_mermaid)
    app.connect("build-finished", finish)
    return {
        "version": importlib.metadata.version("gradexport"),
        "parallel_read_safe": True,
        "parallel_write_safe": True,
        "env_version": 1,
    }
