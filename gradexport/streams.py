"""Walking a graph without building it: one-pass streams, roots, and deep graphs.

`GraphStream` walks roots once and yields adjacency records (what the
writers draw while walking); `collect_roots` and `Root` say what a backward
pass starts from; `run_with_large_stack` runs a call on a thread whose stack
holds the deepest graphs.

Examples:
    >>> import torch
    >>> from gradexport.streams import GraphStream
    >>> x = torch.ones(2, requires_grad=True)
    >>> len(list(GraphStream((x * 2).sum(), params={"x": x})))  # root, SumBackward0, MulBackward0, the leaf x
    4
"""

from .tracing.graph import GraphStream
from .tracing.roots import Root, collect_roots
from .tracing.stack import run_with_large_stack

__all__ = ["GraphStream", "Root", "collect_roots", "run_with_large_stack"]
