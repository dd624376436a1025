"""Model Explorer: the backward graph in Google's viewer for very large graphs.

Google's Model Explorer (github.com/google-ai-edge/model-explorer;
``pip install gradexport[explorer]``) draws graphs of hundreds of thousands
of nodes: namespaces become nested layers that open one level at a time, it
renders with WebGL, shows every node's attributes and colours nodes by
*node data*. `to_model_explorer` builds a graph of `gradexport.graph`
(or a stream of it, see `gradexport.formats.source`) with Model
Explorer's own classes (`model_explorer.graph_builder`), and
`write_model_explorer` writes the JSON file that Model Explorer opens.

The mapping (one graph ``"backward"`` in a `GraphCollection`):

- Every node becomes a ``GraphNode`` with the same id. Its ``namespace`` is
  its ``module`` path with ``/`` for ``.`` (``encoder/layers/3/self_attn``),
  so modules become the layers Model Explorer folds and unfolds; nodes
  without a module sit at the top level. Its ``label`` is the op
  (``MulBackward0``); a leaf shows its parameter names, a root its name, a
  None slot ``None``, a folded module (`gradexport.collapse`) the
  last part of its path.
- Its ``attrs`` hold every attribute of the graph model's node, one
  ``KeyValue`` each: strings as they are, any other value as JSON text
  (``[4, 4]``, ``-1``, ``["x"]``).
- An edge ``F -> G`` with key ``i`` and ``input_nr`` ``k`` (``F.next_functions[i]
  == (G, k)``) is an ``IncomingEdge`` of G with ``sourceNodeId = F``,
  ``sourceNodeOutputId = "i"`` and ``targetNodeInputId = "k"``. Parallel
  edges (``a + a``, recombined ``unbind``) stay distinct, as their output ids
  differ.
- The other attributes of the edge (``shape``, ``dtype``, ``device`` with
  ``edge_metadata=True``; the ``grad`` record of
  `gradexport.record_gradients`, one key per field, ``grad.norm``...)
  go into F's ``outputsMetadata`` under output id ``"i"``, with
  ``tensor_shape`` (``float32[4, 4]``) where the shape is known: Model
  Explorer can write that on the edges.
- Each module layer gets ``groupNodeAttributes``: its ``module`` path, and
  its ``class`` when the graph has a ``module_classes`` attribute
  (``{path: class name}``). The graph's own attributes (``roots``,
  ``torch_version``...) are the attributes shown when nothing is selected.
- Roots, leaves, special nodes and None slots keep the colours of the other
  diagrams (``style``).

None slots follow ``DiagramOptions.show_none``: ``None`` (default) maps the
``kind="none"`` nodes the graph has (``show_none=True`` when tracing), each
in the layer of the node it belongs to; ``True`` also adds one for every
entry of ``none_slots`` (id ``<node>_none<slot>``); ``False`` leaves them out
(``none_slots`` still lists them in the attributes). The other diagram
options do not apply: Model Explorer lays out top to bottom, roots first.

`gradient_node_data` turns the ``grad`` records into Model Explorer
node data, so that its colour scale shows where gradients vanish or explode.

Model Explorer is imported only when one of these functions runs; without it
they raise `ModelExplorerNotInstalledError`.

Examples:
    >>> import networkx as nx
    >>> g = nx.MultiDiGraph(roots=[{"name": "loss", "node": "n0", "input_nr": None}])
    >>> g.add_node("n0", kind="backward", op="AddBackward0", module="block")
    >>> g.add_node("n1", kind="leaf", op="AccumulateGrad", names=["block.a"], module="block")
    >>> _ = g.add_edge("n0", "n1", key=0, next_index=0, input_nr=0)
    >>> _ = g.add_edge("n0", "n1", key=1, next_index=1, input_nr=0)
    >>> leaf = to_model_explorer(g).graphs[0].nodes[1]
    >>> leaf.label, leaf.namespace
    ('block.a', 'block')
    >>> [(edge.sourceNodeId, edge.sourceNodeOutputId, edge.targetNodeInputId) for edge in leaf.incomingEdges]
    [('n0', '0', '0'), ('n0', '1', '0')]
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from typing import IO, TYPE_CHECKING, Any

from .files import atomic_open
from ..options import DiagramOptions
from .labels import element_id, printable
from .styles import GRAD_BAD_COLOR, GRAD_COLORS, NODE_STYLES, is_bad
from .source import GraphSource, adjacency, graph_attributes

if TYPE_CHECKING:
    from model_explorer.graph_builder import GraphCollection
    from model_explorer.node_data_builder import ModelNodeData

__all__ = [
    "EXTENSION",
    "GRADIENT_METRICS",
    "GRAPH_ID",
    "INSTALL_HINT",
    "ModelExplorerNotInstalledError",
    "generate_model_explorer",
    "gradient_node_data",
    "to_model_explorer",
    "write_model_explorer",
]

#: File extension of the written graph: Model Explorer picks its JSON loader by
#: the last extension, and ``.me`` keeps it apart from gradexport's own ``.json``.
EXTENSION = ".me.json"

#: Id of the one graph in the collection (node data refers to it).
GRAPH_ID = "backward"

INSTALL_HINT = "pip install gradexport[explorer]"

#: What `gradient_node_data` can show, by name.
GRADIENT_METRICS = {
    "log10_norm": "log10 of the largest gradient norm a node received (orders of magnitude)",
    "norm": "the largest gradient norm a node received",
    "non_finite": "1 where a node received a gradient with NaN or infinity, else 0",
}

#: Edge attributes that the incoming edge itself carries.
_EDGE_INDICES = ("next_index", "input_nr")


class ModelExplorerNotInstalledError(ImportError):
    """Model Explorer (the ``ai-edge-model-explorer`` package) is not installed."""


def _model_explorer() -> Any:
    """The ``model_explorer`` package, imported on first use."""
    try:
        import model_explorer
    except ImportError as error:
        raise ModelExplorerNotInstalledError(
            f"the model-explorer format needs Google's Model Explorer: {INSTALL_HINT} "
            f"(it is the package ai-edge-model-explorer; import failed: {error})"
        ) from error
    return model_explorer


_VALUE_ENCODER = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str)


def _text(value: Any) -> str:
    """An attribute value as Model Explorer shows it: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    if type(value) is int:  # most values (indices, counts): the same text, without the encoder
        return str(value)
    return _VALUE_ENCODER.encode(value)


