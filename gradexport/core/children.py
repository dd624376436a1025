"""Child processes (Graphviz's ``dot``) that never outlive the process that started them.

`run_child` runs a program as ``subprocess.run`` would, with two guards,
because neither alone covers every way our process can end:

- the child's pid is tracked in `gradexport.core.temporaries` while it
  runs, and `gradexport.core.temporaries.stop` (the command line's handler
  of SIGINT, SIGTERM and SIGHUP) kills it with SIGKILL before the process
  exits. A handler works on every POSIX system, but none runs on SIGKILL,
  on a crash (a segfault while freeing a deep graph), or in a library
  user's program that dies of a signal it does not handle; a child of an
  ended process is re-parented and keeps laying out, using CPU.
- on Linux, the child asks the kernel (``prctl(PR_SET_PDEATHSIG, SIGKILL)``)
  to be killed when its parent ends, which covers those cases too. It is
  started through util-linux's ``setpriv --pdeathsig KILL``, which sets it
  and execs the program: a spawn as cheap as ``subprocess.run``'s. Where
  ``setpriv`` is missing or too old (before 2.33), the child calls
  ``prctl`` itself through ``ctypes`` between ``fork`` and ``exec`` (a
  ``preexec_fn``), and ends itself if its parent is gone already; that
  makes ``subprocess`` fork the whole process instead of ``vfork``, slow
  for a process as large as one holding torch (see docs/performance.md). The kernel ties
  the signal to the *thread* that started the child: `run_child` waits for
  the child on that thread, so the thread outlives the child unless the
  whole process ends.

Examples:
    >>> result = run_child(["cat"], input=b"laid out")
    >>> result.returncode, result.stdout
    (0, b'laid out')
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence

from . import temporaries

__all__ = ["run_child"]

#: ``PR_SET_PDEATHSIG`` of ``<linux/prctl.h>``.
_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, looked up now: a forked child should call it, not load a library."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # a libc without it (a static or unusual build)
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_PRCTL = _load_prctl()


@functools.cache
def _setpriv_prefix() -> tuple[str, ...] | None:
    """``setpriv --pdeathsig KILL --`` where this system's setpriv takes it, else ``None`` (tried once)."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    if setpriv is None:
        return None
    prefix = (setpriv, "--pdeathsig", "KILL", "--")
    try:
        works = subprocess.run([*prefix, "true"], capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        works = False
    return prefix if works else None


def _die_with(parent: int) -> Callable[[], None] | None:
    """The ``preexec_fn`` that makes the child receive SIGKILL when ``parent`` ends (``None`` off Linux)."""
    prctl = _PRCTL
    if prctl is None:
        return None

    def die_with_parent() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent ended before the prctl: no signal will come
            os.kill(os.getpid(), signal.SIGKILL)

    return die_with_parent


def run_child(arguments: Sequence[str], *, input: bytes, timeout: float | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run ``arguments`` with ``input`` on its standard input, capturing its output, as ``subprocess.run`` does.

    The child is killed when ``timeout`` passes (``subprocess.TimeoutExpired``
    is raised), when this call is interrupted, and when this process ends
    (see the module docstring).
    """
    prefix = _setpriv_prefix()
    with temporaries.lock():  # no signal handler can run between the fork and the tracking
        process = subprocess.Popen(
            [*(prefix or ()), *arguments],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=None if prefix else _die_with(os.getpid()),  # it only calls prctl, looked up before the fork
        )
        temporaries.track_child(process.pid)
    try:
        with process:
            try:
                stdout, stderr = process.communicate(input, timeout=timeout)
            except BaseException:  # the timeout, or an exception raised into this thread
                process.kill()
                process.wait()
                raise
    finally:
        temporaries.untrack_child(process.pid)
    return subprocess.CompletedProcess(list(arguments), process.returncode, stdout, stderr)
