"""``gradexport diff A B``: compare two backward graphs, exit 1 when they differ, and say how."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...api.export import write
from ...tracing.roots import RootError
from .misbehaving import output_place, print_lines
from .running import Failure, call_target, flat, no_graph, on_large_stack, one_line, parse_format_list, parse_target, parsed, subparser

__all__ = ["DESCRIPTION", "SUMMARY", "main"]

SUMMARY = "compare two graphs (gradexport JSON files or targets); exit 1 when they differ"

DESCRIPTION = (
    "Compare two backward graphs: exit 0 when they match, 1 when they differ (as diff(1) does), and say how.\n"
    "A and B are JSON files written by gradexport, or FILE.py:FUNCTION targets."
)


def main(argv: Sequence[str]) -> int:
    parser = subparser("diff", DESCRIPTION, target=False)
    parser.add_argument("a", metavar="A", help="a gradexport JSON file, or path/to/file.py:function")
    parser.add_argument("b", metavar="B", help="the same, for the other graph")
    parser.add_argument("-f", "--format", dest="formats", type=parse_format_list, help="also draw the diff in these formats")
    parser.add_argument("-o", "--output", default=".", metavar="DIR", help="folder for --format's files (default: .)")
    parser.add_argument("--model-explorer", action="store_true", help="also open A and B side by side in Model Explorer (pip install gradexport[explorer])")
    parser.add_argument("--no-open", action="store_true", help="with --model-explorer: print the address instead of opening it")
    args = parsed(parser, argv)
    if isinstance(args, int):
        return args
    return on_large_stack(lambda bar: _diff_work(args, bar), args, 3)


def _diff_graph(text: str, bar: Any) -> Any:
    """A JSON file's graph, or the graph of a target's roots."""
    from ...formats.json import read_json
    from ...tracing.graph import to_networkx

    if Path(text).is_file() and not text.endswith(".py"):
        try:
            return read_json(text)
        except ValueError as error:
            raise Failure(f"{text} is not a graph written by gradexport: {flat(error)}", 2) from None
    try:
        target = parse_target(text)
    except argparse.ArgumentTypeError:
        raise Failure(f"{text!r} is neither a JSON file nor a FILE.py:FUNCTION target", 2) from None
    roots, params, module = call_target(target, bar)
    try:
        return to_networkx(roots, params=params, module=module)
    except RootError as error:
        raise no_graph(target, error) from error


def _diff_work(args: argparse.Namespace, bar: Any) -> tuple[int, list[str]]:
    from ...analysis.diff import describe_diff, differs
    from ...api.diff import diff

    place = output_place(args.output)  # before a target runs: an os.chdir in it moves nothing
    first, second = _diff_graph(args.a, bar), _diff_graph(args.b, bar)
    graph = diff(first, second)
    status = int(differs(graph))
    lines: list[str] = [describe_diff(graph)]
    if args.formats:
        try:
            paths = write(graph, place.absolute, args.formats, stem="diff")
        except (OSError, RuntimeError, ValueError) as error:
            raise Failure(one_line(error)) from None
        lines.extend(place.shown(path) for path in paths.values())
    if args.model_explorer:
        from ..model_explorer_server import serve_model_explorer_diff

        print_lines(lines)  # before the server blocks until Ctrl-C
        bar.close()
        try:
            serve_model_explorer_diff(first, second, labels=(f"a: {args.a}", f"b: {args.b}"), merged=graph, open_browser=not args.no_open)
        except (OSError, ImportError, ValueError) as error:
            raise Failure(one_line(error)) from None
        return status, []
    return status, lines
