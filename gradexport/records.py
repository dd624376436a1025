"""What the top tier's verbs return, and the functions that read or draw those records.

- `gradexport.replay` returns a `Replay` of `ReplayStart` and `ReplayStep`;
- `gradexport.find_nonfinite` a `NonfiniteReport`;
- `gradexport.watch` a `Watch`, whose `WatchHistory` `load_watch` reads back
  from a file, `plot_flow` draws and `watch_node_data` exports for Model Explorer;
- `gradexport.load_bundle` a `Bundle` of two `BundleStep`s (a bad step and a healthy one);
- `gradexport.diff` a graph that `describe_diff` summarises as a `DiffSummary`;
- `gradexport.show` a `GraphView`, whose ``interactive()`` is a `Viewer`.

Examples:
    >>> import torch, gradexport
    >>> from gradexport.records import Replay
    >>> x = torch.ones(2, requires_grad=True)
    >>> isinstance(gradexport.replay((x * 2).sum(), params={"x": x}), Replay)
    True
"""

from .analysis.diff import DiffSummary, describe_diff
from .analysis.watch_plot import plot_flow
from .api.export import watch_node_data
from .backward.bundle_file import Bundle, BundleStep
from .backward.nonfinite import NonfiniteReport
from .backward.replay import Replay, ReplayStart, ReplayStep
from .backward.watch import Watch
from .backward.watch_file import WatchHistory, load_watch
from .frontends.notebook import GraphView, Viewer

__all__ = [
    "Bundle",
    "BundleStep",
    "DiffSummary",
    "GraphView",
    "NonfiniteReport",
    "Replay",
    "ReplayStart",
    "ReplayStep",
    "Viewer",
    "Watch",
    "WatchHistory",
    "describe_diff",
    "load_watch",
    "plot_flow",
    "watch_node_data",
]
