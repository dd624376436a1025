"""Comparing the ranks of a ``torch.distributed`` job: which rank's backward graph differs.

``DistributedDataParallel`` needs every rank to produce gradients for the
same parameters: a data-dependent branch taken on one rank only leaves the
others waiting in an all-reduce (a hang), or, when no rank uses a parameter,
makes DDP raise "Expected to have finished reduction in the prior iteration"
on the next forward. `compare_ranks` gathers each rank's graph (as JSON, by
``torch.distributed.all_gather_object``) and diffs it against rank 0's with
`gradexport.diff`; `gradexport.tools.unreached` on each rank names the unused
parameters with their reasons.

FSDP (``fully_shard``) is stricter still: its all-gathers and
reduce-scatters run per group of parameters, and a rank that leaves a
parameter out of its backward sends a reduce-scatter of another size (gloo
aborts: "Is there a distributed collective mismatch in your code?") or never
joins one (a hang). Run on the graphs before ``backward()``, `compare_ranks`
says which parameters the ranks use differently (`RankDiffs.divergent`): the
parameter, the ranks that use it and those that do not, and the line that
uses it (with `gradexport.tools.capture_source`); `RankDiffs.explain` prints it.

Examples:
    >>> import torch, gradexport
    >>> x = torch.ones(2, requires_grad=True)
    >>> gradexport.tools.compare_ranks(gradexport.to_networkx((x * 2).sum()))  # not distributed: one rank, nothing differs
    {}
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import torch.distributed as dist

from ..analysis.diff import diff_graphs, differs
from ..formats.json import from_json, to_json

__all__ = ["DivergentParameter", "RankDiffs", "compare_ranks"]


def _ranks(ranks: tuple[int, ...]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


@dataclass(frozen=True)
class DivergentParameter:
    """A parameter that some ranks' graphs reach and others' do not.

    Attributes:
        name: The parameter's name (from ``module=`` or ``params=`` of the graphs).
        used_on: The ranks whose graph reaches it.
        unused_on: The ranks whose graph does not.
        source: ``"PATH:LINE"`` of the op that uses it on the first rank of
            ``used_on`` (recorded by `gradexport.tools.capture_source`), or None.
    """

    name: str
    used_on: tuple[int, ...]
    unused_on: tuple[int, ...]
    source: str | None = None

    def describe(self) -> str:
        """One line: the parameter, the ranks, and the line.

        Examples:
            >>> DivergentParameter("extra.weight", (0,), (1, 2), "model.py:12").describe()
            'extra.weight: used on rank 0 (at model.py:12), not on ranks 1, 2'
        """
        where = f" (at {self.source})" if self.source is not None else ""
        return f"{self.name}: used on {_ranks(self.used_on)}{where}, not on {_ranks(self.unused_on)}"


class RankDiffs(dict[int, nx.MultiDiGraph]):
    """What `compare_ranks` returns: ``{rank: diff graph}`` for each rank whose graph differs from rank 0's, plus `divergent`.

    Attributes:
        divergent: The parameters that the ranks use differently, in the
            order rank 0's graph, then the others', name them.
    """

    def __init__(self, differing: dict[int, nx.MultiDiGraph], divergent: tuple[DivergentParameter, ...] = ()) -> None:
        super().__init__(differing)
        self.divergent = divergent

    def explain(self) -> str:
        """The parameters the ranks use differently, one per line, and why it matters; one line when none.

        Examples:
            >>> RankDiffs({}).explain()
            'every rank uses the same parameters'
        """
        if not self.divergent:
            return "every rank uses the same parameters"
        lines = [
            f"{len(self.divergent)} parameter(s) are used on some ranks only: DDP's all-reduce and FSDP's "
            "reduce-scatter would wait for, or mismatch with, the ranks that do not use them "
            "(use them on every rank, e.g. multiply by 0, or find_unused_parameters=True for DDP):"
        ]
        lines += [f"  {parameter.describe()}" for parameter in self.divergent]
        return "\n".join(lines)


def _used_parameters(graph: nx.MultiDiGraph) -> dict[str, str | None]:
    """``name -> source`` of the op that uses it, for every named leaf of ``graph``."""
    used: dict[str, str | None] = {}
    for node, names in graph.nodes(data="names"):
        if names:
            sources = [graph.nodes[user].get("source") for user in graph.predecessors(node)]
            for name in names:
                used[name] = next((source for source in sources if source is not None), None)
    return used


def _divergent(graphs: list[nx.MultiDiGraph]) -> tuple[DivergentParameter, ...]:
    used = [_used_parameters(graph) for graph in graphs]
    names = list(dict.fromkeys(name for per_rank in used for name in per_rank))
    found = []
    for name in names:
        on = tuple(rank for rank, per_rank in enumerate(used) if name in per_rank)
        if len(on) < len(graphs):
            off = tuple(rank for rank in range(len(graphs)) if rank not in on)
            found.append(DivergentParameter(name, on, off, used[on[0]][name]))
    return tuple(found)


def compare_ranks(graph: nx.MultiDiGraph, group: dist.ProcessGroup | None = None) -> RankDiffs:
    """Gather every rank's graph and return, for each rank whose graph differs from rank 0's, the `gradexport.diff` graph.

    A collective: every rank of ``group`` must call it. Each rank gets the
    same result. Outside an initialized process group it returns ``{}``.

    Args:
        graph: This rank's graph (from `gradexport.to_networkx`; with
            ``module=`` and `gradexport.capture_modules`, the diff names the
            modules, with `gradexport.tools.capture_source` the lines).
        group: The process group, the default one when None.

    Returns:
        ``{rank: diff(rank 0's graph, rank's graph)}`` for the ranks that
        differ, a `RankDiffs` whose ``divergent`` names the parameters the
        ranks use differently (``explain()`` prints them).

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
        return RankDiffs({})
    gathered: list[str | None] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, to_json(graph), group=group)
    graphs = [from_json(text or "") for text in gathered]
    found = {}
    for rank, other in enumerate(graphs[1:], start=1):
        merged = diff_graphs(graphs[0], other)
        if differs(merged):
            found[rank] = merged
    return RankDiffs(found, _divergent(graphs))
