"""The ``gradexport`` command: run a function that builds a graph and write its diagrams.

``gradexport path/to/file.py:function --format dot,svg,mermaid,json --output DIR``
(or ``package.module:function``; also ``python -m gradexport``) imports the
file or module, calls the function without arguments and writes one file per
format into DIR, named after the function (``DIR/function.dot``, ``.svg``,
``.mmd``, ``.json``).

What the function returns:

- the roots: a tensor, or a tuple, list or dict of tensors (dict keys name them);
- or a 2-tuple ``(roots, names)`` whose second item names the leaves: an
  ``nn.Module`` (its parameters and buffers), or a dict whose values are all
  leaf tensors (``{"x": x, "y": y}``).

Exit status: 0 on success, 2 on bad usage (a target without ``:``, an unknown
format, a file, module or function that does not exist, a function that
needs arguments, a ``--stem`` that is not a file name), 1 on failure (the
function raised, called ``sys.exit()`` or returned no tensor, Graphviz
failed, a file could not be written), 130 when interrupted (Ctrl-C, or the
function raised ``KeyboardInterrupt``). Errors are one line on stderr;
``--traceback`` adds the full traceback of what the function or the export
raised. The function, the export and the
freeing of the graph run on a thread with a large stack, so a graph tens of
thousands of nodes deep cannot crash the process.

Examples:
    >>> import contextlib, io
    >>> with contextlib.redirect_stderr(io.StringIO()) as stderr:
    ...     status = main(["examples/blog.py"])
    >>> status, stderr.getvalue()
    (2, "gradexport: error: argument TARGET: 'examples/blog.py' has no ':FUNCTION'; write path/to/file.py:function or package.module:function (see gradexport --help)\\n")
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import torch

from ..api.export import is_plain_name, prepare, write
from ..api.registry import DEFAULT_FORMATS, FORMATS, parse_formats, read_options
from ..core.options import ExportOptions
from ..tracing.modules import capture_modules
from ..tracing.roots import RootError
from ..tracing.stack import run_with_large_stack

__all__ = ["main", "split_result"]

_PROG = "gradexport"
_EPILOG = """\
examples:
  gradexport examples/blog.py:multiply_then_sum --format dot,svg,mermaid,json --output out/multiply_then_sum
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


class _UsageError(Exception):
    """The target does not name a function that can be called (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, where argparse would print the whole usage first.
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def split_result(result: Any) -> tuple[Any, Mapping[str, torch.Tensor] | None, torch.nn.Module | None]:
    """Split what the user's function returned into ``(roots, params, module)``.

    A 2-tuple whose last item is an ``nn.Module``, or a non-empty mapping of
    leaf tensors, names the leaves; anything else is the roots.

    Examples:
        >>> x = torch.ones(2, requires_grad=True)
        >>> loss = (x * 2).sum()
        >>> split_result((loss, {"x": x}))[1]
        {'x': tensor([1., 1.], requires_grad=True)}
        >>> split_result((loss, x * 3))[1] is None
        True
    """
    if isinstance(result, tuple) and len(result) == 2:
        roots, names = result
        if isinstance(names, torch.nn.Module):
            return roots, None, names
        if isinstance(names, Mapping) and names and all(_is_leaf(value) for value in names.values()):
            return roots, names, None
    return result, None, None


def _is_leaf(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.grad_fn is None


def _target(text: str) -> tuple[str, str]:
    location, _, name = text.rpartition(":")
    if not location or not name or not name.replace(".", "").replace("_", "").isalnum():
        raise argparse.ArgumentTypeError(
            f"{text!r} has no ':FUNCTION'; write path/to/file.py:function or package.module:function"
        )
    return location, name


def _formats(text: str) -> list[str]:
    try:
        return parse_formats(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _stem(text: str) -> str:
    if not is_plain_name(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a plain file name (no folder, not . or ..)")
    return text


def _version() -> str:
    try:
        return importlib.metadata.version("gradexport")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown (not installed)"


def _parser() -> _Parser:
    parser = _Parser(
        prog=_PROG,
        description="Run a function that returns PyTorch tensors and write diagrams of their autograd graph.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", metavar="TARGET", type=_target, help="path/to/file.py:function or package.module:function")
    parser.add_argument(
        "-f",
        "--format",
        dest="formats",
        type=_formats,
        default=list(DEFAULT_FORMATS),
        help=f"comma-separated formats from {', '.join(FORMATS)} (default: {','.join(DEFAULT_FORMATS)})",
    )
    parser.add_argument("-o", "--output", default=".", metavar="DIR", help="folder to write into, created as needed (default: .)")
    parser.add_argument("--stem", type=_stem, help="file name without extension (default: the function's name)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no list of written files")
    parser.add_argument("--traceback", action="store_true", help="on failure, also print the full traceback")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    ExportOptions.add_arguments(parser.add_argument_group("options (see gradexport.core.options; each applies to the formats it names)"))
    return parser


def _load(location: str, name: str) -> Callable[[], Any]:
    if location.endswith(".py") or os.sep in location or "/" in location:
        module = _import_file(Path(location))
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # as `python -m` would, for package.module targets
        try:
            module = importlib.import_module(location)
        except ModuleNotFoundError as error:
            if error.name is not None and location.startswith(error.name):
                raise _UsageError(f"no module named {error.name!r} (from {location!r})") from None
            raise
    function: Any = module
    for part in name.split("."):
        if not hasattr(function, part):
            raise _UsageError(f"{location!r} has no attribute {name!r}")
        function = getattr(function, part)
    if not callable(function):
        raise _UsageError(f"{location}:{name} is {_a(type(function).__name__)}, not a function")
    try:
        inspect.signature(function).bind()
    except TypeError as error:
        raise _UsageError(f"{location}:{name} cannot be called without arguments ({_flat(error)})") from None
    except ValueError:  # no signature to inspect (some builtins): calling it will tell
        pass
    return function


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise _UsageError(f"no such file: {str(path)!r}")
    module_name = f"_gradexport_target_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise _UsageError(f"cannot import {str(path)!r} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))  # so the file imports its neighbours, as `python file.py` would
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def _flat(message: object) -> str:
    return " ".join(str(message).split())


def _one_line(error: BaseException) -> str:
    text = _flat(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class _Failure(Exception):
    """A failure to report in one line, with its exit status."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


