"""``gradexport render-md PAGE.md... -o DIR``: run the ``gradexport`` blocks of Markdown pages and write plain Markdown, pictures beside it.

For a site generator without a gradexport plugin (Hugo, Docusaurus, Jekyll,
a README): each page's blocks run as the MkDocs plugin runs them (the same
fences and options, `gradexport.frontends.blocks`), and ``DIR`` gets the page
with each block replaced by plain Markdown any renderer shows:

- the code, and what it printed (and the warnings it raised), as fenced code;
- ``svg``: the picture as a file beside the page (``PAGE-1.svg``, numbered
  per diagram), shown with ``![...](PAGE-1.svg)``;
- ``mermaid``: a ```` ```mermaid ```` fence, which GitHub, GitLab and most
  generators draw;
- ``html``: the interactive viewer as a page of its own beside it
  (``PAGE-1.html``, self-contained), linked;
- ``dot`` and ``json``: fenced code.

Pages keep their paths relative to the folder that holds them all. Exit
status: 0 when every page was written; 1 when a block failed (its page, line
and traceback on stderr; no page of that run is written) or, with
``--warnings strict``, warned; 2 on bad usage (a page that does not exist, a
block's unknown option). Warnings the blocks raise are printed with their
page and line either way.

Examples:
    >>> import contextlib, io, pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "page.md").write_text('# Page\\n\\n```gradexport show="output"\\nprint(6 * 7)\\n```\\n')
    >>> with contextlib.redirect_stderr(io.StringIO()):
    ...     main([str(folder / "page.md"), "-o", str(folder / "out")])
    0
    >>> print((folder / "out" / "page.md").read_text())
    # Page
    <BLANKLINE>
    ```text
    42
    ```
    <BLANKLINE>
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...core.errors import BlockSyntaxError, ExampleError
from ..blocks.markdown import fenced, find_blocks
from ..blocks.runner import BlockResult, BlockRunner, report_warnings
from ..blocks.spec import FORMATS, WARNING_MODES, Block, check_formats
from .running import parsed, subparser

__all__ = ["DESCRIPTION", "SUMMARY", "main", "render_page"]

SUMMARY = "run the gradexport blocks of Markdown pages; write plain Markdown with the pictures beside it"

DESCRIPTION = (
    "Run the ```gradexport blocks of Markdown pages (the MkDocs plugin's fences and options) and write each\n"
    "page into DIR as plain Markdown: code and output as fences, SVG pictures as files beside the page,\n"
    "Mermaid as ```mermaid fences, the interactive viewer as a page beside it. For any site generator."
)


@dataclass(frozen=True)
class RenderedPage:
    """A page's Markdown and the files that go beside it (name to text)."""

    markdown: str
    files: dict[str, str]


def render_page(text: str, blocks: list[Block], results: list[BlockResult], stem: str) -> RenderedPage:
    """The page ``text`` with each of its ``blocks`` replaced by plain Markdown of its result; files named after ``stem``.

    Examples:
        >>> from gradexport.frontends.blocks.markdown import find_blocks
        >>> lines = ["```gradexport formats=\\"svg\\"", "x = 1", "```"]
        >>> page = render_page("\\n".join(lines), find_blocks(lines, "page.md"), [BlockResult("", {"svg": "<svg/>"})], "page")
        >>> print(page.markdown)
        ```python
        x = 1
        ```
        <BLANKLINE>
        ![Autograd graph (Graphviz (SVG))](page-1.svg)
        >>> page.files
        {'page-1.svg': '<svg/>'}
    """
    lines = text.split("\n")
    files: dict[str, str] = {}
    replacements = []
    for block, result in zip(blocks, results, strict=True):
        parts = []
        if "code" in block.options.show:
            parts.append(fenced(block.code, "python"))
        if "output" in block.options.show and result.output:
            parts.append(fenced(result.output, "text"))
        for name, diagram in result.diagrams.items():
            file_name = f"{stem}-{len(files) + 1}.{name}"
            if name == "svg":
                files[file_name] = diagram
                parts.append(f"![Autograd graph ({FORMATS[name]})]({file_name})")
            elif name == "html":
                files[file_name] = diagram
                parts.append(f"[Autograd graph: {FORMATS[name].lower()}]({file_name})")
            else:  # mermaid, dot, json: text a renderer draws or highlights
                parts.append(fenced(diagram, name))
        shown = "\n\n".join(parts).split("\n")
        replacements.append((block, [f"{block.indent}{line}" if line else "" for line in shown]))
    for block, replacement in reversed(replacements):
        lines[block.start : block.end] = replacement
    return RenderedPage("\n".join(lines), files)


def main(argv: Sequence[str]) -> int:
    parser = subparser("render-md", DESCRIPTION, target=False)
    parser.add_argument("pages", metavar="PAGE.md", nargs="+", type=Path, help="Markdown pages with ```gradexport blocks")
    parser.add_argument("-o", "--output", metavar="DIR", type=Path, required=True, help="where the pages and their pictures go")
    parser.add_argument("--formats", nargs="+", default=["mermaid", "svg"], help="formats of a block that names none (default: mermaid svg)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds a block may run; 0: no limit (default 60)")
    parser.add_argument("--max-output", type=int, default=100_000, help="characters of printed output kept per block; 0: all")
    parser.add_argument("--warnings", choices=WARNING_MODES, default="show", help="strict: exit 1 when a block warned")
    args = parsed(parser, argv)
    if isinstance(args, int):
        return args
    missing = [str(page) for page in args.pages if not page.is_file()]
    if missing or args.timeout < 0 or args.max_output < 0:
        said = f"no such file: {', '.join(missing)}" if missing else "--timeout and --max-output take a number >= 0 (0 turns it off)"
        print(f"gradexport render-md: error: {said} (see gradexport render-md --help)", file=sys.stderr)
        return 2
    root = Path(os.path.commonpath([page.resolve().parent for page in args.pages]))
    try:
        check_formats(args.formats, "--formats")
        found = [(page, find_blocks(page.read_text(encoding="utf-8").split("\n"), str(page), tuple(args.formats))) for page in args.pages]
    except BlockSyntaxError as error:
        print(f"gradexport render-md: error: {error}", file=sys.stderr)
        return 2
    rendered: dict[Path, RenderedPage] = {}
    warned = False
    with BlockRunner(timeout=args.timeout, max_output=args.max_output, setting="render-md --{}") as runner:
        for page, blocks in found:
            text = page.read_text(encoding="utf-8")
            try:
                results = runner.run(blocks, str(page.resolve()), str(page)) if blocks else []
            except ExampleError as error:
                print(f"gradexport render-md: {error}", file=sys.stderr)
                return 1
            for block, result in zip(blocks, results, strict=True):
                strict = (block.options.warnings or args.warnings) == "strict"
                warned |= strict and bool(result.warnings)
                report_warnings(block, result, str(page), strict=strict, inform=_print_error, warn=_print_error)
            relative = page.resolve().relative_to(root)
            rendered[relative] = render_page(text, blocks, results, relative.stem)
    for relative, written in rendered.items():
        target = args.output / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(written.markdown, encoding="utf-8")
        for name, content in written.files.items():
            (target.parent / name).write_text(content, encoding="utf-8")
    return 1 if warned else 0


def _print_error(message: str) -> None:
    print(message, file=sys.stderr)
