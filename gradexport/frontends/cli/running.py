"""What every command shares: reading a target, calling the user's function, running on a large stack, one-line failures.

Examples:
    >>> parse_target("gradexport/examples/blog.py:multiply_then_sum")
    ('gradexport/examples/blog.py', 'multiply_then_sum')
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import sys
import sysconfig
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any, NoReturn

import torch

from ...api.export import is_plain_name
from ...api.registry import parse_formats, read_options
from ...core.errors import GradexportWarning
from ...core.reports import printable
from ...tracing.lines import capture_source
from ...tracing.modules import capture_modules
from ...tracing.roots import RootError
from ...tracing.stack import run_with_large_stack
from .misbehaving import TargetExit, print_lines, watched_call

__all__ = [
    "PROG",
    "Failure",
    "Parser",
    "add_traceback",
    "call_target",
    "flat",
    "no_graph",
    "on_large_stack",
    "one_line",
    "parse_format_list",
    "parse_stem",
    "parse_target",
    "parsed",
    "refuse_options",
    "split_result",
    "subparser",
    "version",
    "where",
]

PROG = "gradexport"


class TargetError(Exception):
    """The target does not name a function that can be called (exit status 2)."""


class Parser(argparse.ArgumentParser):
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


def parse_target(text: str) -> tuple[str, str]:
    location, _, name = text.rpartition(":")
    if not location or not name or not name.replace(".", "").replace("_", "").isalnum():
        raise argparse.ArgumentTypeError(f"{text!r} has no ':FUNCTION'; write path/to/file.py:function or package.module:function")
    return location, name


def parse_format_list(text: str) -> list[str]:
    try:
        return parse_formats(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parse_stem(text: str) -> str:
    if not is_plain_name(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a plain file name (no folder, not . or ..)")
    return text


def version() -> str:
    try:
        return importlib.metadata.version("gradexport")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown (not installed)"


def load(location: str, name: str) -> Callable[[], Any]:
    if location.endswith(".py") or os.sep in location or "/" in location:
        module = import_file(Path(location))
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # as `python -m` would, for package.module targets
        try:
            module = importlib.import_module(location)
        except ModuleNotFoundError as error:
            if error.name is not None and location.startswith(error.name):
                raise TargetError(f"no module named {error.name!r} (from {location!r})") from None
            raise
    function: Any = module
    for part in name.split("."):
        if not hasattr(function, part):
            raise TargetError(f"{location!r} has no attribute {name!r}")
        function = getattr(function, part)
    if not callable(function):
        raise TargetError(f"{location}:{name} is {_a(type(function).__name__)}, not a function")
    try:
        inspect.signature(function).bind()
    except TypeError as error:
        raise TargetError(f"{location}:{name} cannot be called without arguments ({flat(error)})") from None
    except ValueError:  # no signature to inspect (some builtins): calling it will tell
        pass
    return function


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


def import_file(path: Path) -> Any:
    if not path.is_file():
        raise TargetError(f"no such file: {str(path)!r}")
    module_name = f"_gradexport_target_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TargetError(f"cannot import {str(path)!r} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))  # so the file imports its neighbours, as `python file.py` would
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def flat(message: object) -> str:
    """``message`` as one visible line: runs of white space as one space, other control characters as escapes."""
    return printable(" ".join(str(message).split()))


def one_line(error: BaseException) -> str:
    text = flat(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class Failure(Exception):
    """A failure to report in one line, with its exit status."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