def _namespace(module_path: str) -> str:
    return module_path.replace(".", "/")


def _label(node: Any, attributes: Mapping[str, Any]) -> str:
    kind = attributes.get("kind")
    if kind == "root":
        label = attributes.get("root", "root")
    elif kind == "leaf" and attributes.get("names"):
        label = ", ".join(map(str, attributes["names"]))
    elif kind == "none":
        label = "None"
    elif kind == "module":
        label = str(attributes.get("module", "")).rpartition(".")[2] or "(model)"
    else:
        label = attributes.get("op", node)
    return printable(str(label))


def _node_namespace(attributes: Mapping[str, Any]) -> str:
    path = attributes.get("module")
    if not isinstance(path, str):
        return ""
    if attributes.get("kind") == "module":
        path = path.rpartition(".")[0]  # a folded module sits in its parent's layer
    return _namespace(path)


def _style(builder: Any, attributes: Mapping[str, Any]) -> Any:
    kind = attributes.get("kind")
    name = "special" if kind == "backward" and attributes.get("special") else kind
    if name not in NODE_STYLES or name == "backward":
        return None  # Model Explorer's own look for plain backward nodes
    style = NODE_STYLES[name]
    return builder.GraphNodeStyle(backgroundColor=style.fill, borderColor=style.stroke, hoveredBorderColor=style.stroke)


