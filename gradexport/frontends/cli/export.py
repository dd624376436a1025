"""``gradexport TARGET``: run a function and write the diagrams of its roots, one file per format."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from ...api.export import write
from ...api.registry import DEFAULT_FORMATS, FORMATS, honoured_options
from ...core.options import ExportOptions
from ...tracing.roots import RootError
from .misbehaving import output_place
from .running import (
    PROG,
    Failure,
    Parser,
    add_traceback,
    call_target,
    no_graph,
    on_large_stack,
    one_line,
    parse_format_list,
    parse_stem,
    parse_target,
    refuse_options,
    version,
)

__all__ = ["main", "parser"]

_EPILOG = """\
examples:
  gradexport gradexport.examples.blog:multiply_then_sum --format dot,svg,mermaid,json --output out/multiply_then_sum
  python -m gradexport mypackage.models:build_loss -f svg -o diagrams --direction LR
  gradexport train.py:one_step -f mermaid,json -o out --show-none --quiet
  gradexport models.py:encoder_loss -f svg,mermaid -o out --depth 2

the function takes no arguments and returns the roots (a tensor, or a tuple,
list or dict of tensors), or (roots, names) where names is an nn.Module or a
dict of leaf tensors that names the leaves, e.g. return loss, {"x": x, "y": y}.
with an nn.Module, each node is also boxed in the module that created it.

SVG needs Graphviz: apt-get install graphviz, or pip install gradexport[svg];
--prog or GRADEXPORT_DOT choose the program.
exit status: 0 success, 1 failure, 2 bad usage, 130 interrupted."""


def parser(commands: str = "") -> Parser:
    """The parser of ``gradexport TARGET``; ``commands`` (the other commands, listed) follows its description."""
    parser = Parser(
        prog=PROG,
        description="Run a function that returns PyTorch tensors and write diagrams of their autograd graph." + (f"\n\n{commands}" if commands else ""),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", metavar="TARGET", type=parse_target, help="path/to/file.py:function or package.module:function")
    parser.add_argument(
        "-f",
        "--format",
        dest="formats",
        type=parse_format_list,
        default=list(DEFAULT_FORMATS),
        help=f"comma-separated formats from {', '.join(FORMATS)} (default: {','.join(DEFAULT_FORMATS)})",
    )
    parser.add_argument("-o", "--output", default=".", metavar="DIR", help="folder to write into, created as needed (default: .)")
    parser.add_argument("--stem", type=parse_stem, help="file name without extension (default: the function's name)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no list of written files")
    add_traceback(parser)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    ExportOptions.add_arguments(parser.add_argument_group("options (see gradexport.options; each applies to the formats in brackets)"), honoured_options())
    return parser


def _export(args: argparse.Namespace, bar: Any) -> tuple[int, list[str]]:
    location, name = args.target
    roots, params, module = call_target(args.target, bar)
    folding = [flag for flag, option in (("--depth", "depth"), ("--fold", "fold_modules")) if args.options.get(option) is not None]
    if folding and module is None:
        raise Failure(
            f"{' and '.join(folding)} fold modules, but {location}:{name}() returned no nn.Module: return (roots, model) and run the forward pass in it",
            2,
        )
    try:
        paths = write(
            roots,
            args.place.absolute,
            args.formats,
            stem=args.stem or name.rpartition(".")[2],
            progress=bar,
            params=params,
            module=module,
            **args.options,
        )
    except RootError as error:
        raise no_graph(args.target, error) from error
    except (OSError, RuntimeError, ValueError, TypeError) as error:
        raise Failure(one_line(error)) from error
    return 0, [] if args.quiet else [args.place.shown(path) for path in paths.values()]


def main(argv: Sequence[str], commands: str = "") -> int:
    """``gradexport TARGET ...``; ``commands`` lists the other commands in ``--help``."""
    command_parser = parser(commands)
    try:
        args = command_parser.parse_args(argv)
    except SystemExit as exit_request:  # --help (0) or a usage error (2), already printed by argparse
        return exit_request.code if isinstance(exit_request.code, int) else 2
    args.options = ExportOptions.given_arguments(args)
    if refuse_options(args.options, args.formats, PROG):
        return 2
    args.place = output_place(args.output)  # before the function runs: an os.chdir in it moves nothing
    return on_large_stack(lambda bar: _export(args, bar), args, 1 + len(args.formats))
