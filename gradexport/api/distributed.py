"""Comparing the ranks of a ``torch.distributed`` job: which rank's backward graph differs.

``DistributedDataParallel`` needs every rank to produce gradients for the
same parameters: a data-dependent branch taken on one rank only leaves the
others waiting in an all-reduce (a hang), or, when no rank uses a parameter,
makes DDP raise "Expected to have finished reduction in the prior iteration"
on the next forward. `compare_ranks` gathers each rank's graph (as JSON, by
``torch.distributed.all_gather_object``) and diffs it against rank 0's with
`gradexport.diff`; `gradexport.tools.unreached` on each rank names the unused
parameters with their reasons.

Examples:
    >>> import torch, gradexport
    >>> x = torch.ones(2, requires_grad=True)
    >>> gradexport.tools.compare_ranks(gradexport.to_networkx((x * 2).sum()))  # not distributed: one rank, nothing differs
    {}
"""

from __future__ import annotations

import networkx as nx
import torch.distributed as dist

from ..analysis.diff import diff_graphs, differs
from ..formats.json import from_json, to_json

__all__ = ["compare_ranks"]


def compare_ranks(graph: nx.MultiDiGraph, group: dist.ProcessGroup | None = None) -> dict[int, nx.MultiDiGraph]:
    """Gather every rank's graph and return, for each rank whose graph differs from rank 0's, the `gradexport.diff` graph.

    A collective: every rank of ``group`` must call it. Each rank gets the
    same result. Outside an initialized process group it returns ``{}``.

    Args:
        graph: This rank's graph (from `gradexport.to_networkx`; with
            ``module=`` and `gradexport.capture_modules`, the diff names the
            modules, with `gradexport.tools.capture_source` the lines).
        group: The process group, the default one when None.

    Returns:
        ``{rank: diff(rank 0's graph, rank's graph)}`` for the ranks that differ.

    Examples:
        A process group of one rank has no other graph to differ from:

        >>> import os, tempfile, torch, gradexport
        >>> import torch.distributed as dist
        >>> store = os.path.join(tempfile.mkdtemp(), "store")
        >>> dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
        >>> x = torch.ones(2, requires_grad=True)
        >>> gradexport.tools.compare_ranks(gradexport.to_networkx((x * 2).sum()))
        {}
        >>> dist.destroy_process_group()
    """
    if not (dist.is_available() and dist.is_initialized()):
        return {}
    gathered: list[str | None] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, to_json(graph), group=group)
    first = from_json(gathered[0] or "")
    found = {}
    for rank, text in enumerate(gathered[1:], start=1):
        merged = diff_graphs(first, from_json(text or ""))
        if differs(merged):
            found[rank] = merged
    return found
