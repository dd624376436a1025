"""What changed between two backward graphs: one graph with every node and edge marked.

`diff` matches the nodes of two graphs by what survives a change to
the model, never by their ids (ids are positions in a walk, and one added
layer shifts them all):

1. Root nodes match by root name, leaves by parameter name (the first of
   their ``names``, with ``torch.compile``'s ``_orig_mod.`` prefix dropped).
2. Matches spread along the edges: from a matched pair to the children at
   the same ``next_functions`` position (and input slot) when both have the
   same token ``(kind, module, op)``, and to parents when each side has
   exactly one unmatched parent with that token on that edge. From the
   roots down and from the parameters up, this matches everything but the
   region that changed, in time linear in the graph.
3. The nodes left are put in depth-first order from the roots, children
   in ``next_functions`` order (so each sits among its siblings and a
   layer's nodes sit together), and their tokens are aligned as
   ``difflib`` aligns lines: the longest runs of equal tokens match first.
   Where a run is replaced by a run of the same length, the nodes are
   paired in order and reported as ``changed`` (an activation swapped,
   ``ReluBackward0`` for ``GeluBackward0``). Beyond `ALIGN_LIMIT`
   pairs of leftover nodes, the common head and tail of the two orders
   match first (in linear time), matches spread from them again, and only
   what is left between them is aligned, if that is few enough.
4. An opaque node that matched nothing (a ``torch.compile`` region, a
   reentrant checkpoint, a custom Function) stands for the unmatched nodes
   of the other graph that hang below its matched parents: it is reported
   as one replacement of that region, not as so many removals.

The result is a new graph with the schema of `gradexport.tracing.graph` (nodes
renumbered ``n0``, ``n1``, ...: first those of ``b`` in ``b``'s order, then
those only in ``a``), each node and edge carrying ``diff``, one of
`DIFF_STATES`. Attributes only one of the graphs carries (a graph built
without ``module=`` or ``show_saved=True``) are not compared. The lines a
forward ran inside `gradexport.tools.capture_source` (``source``...) are kept
(``b``'s on a matched node, ``a``'s on a removed one) but not compared: an
edit above a line moves it; `describe_diff` names each node's line.

Examples:
    >>> import torch, gradexport
    >>> x = torch.ones(3, requires_grad=True)
    >>> before = gradexport.to_networkx((x * 2).sum(), params={"x": x})
    >>> after = gradexport.to_networkx((x * 2).relu().sum(), params={"x": x})
    >>> graph = gradexport.diff(before, after)
    >>> [(data.get("op"), data["diff"]) for _, data in graph.nodes(data=True)]
    [(None, 'same'), ('SumBackward0', 'same'), ('ReluBackward0', 'added'), ('MulBackward0', 'same'), ('AccumulateGrad', 'same')]
    >>> graph.graph["diff"]["nodes"]
    {'same': 4, 'changed': 0, 'added': 1, 'removed': 0}
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Collection, Hashable, Iterable, Iterator
from difflib import Match, SequenceMatcher
from typing import Any

import networkx as nx

from ..core.collector import gc_paused
from ..core.errors import ArgumentTypeError
from ..core.marks import DIFF_STATES, GRAD_KEYS
from ..core.reports import html_block, html_table, module_label, printable
from ..core.source import KeyedEdges, node_data, predecessors, successors

__all__ = ["DIFF_STATES", "DiffSummary", "describe_diff", "diff_graphs", "differs"]

#: Node attributes compared between matched nodes (when both graphs carry them).
NODE_FIELDS = ("op", "module", "special", "shape", "dtype", "device", "names", "num_next", "none_slots", "saved_bytes", "saved_bytes_shared")
#: Edge attributes compared between matched edges (when both carry them).
EDGE_FIELDS = ("input_nr", "shape", "dtype", "device")

#: Above this many pairs (unmatched nodes of a times those of b) the leftovers are not aligned by
#: difflib (it costs up to their product): their common head and tail match first, and what is
#: still above it stays added and removed.
ALIGN_LIMIT = 4_000_000

_OPAQUE = frozenset({"compiled", "checkpoint", "custom_function"})
_COMPILED_PREFIX = "_orig_mod."


def diff_graphs(graph_a: nx.MultiDiGraph, graph_b: nx.MultiDiGraph) -> nx.MultiDiGraph:
    """Compare two graphs (see `gradexport.diff`, which also takes JSON files and roots)."""
    for which, graph in (("a", graph_a), ("b", graph_b)):
        if not isinstance(graph, nx.MultiDiGraph):
            raise ArgumentTypeError(f"diff: {which} is a {type(graph).__name__}; gradexport graphs are MultiDiGraphs")
    with gc_paused():  # the collector rescanning the growing dicts: measured 1.6 to 2 times the time at 10^5+
        return _merge(graph_a, graph_b, _match(graph_a, graph_b))


class DiffSummary(str):
    """What `describe_diff` returns: its text (a ``str``, printed as is), shown in Jupyter as a table of the counts and the text.

    Attributes:
        counts: ``{"nodes": {state: count}, "edges": {...}}`` for the states
            ``same``, ``changed``, ``added``, ``removed``.
    """

    counts: dict[str, dict[str, int]]

    def __new__(cls, text: str, counts: dict[str, dict[str, int]]) -> DiffSummary:
        summary = super().__new__(cls, text)
        summary.counts = counts
        return summary

    def __repr__(self) -> str:
        return f"DiffSummary({self.splitlines()[0]})"

    def _repr_html_(self) -> str:
        """The counts as a table and the text below it, escaped.

        Examples:
            >>> import torch, gradexport
            >>> x = torch.ones(3, requires_grad=True)
            >>> html = describe_diff(gradexport.diff((x * 2).sum(), (x * 2).exp().sum()))._repr_html_()
            >>> html.count("<tr>"), "ExpBackward0" in html
            (3, True)
        """
        table = html_table(["", *DIFF_STATES], [[part, *(self.counts[part][state] for state in DIFF_STATES)] for part in ("nodes", "edges")])
        return table + html_block("what differs", str(self))


def describe_diff(graph: nx.MultiDiGraph, *, limit: int = 20) -> DiffSummary:
    """A readable summary of a `diff` graph: counts, replacements, then up to ``limit`` nodes of each state.

    It is a `DiffSummary`: a ``str`` that Jupyter shows as a table.

    Examples:
        >>> import torch, gradexport
        >>> x = torch.ones(3, requires_grad=True)
        >>> print(describe_diff(gradexport.diff((x * 2).sum(), (x * 2).exp().sum())))
        nodes: 4 same, 0 changed, 1 added, 0 removed; edges: 2 same, 0 changed, 2 added, 1 removed
        added:
          n2 ExpBackward0
    """
    summary = graph.graph["diff"]
    count = "; ".join(f"{part}: " + ", ".join(f"{summary[part][state]} {state}" for state in DIFF_STATES) for part in ("nodes", "edges"))
    lines = [count]
    in_region = set()
    for replacement in summary["replacements"]:
        region = replacement["region"]
        in_region.update(region)
        ops = Counter(graph.nodes[node_id].get("op", graph.nodes[node_id]["kind"]) for node_id in region)
        what = ", ".join(f"{op} ×{count}" if count > 1 else op for op, count in ops.most_common())
        status = graph.nodes[replacement["node"]]["diff"]
        lines.append(printable(f"replaced: {replacement['node']} {replacement['op']} ({status}) stands for {len(region)} nodes: {what}"))
    for state in ("changed", "added", "removed"):
        nodes = [node_id for node_id, data in graph.nodes(data=True) if data["diff"] == state and node_id not in in_region]
        nodes = [node_id for node_id in nodes if not graph.nodes[node_id].get("replaces")]
        if not nodes:
            continue
        lines.append(f"{state}:")
        for node_id in nodes[:limit]:
            lines.append(f"  {_node_line(graph, node_id)}")
        if len(nodes) > limit:
            lines.append(f"  ... and {len(nodes) - limit} more")
    return DiffSummary("\n".join(lines), {part: dict(summary[part]) for part in ("nodes", "edges")})


def differs(graph: nx.MultiDiGraph) -> bool:
    """Whether a graph from `diff` has any node or edge changed, added or removed."""
    counts = graph.graph["diff"]
    return any(counts[part][state] for part in ("nodes", "edges") for state in ("changed", "added", "removed"))


# ---------------------------------------------------------------- internals


def _normal_name(name: str) -> str:
    return name.replace(_COMPILED_PREFIX, "")


def _anchor(graph: nx.MultiDiGraph, node_id: str) -> Hashable | None:
    data = node_data(graph)[node_id]
    if data["kind"] == "root":
        return ("root", data["root"])
    if data["kind"] == "leaf" and data.get("names"):
        return ("leaf", _normal_name(data["names"][0]))
    return None


def _token(graph: nx.MultiDiGraph, node_id: str) -> tuple[Any, ...]:
    data = node_data(graph)[node_id]
    return (data["kind"], data.get("module"), data.get("op"))


def _preorder(graph: nx.MultiDiGraph) -> list[str]:
    starts = [entry["node"] for entry in graph.graph.get("roots", []) if entry["node"] in graph]
    starts += [node_id for node_id, sources in predecessors(graph).items() if not sources]
    order: list[str] = []
    seen: set[str] = set()
    stack = list(reversed(starts))
    out = successors(graph)
    while stack:
        node_id = stack.pop()
        if node_id in seen:
            continue
        seen.add(node_id)
        order.append(node_id)
        targets = out[node_id]
        if len(targets) <= 1:  # pushed once however many edges lead to it: the copies would only be skipped
            stack.extend(targets)
            continue
        by_key = sorted(((key, target) for target, keyed in targets.items() for key in keyed), reverse=True)
        stack.extend([target for _, target in by_key])
    return order + [node_id for node_id in graph if node_id not in seen]


def _match(graph_a: nx.MultiDiGraph, graph_b: nx.MultiDiGraph) -> dict[str, str]:
    """Pairs ``{id in a: id in b}``."""
    anchors_b: dict[Hashable, str] = {}
    duplicate: set[Hashable] = set()
    for node_id in graph_b:
        key = _anchor(graph_b, node_id)
        if key is not None:
            if key in anchors_b:
                duplicate.add(key)
            anchors_b[key] = node_id
    matched: dict[str, str] = {}
    anchored: set[str] = set()  # matched.values(), as a set: a list test here was 92% of a 10^5 diff
    for node_id in graph_a:
        key = _anchor(graph_a, node_id)
        if key is not None and key in anchors_b and key not in duplicate and anchors_b[key] not in anchored:
            matched[node_id] = anchors_b[key]
            anchored.add(anchors_b[key])
    _spread(graph_a, graph_b, matched)
    orders = (_preorder(graph_a), _preorder(graph_b))  # walked once: a third of a 10^5 diff when walked per use
    rest_a, rest_b = _rest(orders, matched)
    if len(rest_a) * len(rest_b) > ALIGN_LIMIT:
        # Too many for difflib: match the common head and tail of the two orders (linear), spread
        # from those pairs, and align what is left between them if that is small enough.
        ends = _common_ends(graph_a, graph_b, rest_a, rest_b)
        matched.update(ends)
        _spread(graph_a, graph_b, matched, ends.items())
        rest_a, rest_b = _rest(orders, matched)
        if len(rest_a) * len(rest_b) > ALIGN_LIMIT:
            return matched
    tokens_a = [_token(graph_a, node_id) for node_id in rest_a]
    tokens_b = [_token(graph_b, node_id) for node_id in rest_b]
    for tag, i1, i2, j1, j2 in _Aligner(tokens_a, tokens_b).get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            for node_a, node_b in zip(rest_a[i1:i2], rest_b[j1:j2], strict=True):
                if tag == "equal" or _pairable(graph_a.nodes[node_a], graph_b.nodes[node_b]):
                    matched[node_a] = node_b
    return matched


class _Aligner(SequenceMatcher):
    """difflib's alignment of two token lists (no junk), with each longest match found in linear time.

    difflib's own search costs the number of equal pairs of the two ranges:
    below a change in a chain, hundreds of ``AddBackward0`` against as many
    (measured 26 ms of a 45 ms diff of two 10^3-node chains). Where those pairs outnumber the
    tokens many times, the match comes from a suffix automaton of the range
    of ``b`` instead: the same match, the longest, earliest in ``a``, then
    earliest in ``b``, so the alignment is difflib's.

    Examples:
        >>> _Aligner(list("qabxcd"), list("abycd")).get_opcodes() == SequenceMatcher(None, "qabxcd", "abycd").get_opcodes()
        True
        >>> _Aligner(["+"] * 40 + ["a"], ["-"] + ["+"] * 40 + ["a"]).find_longest_match(0, 41, 0, 42)
        Match(a=0, b=1, size=41)
    """

    def __init__(self, a: list[Any], b: list[Any]) -> None:
        super().__init__(None, a, b, autojunk=False)
        self.tokens_a, self.tokens_b, self.counts_b = a, b, Counter(b)

    def find_longest_match(self, alo: int = 0, ahi: int | None = None, blo: int = 0, bhi: int | None = None) -> Match:
        a, b, counts_b = self.tokens_a, self.tokens_b, self.counts_b
        ahi = len(a) if ahi is None else ahi
        bhi = len(b) if bhi is None else bhi
        tokens = ahi - alo + bhi - blo
        # Measured: the automaton 300 to 400 ns per token, difflib's loop 110 ns per equal pair, so
        # the automaton pays from about 4 pairs per token; 16 leaves room for this count itself.
        if (ahi - alo) * (bhi - blo) <= 16 * tokens or sum(counts_b[token] for token in a[alo:ahi]) <= 16 * tokens:
            return super().find_longest_match(alo, ahi, blo, bhi)
        return _automaton_match(a, b, alo, ahi, blo, bhi)


def _automaton_match(a: list[Any], b: list[Any], alo: int, ahi: int, blo: int, bhi: int) -> Match:
    """The longest common run of ``a[alo:ahi]`` and ``b[blo:bhi]``, earliest in ``a``, then in ``b`` (what difflib finds).

    A suffix automaton of ``b[blo:bhi]`` (each state: its longest length, its
    suffix link, its moves, and the first end in ``b`` of what it stands
    for), then a walk of ``a`` through it, keeping the longest run ending at
    each position: the first longest one wins.
    """
    length, link, moves, first_end = [0], [-1], [dict[Any, int]()], [-1]
    last = 0
    for end in range(blo, bhi):
        token = b[end]
        state = len(length)
        length.append(length[last] + 1)
        link.append(0)
        moves.append({})
        first_end.append(end)
        parent = last
        while parent != -1 and token not in moves[parent]:
            moves[parent][token] = state
            parent = link[parent]
        if parent != -1:
            target = moves[parent][token]
            if length[parent] + 1 == length[target]:
                link[state] = target
            else:
                clone = len(length)
                length.append(length[parent] + 1)
                link.append(link[target])
                moves.append(dict(moves[target]))
                first_end.append(first_end[target])
                while parent != -1 and moves[parent].get(token) == target:
                    moves[parent][token] = clone
                    parent = link[parent]
                link[target] = link[state] = clone
        last = state
    best, best_end, best_state = 0, alo, 0
    state = run = 0
    for end in range(alo, ahi):
        token = a[end]
        while state and token not in moves[state]:
            state = link[state]
            run = length[state]
        following = moves[state].get(token)
        if following is None:
            state = run = 0
            continue
        state, run = following, run + 1
        if run > best:
            best, best_end, best_state = run, end, state
    if not best:
        return Match(alo, blo, 0)
    return Match(best_end - best + 1, first_end[best_state] - best + 1, best)


def _rest(orders: tuple[list[str], list[str]], matched: dict[str, str]) -> tuple[list[str], list[str]]:
    """The unmatched nodes of each graph, in the order of ``orders`` (`_preorder` of each)."""
    taken = set(matched.values())
    return [node_id for node_id in orders[0] if node_id not in matched], [node_id for node_id in orders[1] if node_id not in taken]


def _common_ends(graph_a: nx.MultiDiGraph, graph_b: nx.MultiDiGraph, rest_a: list[str], rest_b: list[str]) -> dict[str, str]:
    """Pairs from the longest common head and the longest common tail of the two token sequences."""
    tokens_a = [_token(graph_a, node_id) for node_id in rest_a]
    tokens_b = [_token(graph_b, node_id) for node_id in rest_b]
    shortest = min(len(tokens_a), len(tokens_b))
    head = 0
    while head < shortest and tokens_a[head] == tokens_b[head]:
        head += 1
    tail = 0
    while tail < shortest - head and tokens_a[-1 - tail] == tokens_b[-1 - tail]:
        tail += 1
    pairs = dict(zip(rest_a[:head], rest_b[:head], strict=True))
    if tail:
        pairs.update(zip(rest_a[-tail:], rest_b[-tail:], strict=True))
    return pairs


def _spread(
    graph_a: nx.MultiDiGraph,
    graph_b: nx.MultiDiGraph,
    matched: dict[str, str],
    start: Iterable[tuple[str, str]] | None = None,
) -> None:
    """Extend ``matched`` along edges: to children at the same ``next_functions`` position, and to parents
    that are the only unmatched ones with that token and edge on both sides. Spreads from ``start``
    (default: every pair of ``matched``)."""
    taken = set(matched.values())
    queue = deque(matched.items() if start is None else start)

    def pair(node_a: str, node_b: str) -> None:
        matched[node_a] = node_b
        taken.add(node_b)
        queue.append((node_a, node_b))

    out_a, out_b = successors(graph_a), successors(graph_b)
    while queue:
        node_a, node_b = queue.popleft()
        # The other side's children and parents are gathered only where this side has unmatched
        # ones: walking down from the roots most are matched already (a third of a 10^4 diff).
        children_b: dict[tuple[Any, Any], str] | None = None
        for target_a, keyed in out_a[node_a].items():
            if target_a in matched:
                continue
            if children_b is None:
                children_b = {(key, data.get("input_nr")): target for target, keyed_b in out_b[node_b].items() for key, data in keyed_b.items()}
            for key, data in keyed.items():
                target_b = children_b.get((key, data.get("input_nr")))
                if target_b is not None and target_a not in matched and target_b not in taken and _token(graph_a, target_a) == _token(graph_b, target_b):
                    pair(target_a, target_b)
        parents_a = _free_parents(graph_a, node_a, matched.keys())
        if not parents_a:
            continue
        parents_b = _free_parents(graph_b, node_b, taken)
        for signature, sources_a in parents_a.items():
            sources_b = parents_b.get(signature, [])
            if len(sources_a) == len(sources_b) == 1 and sources_a[0] not in matched and sources_b[0] not in taken:
                pair(sources_a[0], sources_b[0])


def _free_parents(graph: nx.MultiDiGraph, node_id: str, done: Collection[str]) -> dict[tuple[Any, ...], list[str]]:
    parents: dict[tuple[Any, ...], list[str]] = {}
    for source, keyed in predecessors(graph)[node_id].items():
        if source not in done:
            for key, data in keyed.items():
                parents.setdefault((key, data.get("input_nr"), *_token(graph, source)), []).append(source)
    return parents


def _edges_beside(
    edges: dict[str, KeyedEdges], to_other: dict[str, str], other_edges: dict[str, KeyedEdges]
) -> Iterator[tuple[str, str, Any, dict[str, Any], dict[Any, dict[str, Any]]]]:
    """``(source, target, key, data, keyed)`` of every edge of one graph, in the order of its ``edges(keys=True, data=True)``.

    ``keyed`` holds the other graph's edges between the nodes that
    ``to_other`` pairs with ``source`` and ``target`` (empty where either has
    none): each look-up made once per source and per target rather than per
    edge (a tenth of a 10^5 diff).
    """
    nowhere: dict[Any, Any] = {}
    for source, targets in edges.items():
        source_other = to_other.get(source)
        targets_other = nowhere if source_other is None else other_edges[source_other]
        for target, keyed in targets.items():
            target_other = to_other.get(target)
            keyed_other = nowhere if target_other is None else targets_other.get(target_other, nowhere)
            for key, data in keyed.items():
                yield source, target, key, data, keyed_other


def _pairable(data_a: dict[str, Any], data_b: dict[str, Any]) -> bool:
    # Same kind, and an opaque node is never "a changed op": it is a replacement.
    return data_a["kind"] == data_b["kind"] and data_a.get("special") not in _OPAQUE and data_b.get("special") not in _OPAQUE


def _changes(data_a: dict[str, Any], data_b: dict[str, Any], fields: Iterable[str]) -> dict[str, list[Any]]:
    changes: dict[str, list[Any]] = {}
    for key in fields:
        if key in data_a and key in data_b and data_a[key] != data_b[key]:
            if key == "names" and [_normal_name(name) for name in data_a[key]] == [_normal_name(name) for name in data_b[key]]:
                continue
            changes[key] = [data_a[key], data_b[key]]
    return changes


def _grad_changes(grad_a: dict[str, Any], grad_b: dict[str, Any]) -> dict[str, list[Any]]:
    changes = {}
    for key in GRAD_KEYS:
        value_a, value_b = grad_a.get(key), grad_b.get(key)
        if isinstance(value_a, float) and isinstance(value_b, float):
            same = (math.isnan(value_a) and math.isnan(value_b)) or math.isclose(value_a, value_b, rel_tol=1e-5, abs_tol=1e-12)
        else:
            same = value_a == value_b
        if not same:
            changes[key] = [value_a, value_b]
    return changes


def _merge(graph_a: nx.MultiDiGraph, graph_b: nx.MultiDiGraph, matched: dict[str, str]) -> nx.MultiDiGraph:
    merged: nx.MultiDiGraph = nx.MultiDiGraph()
    # Written into the graph's own dict-of-dicts, as add_node and add_edge would fill it (as
    # gradexport.tracing.graph does): their checks and copies were 60% of a 3·10^4 diff.
    nodes, out_edges, in_edges = node_data(merged), successors(merged), predecessors(merged)
    edges_a, edges_b = successors(graph_a), successors(graph_b)
    edge_count = 0

    def add_node(node_id: str, attributes: dict[str, Any]) -> None:
        nodes[node_id] = attributes
        out_edges[node_id] = {}
        in_edges[node_id] = {}

    def add_edge(source: str, target: str, key: int, attributes: dict[str, Any]) -> None:
        nonlocal edge_count
        keyed = out_edges[source].get(target)
        if keyed is None:
            keyed = out_edges[source][target] = in_edges[target][source] = {}
        if key in keyed:
            keyed[key].update(attributes)
        else:
            keyed[key] = attributes
            edge_count += 1

    from_b = {node_b: node_a for node_a, node_b in matched.items()}
    new_b: dict[str, str] = {}
    new_a: dict[str, str] = {}
    for node_b, data_b in node_data(graph_b).items():
        node_id = new_b[node_b] = f"n{len(new_b)}"
        node_a = from_b.get(node_b)
        attributes = dict(data_b, b_id=node_b)
        if node_a is None:
            attributes["diff"] = "added"
        else:
            new_a[node_a] = node_id
            attributes["a_id"] = node_a
            changes = _changes(node_data(graph_a)[node_a], data_b, NODE_FIELDS)
            attributes["diff"] = "changed" if changes else "same"
            if changes:
                attributes["changes"] = changes
        add_node(node_id, attributes)
    for node_a, removed in node_data(graph_a).items():
        if node_a not in matched:
            node_id = new_a[node_a] = f"n{len(nodes)}"
            add_node(node_id, dict(removed, a_id=node_a, diff="removed"))

    for source, target, key, data_b, keyed_a in _edges_beside(edges_b, from_b, edges_a):
        attributes = dict(data_b)
        data_a = keyed_a.get(key)
        if data_a is None:
            attributes["diff"] = "added"
        else:
            changes = _changes(data_a, data_b, EDGE_FIELDS)
            if "grad" in data_a and "grad" in data_b:
                grad = _grad_changes(data_a["grad"], data_b["grad"])
                if grad:
                    changes["grad"] = [{k: v[0] for k, v in grad.items()}, {k: v[1] for k, v in grad.items()}]
            attributes["diff"] = "changed" if changes else "same"
            if changes:
                attributes["changes"] = changes
        add_edge(new_b[source], new_b[target], key, attributes)
    for source, target, key, data_a, keyed_b in _edges_beside(edges_a, matched, edges_b):
        if key not in keyed_b:
            add_edge(new_a[source], new_a[target], key, dict(data_a, diff="removed"))

    replacements = _replacements(merged)
    merged.graph.update(graph_b.graph)
    merged.graph["roots"] = [dict(entry, node=new_b[entry["node"]]) for entry in graph_b.graph.get("roots", [])]
    merged.graph["num_nodes"] = len(nodes)
    merged.graph["num_edges"] = edge_count
    merged.graph["diff"] = {
        "nodes": _count(data["diff"] for data in nodes.values()),
        "edges": _count(data["diff"] for _, _, _, data in _all_edges(out_edges)),
        "replacements": replacements,
    }
    return merged


def _all_edges(adjacency: dict[str, KeyedEdges]) -> Iterable[tuple[str, str, int, dict[str, Any]]]:
    """``(source, target, key, attributes)`` in the order of ``graph.edges(keys=True, data=True)``, from ``_succ``."""
    return ((source, target, key, data) for source, targets in adjacency.items() for target, keyed in targets.items() for key, data in keyed.items())


def _count(states: Iterable[str]) -> dict[str, int]:
    counts = Counter(states)
    return {state: counts[state] for state in DIFF_STATES}


def _replacements(merged: nx.MultiDiGraph) -> list[dict[str, Any]]:
    """Give each unmatched opaque node the unmatched region of the other graph below its matched parents."""
    found: list[dict[str, Any]] = []
    claimed: set[str] = set()
    opposite = {"added": "removed", "removed": "added"}
    for node_id, data in merged.nodes(data=True):
        if data["diff"] not in opposite or data.get("special") not in _OPAQUE:
            continue
        other = opposite[data["diff"]]
        parents = [source for source in merged.predecessors(node_id) if merged.nodes[source]["diff"] in ("same", "changed")]
        region: list[str] = []
        stack = [target for parent in parents for _, target, edge in merged.out_edges(parent, data=True) if edge["diff"] == other]
        while stack:
            current = stack.pop()
            if current in claimed or merged.nodes[current]["diff"] != other:
                continue
            claimed.add(current)
            region.append(current)
            stack += [target for _, target, edge in merged.out_edges(current, data=True) if edge["diff"] == other]
        if region:
            region.sort(key=lambda node: int(node[1:]))
            data["replaces"] = region
            for member in region:
                merged.nodes[member]["replaced_by"] = node_id
            found.append({"node": node_id, "op": data.get("op"), "region": region})
    return found


def _node_line(graph: nx.MultiDiGraph, node_id: str) -> str:
    data = graph.nodes[node_id]
    text = f"{node_id} {data.get('op', data['kind'])}"
    if data.get("names"):
        text += f" ({', '.join(data['names'])})"
    if data.get("module") is not None:
        text += f" [{module_label(data['module'])}]"
    if isinstance(data.get("source"), str):  # gradexport.tools.capture_source: b's line, a's for a removed node
        text += f" at {data['source']}"
    for key, (value_a, value_b) in data.get("changes", {}).items():
        text += f"  {key}: {value_a} -> {value_b}"
    return printable(text)
