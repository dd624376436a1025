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
  out by Graphviz at build time and inlined), ``html`` (the interactive
  viewer, in an isolating iframe), or several, shown as content tabs (needs
  the ``pymdownx.tabbed`` extension). Default: the plugin's ``formats`` option.
- ``graph``: a Python expression, evaluated after the block ran, giving the
  roots (anything `gradexport.to_networkx` takes, or a graph it built).
- Export options: any option of the export functions that can be written as
  text (see `gradexport.options`; the guide lists them all), e.g.
  ``direction="LR" edge_shapes="true" depth="2"``; ``true``, ``false`` and
  ``none`` are read as Python's ``True``, ``False``, ``None``. An option that
  applies to none of the block's formats stops the build.

Which fences run: only those Markdown renders as fences, at the top level or
inside admonitions, content tabs and list items. A ``gradexport`` fence inside
another fence, inside an indented code block, or inside an HTML comment that
starts a line is text and does not run (see `find_blocks`).

How blocks run. **Blocks are trusted code**: they run with the rights of
whoever builds the site, as any code a docs build imports does; build only
documentation whose examples you would run yourself. Each page's blocks run
in a new empty temporary working directory (removed afterwards), so files an
example writes with relative paths land there, not in the project. By
default (plugin option ``isolate: true``, on Linux and other POSIX systems
but macOS) they run in a child process forked from the build, which already
has torch and gradexport imported, and which serves every page of the build
(see `BlockRunner`): a block that runs longer than
``timeout`` seconds (default 60; 0 for none) is stopped and fails the build
naming the page and line, and a block that ends its process
(``os._exit(0)``, a crash) fails the build instead of ending it with exit
status 0. ``sys.exit()`` in a block is a failure either way. With
``isolate: false`` blocks run in the build process itself: no time limit.
Printed output is kept up to ``max_output`` characters per block (default
100,000; 0 for no cap); what is cut is said in the output shown. Pages
listed in MkDocs' ``draft_docs`` are not rendered by ``mkdocs build``, so their
blocks do not run there; ``mkdocs serve`` renders drafts and runs their
blocks, and a failing one shows as an error of the served build.

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

All plugin options, with their defaults:

```yaml
plugins:
  - gradexport:
      formats: [mermaid, svg]
      mermaid_js: node_modules/mermaid/dist/mermaid.min.js
      timeout: 60        # seconds per block; 0: no limit
      max_output: 100000 # characters of printed output per block; 0: no cap
      isolate: true      # run each page's blocks in a forked child process
```

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
import multiprocessing
import os
import re
import shlex
import sys
import tempfile
import time
import traceback
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from mkdocs.config import config_options
from mkdocs.config.base import Config
from mkdocs.exceptions import PluginError
from mkdocs.plugins import BasePlugin
from mkdocs.structure.files import File, Files

__all__ = ["Block", "BlockOptions", "BlockResult", "BlockRunner", "GradexportPlugin", "find_blocks", "run_blocks"]

log = logging.getLogger("mkdocs.plugins.gradexport")

