"""Model Explorer: the backward graph in Google's viewer for very large graphs.

Google's Model Explorer (github.com/google-ai-edge/model-explorer;
``pip install gradexport[explorer]``) draws graphs of hundreds of thousands
of nodes: namespaces become nested layers that open one level at a time, it
renders with WebGL, shows every node's attributes and colours nodes by
*node data*. `to_model_explorer` builds a graph of `gradexport.tracing.graph`
(or a stream of it, see `gradexport.core.source`) with Model
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
node data, so that its colour scale shows where gradients vanish or explode;
`mark_node_data` does the same for the marks of `gradexport.tracing.graph`
(``nonfinite``, ``saved_bytes``, ``exec_order``, ``diff``, see
`MARK_METRICS`), and `node_data_for` gives every metric a graph
has. Marked nodes (a non-finite origin, a diff's added, removed and changed
nodes) also keep the colours of the other diagrams in their ``style``.
`diff_panes` turns a `gradexport.diff` into the two graphs that
Model Explorer puts side by side (see `gradexport.frontends.model_explorer_server.serve_model_explorer_diff`).

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
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..core.errors import ArgumentValueError, ModelExplorerNotInstalledError
from ..core.options import DiagramOptions
from ..core.source import GraphSource, adjacency, graph_attributes
from .files import TextOutput, text_output
from .labels import element_id, node_class, printable
from .styles import GRAD_BAD_COLOR, GRAD_COLORS, MARK_STYLES, STYLES, is_bad

if TYPE_CHECKING:
    import networkx as nx
    from model_explorer.graph_builder import GraphCollection
    from model_explorer.node_data_builder import ModelNodeData

__all__ = [
    "DIFF_VALUES",
    "EXTENSION",
    "GRADIENT_METRICS",
    "GRAPH_ID",
    "INSTALL_HINT",
    "MARK_METRICS",
    "NONFINITE_VALUES",
    "ModelExplorerNotInstalledError",
    "diff_panes",
    "generate_model_explorer",
    "gradient_node_data",
    "mark_node_data",
    "node_data_for",
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

#: Values of the ``nonfinite`` metric: where a NaN or Inf gradient started is the strongest.
NONFINITE_VALUES = {"finite": 0, "reached": 1, "origin": 2}

#: Values of the ``diff`` metric, one per `gradexport.analysis.diff.DIFF_STATES`.
DIFF_VALUES = {"same": 0, "changed": 1, "added": 2, "removed": 3}

#: What `mark_node_data` can show, by name (each needs the node attribute of the same name).
MARK_METRICS = {
    "exec_order": "the position in which the engine ran the node (1 first); roots and nodes that did not run have none",
    "saved_bytes": "bytes of the storages the node's saved tensors are first to keep alive "
    "(each storage counted once, so a layer's sum is its memory)",
    "saved_bytes_held": "bytes of every storage the node's saved tensors keep alive, "
    "shared ones included (saved_bytes + saved_bytes_shared)",
    "nonfinite": "2 where a NaN or Inf gradient started (origin), 1 where one reached, 0 elsewhere (NONFINITE_VALUES)",
    "diff": "0 same, 1 changed, 2 added, 3 removed (DIFF_VALUES)",
}

#: The node attribute each mark metric reads.
_MARK_ATTRIBUTE = {"saved_bytes_held": "saved_bytes"}

#: Edge attributes that the incoming edge itself carries.
_EDGE_INDICES = ("next_index", "input_nr")


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
    name = node_class(attributes)
    if name == "backward":
        return None  # Model Explorer's own look for plain backward nodes
    style = STYLES[name]
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
    graph_id: str = GRAPH_ID,
) -> GraphCollection:
    """Build ``source`` with Model Explorer's classes, as the module docstring maps it.

    Args:
        source: A graph of `gradexport.to_networkx` (or
            `gradexport.record_gradients`, `gradexport.collapse`)
            or a stream of it.
        options: Only ``show_none`` applies (see the module docstring).
        label: The collection's label, which Model Explorer shows after the
            file name in its graph selector.
        graph_id: The graph's id (node data refers to it; graphs opened
            together need different ids).

    Returns:
        A ``model_explorer.graph_builder.GraphCollection`` holding one graph
        with id ``graph_id``.

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
        id=graph_id,
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
    graph_id: str = GRAPH_ID,
) -> Iterator[str]:
    """Yield the JSON text Model Explorer loads (one ``GraphCollection``) in chunks, then a newline.

    Takes the arguments of `to_model_explorer`. The text is ASCII, so
    any name survives, and contains no NaN (attribute values are strings).
    """
    collection = to_model_explorer(source, options, label=label, graph_id=graph_id)
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
    path: TextOutput,
    options: DiagramOptions | None = None,
    *,
    label: str = "gradexport",
    graph_id: str = GRAPH_ID,
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
    chunks = generate_model_explorer(source, options, label=label, graph_id=graph_id)
    with text_output(path) as file:
        file.writelines(chunks)


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