def _output_metadata(builder: Any, key: Any, data: Mapping[str, Any]) -> Any | None:
    """What travels along one out-edge, beyond its two indices, as a ``MetadataItem``."""
    KeyValue = builder.KeyValue
    attrs = []
    if data.get("next_index", key) != key:  # only a collapsed graph's merged edges differ
        attrs.append(KeyValue("next_index", _text(data["next_index"])))
    for name, value in data.items():
        if name in _EDGE_INDICES:
            continue
        if name == "grad" and isinstance(value, Mapping):
            attrs.extend(KeyValue(f"grad.{field}", _text(item)) for field, item in value.items())
        else:
            attrs.append(KeyValue(name, _text(value)))
    if not attrs:
        return None
    tensor = data if "shape" in data else data.get("grad")
    if isinstance(tensor, Mapping) and isinstance(tensor.get("shape"), (list, tuple)):
        shape = ", ".join(map(str, tensor["shape"]))
        attrs.insert(0, KeyValue("tensor_shape", f"{tensor.get('dtype', '')}[{shape}]"))
    return builder.MetadataItem(id=str(key), attrs=attrs)


def to_model_explorer(
    source: GraphSource,
    options: DiagramOptions | None = None,
    *,
    label: str = "gradexport",
) -> GraphCollection:
    """Build ``source`` with Model Explorer's classes, as the module docstring maps it.

    Args:
        source: A graph of `gradexport.to_networkx` (or
            `gradexport.record_gradients`, `gradexport.collapse`)
            or a stream of it.
        options: Only ``show_none`` applies (see the module docstring).
        label: The collection's label, which Model Explorer shows after the
            file name in its graph selector.

    Returns:
        A ``model_explorer.graph_builder.GraphCollection`` holding one graph
        with id `GRAPH_ID`.

    Raises:
        ModelExplorerNotInstalledError: Model Explorer is not installed.
    """
    builder = _model_explorer().graph_builder
    GraphNode, KeyValue, IncomingEdge = builder.GraphNode, builder.KeyValue, builder.IncomingEdge
    show_none = (options or DiagramOptions()).show_none
    nodes: dict[str, Any] = {}
    none_nodes: list[str] = []
    incoming: dict[str, list[Any]] = {}
    paths: set[str] = set()
    for node, attributes, out in adjacency(source):
        kind = attributes.get("kind")
        if kind == "none" and show_none is False:
            continue
        node_id = node if isinstance(node, str) else element_id(node)
        me_node = GraphNode(
            id=node_id,
            label=_label(node, attributes),
            namespace=_node_namespace(attributes),
            attrs=[KeyValue(name, _text(value)) for name, value in attributes.items()],
            style=_style(builder, attributes),
        )
        if isinstance(attributes.get("module"), str):
            paths.add(attributes["module"])
        if kind == "none":
            none_nodes.append(node_id)
        nodes[node_id] = me_node
        for target, keyed in out.items():
            target_id = target if isinstance(target, str) else element_id(target)
            edges = incoming.get(target_id)
            if edges is None:
                edges = incoming[target_id] = []
            for key, data in keyed.items():
                edges.append(IncomingEdge(node_id, str(key), str(data.get("input_nr"))))
                metadata = _output_metadata(builder, key, data)
                if metadata is not None:
                    me_node.outputsMetadata.append(metadata)
        if show_none:
            taken = {key for keyed in out.values() for key in keyed}
            for slot in attributes.get("none_slots") or ():
                if slot in taken:
                    continue  # the graph has a none node for it
                none_id = f"{node_id}_none{slot}"
                nodes[none_id] = GraphNode(
                    id=none_id,
                    label="None",
                    namespace=me_node.namespace,
                    attrs=[KeyValue("kind", "none")],
                    incomingEdges=[IncomingEdge(node_id, str(slot), "0")],
                    style=_style(builder, {"kind": "none"}),
                )
    for target_id, edges in incoming.items():
        if target_id in nodes:  # not a None slot left out
            nodes[target_id].incomingEdges.extend(edges)
    for none_id in none_nodes:
        edges = nodes[none_id].incomingEdges
        if edges and not nodes[none_id].namespace and edges[0].sourceNodeId in nodes:
            nodes[none_id].namespace = nodes[edges[0].sourceNodeId].namespace
    graph = builder.Graph(
        id=GRAPH_ID,
        nodes=list(nodes.values()),
        groupNodeAttributes=_group_attributes(graph_attributes(source), paths),
    )
    return builder.GraphCollection(label=label, graphs=[graph])


