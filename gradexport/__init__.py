"""gradexport: see, export and replay PyTorch's autograd graph.

Examples:
    >>> import torch, gradexport
    >>> x = torch.randn(3, requires_grad=True)
    >>> graph = gradexport.to_networkx((x * 2).sum(), params={"x": x})
    >>> graph.number_of_nodes()
    4
"""

from .analysis.diff import describe_diff
from .analysis.memory import SavedMemory, saved_memory
from .analysis.simplify import VIEW_OPS, collapse, fit, hide, only_reaching
from .analysis.watch_plot import plot_flow
from .api.diff import diff
from .api.export import to_dot, to_html, to_json, to_mermaid, to_model_explorer, to_pydot, to_svg, watch_node_data, write
from .backward.nonfinite import NonfiniteReport, find_nonfinite
from .backward.record_gradients import record_gradients
from .backward.replay import Replay, ReplayStart, ReplayStep, replay
from .backward.watch import Watch, watch
from .backward.watch_file import WatchHistory, load_watch
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
    StructureChangedWarning,
    ViewerTooLargeError,
)
from .core.options import DiagramOptions, ExportOptions, FoldOptions, RenderOptions, TraceOptions
from .formats import from_json
from .frontends.notebook import GraphView, show
from .tracing.graph import KINDS, SPECIAL_KINDS, GraphStream, to_networkx
from .tracing.modules import capture_modules
from .tracing.roots import Root, collect_roots
from .tracing.stack import run_with_large_stack

__all__ = [
    "KINDS",
    "SPECIAL_KINDS",
    "VIEW_OPS",
    "ArgumentKeyError",
    "ArgumentTypeError",
    "ArgumentValueError",
    "DeepGraphWarning",
    "DiagramOptions",
    "ExampleError",
    "ExportOptions",
    "FoldOptions",
    "GradexportError",
    "GradexportWarning",
    "GraphFormatError",
    "GraphStream",
    "GraphTooLargeError",
    "GraphView",
    "GraphvizNotFoundError",
    "MermaidSizeWarning",
    "MissingFileError",
    "ModelExplorerNotInstalledError",
    "NonfiniteReport",
    "OptionWarning",
    "OutputError",
    "RenderError",
    "RenderOptions",
    "Replay",
    "ReplayError",
    "ReplayStart",
    "ReplayStep",
    "Root",
    "RootError",
    "SavedMemory",
    "ServerError",
    "StartGradientError",
    "StreamConsumedError",
    "StructureChangedWarning",
    "TraceOptions",
    "ViewerTooLargeError",
    "Watch",
    "WatchHistory",
    "capture_modules",
    "collapse",
    "collect_roots",
    "describe_diff",
    "diff",
    "find_nonfinite",
    "fit",
    "from_json",
    "hide",
    "load_watch",
    "only_reaching",
    "plot_flow",
    "record_gradients",
    "replay",
    "run_with_large_stack",
    "saved_memory",
    "show",
    "to_dot",
    "to_html",
    "to_json",
    "to_mermaid",
    "to_model_explorer",
    "to_networkx",
    "to_pydot",
    "to_svg",
    "watch",
    "watch_node_data",
    "write",
]
