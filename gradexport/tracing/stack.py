"""Keep the freeing of a deep autograd graph from crashing the process.

torch frees an autograd graph recursively in C++. Once Python has touched the
``next_functions`` of a chain some 50,000 nodes deep, freeing that chain
overflows the main thread's usual 8 MiB stack and kills the process with a
segmentation fault, wherever the last reference is dropped. Two remedies:

- On Linux the main thread's stack grows on demand up to the soft
  ``RLIMIT_STACK``, which a process may raise to its hard limit (often
  unlimited). gradexport does so by itself, once, the first time it walks a
  graph of more than `PROTECT_AT_NODES` nodes (see
  `protect_deep_free`). Side effect: the process, and the processes it
  starts afterwards, keep the higher limit (as after ``ulimit -s unlimited``).
  Opt out with the environment variable ``GRADEXPORT_STACK_LIMIT=keep`` (set
  before the walk), or call `raise_stack_limit` yourself to do it at a
  time of your choosing. Where the limit cannot be raised far enough (a
  finite hard limit, macOS, Windows), gradexport warns once instead.
- Anywhere: build, export and drop deep graphs inside
  `run_with_large_stack`, so that the free happens on a thread whose
  stack is large enough (the command line does this).

Examples:
    >>> import torch
    >>> def deep_chain_size():
    ...     x = torch.zeros(1, requires_grad=True)
    ...     for _ in range(1000):
    ...         x = x + 1
    ...     return to_networkx_size(x)
    >>> from gradexport import to_networkx
    >>> to_networkx_size = lambda t: to_networkx(t).number_of_nodes()
    >>> run_with_large_stack(deep_chain_size)
    1002
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from ..core.errors import DeepGraphWarning

__all__ = [
    "DEFAULT_STACK_MIB",
    "ENV_VAR",
    "PROTECT_AT_NODES",
    "DeepGraphWarning",
    "protect_deep_free",
    "raise_stack_limit",
    "run_with_large_stack",
]

T = TypeVar("T")

#: 512 MiB frees chains of tens of millions of nodes; the memory is only reserved, not used.
DEFAULT_STACK_MIB = 512


def run_with_large_stack(function: Callable[..., T], *args: Any, stack_mib: int = DEFAULT_STACK_MIB, **kwargs: Any) -> T:
    """Call ``function(*args, **kwargs)`` on a new thread with a ``stack_mib`` MiB stack.

    Returns what it returns and re-raises what it raises. Everything the
    function creates and drops (tensors, graphs) is freed on that thread, so
    return only what the caller needs (a NetworkX graph, text), not the tensors.

    Examples:
        >>> import torch, gradexport
        >>> def chain_length(length):
        ...     x = torch.ones(1, requires_grad=True)
        ...     y = x
        ...     for _ in range(length):
        ...         y = y * 1.5
        ...     return gradexport.to_networkx(y).number_of_nodes()
        >>> run_with_large_stack(chain_length, 1000)
        1002
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = function(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - handed to the calling thread below, which raises it
            outcome["error"] = error

    previous = threading.stack_size(stack_mib * 2**20)
    try:
        # A daemon, so that a Ctrl-C on the waiting main thread can end the process.
        thread = threading.Thread(target=target, name="gradexport-large-stack", daemon=True)
        thread.start()
    finally:
        threading.stack_size(previous)
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


#: Environment variable: ``keep`` stops gradexport from raising the stack limit.
ENV_VAR = "GRADEXPORT_STACK_LIMIT"

#: Graphs walked with more nodes than this get `protect_deep_free`; the
#: crash needs a chain some 50,000 deep, and a graph has at least as many
#: nodes as it is deep.
PROTECT_AT_NODES = 20_000

# Enough for chains of millions of nodes (about 160 bytes of stack per node freed).
_ENOUGH_BYTES = 1 << 30


_protection: dict[str, bool] = {}


def raise_stack_limit() -> bool:
    """Raise this process's soft ``RLIMIT_STACK`` to its hard limit (Linux), so the main thread can free deep graphs.

    Returns whether the main thread's stack may now grow to at least 1 GiB
    (or without limit). On other platforms, and where the hard limit is
    lower, nothing changes but the return value (False). Children started
    afterwards inherit the limit.

    Examples:
        >>> import sys
        >>> raise_stack_limit() or not sys.platform.startswith("linux")
        True
    """
    if not sys.platform.startswith("linux"):
        return False  # macOS and Windows fix the main thread's stack when the process starts
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if soft != hard and (soft != resource.RLIM_INFINITY):
        try:
            resource.setrlimit(resource.RLIMIT_STACK, (hard, hard))
        except (ValueError, OSError):
            return False
        soft = hard
    return soft == resource.RLIM_INFINITY or soft >= _ENOUGH_BYTES


def protect_deep_free(nodes: int) -> None:
    """Called once a walk passes `PROTECT_AT_NODES` nodes: raise the stack limit, or warn once where it cannot be.

    Does nothing after its first call in a process, and nothing but remember
    the choice when ``GRADEXPORT_STACK_LIMIT=keep``.
    """
    if _protection:
        return
    if os.environ.get(ENV_VAR, "").strip().lower() == "keep":
        _protection["done"] = False
        return
    _protection["done"] = raised = raise_stack_limit()
    if not raised and threading.current_thread() is threading.main_thread():
        warnings.warn(
            DeepGraphWarning(
                f"this graph has more than {nodes:,} nodes: if it is a chain over about 50,000 deep, freeing it on the "
                "main thread can overflow the stack and crash the process, and this process cannot raise its stack limit "
                "far enough (a finite hard limit, or not Linux). Build, export and drop deep graphs inside "
                "gradexport.tracing.stack.run_with_large_stack(function), or raise the limit before starting (ulimit -s unlimited)"
            ),
            stacklevel=4,
        )
