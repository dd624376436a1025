"""``gradexport view TARGET``: write the interactive viewer page and open it, or serve the graph in Model Explorer."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...api.export import prepare, write
from ...api.registry import honoured_options
from ...core.options import ExportOptions
from ...tracing.roots import RootError
from .misbehaving import output_place, print_lines
from .running import PROG, Failure, add_traceback, call_target, no_graph, on_large_stack, one_line, parsed, refuse_options, subparser

__all__ = ["DESCRIPTION", "SUMMARY", "main"]

SUMMARY = "write the interactive viewer page of TARGET's graph (or of a flight-recorder bundle) and open it"

DESCRIPTION = (
    "Write the interactive viewer page of a function's autograd graph and open it in the default browser\n"
    "(or, with --model-explorer, serve it in Google's Model Explorer on 127.0.0.1).\n"
    "Given a bundle that gradexport.watch(bad_steps=FOLDER) wrote (a .json file), show its bad step and its healthy step side by side."
)


def main(argv: Sequence[str]) -> int:
    if any(item == "--watch" or item.startswith("--watch=") for item in argv):
        return _view_watch(argv)
    if any(item.endswith(".json") and Path(item).is_file() for item in argv if not item.startswith("-")):
        return _view_bundle(argv)
    parser = subparser("view", DESCRIPTION)
    parser.add_argument("-o", "--output", metavar="FILE", help="the page to write (default: FUNCTION.html in the current folder)")
    parser.add_argument("--no-open", action="store_true", help="only write the page (or start the server) and print its address")
    parser.add_argument("--model-explorer", action="store_true", help="open the graph in Model Explorer (pip install gradexport[explorer])")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_traceback(parser)
    ExportOptions.add_arguments(parser.add_argument_group("options (see gradexport.options; each applies to the formats in brackets)"), honoured_options())
    args = parsed(parser, argv)
    if isinstance(args, int):
        return args
    args.options = ExportOptions.given_arguments(args)
    formats = ["model-explorer"] if args.model_explorer else ["html"]
    if refuse_options(args.options, formats, f"{PROG} view"):
        return 2
    return on_large_stack(lambda bar: _view_work(args, bar), args, 2)


def _view_work(args: argparse.Namespace, bar: Any) -> tuple[int, list[str]]:
    import webbrowser

    name = args.target[1]
    stem = name.rpartition(".")[2]
    page = output_place(args.output or f"{stem}.html")  # before the function runs: an os.chdir in it moves nothing
    roots, params, module = call_target(args.target, bar)
    try:
        if args.model_explorer:
            from ..model_explorer_server import serve_model_explorer

            keywords = {"params": params, "module": module, **args.options}
            source, options = prepare(roots, ["model-explorer"], keywords, caller="view", whole=True)  # type: ignore[arg-type]
            del roots
            bar.close()
            serve_model_explorer(source.whole("view"), open_browser=not args.no_open, options=options.diagram)  # until Ctrl+C
            return 0, []
        paths = write(roots, page.absolute.parent, "html", stem=page.absolute.name.removesuffix(".html"), params=params, module=module, **args.options)
    except RootError as error:
        raise no_graph(args.target, error) from error
    except (OSError, RuntimeError, ValueError, TypeError, ImportError) as error:
        raise Failure(one_line(error)) from error
    address = paths["html"].resolve().as_uri()
    if not args.no_open:
        webbrowser.open(address)
    return 0, [page.shown(paths["html"]) if args.no_open else f"opened {address}"]


def _view_bundle(argv: Sequence[str]) -> int:
    """``gradexport view BUNDLE``: the page of a flight-recorder bundle, the bad step beside the healthy one."""
    from ...api.export import to_html
    from ...backward.bundle_file import load_bundle

    parser = subparser("view", "Write the page of a bundle that gradexport.watch(bad_steps=FOLDER) wrote and open it.", target=False)
    parser.add_argument("bundle", metavar="BUNDLE", help="a bad-step-NNNNNN.json file written by the flight recorder")
    _add_page_arguments(parser, "BUNDLE")
    args = parsed(parser, argv)
    if isinstance(args, int):
        return args
    return _write_page(Path(args.bundle), args, lambda source: to_html(load_bundle(source)))


def _view_watch(argv: Sequence[str]) -> int:
    """``gradexport view --watch PATH``: the viewer page of a `gradexport.watch` file's graph at its last step."""
    from ...api.export import to_html
    from ...backward.watch_file import load_watch

    parser = subparser(
        "view --watch", "Write the viewer page of a gradexport.watch file (its graph, with the last step's gradient norms) and open it.", target=False
    )
    parser.add_argument("--watch", metavar="PATH", required=True, help="a file written by gradexport.watch or gradexport watch")
    _add_page_arguments(parser, "PATH")
    args = parsed(parser, argv)
    if isinstance(args, int):
        return args
    return _write_page(Path(args.watch), args, lambda source: to_html(load_watch(source)))


def _add_page_arguments(parser: argparse.ArgumentParser, source: str) -> None:
    """``-o`` and ``--no-open`` of a page written from a file (``source`` names it in the help), as `_write_page` reads them."""
    parser.add_argument("-o", "--output", metavar="FILE", help=f"the page to write (default: {source} with .html)")
    parser.add_argument("--no-open", action="store_true", help="only write the page and print its path")


def _write_page(source: Path, args: argparse.Namespace, page_of: Callable[[Path], str]) -> int:
    """Write the page ``page_of(source)`` to ``-o`` (default: ``source`` with ``.html``) and open it unless ``--no-open``."""
    import webbrowser

    page = Path(args.output) if args.output else source.with_suffix(".html")
    try:
        page.write_text(page_of(source), encoding="utf-8")
    except (OSError, ValueError, KeyError) as error:
        print(f"{PROG} view: error: {one_line(error)}", file=sys.stderr)
        return 1
    if not args.no_open:
        webbrowser.open(page.resolve().as_uri())
    print_lines([str(page) if args.no_open else f"opened {page.resolve().as_uri()}"])
    return 0
