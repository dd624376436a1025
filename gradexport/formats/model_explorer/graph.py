"""The backward graph as Model Explorer's own ``GraphCollection``, and the JSON file it opens (see `gradexport.formats.model_explorer`).

Both come from one mapping of the graph (`_collect`): `to_model_explorer`
makes Model Explorer's objects of it, and `generate_model_explorer` writes
the JSON those objects encode to, field by field, without making them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ...core.errors import ModelExplorerNotInstalledError
from ...core.options import DiagramOptions
from ...core.reports import MODEL_LABEL
from ...core.source import GraphSource, adjacency, graph_attributes
from ..files import TextOutput, text_output
from ..labels import MAX_LINE_CHARS, element_id, node_class, printable, shorten
from ..styles import STYLES, NodeStyle

if TYPE_CHECKING:
    from model_explorer.graph_builder import GraphCollection

__all__ = [
    "EXTENSION",
    "GRAPH_ID",
    "INSTALL_HINT",
    "generate_model_explorer",
    "model_explorer_package",
    "node_namespace",
    "to_model_explorer",
    "write_model_explorer",
]


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
            f"the model-explorer format needs Google's Model Explorer: {INSTALL_HINT} (it is the package ai-edge-model-explorer; import failed: {error})"
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
        label = str(attributes.get("module", "")).rpartition(".")[2] or MODEL_LABEL
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


def _style(attributes: Mapping[str, Any]) -> NodeStyle | None:
    name = node_class(attributes)
    if name == "backward":
        return None  # Model Explorer's own look for plain backward nodes
    return STYLES[name]


#: One ``MetadataItem``: its output id and its attributes, ``(key, text)`` each.
_Metadata = tuple[str, list[tuple[str, str]]]


def _output_metadata(key: Any, data: Mapping[str, Any]) -> _Metadata | None:
    """What travels along one out-edge, beyond its two indices: a ``MetadataItem``'s fields."""
    attrs = []
    if data.get("next_index", key) != key:  # only a collapsed graph's merged edges differ
        attrs.append(("next_index", _text(data["next_index"])))
    for name, value in data.items():
        if name in _EDGE_INDICES:
            continue
        if name == "grad" and isinstance(value, Mapping):
            attrs.extend((f"grad.{field}", _text(item)) for field, item in value.items())
        else:
            attrs.append((name, _text(value)))
    if not attrs:
        return None
    tensor = data if "shape" in data else data.get("grad")
    if isinstance(tensor, Mapping) and isinstance(tensor.get("shape"), (list, tuple)):
        shape = ", ".join(map(str, tensor["shape"]))
        attrs.insert(0, ("tensor_shape", f"{tensor.get('dtype', '')}[{shape}]"))
    return str(key), attrs


class _Node:
    """The fields of one ``GraphNode``, which `to_model_explorer` makes an object of and `generate_model_explorer` writes."""

    __slots__ = ("attributes", "id", "incoming", "label", "namespace", "outputs", "style")

    def __init__(self, node_id: str, label: str, namespace: str, attributes: Mapping[str, Any], style: NodeStyle | None):
        self.id, self.label, self.namespace, self.style = node_id, label, namespace, style
        #: The graph model's attributes, one ``KeyValue`` each (see `_text`).
        self.attributes = attributes
        #: ``(sourceNodeId, sourceNodeOutputId, targetNodeInputId)`` of each ``IncomingEdge``.
        self.incoming: list[tuple[str, str, str]] = []
        self.outputs: list[_Metadata] = []


#: The attributes of a None slot's node that the graph does not have (``show_none=True`` on a graph traced without).
_NONE_ATTRIBUTES = {"kind": "none"}


