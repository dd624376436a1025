"""Targets that misbehave: they change folder, close standard output, call ``os._exit``, fork, or exit in backward.

Each guard here keeps the command line's promise (files where the user
said, one line on failure, a failing status when nothing was written):

- `output_place`: the output path resolved before the target runs (an
  ``os.chdir`` in it changes nothing) and printed as the user wrote it;
- `watched_call`: around the user's function, ``os._exit`` raises
  `TargetExit` instead (a process cannot notice its own ``os._exit``
  afterwards: no ``atexit``, no ``finally`` runs, so it is caught as it is
  called); and a forked copy of the process leaves as soon as the function
  returns in it, so the export runs once, in the parent;
- `print_lines`: every line shown through `gradexport.core.reports.printable`
  (a name's newline, escape sequence or lone surrogate as an escape), a
  character the stream's encoding lacks as a backslash escape; standard
  output closed by the user's code is reported on standard error in one
  line, not as a traceback;
- `exit_call_in`: a ``sys.exit()`` raised in a hook or a custom Function's
  backward named as such, not a silent exit status.

Examples:
    >>> import os
    >>> os.chdir(os.getcwd())
    >>> place = output_place("out")
    >>> place.shown(place.absolute / "a.dot")
    'out/a.dot'
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from ...core.reports import printable

__all__ = ["OutputPlace", "TargetExit", "exit_call_in", "output_place", "print_lines", "watched_call"]


class TargetExit(BaseException):
    """The user's function called ``os._exit(status)``; a BaseException, so its own ``except Exception`` cannot take it."""

    def __init__(self, status: int):
        super().__init__(f"os._exit({status})")
        self.status = status


@dataclass(frozen=True)
class OutputPlace:
    """Where the user asked for output: as written, and as an absolute path fixed before the target runs."""

    given: Path
    absolute: Path

    def shown(self, path: Path) -> str:
        """``path`` (under `absolute`) as the user would write it: under `given`."""
        try:
            return str(self.given / Path(path).relative_to(self.absolute))
        except ValueError:
            return str(path)


def output_place(given: str | os.PathLike[str]) -> OutputPlace:
    """Resolve ``given`` against the current folder now, before the user's function can ``os.chdir``."""
    path = Path(given)
    return OutputPlace(path, path if path.is_absolute() else Path.cwd() / path)


@contextmanager
def watched_call(parent: int | None = None) -> Iterator[None]:
    """Run the user's function: ``os._exit`` raises `TargetExit`; a forked child leaves on return.

    ``parent`` is the pid the command runs as (default: this process).
    """
    parent = os.getpid() if parent is None else parent
    real_exit = os._exit

    def exit_instead(status: int) -> None:
        if os.getpid() != parent:  # a child the function forked ends as it asked
            real_exit(status)
        raise TargetExit(status)

    os._exit = exit_instead  # type: ignore[assignment]
    try:
        yield
    except BaseException:
        if os.getpid() != parent:
            _leave_child(real_exit, 1)
        raise
    finally:
        os._exit = real_exit
    if os.getpid() != parent:
        _leave_child(real_exit, 0)


def _leave_child(real_exit: object, status: int) -> None:
    """End a forked copy of the command: its output flushed, nothing exported, no interpreter shutdown on a non-main thread."""
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError, AttributeError):
            stream.flush()
    real_exit(status)  # type: ignore[operator]


def print_lines(lines: Iterable[str]) -> bool:
    """Print ``lines`` on standard output, each of their lines `printable`; when the user's code closed it, say so on standard error.

    Returns whether they were printed.

    Examples:
        >>> print_lines(["2 parameters:\\n  a\\x1b[2J", "b\\ud800"])
        2 parameters:
          a\\x1b[2J
        b\\ud800
        True
    """
    with suppress(OSError, ValueError, AttributeError):  # a stream the user's code replaced may not have it
        sys.stdout.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    try:
        for text in lines:
            for line in text.split("\n"):
                print(printable(line))
        sys.stdout.flush()
        return True
    except (OSError, ValueError, AttributeError):  # closed (ValueError), its descriptor closed (EBADF), or set to None
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - so the interpreter's last flush cannot fail either
        with suppress(OSError, ValueError):
            print("gradexport: warning: standard output was closed (by the function?): nothing more could be printed there", file=sys.stderr)
        return False


def exit_call_in(where: str, error: SystemExit) -> str:
    """The message for a ``sys.exit()`` raised ``where`` (in backward, in the export)."""
    code = "" if error.code is None else repr(error.code)
    return f"sys.exit({code}) was called {where} (a hook or a custom Function's backward?); nothing was written"
