"""gradexport: see, export and replay PyTorch's autograd graph.

Examples:
    >>> import torch, gradexport
    >>> x = torch.randn(3, requires_grad=True)
    >>> graph = gradexport.to_networkx((x * 2).sum(), params={"x": x})
    >>> graph.number_of_nodes()
    4
"""

from .backward.replay import Replay, ReplayStart, ReplayStep, replay
from .api.export import to_dot, to_html, to_json, to_mermaid, to_model_explorer, to_pydot, to_svg, write
from .backward.record_gradients import record_gradients
from .core.errors import (
    ArgumentKeyError,
    ArgumentTypeError,
    ArgumentValueError,
    DeepGraphWarning,
    ExampleError,
    GradexportError,
    GradexportWarning,
    GraphFormatError,
    GraphTooLargeError,
    GraphvizNotFoundError,
    MermaidSizeWarning,
    MissingFileError,
    ModelExplorerNotInstalledError,
    OptionWarning,
    OutputError,
    RenderError,
    ReplayError,
    RootError,
    ServerError,
    StartGradientError,
    StreamConsumedError,
    ViewerTooLargeError,
)
from .formats import from_json
from .tracing.graph import KINDS, SPECIAL_KINDS, GraphStream, to_networkx
from .tracing.modules import capture_modules
from .core.options import DiagramOptions, ExportOptions, FoldOptions, RenderOptions, TraceOptions
from .frontends.notebook import GraphView, show
from .tracing.roots import Root, collect_roots
from .analysis.simplify import VIEW_OPS, collapse, fit, hide, only_reaching
from .tracing.stack import run_with_large_stack
from .backward.nonfinite import NonfiniteReport, find_nonfinite
from .analysis.memory import SavedMemory, saved_memory
from .analysis.diff import describe_diff
from .api.diff import diff

__all__ = [
    "ArgumentKeyError",
    "ArgumentTypeError",
    "ArgumentValueError",
    "capture_modules",
    "collapse",
    "collect_roots",
    "DeepGraphWarning",
    "describe_diff",
    "DiagramOptions",
    "diff",
    "ExampleError",
    "ExportOptions",
    "find_nonfinite",
    "fit",
    "FoldOptions",
    "from_json",
    "GradexportError",
    "GradexportWarning",
    "GraphFormatError",
    "GraphStream",
    "GraphTooLargeError",
    "GraphView",
    "GraphvizNotFoundError",
    "hide",
    "KINDS",
    "MermaidSizeWarning",
    "MissingFileError",
    "ModelExplorerNotInstalledError",
    "NonfiniteReport",
    "only_reaching",
    "OptionWarning",
    "OutputError",
    "record_gradients",
    "RenderError",
    "RenderOptions",
    "Replay",
    "replay",
    "ReplayError",
    "ReplayStart",
    "ReplayStep",
    "Root",
    "RootError",
    "run_with_large_stack",
    "saved_memory",
    "SavedMemory",
    "ServerError",
    "show",
    "SPECIAL_KINDS",
    "StartGradientError",
    "StreamConsumedError",
    "to_dot",
    "to_html",
    "to_json",
    "to_mermaid",
    "to_model_explorer",
    "to_networkx",
    "to_pydot",
    "to_svg",
    "TraceOptions",
    "VIEW_OPS",
    "ViewerTooLargeError",
    "write",
]
