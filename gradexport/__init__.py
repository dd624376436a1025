"""gradexport: see, export and replay PyTorch's autograd graph.

Examples:
    >>> import torch, gradexport
    >>> x = torch.randn(3, requires_grad=True)
    >>> graph = gradexport.to_networkx((x * 2).sum(), params={"x": x})
    >>> graph.number_of_nodes()
    4
"""

from .backward_replay import Replay, ReplayError, ReplayStart, ReplayStep, replay
from .export import to_dot, to_html, to_json, to_mermaid, to_model_explorer, to_pydot, to_svg, write
from .flow import record_gradients
from .formats import (
    GraphFormatError,
    GraphvizNotFoundError,
    MermaidSizeWarning,
    OutputError,
    RenderError,
    from_json,
)
from .graph import KINDS, SPECIAL_KINDS, GraphStream, to_networkx
from .modules import capture_modules
from .options import DiagramOptions, ExportOptions, FoldOptions, OptionWarning, RenderOptions, TraceOptions
from .notebook import GraphView, show
from .roots import Root, RootError, collect_roots
from .simplify import VIEW_OPS, GraphTooLargeError, collapse, fit, hide, only_reaching
from .stack import run_with_large_stack
from .nonfinite import NonfiniteReport, find_nonfinite
from .memory import SavedMemory, saved_memory
from .graph_diff import describe_diff, diff

__all__ = [
    "GraphStream",
    "GraphTooLargeError",
    "KINDS",
    "SPECIAL_KINDS",
    "VIEW_OPS",
    "Root",
    "RootError",
    "Replay",
    "ReplayError",
    "ReplayStart",
    "ReplayStep",
    "capture_modules",
    "collapse",
    "fit",
    "hide",
    "only_reaching",
    "record_gradients",
    "replay",
    "collect_roots",
    "run_with_large_stack",
    "to_networkx",
    "DiagramOptions",
    "ExportOptions",
    "FoldOptions",
    "OptionWarning",
    "RenderOptions",
    "TraceOptions",
    "GraphView",
    "GraphFormatError",
    "GraphvizNotFoundError",
    "MermaidSizeWarning",
    "OutputError",
    "RenderError",
    "from_json",
    "show",
    "to_dot",
    "to_html",
    "to_json",
    "to_mermaid",
    "to_model_explorer",
    "to_pydot",
    "to_svg",
    "write",
    "NonfiniteReport",
    "find_nonfinite",
    "SavedMemory",
    "saved_memory",
    "describe_diff",
    "diff",
]