#: The parts a block can show, in the order they appear on the page.
PARTS = ("code", "output", "diagram")
#: Diagram formats, in the order of their tabs, with the tab titles.
FORMATS = {"mermaid": "Mermaid", "svg": "Graphviz (SVG)", "html": "Interactive viewer"}
#: Where the plugin puts mermaid.js in the built site.
MERMAID_SITE_PATH = "js/mermaid.min.js"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>.*)$")
_PACKAGE_DIR = Path(__file__).resolve().parent


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
    #: The warnings the block raised, as ``"Category: message"``; the plugin logs them.
    warnings: tuple[str, ...] = ()


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
    """Find the ``gradexport`` fenced blocks that Markdown shows as fences, at the top level or in a container.

    ``where`` names the page in error messages. Only a fence that Markdown
    renders as a fence is an example: one inside another fence (say a
    ````` ````markdown ````` fence that documents the syntax), inside an
    indented code block (4 spaces deeper than its container after a blank
    line), or inside an HTML comment that starts a line (``<!--`` ... ``-->``)
    is text. Admonitions (``!!!``, ``???``), content tabs (``===``) and list
    items are containers whose content is indented by 4.

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


# Lines that open a container whose content is indented by 4: admonitions, content tabs, list items.
_CONTAINER = re.compile(r"^[ \t]*(?:(?:!!!|\?\?\?\+?)[ \t]+\S|===[+!]?[ \t]+\"|[-*+][ \t]+\S|\d+[.)][ \t]+\S)")


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


def run_blocks(
    blocks: list[Block],
    path: str,
    shown_as: str,
    *,
    max_output: int = 0,
    on_block: Callable[[int], None] | None = None,
) -> list[BlockResult]:
    """Run ``blocks`` in order in one fresh namespace and render their diagrams.

    ``path`` is the Markdown file (tracebacks show its lines); ``shown_as`` names
    the page in error messages. Printed output beyond ``max_output`` characters
    (0: no cap) is dropped and a note says so. ``on_block(i)`` is called as
    block ``i`` starts. Run this inside `gradexport.run_with_large_stack`
    so that the namespace, and every graph in it, is freed on the large stack;
    the plugin runs it through `BlockRunner`.

    Raises:
        ExampleError: when a block raises, with the traceback of its own frames.
    """
    namespace: dict[str, Any] = {"__name__": "__gradexport_example__"}
    results = []
    for number, block in enumerate(blocks):
        if on_block is not None:
            on_block(number)
        output = _CappedOutput(max_output)
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
        warned = tuple(f"{warning.category.__name__}: {warning.message}" for warning in caught)
        results.append(BlockResult(_ADDRESS.sub(" at 0x…", output.text()), diagrams, warned))
    return results


class _CappedOutput(io.StringIO):
    """Keeps the first ``limit`` characters written (all when ``limit`` is 0) and counts the rest."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit
        self.written = 0

    def write(self, text: str) -> int:
        self.written += len(text)
        room = len(text) if not self.limit else self.limit - self.tell()
        if room > 0:
            super().write(text[:room])
        return len(text)

    def text(self) -> str:
        kept = self.getvalue()
        if self.written > len(kept):
            kept += (
                f"\n[output cut: the block printed {self.written:,} characters; the first {len(kept):,} are shown "
                "(plugin option max_output)]\n"
            )
        return kept


class BlockRunner:
    """Runs pages' blocks as the plugin does: each page in a fresh temporary working directory and, with ``isolate``, in a child process.

    The child is forked from the build on the first page (so torch and
    gradexport are already imported) and serves the following pages too, so
    what one page warmed up (imports, torch's lazy initialisation) the next
    finds ready, as in the build process itself; each page still gets a fresh
    namespace. It sends back each block's output and diagrams. That gives
    every block a time limit of ``timeout`` seconds (0: none), and a block
    that ends its process (``os._exit(0)``, a crash) fails the build rather
    than ending it; after either, the next page gets a new child. Without
    ``isolate`` the blocks run in the build process, with no time limit.

    Examples:
        >>> blocks = find_blocks(['```gradexport show="output"', "print(6 * 7)", "```"], "page.md")
        >>> with BlockRunner(timeout=10) as runner:
        ...     [result.output for result in runner.run(blocks, "page.md", "page.md")]
        ['42\\n']
    """

    def __init__(self, *, timeout: float = 60, max_output: int = 100_000, isolate: bool = True):
        self.timeout = timeout
        self.max_output = max_output
        self.isolate = isolate
        self._child: Any = None
        self._connection: Any = None

    def run(self, blocks: list[Block], path: str, shown_as: str) -> list[BlockResult]:
        """Run one page's blocks (see `run_blocks`) in a new temporary working directory, removed afterwards.

        Raises:
            ExampleError: when a block raises, runs too long or ends the
                process; the message names the page and the block's line.
        """
        with tempfile.TemporaryDirectory(prefix="gradexport-page-", ignore_cleanup_errors=True) as folder:
            if self.isolate:
                return self._run_in_child(blocks, path, shown_as, folder)
            previous = os.getcwd()
            os.chdir(folder)
            try:
                stack = importlib.import_module("gradexport").run_with_large_stack
                return stack(run_blocks, blocks, path, shown_as, max_output=self.max_output)
            finally:
                os.chdir(previous)

    def _run_in_child(self, blocks: list[Block], path: str, shown_as: str, folder: str) -> list[BlockResult]:
        if self._child is None:
            context = multiprocessing.get_context("fork")
            self._connection, child_end = context.Pipe()
            self._child = context.Process(target=_serve_pages, args=(child_end,), daemon=True)
            self._child.start()
            child_end.close()
        self._connection.send((blocks, path, shown_as, folder, self.max_output))
        running = 0  # the block the child is running
        started = time.monotonic()
        while True:
            wait = None if not self.timeout else max(0.0, started + self.timeout - time.monotonic())
            if not self._connection.poll(wait):
                self.close()
                raise ExampleError(
                    f"{shown_as}:{blocks[running].start + 1}: the gradexport block on this line ran longer than "
                    f"{self.timeout:g} s and was stopped (plugin option timeout; 0 turns the limit off)"
                )
            try:
                kind, payload = self._connection.recv()
            except EOFError:
                self._child.join()
                status = self._child.exitcode
                self.close()
                raise ExampleError(
                    f"{shown_as}:{blocks[running].start + 1}: the gradexport block on this line ended the process "
                    f"that runs the examples (exit status {status}; os._exit(), a crash or a signal) before it "
                    "finished; a block must return normally"
                ) from None
            if kind == "block":
                running, started = payload, time.monotonic()
            elif kind == "error":
                raise ExampleError(payload)
            else:
                return payload

    def close(self) -> None:
        """End the child process, if there is one."""
        if self._child is not None:
            self._connection.close()
            self._child.kill()
            self._child.join()
            self._child = self._connection = None

    def __enter__(self) -> BlockRunner:
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()


