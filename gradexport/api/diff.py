"""`diff` as the public API takes it: graphs, JSON files gradexport wrote, or roots.

The comparison itself is `gradexport.analysis.diff`; this module turns
each input into a graph first (reading a JSON file with
`gradexport.from_json`, tracing roots with `gradexport.to_networkx`).

Examples:
    >>> import torch, gradexport
    >>> x = torch.ones(3, requires_grad=True)
    >>> graph = gradexport.diff((x * 2).sum(), (x * 2).exp().sum())
    >>> graph.graph["diff"]["nodes"]["added"]
    1
"""

from __future__ import annotations

import os
from pathlib import Path

import networkx as nx

from ..analysis.diff import diff_graphs
from ..core.errors import ArgumentTypeError
from ..formats.json import read_json
from ..tracing.graph import to_networkx
from ..tracing.roots import Roots

__all__ = ["Diffable", "diff", "load_graph"]

#: What `diff` compares: a graph, the path of a JSON file gradexport wrote, or roots.
Diffable = nx.MultiDiGraph | str | os.PathLike | Roots


def diff(a: Diffable, b: Diffable) -> nx.MultiDiGraph:
    """Compare two backward graphs and return one graph marking what was added, removed or changed.

    Args:
        a: The graph before: a MultiDiGraph from `gradexport.to_networkx`
            (or `gradexport.record_gradients`), the path of a JSON file
            written by gradexport, or roots (traced with `gradexport.to_networkx`).
        b: The graph after, likewise.

    Returns:
        A MultiDiGraph with the attributes of ``b`` (of ``a`` for removed
        nodes and edges) plus, on every node and edge, ``diff`` (see
        `DIFF_STATES`) and, where ``changed``, ``changes``: a dict from
        attribute to ``[value in a, value in b]`` (``grad`` compares the
        statistics of `GRAD_FIELDS` when both graphs recorded
        gradients). Nodes carry ``a_id`` and/or ``b_id``, their ids in the
        inputs. An opaque node that replaced a region carries ``replaces``
        (the ids of the region's nodes), and they carry ``replaced_by``. The
        graph attribute ``diff`` holds ``nodes`` and ``edges`` (counts per
        state) and ``replacements`` (``{"node", "op", "region"}`` each).

    Raises:
        TypeError: for an input that is none of the accepted kinds.
        gradexport.errors.RootError: for roots without a graph.

    Examples:
        >>> import torch, gradexport
        >>> x = torch.ones(2, requires_grad=True)
        >>> changes = diff((x * 2).sum(), (x * 2).exp().sum())
        >>> changes.graph["diff"]["nodes"]["added"], gradexport.records.describe_diff(changes).splitlines()[0]
        (1, ...)
    """
    return diff_graphs(load_graph(a, "a"), load_graph(b, "b"))


def load_graph(value: Diffable, which: str) -> nx.MultiDiGraph:
    """``value`` as a graph: a MultiDiGraph as it is, a JSON file read back, roots traced.

    Raises:
        TypeError: for a NetworkX graph that is not a MultiDiGraph.
        gradexport.errors.GraphFormatError: for a file that is not a gradexport graph.
        gradexport.errors.MissingFileError: for a path with no file.
        gradexport.errors.UnreadableFileError: for a file that cannot be read.
    """
    if isinstance(value, nx.MultiDiGraph):
        return value
    if isinstance(value, nx.Graph):
        raise ArgumentTypeError(f"diff: {which} is a {type(value).__name__}; gradexport graphs are MultiDiGraphs")
    if isinstance(value, (str, os.PathLike)):
        return read_json(Path(value), caller="diff")
    return to_networkx(value)
