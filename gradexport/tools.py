"""More verbs, beyond the top tier: cutting a graph down, memory, source lines, ranks, other outputs.

- `hide`, `only_reaching` and `fit` cut a graph down (as `gradexport.collapse` folds it);
- `unreached` lists what a backward pass would not reach (`Unreached`, `UnreachedReport`);
- `saved_memory` counts what the graph holds for backward (`SavedMemory`);
- `capture_source` records the source line of each node;
- `compare_ranks` compares the graphs of distributed ranks (`RankDiffs`, and
  the parameters ranks use differently, `DivergentParameter`);
- `retrace_checkpoint` shows a reentrant checkpoint's region (`CheckpointRegion`);
- `compiled_region` shows the backward graph inside a ``torch.compile`` region, and
  `capture_compiled` keeps its source lines;
- `to_pydot` and `to_model_explorer` give the graph as those libraries' objects.

Examples:
    >>> import torch
    >>> from gradexport.tools import hide
    >>> import gradexport
    >>> x = torch.ones(2, requires_grad=True)
    >>> graph = gradexport.to_networkx((x * 2).sum(), params={"x": x})
    >>> hide(graph, ops={"SumBackward0"}).number_of_nodes() < graph.number_of_nodes()
    True
"""

from .analysis.memory import SavedMemory, saved_memory
from .analysis.simplify import fit, hide, only_reaching
from .api.distributed import DivergentParameter, RankDiffs, compare_ranks
from .api.export import to_model_explorer, to_pydot
from .backward.recorder import BadSteps
from .tracing.checkpoints import CheckpointRegion, retrace_checkpoint
from .tracing.compiled import capture_compiled, compiled_region
from .tracing.lines import capture_source
from .tracing.unreached import Unreached, UnreachedReport, unreached

__all__ = [
    "BadSteps",
    "CheckpointRegion",
    "DivergentParameter",
    "RankDiffs",
    "SavedMemory",
    "Unreached",
    "UnreachedReport",
    "capture_compiled",
    "capture_source",
    "compare_ranks",
    "compiled_region",
    "fit",
    "hide",
    "only_reaching",
    "retrace_checkpoint",
    "saved_memory",
    "to_model_explorer",
    "to_pydot",
    "unreached",
]