def _group_attributes(graph_attrs: Mapping[str, Any], paths: set[str]) -> dict[str, dict[str, str]]:
    """The attributes of every module layer (and, under ``""``, of the graph)."""
    classes = graph_attrs.get("module_classes")
    classes = classes if isinstance(classes, Mapping) else {}
    groups: dict[str, dict[str, str]] = {"": {name: _text(value) for name, value in graph_attrs.items()}}
    if "" in classes:
        groups[""]["class"] = str(classes[""])
    for path in paths:
        parts = path.split(".") if path else []
        for depth in range(1, len(parts) + 1):
            prefix = ".".join(parts[:depth])
            namespace = _namespace(prefix)
            if namespace not in groups:
                groups[namespace] = {"module": prefix}
                if prefix in classes:
                    groups[namespace]["class"] = str(classes[prefix])
    return groups


def _fields(value: Any) -> dict[str, Any]:
    """A graph_builder object's fields without its ``None`` ones, for the JSON encoder (its ``default``).

    The encoder walks the objects itself, so a node is encoded without first
    being copied into dicts (as `dataclasses.asdict` would, five times slower).
    """
    try:
        fields = vars(value)
    except TypeError:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable") from None
    return {name: item for name, item in fields.items() if item is not None}


_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False, default=_fields)
_BATCH = 1024


def generate_model_explorer(
    source: GraphSource,
    options: DiagramOptions | None = None,
    *,
    label: str = "gradexport",
) -> Iterator[str]:
    """Yield the JSON text Model Explorer loads (one ``GraphCollection``) in chunks, then a newline.

    Takes the arguments of `to_model_explorer`. The text is ASCII, so
    any name survives, and contains no NaN (attribute values are strings).
    """
    collection = to_model_explorer(source, options, label=label)
    (graph,) = collection.graphs
    nodes = graph.nodes
    head = {name: value for name, value in vars(graph).items() if name != "nodes" and value is not None}
    yield f'{{"label":{_ENCODER.encode(collection.label)},"graphSorting":{_ENCODER.encode(collection.graphSorting)},'
    yield f'"graphs":[{_ENCODER.encode(head)[:-1]},"nodes":['
    for start in range(0, len(nodes), _BATCH):
        batch = _ENCODER.encode(nodes[start : start + _BATCH])[1:-1]
        yield batch if start == 0 else "," + batch
    yield "]}]}\n"


def write_model_explorer(
    source: GraphSource,
    path: str | os.PathLike[str] | IO[str],
    options: DiagramOptions | None = None,
    *,
    label: str = "gradexport",
) -> None:
    """Write the Model Explorer JSON of ``source`` to an open text file, or atomically to a path.

    Name the file with `EXTENSION` (``graph.me.json``): Model Explorer
    picks its JSON loader by the last extension.

    Examples:
        >>> import pathlib, tempfile, torch, gradexport
        >>> x = torch.ones(3, requires_grad=True)
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "graph.me.json"
        >>> write_model_explorer(gradexport.to_networkx((x * x).sum(), params={"x": x}), path)
        >>> import json
        >>> [node["label"] for node in json.loads(path.read_text())["graphs"][0]["nodes"]]
        ['output', 'SumBackward0', 'MulBackward0', 'x']
    """
    if hasattr(path, "write"):
        path.writelines(generate_model_explorer(source, options, label=label))
        return
    with atomic_open(path) as file:
        file.writelines(generate_model_explorer(source, options, label=label))


