"""The backward graph as Model Explorer's own ``GraphCollection``, and the JSON file it opens (see `gradexport.formats.model_explorer`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ...core.errors import ModelExplorerNotInstalledError
from ...core.options import DiagramOptions
from ...core.source import GraphSource, adjacency, graph_attributes
from ..files import TextOutput, text_output
from ..labels import MAX_LINE_CHARS, element_id, node_class, printable, shorten
from ..styles import STYLES

if TYPE_CHECKING:
    from model_explorer.graph_builder import GraphCollection

__all__ = ["EXTENSION", "GRAPH_ID", "INSTALL_HINT", "generate_model_explorer", "model_explorer_package", "node_namespace", "to_model_explorer", "write_model_explorer"]


#: File extension of the written graph: Model Explorer picks its JSON loader by
#: the last extension, and ``.me`` keeps it apart from gradexport's own ``.json``.
EXTENSION = ".me.json"

#: Id of the one graph in the collection (node data refers to it).
GRAPH_ID = "backward"

INSTALL_HINT = "pip install gradexport[explorer]"

#: Edge attributes that the incoming edge itself carries.
_EDGE_INDICES = ("next_index", "input_nr")

def model_explorer_package() -> Any:
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
    """Model Explorer's layer path of a module: ``block/0``; a name part too long to draw is cut, with a digest to keep it apart."""
    return "/".join(_layer_name(part) for part in module_path.split(".")) if module_path else ""


def _layer_name(part: str) -> str:
    if len(part) <= MAX_LINE_CHARS:
        return part
    text = printable(part)
    # Model Explorer draws a layer's name whole: 20,000 characters drew nothing, 100,000 hung the page.
    digest = hashlib.blake2b(part.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    return text[: MAX_LINE_CHARS - len(digest) - 2] + "…~" + digest

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
    return shorten(printable(str(label)))  # the whole name stays in the node's attributes

def node_namespace(attributes: Mapping[str, Any]) -> str:
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
    builder = model_explorer_package().graph_builder
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
            namespace=node_namespace(attributes),
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