def run(work: Callable[[Any], tuple[int, list[str]]], args: argparse.Namespace, steps: int) -> int:
    """Run ``work(bar)`` on this (large-stack) thread, where the user's tensors are freed; print what it returns.

    Warnings raised meanwhile are printed as one line each, a `Failure` as
    one error line with its exit status.
    """
    from tqdm import tqdm

    show_progress = not getattr(args, "quiet", False) and sys.stderr.isatty()
    failure: Failure | None = None
    status, lines = 0, list[str]()
    caught: list[tuple[warnings.WarningMessage, traceback.FrameSummary | None]] = []

    def collect(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: str | None = None) -> None:
        # Called where the warning is issued, so the stack still holds the user's frame.
        user = [frame for frame in traceback.extract_stack()[:-1] if not _inside(frame.filename, *_LIBRARY_DIRS)]
        caught.append((warnings.WarningMessage(message, category, filename, lineno, file, line), user[-1] if user else None))

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = collect
        try:
            # The bar closes (and clears its line) before anything is printed.
            with tqdm(total=steps, file=sys.stderr, delay=0.5, leave=False, disable=not show_progress) as bar:
                status, lines = work(bar)
        except Failure as error:
            failure = error
    shown: set[tuple[Any, ...]] = set()
    for warning, user_frame in caught:
        key = (warning.category, str(warning.message), warning.filename, warning.lineno)
        if key not in shown:  # once per place, as Python's default filter shows them
            shown.add(key)
            print(_warning_text(warning, user_frame), end="", file=sys.stderr)
    if failure is not None:
        if getattr(args, "traceback", False) and failure.__cause__ is not None:
            traceback.print_exception(failure.__cause__, file=sys.stderr)
        print(f"{PROG}: error: {flat(failure)}", file=sys.stderr)
        return failure.status
    print_lines(lines)
    return status


def _warning_text(warning: warnings.WarningMessage, user_frame: traceback.FrameSummary | None) -> str:
    # gradexport's own warnings are one line under its name; torch's (and the user's) are shown
    # as Python shows them, with their category and the file and line they name. Where that is
    # inside a library (nn.Softmax() without dim names torch's module.py), the user's line is
    # shown instead, and the library's place after the message.
    # A library's warning whose stacklevel lands in gradexport's own frames (capture_source's mode
    # runs between the user's call and torch) is shown at the user's line, without that place.
    if issubclass(warning.category, GradexportWarning) or (user_frame is None and _inside(warning.filename, _GRADEXPORT_DIR)):
        return f"{PROG}: warning: {flat(warning.message)}\n"
    if user_frame is not None and user_frame.lineno is not None and _inside(warning.filename, _GRADEXPORT_DIR):
        return warnings.formatwarning(warning.message, warning.category, user_frame.filename, user_frame.lineno, user_frame.line)
    if user_frame is not None and user_frame.lineno is not None and _inside(warning.filename, *_LIBRARY_DIRS):
        message = f"{warning.message} (issued at {warning.filename}:{warning.lineno})"
        return warnings.formatwarning(message, warning.category, user_frame.filename, user_frame.lineno, user_frame.line)
    return warnings.formatwarning(warning.message, warning.category, warning.filename, warning.lineno, warning.line)


_GRADEXPORT_DIR = str(Path(__file__).resolve().parents[2])
#: Where library code lives: a frame there is not "the user's code".
_LIBRARY_DIRS = tuple(
    {_GRADEXPORT_DIR, str(Path(torch.__file__).resolve().parent)}
    | {str(Path(sysconfig.get_paths()[key]).resolve()) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
)


def _inside(filename: str, *folders: str) -> bool:
    try:
        path = str(Path(filename).resolve())
    except (OSError, ValueError):
        return False
    return any(path == folder or path.startswith(folder + os.sep) for folder in folders)


def where(error: BaseException) -> str:
    """`` (at path/to/file.py:12, in function)``: the innermost line of the user's code the error passed, or ``""``.

    Frames in gradexport, torch, the standard library and installed packages
    are skipped; a ``SyntaxError`` names its own file and line.

    Examples:
        >>> where(ValueError("no traceback"))
        ''
    """
    if isinstance(error, SyntaxError) and error.filename and error.lineno:
        return f" (at {error.filename}:{error.lineno})"
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if not _inside(frame.filename, *_LIBRARY_DIRS)]
    if not frames:
        return ""
    frame = frames[-1]
    return f" (at {frame.filename}:{frame.lineno}, in {frame.name})"


