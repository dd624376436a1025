"""A MkDocs plugin that runs autograd examples at build time and embeds their graphs.

Enable it in ``mkdocs.yml``:

```yaml
plugins:
  - search
  - gradexport
```

Then write an example as a fenced block whose language is ``gradexport``;
options go on the fence line, as ``key="value"`` pairs:

````markdown
```gradexport formats="mermaid svg" show="code output diagram"
import torch
x = torch.ones(3, requires_grad=True)
loss = (x * 2).sum()
print(loss)
loss
```
````

The block is replaced by its code, what it printed, and the autograd graph of
its roots. The roots are the value of the block's last line when that line is
an expression (``loss`` above), or the Python expression given as
``graph="..."``. A block with neither (or whose last expression is ``None``)
shows no diagram. Blocks of one page run in order in one namespace, like the
cells of a notebook, so a later block sees the tensors of an earlier one.

Options (each optional):

- ``show``: which parts to show, any of ``code``, ``output``, ``diagram``
  (default: all three; ``output`` is left out when nothing was printed).
- ``formats``: ``mermaid`` (drawn by mermaid.js in the browser), ``svg`` (laid
  out by Graphviz at build time and inlined), or both, shown as content tabs
  (needs the ``pymdownx.tabbed`` extension). Default: the plugin's ``formats``
  option.
- ``graph``: a Python expression, evaluated after the block ran, giving the
  roots (anything `gradexport.to_networkx` takes, or a graph it built).
- Export options: any option of the export functions that can be written as
  text (see `gradexport.options`; the guide lists them all): ``direction``,
  ``show_none``, ``show_saved``, ``edge_shapes``, ``grad_norms``,
  ``group_modules``, ``depth``, ``fit``, ``edge_metadata``, ``prog``, e.g.
  ``direction="LR" edge_shapes="true" depth="2"``; ``true``, ``false`` and
  ``none`` are read as Python's ``True``, ``False``, ``None``. An option that
  applies to none of the block's formats stops the build.

A failing block stops the build with a `mkdocs.exceptions.PluginError`
naming the page, the block's line and the traceback, whose line numbers are
those of the Markdown file. A warning raised while a block runs is logged as a
MkDocs warning, so ``mkdocs build --strict`` stops on it too. Examples run inside
`gradexport.run_with_large_stack`, so deep graphs are safe to build and
free. Results are cached in memory per page, keyed by the page's blocks, the
gradexport version and the library's source files: ``mkdocs serve`` re-runs a
page's examples when the page or the library changes (the plugin watches the
gradexport package), and re-imports the library when its sources changed.

The plugin also copies a local ``mermaid.min.js`` into the site (option
``mermaid_js``, default ``node_modules/mermaid/dist/mermaid.min.js``, relative
to ``mkdocs.yml``; run ``npm ci`` to get it) and loads it before the theme's
scripts, so that Material for MkDocs finds it and fetches nothing from a CDN.
Set ``mermaid_js: ""`` to load mermaid.js yourself.

Examples:
    >>> blocks = find_blocks(['# Title', '```gradexport show="code"', 'x = 1', '```'], "page.md")
    >>> [(block.line, block.code, sorted(block.options.show)) for block in blocks]
    [(3, 'x = 1\\n', ['code'])]
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import html
import importlib
import io
import logging
import re
import shlex
import sys
import traceback
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from mkdocs.config import config_options
from mkdocs.config.base import Config
from mkdocs.exceptions import PluginError
from mkdocs.plugins import BasePlugin
from mkdocs.structure.files import File, Files

__all__ = ["Block", "BlockOptions", "BlockResult", "GradexportPlugin", "find_blocks", "run_blocks"]

log = logging.getLogger("mkdocs.plugins.gradexport")

#: The parts a block can show, in the order they appear on the page.
PARTS = ("code", "output", "diagram")
#: Diagram formats, in the order of their tabs, with the tab titles.
FORMATS = {"mermaid": "Mermaid", "svg": "Graphviz (SVG)"}
#: Where the plugin puts mermaid.js in the built site.
MERMAID_SITE_PATH = "js/mermaid.min.js"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>.*)$")
_PACKAGE_DIR = Path(__file__).resolve().parent


class GradexportPluginConfig(Config):
    """The plugin's options in ``mkdocs.yml``."""

    formats = config_options.Type(list, default=["mermaid", "svg"])
    mermaid_js = config_options.Type(str, default="node_modules/mermaid/dist/mermaid.min.js")


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


@dataclass(frozen=True)
class BlockResult:
    """What running a block produced."""

    #: Everything the block printed to stdout.
    output: str
    #: Diagram text per format: Mermaid source, or an ``<svg>`` element.
    diagrams: dict[str, str]


class ExampleError(Exception):
    """An example block raised; the message carries the page, line and traceback."""


