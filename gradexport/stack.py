"""Run work on a thread with a large stack, where freeing a deep autograd graph cannot crash.

torch frees an autograd graph recursively in C++. Once Python has touched the
``next_functions`` of a chain some 50,000 nodes deep, freeing that chain
overflows the main thread's usual 8 MiB stack and kills the process with a
segmentation fault, wherever the last reference is dropped. Build, export and
drop deep graphs inside `run_with_large_stack` so that the free happens
on a thread whose stack is large enough.

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

import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["DEFAULT_STACK_MIB", "run_with_large_stack"]

T = TypeVar("T")

#: 512 MiB frees chains of tens of millions of nodes; the memory is only reserved, not used.
DEFAULT_STACK_MIB = 512


def run_with_large_stack(function: Callable[..., T], *args: Any, stack_mib: int = DEFAULT_STACK_MIB, **kwargs: Any) -> T:
    """Call ``function(*args, **kwargs)`` on a new thread with a ``stack_mib`` MiB stack.

    Returns what it returns and re-raises what it raises. Everything the
    function creates and drops (tensors, graphs) is freed on that thread, so
    return only what the caller needs (a NetworkX graph, text), not the tensors.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = function(*args, **kwargs)
        except BaseException as error:  # handed to the calling thread below
            outcome["error"] = error

    previous = threading.stack_size(stack_mib * 2**20)
    try:
        thread = threading.Thread(target=target, name="gradexport-large-stack")
        thread.start()
    finally:
        threading.stack_size(previous)
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