def _run(work: Callable[[Any], tuple[int, list[str]]], args: argparse.Namespace, steps: int) -> int:
    """Run ``work(bar)`` on this (large-stack) thread, where the user's tensors are freed; print what it returns.

    Warnings raised meanwhile are printed as one line each, a `_Failure` as
    one error line with its exit status.
    """
    from tqdm import tqdm

    show_progress = not getattr(args, "quiet", False) and sys.stderr.isatty()
    failure: _Failure | None = None
    status, lines = 0, list[str]()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            # The bar closes (and clears its line) before anything is printed.
            with tqdm(total=steps, file=sys.stderr, delay=0.5, leave=False, disable=not show_progress) as bar:
                status, lines = work(bar)
        except _Failure as error:
            failure = error
    for warning in caught:
        print(f"{_PROG}: warning: {_flat(warning.message)}", file=sys.stderr)
    if failure is not None:
        if getattr(args, "traceback", False) and failure.__cause__ is not None:
            traceback.print_exception(failure.__cause__, file=sys.stderr)
        print(f"{_PROG}: error: {failure}", file=sys.stderr)
        return failure.status
    for line in lines:
        print(line)
    return status


def _call_target(target: tuple[str, str], bar: Any) -> tuple[Any, Mapping[str, torch.Tensor] | None, torch.nn.Module | None]:
    """Import and call the user's function; its result split into ``(roots, params, module)``."""
    location, name = target
    try:
        function = _load(location, name)
    except _UsageError as error:
        raise _Failure(str(error), 2) from None
    except KeyboardInterrupt as error:
        raise _Failure("interrupted", 130) from error
    except SystemExit as error:
        raise _Failure(f"importing {location} called {_exit_call(error)}") from error
    except BaseException as error:  # GeneratorExit too
        raise _Failure(f"importing {location} raised {_one_line(error)}") from error
    bar.set_description(f"{_PROG}: running {name}()")
    try:
        with capture_modules():  # so that a returned nn.Module also names the nodes its forward made
            result = function()
    except KeyboardInterrupt as error:
        raise _Failure("interrupted", 130) from error
    except SystemExit as error:
        raise _Failure(f"{location}:{name}() called {_exit_call(error)} instead of returning the roots; nothing was written") from error
    except BaseException as error:  # GeneratorExit and the like, too: never exit 0 without files
        raise _Failure(f"{location}:{name}() raised {_one_line(error)}") from error
    bar.update()
    bar.set_description(f"{_PROG}: tracing the graph")
    return split_result(result)


def _no_graph(target: tuple[str, str], error: RootError) -> _Failure:
    """The failure of a function whose result holds no autograd graph."""
    location, name = target
    return _Failure(f"{location}:{name}() returned no autograd graph ({_flat(error)})")


def _exit_call(error: SystemExit) -> str:
    """``sys.exit(3)``, as the user's code called it."""
    return f"sys.exit({'' if error.code is None else repr(error.code)})"