def parse_options(info: str, default_formats: tuple[str, ...], where: str) -> BlockOptions:
    """Parse the ``key="value"`` pairs after ``gradexport`` on a fence line.

    Examples:
        >>> options = parse_options('formats="svg" graph="loss" direction="LR"', ("mermaid",), "page.md:1")
        >>> sorted(options.show), options.formats, options.graph, options.export
        (['code', 'diagram', 'output'], ('svg',), 'loss', (('direction', 'LR'),))
    """
    export_options = importlib.import_module("gradexport.options")
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
    _check_formats(formats, where)
    try:
        keywords = export_options.ExportOptions.parse_text(given, caller=where)
        export_options.ExportOptions.from_keywords(keywords, formats=formats, from_roots=True, caller=where)
    except (TypeError, ValueError) as error:
        raise PluginError(str(error)) from None
    graph = values.get("graph") or None
    return BlockOptions(show=show, formats=formats, graph=graph, export=tuple(keywords.items()))


def _check_formats(formats: tuple[str, ...] | list[str], where: str) -> None:
    unknown = [name for name in formats if name not in FORMATS]
    if unknown or not formats or len(set(formats)) != len(formats):
        raise PluginError(f"{where}: formats={' '.join(formats)!r}: give one or both of {', '.join(FORMATS)}")


def find_blocks(lines: list[str], where: str, default_formats: tuple[str, ...] = ("mermaid", "svg")) -> list[Block]:
    """Find the ``gradexport`` fenced blocks in a page, skipping any inside other fences.

    ``where`` names the page in error messages. A block inside another fence
    (say a ````` ````markdown ````` fence that documents the syntax) is text, not an example.
    """
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        closing = _find_closing(lines, index + 1, opening)
        language, _, info = opening["info"].strip().partition(" ")
        if language == "gradexport":
            if closing == len(lines):
                raise PluginError(f"{where}:{index + 1}: the gradexport block opened here is never closed")
            indent = opening["indent"]
            body = [line[len(indent) :] if line.startswith(indent) else line.lstrip() for line in lines[index + 1 : closing]]
            options = parse_options(info, default_formats, f"{where}:{index + 1}")
            blocks.append(Block(index, closing + 1, indent, "".join(f"{line}\n" for line in body), options, index + 2))
        index = closing + 1
    return blocks


def _find_closing(lines: list[str], start: int, opening: re.Match[str]) -> int:
    fence = opening["fence"]
    for index in range(start, len(lines)):
        match = _FENCE.match(lines[index])
        if match and match["fence"][0] == fence[0] and len(match["fence"]) >= len(fence) and not match["info"].strip():
            return index
    return len(lines)


def run_blocks(blocks: list[Block], path: str, shown_as: str) -> list[BlockResult]:
    """Run ``blocks`` in order in one fresh namespace and render their diagrams.

    ``path`` is the Markdown file (tracebacks show its lines); ``shown_as`` names
    the page in error messages. Run this inside `gradexport.run_with_large_stack`
    so that the namespace, and every graph in it, is freed on the large stack.

    Raises:
        ExampleError: when a block raises, with the traceback of its own frames.
    """
    namespace: dict[str, Any] = {"__name__": "__gradexport_example__"}
    results = []
    for block in blocks:
        output = io.StringIO()
        try:
            with contextlib.redirect_stdout(output), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("default")
                value = _execute(block, path, namespace)
                if block.options.graph is not None:
                    value = eval(compile(block.options.graph, "<graph option>", "eval"), namespace)
            diagrams = {}
            if "diagram" in block.options.show and value is not None:
                diagrams = _render(value, block.options)
        except (Exception, SystemExit) as error:  # sys.exit() in an example is a failure too, not the build's exit
            raise ExampleError(
                f"{shown_as}:{block.start + 1}: the gradexport block on this line failed:\n"
                + _format_traceback(error, path)
            ) from None
        for warning in caught:
            # A MkDocs warning, so that `mkdocs build --strict` stops on an example that warns.
            log.warning(f"{shown_as}:{block.start + 1}: the gradexport block on this line warned: "
                        f"{warning.category.__name__}: {warning.message}")
        results.append(BlockResult(_ADDRESS.sub(" at 0x…", output.getvalue()), diagrams))
    return results


# Python's default reprs (``<SumBackward0 object at 0x7f…>``) change on every
# run; masking the address keeps the built site the same from build to build.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _execute(block: Block, path: str, namespace: dict[str, Any]) -> Any:
    """Run a block; return the value of its last line if that is an expression."""
    # Padding the code to its place in the Markdown file makes every line number
    # (in tracebacks and syntax errors) a line of that file.
    tree = ast.parse("\n" * (block.line - 1) + block.code, filename=path)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, path, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), path, "eval"), namespace)


def _format_traceback(error: BaseException, path: str) -> str:
    tb: TracebackType | None = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename not in (path, "<graph option>"):
        tb = tb.tb_next  # drop the plugin's own frames: the reader wants the example's
    return "".join(traceback.format_exception(type(error), error, tb))


def _render(value: Any, options: BlockOptions) -> dict[str, str]:
    """The block's diagrams, from one trace of its roots."""
    texts = importlib.import_module("gradexport.export").render(value, options.formats, **dict(options.export))
    if "svg" in texts:
        texts["svg"] = texts["svg"][texts["svg"].index("<svg") :]  # inline: drop the XML prolog and DOCTYPE
    return texts