def _collect(source: GraphSource, options: DiagramOptions | None) -> tuple[list[_Node], dict[str, dict[str, str]]]:
    """The nodes of ``source`` as the module docstring maps them, and the ``groupNodeAttributes``."""
    show_none = (options or DiagramOptions()).show_none
    nodes: dict[str, _Node] = {}
    none_nodes: list[str] = []
    incoming: dict[str, list[tuple[str, str, str]]] = {}
    paths: dict[str, None] = {}  # in the order the walk meets them: a set's order follows the hash seed
    for node, attributes, out in adjacency(source):
        kind = attributes.get("kind")
        if kind == "none" and show_none is False:
            continue
        node_id = node if isinstance(node, str) else element_id(node)
        record = _Node(node_id, _label(node, attributes), node_namespace(attributes), attributes, _style(attributes))
        if isinstance(attributes.get("module"), str):
            paths[attributes["module"]] = None
        if kind == "none":
            none_nodes.append(node_id)
        nodes[node_id] = record
        for target, keyed in out.items():
            target_id = target if isinstance(target, str) else element_id(target)
            edges = incoming.get(target_id)
            if edges is None:
                edges = incoming[target_id] = []
            for key, data in keyed.items():
                edges.append((node_id, str(key), str(data.get("input_nr"))))
                metadata = _output_metadata(key, data)
                if metadata is not None:
                    record.outputs.append(metadata)
        if show_none:
            taken = {key for keyed in out.values() for key in keyed}
            for slot in attributes.get("none_slots") or ():
                if slot in taken:
                    continue  # the graph has a none node for it
                none_id = f"{node_id}_none{slot}"
                none_node = nodes[none_id] = _Node(none_id, "None", record.namespace, _NONE_ATTRIBUTES, _style(_NONE_ATTRIBUTES))
                none_node.incoming.append((node_id, str(slot), "0"))
    for target_id, edges in incoming.items():
        if target_id in nodes:  # not a None slot left out
            nodes[target_id].incoming.extend(edges)
    for none_id in none_nodes:
        edges = nodes[none_id].incoming
        if edges and not nodes[none_id].namespace and edges[0][0] in nodes:
            nodes[none_id].namespace = nodes[edges[0][0]].namespace
    return list(nodes.values()), _group_attributes(graph_attributes(source), paths)


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
    KeyValue = builder.KeyValue
    nodes, groups = _collect(source, options)
    graph = builder.Graph(
        id=graph_id,
        nodes=[
            builder.GraphNode(
                id=node.id,
                label=node.label,
                namespace=node.namespace,
                attrs=[KeyValue(name, _text(value)) for name, value in node.attributes.items()],
                incomingEdges=[builder.IncomingEdge(*edge) for edge in node.incoming],
                outputsMetadata=[builder.MetadataItem(id=output, attrs=[KeyValue(*pair) for pair in attrs]) for output, attrs in node.outputs],
                style=None
                if node.style is None
                else builder.GraphNodeStyle(backgroundColor=node.style.fill, borderColor=node.style.stroke, hoveredBorderColor=node.style.stroke),
            )
            for node in nodes
        ],
        groupNodeAttributes=groups,
    )
    return builder.GraphCollection(label=label, graphs=[graph])


def _group_attributes(graph_attrs: Mapping[str, Any], paths: Iterable[str]) -> dict[str, dict[str, str]]:
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


_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)

_BATCH = 1024


def _node_json(node: _Node) -> str:
    """The JSON of ``node``'s ``GraphNode``, as the JSON encoder writes the object's fields without its ``None`` ones.

    Written here rather than building Model Explorer's objects and encoding
    them: measured 91 ms against 401 ms for a 10^4-node chain.
    """
    text = _STRING
    edges = ",".join(
        [
            f'{{"sourceNodeId":{text(source)},"sourceNodeOutputId":{text(output)},"targetNodeInputId":{text(input_id)}}}'
            for source, output, input_id in node.incoming
        ]
    )
    outputs = ",".join([f'{{"id":{text(output)},"attrs":[{_key_values_json(items)}]}}' for output, items in node.outputs])
    style = (
        ""
        if node.style is None
        else (f',"style":{{"backgroundColor":{text(node.style.fill)},"borderColor":{text(node.style.stroke)},"hoveredBorderColor":{text(node.style.stroke)}}}')
    )
    attrs = _key_values_json([(name, _text(value)) for name, value in node.attributes.items()])
    return (
        f'{{"id":{text(node.id)},"label":{text(node.label)},"namespace":{text(node.namespace)},"subgraphIds":[],'
        f'"attrs":[{attrs}],"incomingEdges":[{edges}],"outputsMetadata":[{outputs}],"inputsMetadata":[]{style}}}'
    )


def _key_values_json(items: list[tuple[str, str]]) -> str:
    """``KeyValue`` objects of ``items``, as JSON, without the brackets."""
    text = _STRING
    return ",".join([f'{{"key":{text(key)},"value":{text(value)}}}' for key, value in items])


#: A string as `_ENCODER` writes it.
_STRING = json.encoder.encode_basestring_ascii


def generate_model_explorer(
    source: GraphSource,
    options: DiagramOptions | None = None,
    *,
    label: str = "gradexport",
    graph_id: str = GRAPH_ID,
) -> Iterator[str]:
    """Yield the JSON text Model Explorer loads (one ``GraphCollection``) in chunks, then a newline.

    Takes the arguments of `to_model_explorer`, and writes what it builds.
    The text is ASCII, so any name survives, and contains no NaN (attribute
    values are strings).
    """
    sorting = model_explorer_package().graph_builder.GraphCollection.graphSorting  # without it, to_model_explorer's error
    nodes, groups = _collect(source, options)
    yield f'{{"label":{_ENCODER.encode(label)},"graphSorting":{_ENCODER.encode(sorting)},'
    yield f'"graphs":[{_ENCODER.encode({"id": graph_id, "groupNodeAttributes": groups})[:-1]},"nodes":['
    for start in range(0, len(nodes), _BATCH):
        batch = ",".join([_node_json(node) for node in nodes[start : start + _BATCH]])
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
