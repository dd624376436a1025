"""``gradexport check TARGET``: run backward watching every node; exit 1 naming where a NaN or infinity started."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from ...tracing.roots import RootError
from .misbehaving import exit_call_in
from .running import Failure, call_target, no_graph, on_large_stack, one_line, parsed, subparser

__all__ = ["DESCRIPTION", "SUMMARY", "main"]

SUMMARY = "run backward on TARGET's roots; exit 1 saying where a NaN or infinity started"

DESCRIPTION = (
    "Run backward on a function's roots, watching every node: exit 0 with one line when every gradient is\n"
    "finite, exit 1 with a report of where the first NaN or infinity started otherwise."
)

def main(argv: Sequence[str]) -> int:
    parser = subparser("check", DESCRIPTION)
    args = parsed(parser, argv)
    if isinstance(args, int):
        return args
    return on_large_stack(lambda bar: _check_work(args, bar), args, 2)


def _check_work(args: argparse.Namespace, bar: Any) -> tuple[int, list[str]]:
    from ...backward.nonfinite import check_command

    location, name = args.target
    roots, params, module = call_target(args.target, bar)
    try:
        status, text = check_command(roots, params=params, module=module)
    except RootError as error:
        raise no_graph(args.target, error) from error
    except RuntimeError as error:  # backward itself failed (a graph freed already, say)
        raise Failure(f"backward through {location}:{name}() raised {one_line(error)}") from None
    except SystemExit as error:  # raised by a hook or a custom Function's backward: not check's own status
        raise Failure(exit_call_in(f"during backward through {location}:{name}()", error)) from error
    return status, [text]
