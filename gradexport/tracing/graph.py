"""The graph model: an autograd graph as a faithful `networkx.MultiDiGraph`.

Schema (a public contract; writers, replay and the docs rely on it):

Nodes are keyed by string ids ``"n0"``, ``"n1"``, ... assigned in breadth-first
order from the roots (roots in the order given, then ``next_functions`` order),
so the same program always yields the same ids. Every node has ``kind``:

``"root"``
    A root tensor. Attributes ``root`` (its name), ``shape``, ``dtype``,
    ``device``. One edge leads to the tensor's ``grad_fn``.
``"backward"``
    A backward function (``grad_fn``). Attributes ``op``
    (``type(node).__name__``), ``torch_name`` (``node.name()``; may contain
    ``::`` and is not unique), ``sequence_nr`` (``node._sequence_nr()``,
    creation order), ``num_next`` (``len(node.next_functions)``),
    ``none_slots`` (positions of ``(None, 0)`` entries, only when there are
    some), ``special`` (only for special nodes, see `SPECIAL_KINDS`),
    ``saved`` (only with ``show_saved=True``, see `gradexport.tracing.saved.summarize_saved`),
    ``saved_bytes`` and ``saved_bytes_shared`` (only with ``show_saved=True``: the
    bytes of the storages its saved tensors keep alive, see
    `gradexport.tracing.saved.saved_storages`; a storage counts in
    ``saved_bytes`` of the first node in id order that holds it and in
    ``saved_bytes_shared`` of every later one),
    ``module`` (only when ``module=`` is given and the forward pass ran
    inside `gradexport.capture_modules`: the qualified name of the
    innermost module that created the node, ``""`` for the model itself),
    ``source``, ``source_code``, ``source_function`` and, with more than one
    user frame kept, ``source_stack`` (only when the forward pass ran inside
    `gradexport.tools.capture_source`: the user's line that created the node,
    ``"PATH:LINE"``, see `gradexport.tracing.lines`).
    ``compiled_graph`` (only on a ``CompiledFunctionBackward`` node, with
    ``open_compiled=True``: the backward graph inside the compiled region, its
    ops, the saved values they read and the gradients they return, each op
    with its source line; see `gradexport.tracing.compiled`).
``"leaf"``
    An ``AccumulateGrad`` node, which writes a leaf's ``.grad``. The backward
    attributes (``sequence_nr`` is -1: torch reports 2**64 - 1) plus the leaf
    variable's ``shape``, ``dtype``, ``device`` and ``names``: every name the
    tensor has in ``params`` or ``module`` (tied weights have several;
    empty when unnamed) and, with ``module=``, ``module``: the qualified
    name of the module that owns the tensor.
``"none"``
    Only with ``show_none=True``: one node per ``(None, 0)`` slot, an input
    of the forward op that needs no gradient.

Edges follow ``next_functions``: for ``F.next_functions[i] == (G, k)`` there is
one edge ``F -> G`` with key ``i`` and attributes ``next_index=i`` (which
output of F's backward flows along it) and ``input_nr=k`` (which input slot of
G receives it), plus ``shape``, ``dtype``, ``device`` of the tensor on the edge
with ``edge_metadata=True`` (from ``G._input_metadata[k]``). Parallel edges
are kept. A root edge has key 0, ``next_index=0`` and ``input_nr`` equal to the
root tensor's ``output_nr``. So for every backward node, its out-edges sorted
by key together with ``none_slots`` give back ``next_functions``.

Graph attributes: ``torch_version``, ``roots`` (a list of ``{"name", "node",
"input_nr"}``; ``input_nr`` is ``None`` for a Node root), ``num_nodes``,
``num_edges``, ``num_none_slots``; with ``module=``, ``module_classes``
(``{qualified name: class name}`` for the model and every submodule,
``""`` for the model itself: ``{"": "ResNet", "layer1.0": "BasicBlock"}``),
which module boxes use for their titles; with ``show_saved=True``, ``saved_bytes``:
the bytes of all distinct storages that saved tensors keep alive (the sum of
the nodes' ``saved_bytes``; see `gradexport.tools.saved_memory`), split into
``saved_bytes_parameters`` (storages of the graph's leaves: parameters and
other tensors whose ``.grad`` backward fills), ``saved_bytes_buffers``
(storages of ``module``'s buffers that are no leaf) and
``saved_bytes_activations`` (the rest: what backward keeps alive beyond
them), and ``saved_weights``: ``{node id: [own, shared]}`` bytes of
parameter and buffer storages among each node's ``saved_bytes`` and
``saved_bytes_shared`` (nodes holding none are left out).
`gradexport.collapse` adds ``collapsed_depth`` and/or ``collapsed_modules``.

Attributes that other functions add to this graph (writers may style them):

- ``exec_order`` (node; `gradexport.record_gradients`,
  `gradexport.replay`, `gradexport.find_nonfinite`): 1, 2, ...,
  the position in which the engine (or the replay) called the node; absent
  on roots and on nodes that did not run (pruned by ``inputs=``).
- ``grad`` (edge; `gradexport.record_gradients`): the gradient that
  flowed along it, see `gradexport.core.marks.GRAD_KEYS (plus ``values`` for small tensors)`.
- ``nonfinite`` (`gradexport.find_nonfinite`, on
  ``NonfiniteReport.graph``): on a node, ``"origin"`` where gradients went
  NaN or Inf although all it received was finite, ``"reached"`` where it
  received a non-finite gradient (down to the parameters); on an edge,
  ``"origin"`` for the non-finite gradients an origin sent, ``"path"`` for
  the others that carried one. The graph attribute ``nonfinite`` lists the
  origins in execution order.
- ``diff`` (node and edge; `gradexport.diff`): ``"same"``,
  ``"changed"``, ``"added"`` or ``"removed"``; with ``changes`` (attribute to
  ``[before, after]``) where changed, ``a_id``/``b_id`` on nodes,
  ``replaces`` (ids) on an opaque node that stands for a region of the other
  graph and ``replaced_by`` (id) on that region's nodes. The graph attribute
  ``diff`` holds the counts and the replacements.

The graph holds no torch objects: it can be pickled, written to JSON and kept
after the tensors are gone.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cache
from typing import Any, NamedTuple

import networkx as nx
import torch
from torch.autograd.graph import Node

from ..core.arguments import renamed_keyword
from ..core.collector import gc_paused
from ..core.errors import ArgumentTypeError, ModuleNotCapturedWarning, StreamConsumedError
from ..core.kinds import KINDS, SPECIAL_KINDS
from ..core.source import Adjacency, KeyedEdges, node_data, predecessors, successors
from . import lines
from ._torch import COMPILED_GRAPH_TORCH, INPUT_METADATA_TORCH, fsdp_unsharded, input_metadata, leaf_variable, require_torch, sequence_nr_getter, signed
from .compiled import region_of
from .lines import source_attributes, source_of
from .modules import module_classes, named_module_of, qualified_names
from .roots import Root, RootError, Roots, collect_roots, described_type
from .saved import SavedTally, StorageKey, add_storage, may_hold_storages, saved_storages, summarize_and_count
from .stack import PROTECT_AT_NODES, protect_deep_free
from .tensors import tensor_meta

__all__ = ["KINDS", "SPECIAL_KINDS", "Adjacency", "GraphStream", "Params", "RootError", "SavedNode", "Trace", "to_networkx", "trace"]

_SPECIAL_BY_OP = {
    "CopySlices": "copy_slices",
    "CheckpointFunctionBackward": "checkpoint",
    "CompiledFunctionBackward": "compiled",
    "BackwardHookFunctionBackward": "backward_hook",
    "Error": "error",
    "DelayedError": "error",
    "NotImplemented": "error",
}

#: Parameter names, as ``model.named_parameters()`` gives them (a mapping or pairs).
Params = Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]


def to_networkx(
    roots: Roots,
    *,
    params: Params | None = None,
    module: torch.nn.Module | None = None,
    show_none: bool = False,
    show_saved: bool = False,
    edge_metadata: bool = False,
    open_compiled: bool = False,
    saved: bool | None = None,
) -> nx.MultiDiGraph:
    """Build the autograd graph behind ``roots`` as a `networkx.MultiDiGraph`.

    Args:
        roots: A tensor, a ``grad_fn`` Node, a ``GradientEdge``, or a
            (nested) sequence or mapping of them; mapping keys name the roots.
        params: Names for leaf tensors, as ``model.named_parameters()`` gives.
        module: A module whose parameters (tied ones under all their names)
            and buffers name the leaves; with a forward pass captured by
            `gradexport.capture_modules`, it also names the module of
            every backward node.
        show_none: Add a ``kind="none"`` node for every ``(None, 0)`` slot.
        show_saved: Summarise each node's saved tensors and attributes under ``saved``.
        edge_metadata: Put the ``shape``, ``dtype`` and ``device`` of the
            gradient on every edge (from ``_input_metadata``). Off by
            default: it is a third of the construction time.
        open_compiled: Put the backward graph inside each ``torch.compile``
            region on its ``CompiledFunctionBackward`` node, as ``compiled_graph``
            (torch 2.3 and later). The graph's nodes and edges stay as without it.
        saved: The earlier spelling of ``show_saved``, kept with a
            `gradexport.errors.GradexportDeprecationWarning`.

    Returns:
        The graph described in this module's docstring.

    Raises:
        RootError: when ``roots`` is empty, not tensor-like, or has no graph.

    Examples:
        >>> import torch
        >>> x = torch.randn(4, 4, requires_grad=True)
        >>> y = torch.randn(4, 4, requires_grad=True)
        >>> g = to_networkx((x * y).sum(), params={"x": x, "y": y})
        >>> [(g.nodes[n]["kind"], g.nodes[n].get("op")) for n in g]
        [('root', None), ('backward', 'SumBackward0'), ('backward', 'MulBackward0'), ('leaf', 'AccumulateGrad'), ('leaf', 'AccumulateGrad')]
        >>> sorted((k, d["input_nr"], g.nodes[v]["names"]) for _, v, k, d in g.out_edges("n2", keys=True, data=True))
        [(0, 0, ['x']), (1, 0, ['y'])]
    """
    show_saved = renamed_keyword(saved, show_saved, caller="to_networkx", old="saved", new="show_saved")
    return trace(
        roots, params=params, module=module, show_none=show_none, show_saved=show_saved, edge_metadata=edge_metadata, open_compiled=open_compiled
    ).graph


#: What `GraphStream.saved_nodes` gives of a node that holds saved storages, as its graph node has them:
#: ``(id, op, module, saved_bytes, saved_bytes_shared)``.
SavedNode = tuple[str, str, str | None, int, int]


class Trace(NamedTuple):
    """A graph together with the torch Nodes behind its ids, for code that must call them (replay)."""

    graph: nx.MultiDiGraph
    #: Node id in ``graph`` of every backward and leaf Node.
    ids: dict[Node, str]
    #: The roots, as `gradexport.tracing.roots.collect_roots` named them.
    roots: list[Root]


def trace(
    roots: Roots,
    *,
    params: Params | None = None,
    module: torch.nn.Module | None = None,
    show_none: bool = False,
    show_saved: bool = False,
    edge_metadata: bool = False,
    open_compiled: bool = False,
    caller: str = "to_networkx",
) -> Trace:
    """Like `to_networkx`, but also return the Node of each id and the collected roots.

    The Trace holds references to the autograd graph: drop it when done, on a
    large stack for deep graphs (see `gradexport.tracing.stack`).

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> loss = (x * 3).sum()
        >>> result = trace(loss)
        >>> result.ids[loss.grad_fn]
        'n1'
    """
    stream = GraphStream(
        roots, params=params, module=module, show_none=show_none, show_saved=show_saved, edge_metadata=edge_metadata, open_compiled=open_compiled, caller=caller
    )
    return Trace(stream.to_networkx(), stream.ids, stream.roots)


def _leaf_names(params: Params | None, module: torch.nn.Module | None, caller: str = "to_networkx") -> dict[int, list[str]]:
    # Keyed by id() only for this lookup, while the tensors are alive; never used as a node id.
    names: dict[int, list[str]] = {}
    pairs: list[tuple[str, torch.Tensor]] = []
    if module is not None:
        pairs += _named_tensors(module)
    if params is not None:
        pairs += param_pairs(params, caller)
    for name, tensor in pairs:
        if not isinstance(tensor, torch.Tensor):
            raise ArgumentTypeError(f"{caller}: params[{name!r}] is {described_type(tensor)}, not a tensor")
        bucket = names.setdefault(id(tensor), [])
        if name not in bucket:
            bucket.append(name)
    return names


def param_pairs(params: Params, caller: str) -> list[tuple[str, Any]]:
    """``params`` as (name, tensor) pairs, or a one-line TypeError saying what params accepts."""
    accepts = "params takes a mapping of names to tensors or (name, tensor) pairs, as model.named_parameters() gives"
    if isinstance(params, Mapping):
        pairs = list(params.items())
    elif isinstance(params, (torch.Tensor, str, bytes)) or not isinstance(params, Iterable):
        raise ArgumentTypeError(f"{caller}: {accepts}; got a {type(params).__name__}")
    else:
        pairs = []
        for index, pair in enumerate(params):
            if isinstance(pair, (str, bytes, torch.Tensor)) or not isinstance(pair, Sequence) or len(pair) != 2:
                raise ArgumentTypeError(f"{caller}: {accepts}; item {index} is {_short(pair)}, not a (name, tensor) pair")
            pairs.append((pair[0], pair[1]))
    for name, _ in pairs:
        if not isinstance(name, str):
            raise ArgumentTypeError(f"{caller}: {accepts}; the name {name!r} is a {type(name).__name__}, not a str")
    return pairs


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, torch.Tensor) else f"a tensor of shape {list(value.shape)}"
    return text if len(text) <= 60 else text[:57] + "..."


def _leaf_modules(module: torch.nn.Module) -> dict[int, str]:
    owners: dict[int, str] = {}
    for name, tensor in _named_tensors(module):
        owners.setdefault(id(tensor), name.rpartition(".")[0])
    return owners


def _named_tensors(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``named_parameters()`` and ``named_buffers()`` (duplicates kept), with each FSDP2 parameter's unsharded twin under its name too."""
    pairs = [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]
    unsharded = fsdp_unsharded(module)
    if unsharded:
        pairs += [(name, unsharded[id(tensor)]) for name, tensor in pairs if id(tensor) in unsharded]
    return pairs


