"""Temporary files and folders, removed when the command line is stopped by SIGINT or SIGTERM.

`gradexport.formats.files` tracks each temporary file it writes, the
Model Explorer server its temporary folder. On the command line the work
(the user's function, backward, the export, the server) runs on a worker
thread (`gradexport.tracing.stack.run_with_large_stack`) and a signal
reaches the main thread, which only waits. Raising ``KeyboardInterrupt``
there and returning would let the interpreter shut down under a worker still
inside torch's C++ backward, and torch aborts the process ("terminate called
without an active exception", SIGABRT: 3 of 3 interrupts during ``check``'s
backward), leaving the worker's temporaries behind. So `stop`, the
handler, removes every tracked path (`remove_all`), prints one line,
flushes and ends the process with ``os._exit``: status 130 for SIGINT, 143
for SIGTERM. `handled` installs it around a command; `guard_startup`
installs it while ``import gradexport`` is still importing torch, when the
process is the ``gradexport`` command or ``python -m gradexport`` (a
library user's program keeps its own handlers). Inside `handled` a
watcher thread also reads the signal wakeup pipe, so that a signal the
kernel gives another thread stops the process at once.

Examples:
    >>> import os, signal, tempfile
    >>> path = tempfile.mkdtemp()
    >>> track(path, folder=True)
    >>> remove_all() >= 1, os.path.exists(path)
    (True, False)
    >>> with handled():
    ...     signal.getsignal(signal.SIGTERM) is stop
    True
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any

__all__ = ["EXIT_STATUS", "guard_startup", "handled", "lock", "remove_all", "stop", "track", "untrack"]

# Taken now: the command line replaces os._exit while the user's function runs (to catch its calls).
_exit = os._exit
# Reentrant: the handler runs on the main thread, which may hold it (a write on the main thread).
_lock = threading.RLock()
_tracked: dict[str, bool] = {}  # path -> is a folder


def lock() -> Any:
    """The lock to hold while creating a temporary and tracking it, so that no handler runs between the two."""
    return _lock


def track(path: str | os.PathLike[str], *, folder: bool = False) -> None:
    """Remember ``path`` (a file, or a folder with ``folder=True``) until `untrack`.

    Blocks for good once `remove_all` ran with ``keep_locked``.
    """
    with _lock:
        _tracked[os.fspath(path)] = folder


def untrack(path: str | os.PathLike[str]) -> None:
    """Forget ``path`` (it was published, renamed or removed)."""
    with _lock:
        _tracked.pop(os.fspath(path), None)


def remove_all(*, keep_locked: bool = False) -> int:
    """Remove every tracked path now and return how many there were.

    With ``keep_locked`` (a handler about to end the process) the lock is
    never released, so that no other thread can start a temporary between
    this and the process's exit.
    """
    _lock.acquire()
    count = 0
    for path, folder in list(_tracked.items()):
        count += 1
        try:
            if folder:
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass
    _tracked.clear()
    if not keep_locked:
        _lock.release()
    return count


#: The exit status and the one line of each handled signal (128 + its number, as a shell reports it).
EXIT_STATUS: dict[int, tuple[int, str]] = {
    signal.SIGINT: (130, "interrupted"),
    signal.SIGTERM: (128 + signal.SIGTERM, "terminated"),
}


def stop(signum: int, frame: FrameType | None = None) -> None:
    """The handler: remove the temporaries, print ``gradexport: error: interrupted`` (or ``terminated``), exit."""
    status, word = EXIT_STATUS.get(signum, (128 + signum, "stopped by a signal"))
    # The exit must happen whatever the clean-up meets: an exception raised here would surface in the
    # interrupted code, and Model Explorer's start-up loop swallows every exception (a bare except).
    try:
        remove_all(keep_locked=True)
        for stream in (sys.stdout, sys.stderr):
            # Closed or replaced by the user's code, or its buffer held by the very write this signal
            # interrupted (a reentrant flush raises RuntimeError).
            with suppress(Exception):
                stream.flush()
        with suppress(OSError):
            os.write(2, f"gradexport: error: {word}\n".encode())
    finally:
        _exit(status)


def _install() -> dict[int, Any]:
    previous: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    for signum in EXIT_STATUS:
        current = signal.getsignal(signum)
        if current is signal.SIG_IGN:  # nohup, or a background job's SIGINT: leave it ignored
            continue
        previous[signum] = current
        signal.signal(signum, stop)
    return previous


def _watch(read_end: int) -> None:
    """Call `stop` for each handled signal number that arrives on ``read_end``; return at end of file."""
    while data := os.read(read_end, 64):
        for signum in data:
            if signum in EXIT_STATUS:
                stop(signum)
    os.close(read_end)


def _start_watcher() -> int | None:
    """Route signals through a wakeup pipe to a watcher thread too; the previous wakeup descriptor.

    Python runs a handler on the main thread only, between two bytecodes,
    and a blocking call there is interrupted only by a signal the kernel
    delivered to the main thread: one that lands on another thread waits
    until the call returns (Model Explorer's health check blocks in a
    request without a timeout: CI once waited 60 s). The C-level handler
    writes the signal's number to the wakeup descriptor whichever thread
    took it, and the watcher stops the process from there.
    """
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except ValueError:  # not the main thread of the main interpreter
        os.close(read_end)
        os.close(write_end)
        return None
    threading.Thread(target=_watch, args=(read_end,), name="gradexport-signals", daemon=True).start()
    global _wakeup_write_end
    _wakeup_write_end = write_end
    return previous


# The write end of the wakeup pipe `handled` set, if any: a forked child (a DataLoader worker) inherits it,
# and a signal to the child would otherwise reach the parent's watcher and stop the parent.
_wakeup_write_end: int | None = None


def _forget_wakeup_in_child() -> None:
    global _wakeup_write_end
    if _wakeup_write_end is None:
        return
    with suppress(ValueError, OSError):
        current = signal.set_wakeup_fd(-1)
        if current != _wakeup_write_end:
            signal.set_wakeup_fd(current)
        else:
            os.close(current)
    _wakeup_write_end = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_wakeup_in_child)


@contextmanager
def handled() -> Iterator[None]:
    """Handle SIGINT and SIGTERM with `stop` inside the block (on the main thread; elsewhere nothing changes)."""
    global _wakeup_write_end
    previous = _install()
    previous_wakeup = _start_watcher() if previous else None
    try:
        yield
    finally:
        if previous_wakeup is not None:
            _wakeup_write_end = None
            ours = signal.set_wakeup_fd(previous_wakeup)
            if ours >= 0:  # -1 in a forked child, which forgot it
                os.close(ours)  # the watcher reads end of file and returns
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def guard_startup() -> None:
    """Install `stop` for the rest of the process when this process is the ``gradexport`` command.

    Called first thing by ``import gradexport``; a library user's process
    (any other program name) is left alone.
    """
    main = sys.modules.get("__main__")
    program = os.path.basename(getattr(main, "__file__", None) or "")
    if program in ("gradexport", "gradexport.exe", "gradexport-script.py") or _running_module() == "gradexport":
        _install()
        # torch warns "Failed to initialize NumPy" as it is imported without NumPy. Neither torch nor
        # gradexport needs NumPy, so it is no dependency; the command line never converts to it, and
        # the warning would open every run's output.
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)


def _running_module() -> str | None:
    """The module ``python -m`` is running, while runpy imports its package."""
    if sys.argv[:1] != ["-m"]:
        return None
    original = getattr(sys, "orig_argv", [])
    for index, word in enumerate(original[:-1]):
        if word == "-m":
            return str(original[index + 1])
    return None