def _export(args: argparse.Namespace, bar: Any) -> tuple[int, list[str]]:
    location, name = args.target
    roots, params, module = _call_target(args.target, bar)
    folding = [flag for flag, option in (("--depth", "depth"), ("--fold", "fold_modules")) if args.options.get(option) is not None]
    if folding and module is None:
        raise _Failure(
            f"{' and '.join(folding)} fold modules, but {location}:{name}() returned no nn.Module: "
            "return (roots, model) and run the forward pass in it",
            2,
        )
    try:
        paths = write(
            roots,
            args.output,
            args.formats,
            stem=args.stem or name.rpartition(".")[2],
            progress=bar,
            params=params,
            module=module,
            **args.options,
        )
    except RootError as error:
        raise _no_graph(args.target, error) from error
    except (OSError, RuntimeError, ValueError, TypeError) as error:
        raise _Failure(_one_line(error)) from error
    return 0, [] if args.quiet else [str(path) for path in paths.values()]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``) and return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _COMMANDS:
        return _COMMANDS[argv[0]](argv[1:])
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_request:  # --help (0) or a usage error (2), already printed by argparse
        return exit_request.code if isinstance(exit_request.code, int) else 2
    args.options = ExportOptions.given_arguments(args)
    try:  # an option that does nothing for these formats is a usage error, before the function runs
        read_options(args.options, formats=args.formats, from_roots=True, caller=_PROG)
    except (TypeError, ValueError) as error:
        print(f"{_PROG}: error: {_flat(str(error).replace('gradexport: ', '', 1))} (see {_PROG} --help)", file=sys.stderr)
        return 2
    return _on_large_stack(lambda bar: _export(args, bar), args, 1 + len(args.formats))


def _on_large_stack(work: Callable[[Any], tuple[int, list[str]]], args: argparse.Namespace, steps: int) -> int:
    """`_run` on the large-stack thread; Ctrl-C is one line and exit 130."""
    try:
        return run_with_large_stack(_run, work, args, steps)
    except KeyboardInterrupt:  # Ctrl-C reaches the main thread, which waits for the worker
        print(f"{_PROG}: error: interrupted", file=sys.stderr)
        return 130


# ---------------------------------------------------------------- subcommands
# ``gradexport view|check|diff ...``: the first word picks the command, so a
# target (which always has a ``:``) is never mistaken for one.


