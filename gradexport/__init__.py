"""gradexport: see, export and replay PyTorch's autograd graph.

Examples:
    >>> import torch, gradexport
    >>> x = torch.randn(3, requires_grad=True)
    >>> graph = gradexport.to_networkx((x * 2).sum(), params={"x": x})
    >>> graph.number_of_nodes()
    4
"""

# ruff: noqa: E402
# First, before torch is imported (seconds): Ctrl-C then is one line and exit 130 for the command line.
from .core.temporaries import guard_startup as _guard_startup

_guard_startup()

from .analysis.diff import DiffSummary, describe_diff
from .analysis.memory import SavedMemory, saved_memory
from .analysis.simplify import VIEW_OPS, collapse, fit, hide, only_reaching
from .analysis.watch_plot import plot_flow
from .api.diff import diff
from .api.distributed import DivergentParameter, RankDiffs, compare_ranks
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
    GraphvizSizeWarning,
    InPlaceError,
    MermaidSizeWarning,
    MissingFileError,
    ModelExplorerNotInstalledError,
    OptionWarning,
    OutputError,
    RenderError,
    RenderTimeoutError,
    ReplayError,
    RootError,
    ServerError,
    StartGradientError,
    StepsUnavailableError,
    StreamConsumedError,
    StructureChangedWarning,
    TorchVersionError,
    ViewerTooLargeError,
)
from .core.options import DiagramOptions, ExportOptions, FoldOptions, RenderOptions, TraceOptions
from .core.version import __version__ as __version__
from .formats import from_json
from .frontends.notebook import GraphView, show
from .tracing.checkpoints import CheckpointRegion, retrace_checkpoint
from .tracing.graph import KINDS, SPECIAL_KINDS, GraphStream, to_networkx
from .tracing.lines import capture_source
from .tracing.modules import capture_modules
from .tracing.roots import Root, collect_roots
from .tracing.stack import run_with_large_stack
from .tracing.unreached import Unreached, UnreachedReport, unreached

__all__ = [
    "KINDS",
    "SPECIAL_KINDS",
    "VIEW_OPS",
    "ArgumentKeyError",
    "ArgumentTypeError",
    "ArgumentValueError",
    "CheckpointRegion",
    "DeepGraphWarning",
    "DiagramOptions",
    "DiffSummary",
    "DivergentParameter",
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
    "GraphvizSizeWarning",
    "InPlaceError",
    "MermaidSizeWarning",
    "MissingFileError",
    "ModelExplorerNotInstalledError",
    "NonfiniteReport",
    "OptionWarning",
    "OutputError",
    "RankDiffs",
    "RenderError",
    "RenderOptions",
    "RenderTimeoutError",
    "Replay",
    "ReplayError",
    "ReplayStart",
    "ReplayStep",
    "Root",
    "RootError",
    "SavedMemory",
    "ServerError",
    "StartGradientError",
    "StepsUnavailableError",
    "StreamConsumedError",
    "StructureChangedWarning",
    "TorchVersionError",
    "TraceOptions",
    "Unreached",
    "UnreachedReport",
    "ViewerTooLargeError",
    "Watch",
    "WatchHistory",
    "capture_modules",
    "capture_source",
    "collapse",
    "collect_roots",
    "compare_ranks",
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
    "retrace_checkpoint",
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
    "unreached",
    "watch",
    "watch_node_data",
    "write",
]