def add_traceback(parser: argparse.ArgumentParser) -> None:
    """The ``--traceback`` flag every command that runs the user's code takes."""
    parser.add_argument("--traceback", action="store_true", help="on failure, also print the full traceback")


def call_target(target: tuple[str, str], bar: Any, *, lines: bool = False) -> tuple[Any, Mapping[str, torch.Tensor] | None, torch.nn.Module | None]:
    """Import and call the user's function; its result split into ``(roots, params, module)``.

    With ``lines``, the call also runs inside `gradexport.tools.capture_source`.
    """
    location, name = target
    try:
        function = load(location, name)
    except TargetError as error:
        raise Failure(str(error), 2) from None
    except KeyboardInterrupt as error:
        raise Failure("interrupted", 130) from error
    except SystemExit as error:
        raise Failure(f"importing {location} called {exit_call(error)}") from error
    except BaseException as error:  # GeneratorExit too
        raise Failure(f"importing {location} raised {one_line(error)}{where(error)}") from error
    bar.set_description(f"{PROG}: running {name}()")
    try:
        with watched_call(), capture_modules(), capture_source() if lines else nullcontext():  # a returned nn.Module names the nodes
            result = function()
    except TargetExit as error:
        raise Failure(f"{location}:{name}() called {error} instead of returning the roots; nothing was written") from error
    except KeyboardInterrupt as error:
        raise Failure("interrupted", 130) from error
    except SystemExit as error:
        raise Failure(f"{location}:{name}() called {exit_call(error)} instead of returning the roots; nothing was written") from error
    except BaseException as error:  # GeneratorExit and the like, too: never exit 0 without files
        raise Failure(f"{location}:{name}() raised {one_line(error)}{where(error)}") from error
    bar.update()
    bar.set_description(f"{PROG}: tracing the graph")
    return split_result(result)


def no_graph(target: tuple[str, str], error: RootError) -> Failure:
    """The failure of a function whose result holds no autograd graph."""
    location, name = target
    return Failure(f"{location}:{name}() returned no autograd graph ({flat(error)})")


def exit_call(error: SystemExit) -> str:
    """``sys.exit(3)``, as the user's code called it."""
    return f"sys.exit({'' if error.code is None else repr(error.code)})"


def on_large_stack(work: Callable[[Any], tuple[int, list[str]]], args: argparse.Namespace, steps: int) -> int:
    """`run` on the large-stack thread; Ctrl-C is one line and exit 130."""
    try:
        return run_with_large_stack(run, work, args, steps)
    except KeyboardInterrupt:  # Ctrl-C reaches the main thread, which waits for the worker
        print(f"{PROG}: error: interrupted", file=sys.stderr)
        return 130


def subparser(command: str, description: str, *, target: bool = True) -> Parser:
    """The parser of ``gradexport COMMAND``, taking a TARGET unless told otherwise."""
    parser = Parser(prog=f"{PROG} {command}", description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    if target:
        parser.add_argument("target", metavar="TARGET", type=parse_target, help="path/to/file.py:function or package.module:function")
    return parser


def parsed(parser: Parser, argv: Sequence[str]) -> argparse.Namespace | int:
    try:
        return parser.parse_args(argv)
    except SystemExit as exit_request:  # --help (0) or a usage error (2), already printed by argparse
        return exit_request.code if isinstance(exit_request.code, int) else 2


def refuse_options(options: dict[str, Any], formats: Sequence[str], command: str) -> bool:
    """Print a usage error and return True when an option does nothing for ``formats``, before the user's function runs."""
    try:
        read_options(options, formats=formats, from_roots=True, caller=command)
    except (TypeError, ValueError) as error:
        print(f"{command}: error: {flat(str(error).replace('gradexport: ', '', 1))} (see {command} --help)", file=sys.stderr)
        return True
    return False
