"""``gradexport check TARGET``: run backward watching every node; exit 1 naming where a NaN or infinity started."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from ...core.errors import InPlaceError
from ...tracing.roots import RootError
from .misbehaving import exit_call_in
from .running import Failure, add_traceback, call_target, no_graph, on_large_stack, one_line, parsed, subparser, where

__all__ = ["DESCRIPTION", "SUMMARY", "main"]

SUMMARY = "run backward on TARGET's roots; exit 1 saying where a NaN or infinity started, forward and backward"

DESCRIPTION = (
    "Run backward on a function's roots, watching every node: exit 0 with one line when every gradient is\n"
    "finite, exit 1 with a report of where the first NaN or infinity started when a parameter received one\n"
    "or a root (the loss) is not finite. The function runs inside gradexport.tools.capture_source, so the report\n"
    "also names the forward origin: the first op whose result held NaN or Inf, its line and its inputs.\n"
    "A non-finite gradient that was absorbed on the way (every parameter's gradient finite) is reported\n"
    "and exits 0, or 1 with --strict. A saved tensor modified in place is named with its node and module.\n"
    "With --unused: exit 1 naming every trainable parameter the roots do not reach, with its reason\n"
    "(gradexport.tools.unreached), 0 with one line when every one is reached."
)


def main(argv: Sequence[str]) -> int:
    parser = subparser("check", DESCRIPTION)
    parser.add_argument("--strict", action="store_true", help="exit 1 also when every non-finite gradient was absorbed")
    add_traceback(parser)
    parser.add_argument("--unused", action="store_true", help="name the trainable parameters that get no gradient, and why (no backward is run)")
    args = parsed(parser, argv)
    if isinstance(args, int):
        return args
    return on_large_stack(lambda bar: _check_work(args, bar), args, 2)


def _check_work(args: argparse.Namespace, bar: Any) -> tuple[int, list[str]]:
    from ...backward.nonfinite import check_command

    location, name = args.target
    if args.unused:
        return _unused_work(args, bar)
    roots, params, module = call_target(args.target, bar, lines=True)
    try:
        status, text = check_command(roots, params=params, module=module, strict=args.strict)
    except RootError as error:
        raise no_graph(args.target, error) from error
    except InPlaceError as error:
        raise Failure(str(error)) from error
    except RuntimeError as error:  # backward itself failed (a graph freed already, a custom backward raised)
        raise Failure(f"backward through {location}:{name}() raised {one_line(error)}{where(error)}") from error
    except SystemExit as error:  # raised by a hook or a custom Function's backward: not check's own status
        raise Failure(exit_call_in(f"during backward through {location}:{name}()", error)) from error
    return status, [text]


def _unused_work(args: argparse.Namespace, bar: Any) -> tuple[int, list[str]]:
    from ...tracing.unreached import unreached

    roots, params, module = call_target(args.target, bar, lines=True)
    try:
        report = unreached(roots, module=module, params=params)
    except RootError as error:
        raise no_graph(args.target, error) from error
    return (1 if report.unreached else 0), [report.to_text()]