def _colour_scale(node_data: Any) -> dict[str, list[Any]]:
    """The blue scale of the gradient edges, smallest value to largest."""
    last = len(GRAD_COLORS) - 1
    return {
        "gradient": [
            node_data.GradientItem(stop=step / last, bgColor=colour, textColor="#ffffff" if step > last // 2 else None)
            for step, colour in enumerate(GRAD_COLORS)
        ]
    }


def _classes(node_data: Any, colours: Mapping[int, tuple[str, str | None]]) -> dict[str, list[Any]]:
    """One colour per value (``{value: (background, text)}``), as thresholds."""
    return {
        "thresholds": [
            node_data.ThresholdItem(value=value, bgColor=background, textColor=text)
            for value, (background, text) in sorted(colours.items())
        ]
    }


def _model_node_data(node_data: Any, graph_id: str, name: str, results: Mapping[str, float], colours: Mapping[str, Any]) -> ModelNodeData:
    graph_data = node_data.GraphNodeData(
        results={node: node_data.NodeDataResult(value=value) for node, value in results.items()}, name=name, **colours
    )
    return node_data.ModelNodeData(graphsData={graph_id: graph_data})


def gradient_node_data(source: GraphSource, metric: str = "log10_norm", *, graph_id: str = GRAPH_ID) -> ModelNodeData:
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
        graph_id: The id of the graph in Model Explorer (as written).

    Returns:
        A ``model_explorer.node_data_builder.ModelNodeData`` for the graph
        ``graph_id``; ``.to_json_string()`` gives its JSON and
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
        raise ArgumentValueError(f"metric must be one of {', '.join(GRADIENT_METRICS)}, got {metric!r}")
    _model_explorer()
    received = _received(source)
    if not received:
        raise ArgumentValueError(
            "the graph has no gradient records: build it with gradexport.record_gradients to show gradients"
        )
    return _gradient_node_data(received, metric, graph_id)


def _gradient_node_data(received: Mapping[str, list[Mapping[str, Any]]], metric: str, graph_id: str) -> ModelNodeData:
    node_data = _model_explorer().node_data_builder
    results: dict[str, float] = {}
    for node_id, grads in received.items():
        if metric == "non_finite":
            results[node_id] = int(any(map(is_bad, grads)))
            continue
        norms = [norm for norm in map(_finite_norm, grads) if norm is not None]
        if not norms:
            continue
        largest = max(norms)
        if metric == "norm":
            results[node_id] = largest
        elif largest > 0:
            results[node_id] = math.log10(largest)
    if metric == "non_finite":
        colours = _classes(node_data, {0: (GRAD_COLORS[0], None), 1: (GRAD_BAD_COLOR, "#ffffff")})
    else:
        colours = _colour_scale(node_data)
    return _model_node_data(node_data, graph_id, f"gradient {metric}", results, colours)


def _mark_value(metric: str, attributes: Mapping[str, Any]) -> float | None:
    """A node's value in a mark metric, ``None`` for none."""
    if metric == "nonfinite":
        return NONFINITE_VALUES.get(attributes.get("nonfinite", "finite"))
    if metric == "diff":
        return DIFF_VALUES.get(attributes.get("diff"))  # type: ignore[arg-type]
    value = attributes.get(_MARK_ATTRIBUTE.get(metric, metric))
    if type(value) is not int:
        return None
    if metric == "saved_bytes_held":
        shared = attributes.get("saved_bytes_shared", 0)
        value += shared if type(shared) is int else 0
    return value


def _mark_colours(node_data: Any, metric: str) -> dict[str, list[Any]]:
    if metric == "nonfinite":
        origin = MARK_STYLES["nonfinite"]
        return _classes(node_data, {0: (GRAD_COLORS[0], None), 1: (origin.fill, None), 2: (origin.stroke, "#ffffff")})
    if metric == "diff":
        same = STYLES["backward"]
        return _classes(
            node_data,
            {DIFF_VALUES[state]: (same.fill if state == "same" else MARK_STYLES[state].fill, None) for state in DIFF_VALUES},
        )
    return _colour_scale(node_data)


def mark_node_data(source: GraphSource, metric: str, *, graph_id: str = GRAPH_ID) -> ModelNodeData:
    """Model Explorer node data from a mark of the graph model (see `MARK_METRICS`).

    ``nonfinite`` (a `gradexport.find_nonfinite` report's ``.graph``)
    gives every node a value of `NONFINITE_VALUES`, shown in the reds
    of the other diagrams, darkest where the NaN or Inf started. ``diff`` (a
    `gradexport.diff` graph, or a pane of `diff_panes`) gives
    every node a value of `DIFF_VALUES`, in the colours of the other
    diagrams: grey same, orange changed, green added, red removed.
    ``saved_bytes``, ``saved_bytes_held`` (a graph traced with ``saved=True``)
    and ``exec_order`` (from `gradexport.record_gradients`,
    `gradexport.replay` or `gradexport.find_nonfinite`) colour
    nodes on the blue scale of the gradients, smallest to largest. Model
    Explorer shows each layer's aggregate: the sum of ``saved_bytes`` is the
    layer's share of the saved memory.

    Args:
        source: A graph (or a stream of one) whose nodes carry the metric's attribute.
        metric: A key of `MARK_METRICS`.
        graph_id: The id of the graph in Model Explorer (as written).

    Returns:
        A ``model_explorer.node_data_builder.ModelNodeData``, as `gradient_node_data`'s.

    Raises:
        ValueError: an unknown metric, or a graph without the mark.
        ModelExplorerNotInstalledError: Model Explorer is not installed.

    Examples:
        >>> import torch, gradexport
        >>> x = torch.tensor([0.0, 4.0], requires_grad=True)
        >>> report = gradexport.find_nonfinite(x.sqrt().sum(), params={"x": x})
        >>> data = mark_node_data(report.graph, "nonfinite").graphsData["backward"]
        >>> {report.graph.nodes[node]["op"]: result.value for node, result in data.results.items() if node != "n0"}
        {'SumBackward0': 0, 'SqrtBackward0': 2, 'AccumulateGrad': 1}
    """
    if metric not in MARK_METRICS:
        raise ArgumentValueError(f"metric must be one of {', '.join(MARK_METRICS)}, got {metric!r}")
    node_data = _model_explorer().node_data_builder
    attribute = _MARK_ATTRIBUTE.get(metric, metric)
    results: dict[str, float] = {}
    marked = False
    for node, attributes, _ in adjacency(source):
        marked = marked or attribute in attributes
        value = _mark_value(metric, attributes)
        if value is not None:
            results[node if isinstance(node, str) else element_id(node)] = value
    if not marked:
        raise ArgumentValueError(f"no node has the attribute {attribute!r}: {MARK_METRICS[metric]} needs it ({_MAKERS[metric]})")
    return _model_node_data(node_data, graph_id, metric, results, _mark_colours(node_data, metric))


#: What puts each mark on a graph, for the error of a graph without it.
_MAKERS = {
    "exec_order": "gradexport.record_gradients, replay or find_nonfinite",
    "saved_bytes": "trace with saved=True",
    "saved_bytes_held": "trace with saved=True",
    "nonfinite": "the .graph of gradexport.find_nonfinite's report",
    "diff": "gradexport.diff",
}

#: The order `node_data_for` adds metrics in: Model Explorer shows the last one added.
_SHOWN_LAST = ("exec_order", "saved_bytes_held", "saved_bytes", "nonfinite", "diff")


def node_data_for(graph: nx.MultiDiGraph, *, graph_id: str = GRAPH_ID) -> dict[str, ModelNodeData]:
    """Every node data that ``graph`` can give, by name, the most telling last.

    The gradient metrics (``gradient log10_norm``...) when it has ``grad``
    records, and each mark metric whose attribute some node has. Model
    Explorer colours by the last node data added: the ``diff``, else the
    ``nonfinite`` marks, else ``saved_bytes``, else ``gradient log10_norm``
    (``exec_order`` only when it is all there is).

    Raises:
        ModelExplorerNotInstalledError: Model Explorer is not installed.

    Examples:
        >>> import torch, gradexport
        >>> x = torch.ones(3, requires_grad=True)
        >>> list(node_data_for(gradexport.record_gradients((x * 2).sum())))
        ['exec_order', 'gradient non_finite', 'gradient norm', 'gradient log10_norm']
    """
    found: dict[str, ModelNodeData] = {}
    present = {name for _, attributes in graph.nodes(data=True) for name in attributes}
    metrics = [metric for metric in _SHOWN_LAST if _MARK_ATTRIBUTE.get(metric, metric) in present]
    if metrics[:1] == ["exec_order"]:
        found["exec_order"] = mark_node_data(graph, "exec_order", graph_id=graph_id)
        metrics = metrics[1:]
    received = _received(graph)
    if received:
        for metric in reversed(GRADIENT_METRICS):
            found[f"gradient {metric}"] = _gradient_node_data(received, metric, graph_id)
    for metric in metrics:
        found[metric] = mark_node_data(graph, metric, graph_id=graph_id)
    return found


def diff_panes(merged: nx.MultiDiGraph, a: nx.MultiDiGraph, b: nx.MultiDiGraph) -> tuple[nx.MultiDiGraph, nx.MultiDiGraph]:
    """The two sides of ``merged = gradexport.diff(a, b)``, for two panes that sync by node id.

    Each pane is the graph itself (``a`` or ``b``: its own attributes,
    edges and graph attributes) with its nodes renamed to the ids of
    ``merged``, so a node and its counterpart have the same id in both panes
    (Model Explorer's "match node id" navigation follows it), and with the
    diff's marks copied onto it: ``diff``, ``changes``, ``a_id``, ``b_id``,
    ``replaces``/``replaced_by`` on nodes, ``diff``/``changes`` on edges.
    Pane ``a`` holds the same, changed and removed nodes; pane ``b`` the
    same, changed and added ones. The graph attribute ``diff`` holds the
    counts; ``roots`` and ``nonfinite`` name the renamed ids.

    Args:
        merged: The result of `gradexport.diff` ``(a, b)``.
        a: The graph before, as given to it.
        b: The graph after.

    Raises:
        ValueError: ``merged`` is not the diff of these graphs.

    Examples:
        >>> import torch, gradexport
        >>> x = torch.ones(3, requires_grad=True)
        >>> a, b = gradexport.to_networkx((x * 2).sum()), gradexport.to_networkx((x * 2).exp().sum())
        >>> pane_a, pane_b = diff_panes(gradexport.diff(a, b), a, b)
        >>> [(node, data["diff"]) for node, data in pane_b.nodes(data=True)]
        [('n0', 'same'), ('n1', 'same'), ('n2', 'added'), ('n3', 'same'), ('n4', 'same')]
        >>> [(node, data["diff"]) for node, data in pane_a.nodes(data=True)]
        [('n0', 'same'), ('n1', 'same'), ('n3', 'same'), ('n4', 'same')]
    """
    return _pane(merged, a, "a_id", "added"), _pane(merged, b, "b_id", "removed")


_NODE_MARKS = ("diff", "changes", "a_id", "b_id", "replaces", "replaced_by")
_EDGE_MARKS = ("diff", "changes")


def _pane(merged: nx.MultiDiGraph, side: nx.MultiDiGraph, id_key: str, other_only: str) -> nx.MultiDiGraph:
    import networkx as nx

    mismatch = f"the diff does not match the graph given as {id_key[0]}: diff_panes takes diff(a, b), a, b"
    renamed = {data[id_key]: node for node, data in merged.nodes(data=True) if id_key in data}
    if set(renamed) != set(side.nodes):
        raise ArgumentValueError(mismatch)
    index = 0 if id_key == "a_id" else 1
    pane: nx.MultiDiGraph = nx.MultiDiGraph()
    for node, data in side.nodes(data=True):
        marks = merged.nodes[renamed[node]]
        changes = marks.get("changes") or {}
        if any(data.get(name) != (changes[name][index] if name in changes else marks.get(name)) for name in ("kind", "op")):
            raise ArgumentValueError(mismatch)
        pane.add_node(renamed[node], **{**data, **{name: marks[name] for name in _NODE_MARKS if name in marks}})
    for source, target, key, data in side.edges(keys=True, data=True):
        edge = (renamed[source], renamed[target], key)
        marks = merged.edges[edge] if merged.has_edge(*edge) else {}
        if marks.get("diff") == other_only:
            raise ArgumentValueError(mismatch)
        pane.add_edge(*edge, **{**data, **{name: marks[name] for name in _EDGE_MARKS if name in marks}})
    pane.graph.update(side.graph)
    if isinstance(side.graph.get("roots"), list):
        pane.graph["roots"] = [dict(entry, node=renamed.get(entry.get("node"), entry.get("node"))) for entry in side.graph["roots"]]
    if isinstance(side.graph.get("nonfinite"), list):
        pane.graph["nonfinite"] = [renamed.get(node, node) for node in side.graph["nonfinite"]]
    pane.graph["diff"] = merged.graph.get("diff")
    return pane