def _received(source: GraphSource) -> dict[str, list[Mapping[str, Any]]]:
    """The ``grad`` records that reached each node (a root: the one it started with)."""
    received: dict[str, list[Mapping[str, Any]]] = {}
    for node, attributes, out in adjacency(source):
        node_id = node if isinstance(node, str) else element_id(node)
        for target, keyed in out.items():
            for data in keyed.values():
                grad = data.get("grad")
                if isinstance(grad, Mapping):
                    target_id = target if isinstance(target, str) else element_id(target)
                    received.setdefault(target_id, []).append(grad)
                    if attributes.get("kind") == "root":
                        received.setdefault(node_id, []).append(grad)
    return received


def _finite_norm(grad: Mapping[str, Any]) -> float | None:
    return None if "norm" not in grad or is_bad(grad) else float(grad["norm"])


def gradient_node_data(source: GraphSource, metric: str = "log10_norm") -> ModelNodeData:
    """Model Explorer node data from the ``grad`` records of `gradexport.record_gradients`.

    A node's value comes from the gradients it received (its incoming
    edges; a root: the gradient it started with), see `GRADIENT_METRICS`.
    Norms are exact per edge; a node that receives several gradients gets
    the largest. Nodes without a finite norm (no gradient flowed, NaN or
    infinity) get no value in the norm metrics, and ``log10_norm`` leaves out
    zero norms too; ``non_finite`` gives every node that received a gradient
    0 or 1. Layers show Model Explorer's aggregate (min, max, sum, mean) of
    their nodes.

    Args:
        source: A graph from `gradexport.record_gradients` (or a stream of one).
        metric: A key of `GRADIENT_METRICS`.

    Returns:
        A ``model_explorer.node_data_builder.ModelNodeData`` for the graph
        `GRAPH_ID`; ``.to_json_string()`` gives its JSON and
        ``.save_to_file(path)`` writes the file Model Explorer's "node data"
        button loads.

    Raises:
        ValueError: an unknown metric, or a graph without gradients.
        ModelExplorerNotInstalledError: Model Explorer is not installed.

    Examples:
        >>> import torch, gradexport
        >>> x = torch.tensor([3.0, 4.0], requires_grad=True)
        >>> graph = gradexport.record_gradients((x * 10).sum(), params={"x": x})
        >>> data = gradient_node_data(graph, "norm").graphsData["backward"]
        >>> {node: result.value for node, result in data.results.items()}
        {'n1': 1.0, 'n0': 1.0, 'n2': 1.414..., 'n3': 14.14...}
    """
    if metric not in GRADIENT_METRICS:
        raise ValueError(f"metric must be one of {', '.join(GRADIENT_METRICS)}, got {metric!r}")
    node_data = _model_explorer().node_data_builder
    received = _received(source)
    if not received:
        raise ValueError(
            "the graph has no gradient records: build it with gradexport.record_gradients to show gradients"
        )
    results: dict[str, Any] = {}
    for node_id, grads in received.items():
        if metric == "non_finite":
            results[node_id] = node_data.NodeDataResult(value=int(any(map(is_bad, grads))))
            continue
        norms = [norm for norm in map(_finite_norm, grads) if norm is not None]
        if not norms:
            continue
        largest = max(norms)
        if metric == "norm":
            results[node_id] = node_data.NodeDataResult(value=largest)
        elif largest > 0:
            results[node_id] = node_data.NodeDataResult(value=math.log10(largest))
    if metric == "non_finite":
        colours = {
            "thresholds": [
                node_data.ThresholdItem(value=0, bgColor=GRAD_COLORS[0]),
                node_data.ThresholdItem(value=1, bgColor=GRAD_BAD_COLOR, textColor="#ffffff"),
            ]
        }
    else:
        last = len(GRAD_COLORS) - 1
        colours = {
            "gradient": [
                node_data.GradientItem(stop=step / last, bgColor=colour, textColor="#ffffff" if step > last // 2 else None)
                for step, colour in enumerate(GRAD_COLORS)
            ]
        }
    graph_data = node_data.GraphNodeData(results=results, name=f"gradient {metric}", **colours)
    return node_data.ModelNodeData(graphsData={GRAPH_ID: graph_data})