def _serve_pages(connection: Any) -> None:
    """The forked child: run each page sent, send back its results, and leave without tearing anything down."""
    stack = importlib.import_module("gradexport").run_with_large_stack
    try:
        while True:
            try:
                blocks, path, shown_as, folder, max_output = connection.recv()
            except EOFError:
                break
            try:
                os.chdir(folder)
                results = stack(
                    run_blocks, blocks, path, shown_as, max_output=max_output, on_block=lambda i: connection.send(("block", i))
                )
                connection.send(("done", results))
            except ExampleError as error:
                connection.send(("error", str(error)))
            except BaseException as error:  # noqa: BLE001 - everything is reported to the build
                trace = "".join(traceback.format_exception(error))
                connection.send(("error", f"{shown_as}: running the gradexport blocks failed:\n{trace}"))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip interpreter teardown: freeing a deep graph there could overflow the stack.
        os._exit(0)


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
        self._runner = BlockRunner(isolate=False)

    def on_startup(self, *, command: Literal["build", "gh-deploy", "serve"], dirty: bool) -> None:
        """Mark the plugin persistent across ``mkdocs serve`` rebuilds."""

    def on_config(self, config: Any) -> Any:
        _check_formats(self.config.formats, "plugins.gradexport.formats")
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
        self._runner = BlockRunner(timeout=self.config.timeout, max_output=self.config.max_output, isolate=self.config.isolate)
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
        key = (
            page.file.src_uri,
            tuple((block.code, block.options) for block in blocks),
            version,
            self._fingerprint,
            self.config.max_output,
        )
        if key not in self._cache:
            path = str(Path(page.file.abs_src_path).resolve()) if page.file.abs_src_path else page.file.src_uri
            try:
                results = self._runner.run(blocks, path, page.file.src_uri)
            except ExampleError as error:
                raise PluginError(str(error)) from None
            for block, result in zip(blocks, results, strict=True):
                for warning in result.warnings:
                    # A MkDocs warning, so that `mkdocs build --strict` stops on an example that warns.
                    log.warning(f"{page.file.src_uri}:{block.start + 1}: the gradexport block on this line warned: {warning}")
            self._cache[key] = results
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

    def on_post_build(self, *, config: Any) -> None:
        self._runner.close()

    def on_build_error(self, *, error: Exception) -> None:
        self._runner.close()

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
    # data-search-exclude keeps the diagram's text (Mermaid source, SVG labels, the
    # viewer's data) out of Material's search index: it matches the prose, not node ids.
    if name == "mermaid":
        # The markup pymdownx.superfences writes for a mermaid fence, which Material renders.
        source = html.escape(_MERMAID_FRONT_MATTER + text)
        return f'<div class="gradexport-diagram" data-search-exclude><pre class="mermaid"><code>{source}</code></pre></div>'
    if name == "html":
        # The viewer, isolated in an iframe (its own document, scripts and styles) at a readable height.
        frame = importlib.import_module("gradexport.formats.html").notebook_iframe(text, height=560)
        return f'<div class="gradexport-diagram gradexport-viewer" data-search-exclude>{frame}</div>'
    return f'<div class="gradexport-diagram gradexport-svg">{text.replace("<svg", "<svg data-search-exclude", 1)}</div>'