def _subparser(command: str, description: str, *, target: bool = True) -> _Parser:
    """The parser of ``gradexport COMMAND``, taking a TARGET unless told otherwise."""
    parser = _Parser(prog=f"{_PROG} {command}", description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    if target:
        parser.add_argument("target", metavar="TARGET", type=_target, help="path/to/file.py:function or package.module:function")
    return parser


def _parsed(parser: _Parser, argv: Sequence[str]) -> argparse.Namespace | int:
    try:
        return parser.parse_args(argv)
    except SystemExit as exit_request:  # --help (0) or a usage error (2), already printed by argparse
        return exit_request.code if isinstance(exit_request.code, int) else 2


def _view(argv: Sequence[str]) -> int:
    parser = _subparser(
        "view",
        "Write the interactive viewer page of a function's autograd graph and open it in the default browser\n"
        "(or, with --model-explorer, serve it in Google's Model Explorer on 127.0.0.1).",
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="the page to write (default: FUNCTION.html in the current folder)")
    parser.add_argument("--no-open", action="store_true", help="only write the page (or start the server) and print its address")
    parser.add_argument("--model-explorer", action="store_true", help="open the graph in Model Explorer (pip install gradexport[explorer])")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    ExportOptions.add_arguments(parser.add_argument_group("options (see gradexport.core.options)"))
    args = _parsed(parser, argv)
    if isinstance(args, int):
        return args
    args.options = ExportOptions.given_arguments(args)
    formats = ["model-explorer"] if args.model_explorer else ["html"]
    try:
        read_options(args.options, formats=formats, from_roots=True, caller=f"{_PROG} view")
    except (TypeError, ValueError) as error:
        print(f"{_PROG} view: error: {_flat(error)}", file=sys.stderr)
        return 2
    return _on_large_stack(lambda bar: _view_work(args, bar), args, 2)


def _view_work(args: argparse.Namespace, bar: Any) -> tuple[int, list[str]]:
    import webbrowser

    name = args.target[1]
    roots, params, module = _call_target(args.target, bar)
    stem = name.rpartition(".")[2]
    try:
        if args.model_explorer:
            from .model_explorer_server import serve_model_explorer

            keywords = {"params": params, "module": module, **args.options}
            source, options = prepare(roots, ["model-explorer"], keywords, caller="view", whole=True)  # type: ignore[arg-type]
            del roots
            bar.close()
            serve_model_explorer(source.whole("view"), open_browser=not args.no_open, options=options.diagram)  # until Ctrl+C
            return 0, []
        page = Path(args.output) if args.output else Path(f"{stem}.html")
        paths = write(roots, page.parent, "html", stem=page.name.removesuffix(".html"), params=params, module=module, **args.options)
    except RootError as error:
        raise _no_graph(args.target, error) from error
    except (OSError, RuntimeError, ValueError, TypeError, ImportError) as error:
        raise _Failure(_one_line(error)) from None
    address = paths["html"].resolve().as_uri()
    if not args.no_open:
        webbrowser.open(address)
    return 0, [str(paths["html"]) if args.no_open else f"opened {address}"]


def _check(argv: Sequence[str]) -> int:
    parser = _subparser(
        "check",
        "Run backward on a function's roots, watching every node: exit 0 with one line when every gradient is\n"
        "finite, exit 1 with a report of where the first NaN or infinity started otherwise.",
    )
    args = _parsed(parser, argv)
    if isinstance(args, int):
        return args
    return _on_large_stack(lambda bar: _check_work(args, bar), args, 2)


def _check_work(args: argparse.Namespace, bar: Any) -> tuple[int, list[str]]:
    from ..backward.nonfinite import check_command

    location, name = args.target
    roots, params, module = _call_target(args.target, bar)
    try:
        status, text = check_command(roots, params=params, module=module)
    except RootError as error:
        raise _no_graph(args.target, error) from error
    except RuntimeError as error:  # backward itself failed (a graph freed already, say)
        raise _Failure(f"backward through {location}:{name}() raised {_one_line(error)}") from None
    return status, [text]


def _diff(argv: Sequence[str]) -> int:
    parser = _subparser(
        "diff",
        "Compare two backward graphs: exit 0 when they match, 1 when they differ (as diff(1) does), and say how.\n"
        "A and B are JSON files written by gradexport, or FILE.py:FUNCTION targets.",
        target=False,
    )
    parser.add_argument("a", metavar="A", help="a gradexport JSON file, or path/to/file.py:function")
    parser.add_argument("b", metavar="B", help="the same, for the other graph")
    parser.add_argument("-f", "--format", dest="formats", type=_formats, help="also draw the diff in these formats")
    parser.add_argument("-o", "--output", default=".", metavar="DIR", help="folder for --format's files (default: .)")
    parser.add_argument(
        "--model-explorer", action="store_true", help="also open A and B side by side in Model Explorer (pip install gradexport[explorer])"
    )
    parser.add_argument("--no-open", action="store_true", help="with --model-explorer: print the address instead of opening it")
    args = _parsed(parser, argv)
    if isinstance(args, int):
        return args
    return _on_large_stack(lambda bar: _diff_work(args, bar), args, 3)


def _diff_graph(text: str, bar: Any) -> Any:
    """A JSON file's graph, or the graph of a target's roots."""
    from ..formats.json import read_json
    from ..tracing.graph import to_networkx

    if Path(text).is_file() and not text.endswith(".py"):
        try:
            return read_json(text)
        except ValueError as error:
            raise _Failure(f"{text} is not a graph written by gradexport: {_flat(error)}", 2) from None
    try:
        target = _target(text)
    except argparse.ArgumentTypeError:
        raise _Failure(f"{text!r} is neither a JSON file nor a FILE.py:FUNCTION target", 2) from None
    roots, params, module = _call_target(target, bar)
    try:
        return to_networkx(roots, params=params, module=module)
    except RootError as error:
        raise _no_graph(target, error) from error


def _diff_work(args: argparse.Namespace, bar: Any) -> tuple[int, list[str]]:
    from ..analysis.diff import describe_diff, differs
    from ..api.diff import diff

    first, second = _diff_graph(args.a, bar), _diff_graph(args.b, bar)
    graph = diff(first, second)
    status = int(differs(graph))
    lines = [describe_diff(graph)]
    if args.formats:
        try:
            paths = write(graph, args.output, args.formats, stem="diff")
        except (OSError, RuntimeError, ValueError) as error:
            raise _Failure(_one_line(error)) from None
        lines.extend(str(path) for path in paths.values())
    if args.model_explorer:
        from .model_explorer_server import serve_model_explorer_diff

        print("\n".join(lines), flush=True)  # before the server blocks until Ctrl-C
        bar.close()
        try:
            serve_model_explorer_diff(
                first, second, labels=(f"a: {args.a}", f"b: {args.b}"), merged=graph, open_browser=not args.no_open
            )
        except (OSError, ImportError, ValueError) as error:
            raise _Failure(_one_line(error)) from None
        return status, []
    return status, lines


_COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {"view": _view, "check": _check, "diff": _diff}