def library_fingerprint() -> str:
    """A digest of the gradexport sources: it changes when the library is edited."""
    digest = hashlib.sha256()
    for source in sorted(_PACKAGE_DIR.rglob("*.py")):
        digest.update(source.relative_to(_PACKAGE_DIR).as_posix().encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()


def _forget_library() -> None:
    """Drop the imported gradexport modules so that the next example imports the edited ones."""
    for name in [name for name in sys.modules if name == "gradexport" or name.startswith("gradexport.")]:
        if name != __name__:
            del sys.modules[name]


class GradexportPlugin(BasePlugin[GradexportPluginConfig]):
    """Run ``gradexport`` fenced blocks at build time; see `gradexport.mkdocs_plugin`."""

    def __init__(self) -> None:
        # The plugin defines on_startup, so MkDocs keeps this one object across
        # the rebuilds of `mkdocs serve`: the cache lives as long as the server.
        self._cache: dict[tuple[Any, ...], list[BlockResult]] = {}
        self._fingerprint: str | None = None
        self._pending: dict[str, dict[str, str]] = {}
        self._tabbed = False
        self._titled_fences = False

    def on_startup(self, *, command: Literal["build", "gh-deploy", "serve"], dirty: bool) -> None:
        """Mark the plugin persistent across ``mkdocs serve`` rebuilds."""

    def on_config(self, config: Any) -> Any:
        _check_formats(self.config.formats, "plugins.gradexport.formats")
        self._tabbed = "pymdownx.tabbed" in config.markdown_extensions
        self._titled_fences = "pymdownx.superfences" in config.markdown_extensions
        fingerprint = library_fingerprint()
        if self._fingerprint is not None and fingerprint != self._fingerprint:
            log.info("gradexport: the library changed; re-importing it and re-running the examples")
            _forget_library()
            self._cache.clear()
        self._fingerprint = fingerprint
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
        server.watch(str(_PACKAGE_DIR))
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
        gradexport = importlib.import_module("gradexport")
        version = getattr(gradexport, "__version__", None)
        key = (page.file.src_uri, tuple((block.code, block.options) for block in blocks), version, self._fingerprint)
        if key not in self._cache:
            path = str(Path(page.file.abs_src_path).resolve()) if page.file.abs_src_path else page.file.src_uri
            try:
                self._cache[key] = gradexport.run_with_large_stack(run_blocks, blocks, path, page.file.src_uri)
            except ExampleError as error:
                raise PluginError(str(error)) from None
        return self._cache[key]

    def _markdown_for(self, block: Block, result: BlockResult, placeholders: dict[str, str]) -> list[str]:
        parts: list[str] = []
        if "code" in block.options.show:
            parts.append(_fenced(block.code, "python"))
        if "output" in block.options.show and result.output:
            parts.append(_fenced(result.output, 'text title="Output"' if self._titled_fences else "text"))
        if result.diagrams:
            tokens = []
            for name, text in result.diagrams.items():
                token = f"gradexport-diagram-{uuid.uuid4().hex}"
                placeholders[token] = _diagram_html(name, text)
                tokens.append((name, token))
            if len(tokens) == 1:
                parts.append(tokens[0][1])
            else:
                parts.append("\n\n".join(f'=== "{FORMATS[name]}"\n\n    {token}' for name, token in tokens))
        text = "\n\n".join(parts)
        return [f"{block.indent}{line}" if line else "" for line in f"\n{text}\n".split("\n")]

    def on_page_content(self, html_text: str, *, page: Any, config: Any, files: Files) -> str:
        placeholders = self._pending.pop(page.file.src_uri, {})
        for token, diagram in placeholders.items():
            paragraph = f"<p>{token}</p>"
            if paragraph not in html_text:
                raise PluginError(
                    f"{page.file.src_uri}: a gradexport diagram could not be placed; keep gradexport "
                    "blocks at the top level, in admonitions or in content tabs"
                )
            html_text = html_text.replace(paragraph, diagram)
        return html_text


def _fenced(text: str, info: str) -> str:
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (longest + 1)
    return f"{fence}{info}\n{text.rstrip()}\n{fence}"


#: Front matter for every Mermaid diagram: draw it at its natural size, as the SVGs
#: are. By default mermaid.js scales a diagram down to the column's width, so a
#: large graph's text shrinks until it cannot be read; the container scrolls instead.
_MERMAID_FRONT_MATTER = "---\nconfig:\n  flowchart:\n    useMaxWidth: false\n---\n"


def _diagram_html(name: str, text: str) -> str:
    # data-search-exclude keeps the diagram's text (Mermaid source, SVG labels)
    # out of Material's search index: it matches the prose, not the node ids.
    if name == "mermaid":
        # The markup pymdownx.superfences writes for a mermaid fence, which Material renders.
        source = html.escape(_MERMAID_FRONT_MATTER + text)
        return f'<div class="gradexport-diagram" data-search-exclude><pre class="mermaid"><code>{source}</code></pre></div>'
    return f'<div class="gradexport-diagram gradexport-svg">{text.replace("<svg", "<svg data-search-exclude", 1)}</div>'