NextFunctions = tuple[tuple[Node | None, int], ...]


TypeFacts = tuple[str, str | None, Callable[[Node], int]]
#: `_type_facts` of every Node type met so far. The walk reads it directly: a dict look-up
#: measured 30 ns per node, against 60 to 110 ns for a call to a functools.cache function.
_TYPE_FACTS: dict[type, TypeFacts] = {}


def _type_facts(node_type: type) -> TypeFacts:
    """``op`` and ``special`` of every Node of this type, and its ``_sequence_nr`` getter (no call layer per node)."""
    facts = _TYPE_FACTS.get(node_type)
    if facts is None:
        op = node_type.__name__
        special = _SPECIAL_BY_OP.get(op)
        if special is None and issubclass(node_type, torch.autograd.function.BackwardCFunction):
            special = "custom_function"
        facts = _TYPE_FACTS[node_type] = (op, special, sequence_nr_getter(node_type))
    return facts


class GraphStream:
    """The graph of `to_networkx`, one node at a time, without building it.

    It takes the arguments of `to_networkx` and checks them at once, and
    ``drawn_only``: leave out ``torch_name``, ``sequence_nr`` and
    ``num_next``, which no diagram draws, and ``none_slots`` unless None
    slots are drawn (``show_none``): for a stream drawn by `to_dot`, reading
    them was a tenth of its time (``node.name()`` alone measured 0.2 µs per
    node). Iterating yields an `Adjacency` per node, in id order, each once
    its out-edges are known; after the last one, `graph_attributes`
    holds the graph attributes and `ids` the Node of every id.
    `to_networkx` stores these records in a MultiDiGraph; the writers
    can also draw them as they come (``gradexport.to_dot(tensor)`` does),
    which keeps a second copy of the graph out of memory. A stream can be
    iterated once, and holds the Nodes it walks until it is dropped. For a
    large graph, iterate it inside `gc_paused`, as the export
    functions do.

    This is the hot loop of every export (about a million iterations for a
    large model), so it is written for speed: each Node's ``next_functions`` is
    read once and carried in the queue with the node's attribute dict, and
    per-type facts and dtype/device strings are cached.

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> stream = GraphStream((x * 2).sum())
        >>> [(node_id, attributes["kind"], list(out)) for node_id, attributes, out in stream]
        [('n0', 'root', ['n1']), ('n1', 'backward', ['n2']), ('n2', 'backward', ['n3']), ('n3', 'leaf', [])]
        >>> stream.graph_attributes["num_edges"]
        3
    """

    #: Every id is ``n`` followed by digits (see `gradexport.core.source`).
    model_ids = True

    def __init__(
        self,
        roots: Roots,
        *,
        params: Params | None = None,
        module: torch.nn.Module | None = None,
        show_none: bool = False,
        show_saved: bool = False,
        edge_metadata: bool = False,
        open_compiled: bool = False,
        drawn_only: bool = False,
        caller: str = "GraphStream",
        saved: bool | None = None,
    ):
        saved = renamed_keyword(saved, show_saved, caller=caller, old="saved", new="show_saved")
        if edge_metadata:
            require_torch(INPUT_METADATA_TORCH, f"{caller}(edge_metadata=True)")
        if open_compiled:
            require_torch(COMPILED_GRAPH_TORCH, f"{caller}(open_compiled=True)")
        self.roots = collect_roots(roots, caller=caller)
        if module is not None and not isinstance(module, torch.nn.Module):
            raise ArgumentTypeError(f"{caller}: module must be a torch.nn.Module, got {type(module).__name__}")
        self.caller = caller
        self.names_by_tensor = _leaf_names(params, module, caller)
        self.module_names = qualified_names(module) if module is not None else None
        #: The graph attributes (see the module docstring), complete once the stream is exhausted.
        self.graph_attributes: dict[str, Any] = {}
        if module is not None:
            self.graph_attributes["module_classes"] = module_classes(module)
        self.leaf_modules = _leaf_modules(module) if module is not None else {}
        self.show_none = show_none
        self.saved = saved
        self.edge_metadata = edge_metadata
        self.open_compiled = open_compiled
        self.drawn_only = drawn_only
        #: Node id of every backward and leaf Node reached so far.
        self.ids: dict[Node, str] = {}
        self.node_count = 0
        self.edge_count = 0
        self.none_slot_count = 0
        #: With module=: backward nodes seen, and those a module of it made.
        self.backward_count = self.module_node_count = 0
        self.started = False
        # Queued nodes: id, the next_functions still to expand, attributes, and
        # the out-edges already known (a root tensor's, drawn when it is named).
        self.queue: deque[tuple[str, NextFunctions, dict[str, Any], dict[str, dict[int, dict[str, Any]]]]] = deque()
        self.input_meta: dict[Node, list[dict[str, Any]]] = {}
        #: With show_saved=True: the nodes' saved storages, and the leaves' and buffers'.
        self.tally = SavedTally(module.buffers() if saved and module is not None else ())
        self.source_attributes = cache(source_attributes)

    def __iter__(self) -> Iterator[Adjacency]:
        if self.started:
            raise StreamConsumedError("a GraphStream can be iterated only once; create a new one")
        self.started = True
        root_records: list[dict[str, Any]] = []
        for root in self.roots:
            if root.tensor is not None and not root.is_leaf_tensor:
                tensor_id = self.new_id()
                out: KeyedEdges = {}
                self.queue.append((tensor_id, (), {"kind": "root", "root": root.name, **tensor_meta(root.tensor)}, out))
                out[self.discover(root.node)] = {0: self.edge_attributes(0, root.node, root.input_nr)}
                self.edge_count += 1
                root_records.append({"name": root.name, "node": tensor_id, "input_nr": root.input_nr})
            else:
                root_records.append({"name": root.name, "node": self.discover(root.node), "input_nr": root.input_nr})
        # The expansion of each node is written out here, with local counters,
        # rather than in methods: the calls cost about a tenth of the walk.
        queue, ids, add, show_none = self.queue, self.ids, self.add, self.show_none
        edge_attributes = self.edge_attributes if self.edge_metadata else None
        edge_count, none_slot_count = self.edge_count, 0
        keep_slots = show_none or not self.drawn_only
        while queue:
            source, next_functions, attributes, out = queue.popleft()
            for index, (child, input_nr) in enumerate(next_functions):
                if child is None:
                    none_slot_count += 1
                    if not keep_slots:
                        continue
                    if "none_slots" in attributes:
                        attributes["none_slots"].append(index)
                    else:
                        attributes["none_slots"] = [index]
                    if show_none:
                        out[self.none_node()] = {index: {"next_index": index, "input_nr": input_nr}}
                        edge_count += 1
                    continue
                target = ids.get(child) or add(child)
                if edge_attributes is None:
                    record = {"next_index": index, "input_nr": input_nr}
                else:
                    record = edge_attributes(index, child, input_nr)
                if target in out:  # a parallel edge
                    out[target][index] = record
                else:
                    out[target] = {index: record}
                edge_count += 1
            yield source, attributes, out
        self.edge_count, self.none_slot_count = edge_count, none_slot_count
        self.warn_if_no_module_named()
        self.graph_attributes.update(
            torch_version=torch.__version__,
            roots=root_records,
            num_nodes=self.node_count,
            num_edges=self.edge_count,
            num_none_slots=self.none_slot_count,
        )
        if self.saved:
            self.graph_attributes.update(self.tally.split())

    def warn_if_no_module_named(self) -> None:
        """Warn when ``module=`` was given but named no backward node (the forward pass ran outside `gradexport.capture_modules`)."""
        if self.backward_count and not self.module_node_count:
            warnings.warn(
                ModuleNotCapturedWarning(
                    f"{self.caller}: module= named no backward node, since the forward pass did not run inside "
                    "gradexport.capture_modules(): run it there to box nodes by module (the leaves are named all the same)"
                ),
                stacklevel=3,
            )

    def saved_nodes(self) -> list[SavedNode]:
        """Walk the graph as iterating does, keeping only what `gradexport.tools.saved_memory` reports: the saved bytes.

        For a stream made with ``show_saved=True``: the nodes whose saved tensors
        hold storage bytes, with the id, ``op``, ``module``, ``saved_bytes`` and
        ``saved_bytes_shared`` they have in `to_networkx`'s graph, in id order;
        afterwards `graph_attributes` holds the graph's ``saved_*`` attributes
        (and `ids` stays empty). It consumes the stream: call it instead of
        iterating, once. It makes no attribute dicts, edges or summaries of
        saved values: on a 10^5-node MLP it took a sixth of the time of
        building the graph with ``show_saved=True``.

        Examples:
            >>> import torch
            >>> x = torch.ones(4, requires_grad=True)
            >>> stream = GraphStream(x.exp().sum(), show_saved=True)
            >>> stream.saved_nodes()
            [('n2', 'ExpBackward0', None, 16, 0)]
            >>> stream.graph_attributes["saved_bytes"]
            16
        """
        if self.started:
            raise StreamConsumedError("a GraphStream can be iterated only once; create a new one")
        self.started = True
        tally, module_names, leaf_modules = self.tally, self.module_names, self.leaf_modules
        # The number of each node's id, as new_id would give it: string ids are made only for the nodes returned.
        numbers: dict[Node, int] = {}
        order: list[Node] = []
        count = 0
        for root in self.roots:
            if root.tensor is not None and not root.is_leaf_tensor:
                count += 1  # the root tensor's node
            if root.node not in numbers:
                numbers[root.node] = count
                count += 1
                order.append(root.node)
        if count >= PROTECT_AT_NODES:
            protect_deep_free(PROTECT_AT_NODES)
        found: list[SavedNode] = []
        # Per node type: its op, and whether it can save tensors at all.
        facts: dict[type, tuple[str, bool]] = {}
        for node in order:  # grows as it goes: breadth-first, in id order
            for child, _ in node.next_functions:
                if child is not None and child not in numbers:
                    numbers[child] = count
                    count += 1
                    order.append(child)
                    if count == PROTECT_AT_NODES:
                        protect_deep_free(PROTECT_AT_NODES)
            node_type = type(node)
            fact = facts.get(node_type)
            if fact is None:
                fact = facts[node_type] = (node_type.__name__, may_hold_storages(node_type))
            op, may_hold = fact
            module: str | None = None
            if op == "AccumulateGrad":
                variable = leaf_variable(node)
                add_storage(tally.leaf_storages, variable)
                module = leaf_modules.get(id(variable))
            elif module_names is not None:
                self.backward_count += 1
                module = named_module_of(node, module_names)
                if module is not None:
                    self.module_node_count += 1
            if may_hold and (storages := saved_storages(node)):
                node_id = f"n{numbers[node]}"
                own, shared = tally.count(node_id, storages)
                if own or shared:
                    found.append((node_id, op, module, own, shared))
        self.node_count = count
        self.warn_if_no_module_named()
        self.graph_attributes.update(tally.split())
        return found

    def to_networkx(self) -> nx.MultiDiGraph:
        """Store the whole stream in the MultiDiGraph that `to_networkx` returns.

        The records go straight into the graph's documented dict-of-dicts
        storage (``_node``, ``_succ``, ``_pred``): they already have its shape,
        and ``add_node``/``add_edge``'s per-call checks and copies would double
        the cost of building the graph.
        """
        graph: nx.MultiDiGraph = nx.MultiDiGraph()
        nodes, out_edges, in_edges = node_data(graph), successors(graph), predecessors(graph)
        with gc_paused():
            for node_id, attributes, out in self:
                nodes[node_id] = attributes
                out_edges[node_id] = out
                if node_id not in in_edges:
                    in_edges[node_id] = {}
                for target, keyed in out.items():
                    sources = in_edges.get(target)
                    if sources is None:
                        sources = in_edges[target] = {}
                    sources[node_id] = keyed
            # Targets got their entry when first reached, which can be before a
            # root with a smaller id: put them in id order, as add_node would have.
            graph._pred = {node_id: in_edges[node_id] for node_id in nodes}  # type: ignore[attr-defined]
        _forget_cached_conversions(graph)
        graph.graph.update(self.graph_attributes)
        return graph

    def new_id(self) -> str:
        node_id = f"n{self.node_count}"
        self.node_count += 1
        if self.node_count == PROTECT_AT_NODES:
            protect_deep_free(PROTECT_AT_NODES)
        return node_id

    def discover(self, node: Node) -> str:
        """The id of ``node``; the first time, a new one, and the node's attributes, queued for expansion."""
        return self.ids.get(node) or self.add(node)

    def add(self, node: Node) -> str:
        """A new id for ``node``, not seen before, and its attributes, queued for expansion."""
        node_id = self.ids[node] = f"n{self.node_count}"  # new_id, without a call per node
        self.node_count += 1
        if self.node_count == PROTECT_AT_NODES:
            protect_deep_free(PROTECT_AT_NODES)
        next_functions = node.next_functions
        node_type = type(node)
        op, special, sequence_nr_of = _TYPE_FACTS.get(node_type) or _type_facts(node_type)
        attributes: dict[str, Any]
        if self.drawn_only:
            attributes = {"kind": "backward", "op": op}
        else:
            sequence_nr = sequence_nr_of(node)
            attributes = {
                "kind": "backward",
                "op": op,
                "torch_name": node.name(),
                "sequence_nr": sequence_nr if sequence_nr < 2**63 else signed(sequence_nr),
                "num_next": len(next_functions),
            }
        if special is not None:
            attributes["special"] = special
            if special == "compiled" and self.open_compiled and (region := region_of(node)) is not None:
                attributes["compiled_graph"] = region
        if op == "AccumulateGrad":
            variable = leaf_variable(node)
            attributes["kind"] = "leaf"
            if self.saved:
                add_storage(self.tally.leaf_storages, variable)
            attributes.update(tensor_meta(variable))
            attributes["names"] = list(self.names_by_tensor.get(id(variable), ()))
            owner = self.leaf_modules.get(id(variable))
            if owner is not None:
                attributes["module"] = owner
        else:
            if self.module_names is not None:
                self.backward_count += 1
                name = named_module_of(node, self.module_names)
                if name is not None:
                    attributes["module"] = name
                    self.module_node_count += 1
            if lines.USED:
                where = source_of(node)
                if where:
                    attributes.update(self.source_attributes(where))
                    if "source_stack" in attributes:  # the cached list is not the node's own
                        attributes["source_stack"] = list(attributes["source_stack"])
        if self.saved:
            attributes["saved"], storages = summarize_and_count(node)
            self.count_saved_bytes(node, attributes, storages)
        self.queue.append((node_id, next_functions, attributes, {}))
        return node_id

    def count_saved_bytes(self, node: Node, attributes: dict[str, Any], storages: dict[StorageKey, int] | None = None) -> None:
        """``saved_bytes``: storages first held by this node (in id order); ``saved_bytes_shared``: the rest.

        ``storages``: `saved_storages` of ``node``, where the caller has them already.
        """
        attributes["saved_bytes"], attributes["saved_bytes_shared"] = self.tally.count(self.ids[node], saved_storages(node) if storages is None else storages)

    def none_node(self) -> str:
        """A new ``kind="none"`` node, queued so that it keeps its place in id order."""
        none_id = self.new_id()
        self.queue.append((none_id, (), {"kind": "none"}, {}))
        return none_id

    def edge_attributes(self, index: int, target: Node, input_nr: int | None) -> dict[str, Any]:
        if self.edge_metadata and input_nr is not None:
            slots = self.input_meta.get(target)
            if slots is None:
                slots = self.input_meta[target] = _input_meta(target)
            if input_nr < len(slots):
                return {"next_index": index, "input_nr": input_nr, **slots[input_nr]}
        return {"next_index": index, "input_nr": input_nr}


def _forget_cached_conversions(graph: nx.MultiDiGraph) -> None:
    """Drop what NetworkX cached about ``graph`` after its dicts were written directly.

    NetworkX 3.3+ caches backend conversions of a graph (``nx._clear_cache``
    empties that cache); 3.2 caches nothing and has no such function.
    """
    clear = getattr(nx, "_clear_cache", None)
    if clear is not None:
        clear(graph)


def _input_meta(node: Node) -> list[dict[str, Any]]:
    try:
        slots = input_metadata(node)
    except (RuntimeError, AttributeError):  # not every node type exposes it
        return []
    return [tensor_meta(slot) for slot in slots]
