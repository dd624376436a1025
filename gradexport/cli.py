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

Example:
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

from .export import write
from .formats.registry import DEFAULT_FORMATS, FORMATS, parse_formats
from .modules import capture_modules
from .options import ExportOptions
from .roots import RootError
from .stack import run_with_large_stack

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

    Example:
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
    if not text or text in (".", "..") or any(separator in text for separator in ("/", "\\", "\0")):
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
    ExportOptions.add_arguments(parser.add_argument_group("options (see gradexport.options; each applies to the formats it names)"))
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


def _run(args: argparse.Namespace) -> int:
    """Everything that touches the user's tensors: runs on the large-stack thread, where they are freed."""
    from tqdm import tqdm

    show_progress = not args.quiet and sys.stderr.isatty()
    failure: _Failure | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            # The bar closes (and clears its line) before anything is printed.
            with tqdm(total=1 + len(args.formats), file=sys.stderr, delay=0.5, leave=False, disable=not show_progress) as bar:
                paths = _export(args, bar)
        except _Failure as error:
            failure = error
    for warning in caught:
        print(f"{_PROG}: warning: {_flat(warning.message)}", file=sys.stderr)
    if failure is not None:
        if args.traceback and failure.__cause__ is not None:
            traceback.print_exception(failure.__cause__, file=sys.stderr)
        print(f"{_PROG}: error: {failure}", file=sys.stderr)
        return failure.status
    if not args.quiet:
        for path in paths.values():
            print(path)
    return 0


def _export(args: argparse.Namespace, bar: Any) -> dict[str, Path]:
    location, name = args.target
    try:
        function = _load(location, name)
    except _UsageError as error:
        raise _Failure(str(error), 2) from None
    except Exception as error:
        raise _Failure(f"importing {location} raised {_one_line(error)}") from error
    bar.set_description(f"{_PROG}: running {name}()")
    try:
        with capture_modules():  # so that a returned nn.Module also names the nodes its forward made
            result = function()
    except KeyboardInterrupt as error:
        raise _Failure("interrupted", 130) from error
    except SystemExit as error:
        raise _Failure(
            f"{location}:{name}() called sys.exit({'' if error.code is None else repr(error.code)}) instead of returning "
            "the roots; nothing was written"
        ) from error
    except BaseException as error:  # GeneratorExit and the like, too: never exit 0 without files
        raise _Failure(f"{location}:{name}() raised {_one_line(error)}") from error
    bar.update()
    bar.set_description(f"{_PROG}: tracing the graph")
    roots, params, module = split_result(result)
    del result
    if args.options.get("depth") is not None and module is None:
        raise _Failure(
            f"--depth {args.options['depth']} folds modules, but {location}:{name}() returned no nn.Module: "
            "return (roots, model) and run the forward pass in it",
            2,
        )
    try:
        return write(
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
        raise _Failure(f"{location}:{name}() returned no autograd graph ({_flat(error)})") from error
    except (OSError, RuntimeError, ValueError, TypeError) as error:
        raise _Failure(_one_line(error)) from error


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``) and return the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_request:  # --help (0) or a usage error (2), already printed by argparse
        return exit_request.code if isinstance(exit_request.code, int) else 2
    args.options = ExportOptions.given_arguments(args)
    try:  # an option that does nothing for these formats is a usage error, before the function runs
        ExportOptions.from_keywords(args.options, formats=args.formats, from_roots=True, caller=_PROG)
    except (TypeError, ValueError) as error:
        print(f"{_PROG}: error: {_flat(str(error).replace('gradexport: ', '', 1))} (see {_PROG} --help)", file=sys.stderr)
        return 2
    try:
        return run_with_large_stack(_run, args)
    except KeyboardInterrupt:  # Ctrl-C reaches the main thread, which waits for the worker
        print(f"{_PROG}: error: interrupted", file=sys.stderr)
        return 130
