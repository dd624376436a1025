"""Make a large graph readable: fold modules, keep what matters, drop the noise.

All functions take a graph from `gradexport.to_networkx` and return a new
one; the input is never changed. They use only the graph, not torch.

- `collapse` opens ``depth`` levels of modules and folds what lies
  deeper, and every module without submodules, into one node of kind
  ``"module"`` each (the model itself is level 0, ``encoder`` level 1,
  ``encoder.layers.3`` level 3), or folds the modules it is given by name,
  using the node attribute ``module`` that `gradexport.capture_modules`
  makes possible.
- `only_reaching` keeps the part of the graph that carries gradient to
  given parameters.
- `hide` removes AccumulateGrad leaves or contracts chosen ops (views,
  reshapes) while keeping every path between the remaining nodes.
- `fit` picks the deepest collapse that fits a node and edge budget, or
  says what to do.

Edges that stand for several original edges carry ``count``; every edge of a
graph made here carries it (1 for an untouched edge) so a writer can show it.

Examples:
    >>> import torch, gradexport
    >>> model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    >>> with gradexport.capture_modules():
    ...     loss = model(torch.randn(2, 3)).sum()
    >>> graph = gradexport.to_networkx(loss, module=model)
    >>> folded = collapse(graph, depth=1)
    >>> sorted(data["module"] for _, data in folded.nodes(data=True) if data["kind"] == "module")
    ['0', '1', '2']
    >>> collapse(graph, depth=0).number_of_nodes()  # the root tensor, SumBackward0, the model
    3
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator
from fnmatch import fnmatchcase
from typing import Any

import networkx as nx

from ..core.arguments import collection_of
from ..core.errors import ArgumentKeyError, ArgumentTypeError, ArgumentValueError, GraphTooLargeError
from ..core.limits import LIMITS as MERMAID_LIMITS
from ..core.source import node_data

__all__ = ["MAX_DEPTH", "VIEW_OPS", "GraphTooLargeError", "collapse", "fit", "has_modules", "hide", "module_depth", "only_reaching"]

#: Backward ops of views and reshapes: pure plumbing that `hide` can contract.
VIEW_OPS = frozenset(
    {
        "AliasBackward0",
        "AsStridedBackward0",
        "ExpandBackward0",
        "PermuteBackward0",
        "ReshapeAliasBackward0",
        "SelectBackward0",
        "SliceBackward0",
        "SqueezeBackward0",
        "SqueezeBackward1",
        "SqueezeBackward2",
        "TBackward0",
        "TransposeBackward0",
        "UnsafeViewBackward0",
        "UnsqueezeBackward0",
        "ViewBackward0",
    }
)

_EDGE_META = ("shape", "dtype", "device")


def has_modules(graph: nx.MultiDiGraph) -> bool:
    """Whether some node of ``graph`` knows its module (the graph was traced with ``module=`` in `gradexport.capture_modules`)."""
    return any(path is not None for _, path in graph.nodes(data="module"))


def module_depth(graph: nx.MultiDiGraph) -> int:
    """The deepest module level any node of ``graph`` belongs to (0 when none has a module)."""
    return max((_level(path) for path in _module_paths(graph)), default=0)


def _module_paths(graph: nx.MultiDiGraph) -> Iterator[str]:
    """The ``module`` of every node that has one."""
    return (data["module"] for data in node_data(graph).values() if isinstance(data.get("module"), str))


def _level(path: str) -> int:
    return 0 if path == "" else path.count(".") + 1


#: The deepest ``depth`` `collapse` accepts: nn.Module's recursion stops far above it.
MAX_DEPTH = 10_000


def collapse(graph: nx.MultiDiGraph, depth: int | None = None, *, modules: str | Iterable[str] | None = None) -> nx.MultiDiGraph:
    """Fold modules into single nodes: open ``depth`` levels of modules, and fold the modules named in ``modules``.

    ``depth`` counts the levels opened, as torchview's ``depth`` does: at 0
    the whole model is one node; at 1 the model is opened and each of its
    children (``encoder``, ``head``) is one node; at 2 their children are, and
    so on. A module with no submodule in the graph (``conv1``, ``fc``,
    ``lm_head``) has nothing to open and stays one node at every depth below
    its own level. Nodes the model's or an opened module's own ``forward``
    made stay, in that module's box.

    ``modules`` folds by qualified name: each module matching one of these
    `fnmatch` patterns (``"transformer.h.*"``, ``"layer?"``) becomes one
    node, the outermost match winning; ``"*"`` matches every module but the
    model, ``""`` matches the model. With both, a node is folded into the
    outermost module either rule picks.

    Collapses compose: folding an already collapsed graph to a shallower
    depth gives what folding the original to that depth gives.

    The folded node has id ``"module:<path>"`` and attributes ``kind="module"``,
    ``module``, ``num_nodes`` and ``num_edges`` (what it hides), ``ops`` (op name
    -> count) and ``names`` (the parameters inside, sorted). Nodes without ``module``
    (roots, unnamed inputs, the loss computed outside the model) stay. Edges
    between two kept nodes keep their key; edges leaving a module node are
    keyed 0, 1, ... and keep ``next_index`` and ``input_nr``; edges with the
    same ends and indices merge and add up their ``count``. The result's
    graph attributes add ``collapsed_depth`` and ``collapsed_modules`` (the
    patterns) for what was given.

    Raises:
        TypeError: when ``graph`` is not a MultiDiGraph, ``depth`` not an int
            or ``modules`` not strings, or neither is given.
        ValueError: when ``depth`` is outside 0 to `MAX_DEPTH`.

    Examples:
        >>> import torch, gradexport
        >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Linear(2, 1)))
        >>> with gradexport.capture_modules():
        ...     loss = model(torch.ones(1, 2)).sum()
        >>> graph = gradexport.to_networkx(loss, module=model)
        >>> sorted(path for _, path in collapse(graph, 2).nodes(data="module") if path is not None)
        ['0', '1.0', '1.1']
        >>> sorted(path for _, path in collapse(graph, modules=["1"]).nodes(data="module") if path is not None)[-3:]
        ['0', '0', '1']
    """
    if not isinstance(graph, nx.MultiDiGraph):
        raise ArgumentTypeError(f"collapse: graph must be a networkx.MultiDiGraph from gradexport.to_networkx, got {type(graph).__name__}")
    if depth is not None and (not isinstance(depth, int) or isinstance(depth, bool)):
        raise ArgumentTypeError(f"collapse: depth must be an int (the levels of modules to open, 0 folds the whole model), got {_short_repr(depth)}")
    if depth is not None and not 0 <= depth <= MAX_DEPTH:
        raise ArgumentValueError(f"collapse: depth must be from 0 to {MAX_DEPTH} (the levels of modules to open), got {_short_repr(depth)}")
    patterns = _patterns(modules)
    if depth is None and patterns is None:
        raise ArgumentTypeError("collapse: give depth (levels of modules to open) or modules (names to fold), or both")
    paths = set(_module_paths(graph))
    # A module with a node strictly inside it has something to open.
    has_inner = {prefix for path in paths for prefix in _ancestors(path)}
    targets: dict[str, str | None] = {}

    def target(path: str) -> str | None:
        found = targets.get(path, ...)
        if found is not ...:
            return found
        chain = [*_ancestors(path), path]  # outermost first: "", "a", "a.b", ...
        chosen = None
        for prefix in chain:
            level = _level(prefix)
            by_depth = depth is not None and (level == depth or (level < depth and prefix not in has_inner))
            by_name = patterns is not None and _matches(prefix, patterns)
            if by_depth or by_name:
                chosen = prefix
                break
        targets[path] = chosen
        return chosen

    def group_of(node: Hashable, data: dict[str, Any]) -> Hashable | None:
        path = data.get("module")
        if not isinstance(path, str):
            return None
        folded = target(path)
        return None if folded is None else "module:" + folded

    attributes: dict[str, Any] = {}
    if depth is not None:
        attributes["collapsed_depth"] = depth
    if patterns is not None:
        attributes["collapsed_modules"] = [*graph.graph.get("collapsed_modules", ()), *patterns]
    return _regroup(graph, group_of, **attributes)


def _ancestors(path: str) -> list[str]:
    """The modules strictly containing ``path``, outermost (the model, ``""``) first."""
    if path == "":
        return []
    parts = path.split(".")
    return ["", *(".".join(parts[:end]) for end in range(1, len(parts)))]


def _patterns(modules: str | Iterable[str] | None) -> list[str] | None:
    if modules is None:
        return None
    if isinstance(modules, str):  # one name or pattern
        return [modules]
    return list(collection_of(modules, str, caller="collapse", argument="modules", example="['layers.*']"))


def _matches(path: str, patterns: list[str]) -> bool:
    if path == "":
        return "" in patterns  # "*" means the model's modules, not the model
    return any(fnmatchcase(path, pattern) for pattern in patterns)


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _regroup(
    graph: nx.MultiDiGraph,
    group_of: Callable[[Hashable, dict[str, Any]], Hashable | None],
    **graph_attributes: Any,
) -> nx.MultiDiGraph:
    result: nx.MultiDiGraph = nx.MultiDiGraph()
    target_of: dict[Hashable, Hashable] = {}
    groups: dict[Hashable, dict[str, Any]] = {}
    for node, data in graph.nodes(data=True):
        group = group_of(node, data)
        if group is None:
            target_of[node] = node
            result.add_node(node, **data)
            continue
        target_of[node] = group
        summary = groups.get(group)
        if summary is None:
            path = str(group).removeprefix("module:")
            summary = groups[group] = {"kind": "module", "module": path, "num_nodes": 0, "num_edges": 0, "ops": Counter(), "names": []}
            result.add_node(group, **summary)
        if data["kind"] == "module":  # folded before: add up what it stands for, so collapses compose
            summary["num_nodes"] += data["num_nodes"]
            summary["num_edges"] += data["num_edges"]
            summary["ops"].update(data["ops"])
        else:
            summary["num_nodes"] += 1
            summary["ops"][data.get("op", data["kind"])] += 1
        summary["names"].extend(data.get("names", ()))
    for group, summary in groups.items():
        result.nodes[group].update(summary, ops=dict(sorted(summary["ops"].items())), names=sorted(summary["names"]))
    _merge_edges(graph, result, target_of, groups)
    result.graph.update(graph.graph, **graph_attributes)
    _retarget_roots(result, target_of)
    return result


def _merge_edges(graph: nx.MultiDiGraph, result: nx.MultiDiGraph, target_of: dict[Hashable, Hashable], groups: dict[Hashable, dict[str, Any]]) -> None:
    merged: dict[tuple[Hashable, Hashable, Any, Any], dict[str, Any]] = {}
    for source, target, key, data in graph.edges(keys=True, data=True):
        new_source, new_target = target_of[source], target_of[target]
        if new_source == new_target and new_source in groups:
            result.nodes[new_source]["num_edges"] += data.get("count", 1)
            continue
        signature = (new_source, new_target, data.get("next_index", key), data.get("input_nr"))
        existing = merged.get(signature)
        if existing is None:
            merged[signature] = {**data, "count": data.get("count", 1), "_key": key if new_source not in groups else None}
        else:
            existing["count"] += data.get("count", 1)
            for name in _EDGE_META:
                if existing.get(name) != data.get(name):
                    existing.pop(name, None)
    next_key: Counter[tuple[Hashable, Hashable]] = Counter()
    for (source, target, _, _), data in merged.items():
        key = data.pop("_key")
        if key is None or result.has_edge(source, target, key):
            key = next_key[source, target]
            while result.has_edge(source, target, key):
                key += 1
        next_key[source, target] = key + 1
        result.add_edge(source, target, key=key, **data)


def _retarget_roots(result: nx.MultiDiGraph, target_of: dict[Hashable, Hashable]) -> None:
    roots = result.graph.get("roots", [])
    result.graph["roots"] = [{**root, "node": target_of[root["node"]]} for root in roots if root["node"] in target_of]
    result.graph["num_nodes"] = result.number_of_nodes()
    result.graph["num_edges"] = result.number_of_edges()


def only_reaching(graph: nx.MultiDiGraph, targets: Iterable[str]) -> nx.MultiDiGraph:
    """Keep the nodes on some path from a root to one of ``targets``.

    ``targets`` are parameter names (a leaf's ``names``) or node ids.

    Raises:
        KeyError: when a target names no node, listing the known names.

    Examples:
        >>> import torch, gradexport
        >>> w, b = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
        >>> graph = gradexport.to_networkx((w.exp() + b.sin()).sum(), params={"w": w, "b": b})
        >>> sorted(data.get("op", data["kind"]) for _, data in only_reaching(graph, ["w"]).nodes(data=True))
        ['AccumulateGrad', 'AddBackward0', 'ExpBackward0', 'SumBackward0', 'root']
    """
    wanted = collection_of(targets, str, caller="only_reaching", argument="targets", example="['layer.weight']")
    by_name = {name: node for node, names in graph.nodes(data="names") if names for name in names}
    missing = [target for target in wanted if target not in by_name and target not in graph]
    if missing:
        raise ArgumentKeyError(f"only_reaching: no node or parameter named {missing}; parameters are {sorted(by_name)}")
    ends = {by_name.get(target, target) for target in wanted}
    keep = set(ends)
    for end in ends:
        keep |= nx.ancestors(graph, end)
    result = graph.subgraph(keep).copy()
    for _, _, data in result.edges(data=True):
        data.setdefault("count", 1)
    _retarget_roots(result, {node: node for node in keep})
    return result


def hide(graph: nx.MultiDiGraph, *, leaves: bool = False, ops: Collection[str] = ()) -> nx.MultiDiGraph:
    """Remove AccumulateGrad leaves (``leaves=True``) and contract nodes whose ``op`` is in ``ops``.

    A contracted node's in-edges are joined to its out-edges: the new edge
    keeps the in-edge's ``next_index`` (which output of the predecessor) and
    the out-edge's ``input_nr`` (which slot of the successor), lists the hidden
    ops in ``via`` and multiplies the counts. Leaves are dropped with their
    in-edges; their parents record how many under ``hidden_leaves``.

    Raises:
        ArgumentTypeError: ``ops`` is not a collection of op names (one
            name alone must be wrapped: ``ops={"MulBackward0"}``).

    Examples:
        >>> import torch, gradexport
        >>> w = torch.randn(3, 2, requires_grad=True)
        >>> graph = gradexport.to_networkx((torch.ones(4, 3) @ w.t().t()).sum())
        >>> [data["op"] for _, data in hide(graph, ops=VIEW_OPS, leaves=True).nodes(data=True) if "op" in data]
        ['SumBackward0', 'MmBackward0']
    """
    hidden_ops = frozenset(collection_of(ops, str, caller="hide", argument="ops", example="{'MulBackward0'}"))
    result = graph.copy()
    for _, _, data in result.edges(data=True):
        data.setdefault("count", 1)
    for node in [node for node, data in graph.nodes(data=True) if data.get("op") in hidden_ops and data["kind"] != "leaf"]:
        _contract(result, node)
    if leaves:
        for node in [node for node, kind in graph.nodes(data="kind") if kind == "leaf"]:
            if node in result:
                for parent in set(result.predecessors(node)):
                    result.nodes[parent]["hidden_leaves"] = result.nodes[parent].get("hidden_leaves", 0) + 1
                result.remove_node(node)
    _retarget_roots(result, {node: node for node in result})
    return result


def _contract(graph: nx.MultiDiGraph, node: Hashable) -> None:
    op = graph.nodes[node]["op"]
    incoming = list(graph.in_edges(node, keys=True, data=True))
    outgoing = list(graph.out_edges(node, keys=True, data=True))
    graph.remove_node(node)
    for source, _, in_key, in_data in incoming:
        for _, target, _, out_data in outgoing:
            data = {
                **out_data,
                "next_index": in_data.get("next_index", in_key),
                "input_nr": out_data.get("input_nr"),
                "count": in_data["count"] * out_data["count"],
                "via": [*in_data.get("via", []), op, *out_data.get("via", [])],
            }
            key = in_key
            while graph.has_edge(source, target, key):
                key += 1
            graph.add_edge(source, target, key=key, **data)


def fit(
    graph: nx.MultiDiGraph,
    *,
    max_nodes: int | None = None,
    max_edges: int | None = MERMAID_LIMITS.max_edges,
    fits: Callable[[nx.MultiDiGraph], bool] | None = None,
) -> nx.MultiDiGraph:
    """Return ``graph`` if it is within budget, else the deepest `collapse` that is.

    The default edge budget is mermaid.js's own limit (500 edges). ``fits``
    adds a test of its own, asked only of candidates within the node and edge
    budget, from the whole graph to ever shallower collapses: the Mermaid
    export passes one that draws the candidate and checks its text size.

    Raises:
        GraphTooLargeError: when even ``depth=0`` is over budget, or the graph
            has no module information to collapse by; the message says what to do.

    Examples:
        >>> import torch, gradexport
        >>> stack = torch.nn.Sequential(*(torch.nn.Linear(2, 2) for _ in range(4)))
        >>> with gradexport.capture_modules():
        ...     total = stack(torch.ones(1, 2)).sum()
        >>> small = fit(gradexport.to_networkx(total, module=stack), max_nodes=8)
        >>> small.graph["collapsed_depth"], small.number_of_nodes()
        (1, 6)
    """

    def within(candidate: nx.MultiDiGraph) -> bool:
        return (
            (max_nodes is None or candidate.number_of_nodes() <= max_nodes)
            and (max_edges is None or candidate.number_of_edges() <= max_edges)
            and (fits is None or fits(candidate))
        )

    if within(graph):
        return graph
    foldable = has_modules(graph)
    if foldable:
        for depth in range(module_depth(graph), -1, -1):
            candidate = collapse(graph, depth)
            if within(candidate):
                return candidate
    own_test = " and the caller's own test" if fits is not None else ""
    budget = ", ".join(f"{label} {value}" for label, value in (("nodes", max_nodes), ("edges", max_edges)) if value is not None)
    advice = (
        "even the model folded into one node is over budget: use only_reaching() or hide() first"
        if foldable
        else "run the forward pass inside gradexport.capture_modules() and pass module=model so it can be collapsed, or use only_reaching()/hide()"
    )
    raise GraphTooLargeError(
        f"graph has {graph.number_of_nodes()} nodes and {graph.number_of_edges()} edges, over the budget "
        f"({budget}{own_test}); {advice}, "
        "or use the interactive viewer (gradexport.to_html), which has no such limit"
    )
