"""JSON for an autograd graph: NetworkX node-link data, byte-stable, round-tripping.

The document is `networkx.node_link_data` with edges under ``"edges"``:
``{"directed": true, "multigraph": true, "graph": {...}, "nodes": [{"id": "n0",
...}], "edges": [{"source": "n0", "target": "n1", "key": 0, ...}]}``, with every
node, edge and graph attribute of `gradexport.tracing.graph`. Keys are sorted and
separators fixed, so the same graph always gives the same bytes. The text is
ASCII (other characters as ``\\u`` escapes), so a name with any character,
even a lone surrogate, survives a file. Non-finite floats (a NaN gradient
norm) are written as ``NaN``/``Infinity``, as Python's `json` reads them.

`from_json` checks what it reads against that schema and raises
`GraphFormatError`, naming the path to the first field that does not
fit (``nodes[3].module: expected str or null, got int``), for anything else:
a document that is not an object, ids that are not strings or repeat,
edges to unknown ids, repeated edge keys, a root naming an unknown node, and
documented attributes of the wrong type. Attributes the schema does not
name are kept as they are, so a user's own annotations survive a round trip.

Examples:
    >>> import networkx as nx
    >>> g = nx.MultiDiGraph(roots=[{"name": "loss", "node": "n0", "input_nr": 0}])
    >>> g.add_node("n0", kind="backward", op="AddBackward0")
    >>> g.add_node("n1", kind="leaf", names=["a"])
    >>> _ = g.add_edge("n0", "n1", key=0, next_index=0, input_nr=0)
    >>> _ = g.add_edge("n0", "n1", key=1, next_index=1, input_nr=0)
    >>> text = to_json(g)
    >>> text[:60]
    '{"directed":true,"edges":[{"input_nr":0,"key":0,"next_index"'
    >>> back = from_json(text)
    >>> sorted(back.edges(keys=True)) == sorted(g.edges(keys=True)) and back.graph == g.graph
    True
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import networkx as nx

from ..core.collector import gc_paused
from ..core.errors import GraphFormatError, file_error
from ..core.kinds import KINDS, SPECIAL_KINDS
from ..core.source import GraphSource, Source
from .files import TextOutput, text_output

__all__ = ["GraphFormatError", "from_json", "generate_json", "read_json", "to_json", "write_json"]

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def generate_json(graph: GraphSource) -> Iterator[str]:
    """Yield the JSON text of ``graph`` (a graph or a stream, see `gradexport.core.source`) in chunks, then a final newline.

    The text is exactly ``json.dumps(networkx.node_link_data(graph,
    edges="edges"), sort_keys=True, separators=(",", ":"))``, produced a
    batch of node or edge records at a time: ``node_link_data`` would first
    build a second copy of the whole graph (2.4 times the memory at a million
    nodes), and ``json.dumps``'s streaming form runs the pure-Python encoder,
    three times slower than the C encoder. Sorted keys put the edges before
    the graph attributes and the nodes, so a stream's nodes are held until
    its end.
    """
    source = Source.of(graph)
    streamed = source.is_stream  # asked once: this loop runs once per node
    held_nodes: list[tuple[Any, dict[str, Any]]] = []

    def edge_records() -> Iterator[dict[str, Any]]:
        for node, attributes, out in source.records():
            if streamed:
                held_nodes.append((node, attributes))
            for target, keyed in out.items():
                for key, data in keyed.items():
                    yield {**data, "source": node, "target": target, "key": key}

    yield '{"directed":true,"edges":['
    yield from _comma_joined(edge_records())
    yield f'],"graph":{_ENCODER.encode(source.graph_attributes)},"multigraph":true,"nodes":['
    nodes = held_nodes if source.graph is None else source.graph.nodes(data=True)
    yield from _comma_joined({**attributes, "id": node} for node, attributes in nodes)
    yield "]}\n"


_BATCH = 1024


def _comma_joined(records: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The JSON texts of ``records`` joined by commas, in chunks.

    Records are encoded a batch at a time, as a list whose brackets are cut
    off: each call of the encoder sets it up anew, which costs more than
    encoding one small record.
    """
    batch: list[dict[str, Any]] = []
    separator = ""
    for record in records:
        batch.append(record)
        if len(batch) == _BATCH:
            yield separator + _ENCODER.encode(batch)[1:-1]
            separator = ","
            batch = []
    if batch:
        yield separator + _ENCODER.encode(batch)[1:-1]


def to_json(graph: GraphSource) -> str:
    """The JSON text of ``graph``, ending with a newline."""
    return "".join(generate_json(graph))


def write_json(graph: GraphSource, path: TextOutput) -> None:
    """Write the JSON text of ``graph`` to an open text file, or atomically to a path."""
    with text_output(path) as file:
        file.writelines(generate_json(graph))


def from_json(text: str | bytes) -> nx.MultiDiGraph:
    """The graph that `to_json` wrote: same nodes, edges with keys, and attributes.

    Raises:
        GraphFormatError: when ``text`` is not JSON or does not fit the schema
            of `gradexport.tracing.graph`; the message names the field.

    Examples:
        >>> node = '{"id": "n0", "kind": "leaf", "module": 5}'
        >>> from_json('{"directed": true, "multigraph": true, "graph": {}, "nodes": [' + node + '], "edges": []}')
        Traceback (most recent call last):
        ...
        gradexport.errors.GraphFormatError: not a gradexport graph: nodes[0].module: expected str or null, got int
    """
    if isinstance(text, (bytes, bytearray)):  # json.loads would take UTF-16 and UTF-32 too, guessing from the first bytes
        text = _utf8(bytes(text), "not a gradexport graph")
    try:
        data = json.loads(text)
    except ValueError as error:  # JSONDecodeError is a ValueError
        raise GraphFormatError(f"not a gradexport graph: not JSON: {error}") from None
    except RecursionError:  # json's scanner recurses once per level: about 1,000 levels end it
        raise GraphFormatError(f"not a gradexport graph: arrays or objects nested deeper than {MAX_NESTING} levels") from None
    try:
        _check_nesting(data)
        with gc_paused():  # the collector rescans the growing graph: measured 0.29 against 0.21 s on a 10^4 chain
            return _graph_of(data)
    except _Misfit as misfit:
        raise GraphFormatError(f"not a gradexport graph: {misfit.path}: {misfit.problem}") from None


#: Arrays and objects nested deeper than this are refused: a graph's deepest value (a
#: gradient's ``values`` of a tensor with many dimensions) stays far below, and a deeper
#: one could be read but not checked or written back (both recurse once per level).
MAX_NESTING = 100


def _check_nesting(data: Any) -> None:
    """Refuse a document nested deeper than `MAX_NESTING`, naming the path to the first value that is (no recursion)."""
    # Only containers are stacked, each with its parent and key, and a path is spelled only for the misfit:
    # spelling every value's path was a third of from_json (0.30 of 0.87 s on a 10^4-node chain, profiled).
    stack: list[_Nest] = [_Nest(data, 0, None, "")] if isinstance(data, (dict, list)) else []
    while stack:
        nest = stack.pop()
        items = nest.value.items() if isinstance(nest.value, dict) else enumerate(nest.value)
        for key, item in items:
            if nest.depth == MAX_NESTING:
                raise _Misfit(_Nest(item, nest.depth + 1, nest, key).path(), f"nested deeper than {MAX_NESTING} levels")
            if isinstance(item, (dict, list)):
                stack.append(_Nest(item, nest.depth + 1, nest, key))


class _Nest(NamedTuple):
    """A container of a JSON document, where `_check_nesting` found it."""

    value: Any
    depth: int
    parent: _Nest | None
    key: str | int

    def path(self) -> str:
        """``nodes[0].mine[0]``: the keys from the document down to this value."""
        keys: list[str | int] = []
        nest: _Nest | None = self
        while nest is not None and nest.parent is not None:
            keys.append(nest.key)
            nest = nest.parent
        path = ""
        for key in reversed(keys):
            path = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key)
        return path


def _graph_of(data: Any) -> nx.MultiDiGraph:
    _check(data, dict, "")
    for name in ("directed", "multigraph"):
        if data.get(name) is not True:
            raise _Misfit(name, f"expected true (gradexport JSON describes a directed multigraph), got {_show(data.get(name))}")
    unknown = sorted(set(data) - {"directed", "multigraph", "graph", "nodes", "edges"})
    if unknown:
        raise _Misfit(unknown[0], "unknown key; a gradexport graph has directed, multigraph, graph, nodes and edges")
    for name in ("graph", "nodes", "edges"):
        if name not in data:
            raise _Misfit(name, "missing")
    graph: nx.MultiDiGraph = nx.MultiDiGraph()
    _check(data["nodes"], list, "nodes")
    for index, record in enumerate(data["nodes"]):
        path = f"nodes[{index}]"  # an f-string per record is cheap; the checks below run only on a misfit
        if type(record) is not dict:
            _check(record, dict, path)
        node = record.get("id")
        if type(node) is not str:
            _check(node, str, f"{path}.id")
        if node in graph:
            raise _Misfit(f"{path}.id", f"the id {node!r} is already the id of another node")
        if "kind" not in record:
            raise _Misfit(f"{path}.kind", "missing")
        if record["kind"] == "root" and "root" not in record:
            raise _Misfit(f"{path}.root", "missing (a root node names its root)")
        attributes = {name: value for name, value in record.items() if name != "id"}
        _check_fields(attributes, _NODE_FIELDS, path)
        graph.add_node(node, **attributes)
    _check(data["edges"], list, "edges")
    for index, record in enumerate(data["edges"]):
        path = f"edges[{index}]"
        if type(record) is not dict:
            _check(record, dict, path)
        ends = []
        for end in ("source", "target"):
            if type(record.get(end)) is not str:
                _check(record.get(end), str, f"{path}.{end}")
            if record[end] not in graph:
                raise _Misfit(f"{path}.{end}", f"{record[end]!r} is not the id of a node")
            ends.append(record[end])
        key = record.get("key")
        if type(key) is not int or key < 0:
            _check(key, _Index, f"{path}.key")
        if graph.has_edge(ends[0], ends[1], key):
            raise _Misfit(f"{path}.key", f"{ends[0]!r} -> {ends[1]!r} already has an edge with key {key}")
        attributes = {name: value for name, value in record.items() if name not in ("source", "target", "key")}
        _check_fields(attributes, _EDGE_FIELDS, path)
        graph.add_edge(ends[0], ends[1], key=key, **attributes)
    _check(data["graph"], dict, "graph")
    _check_fields(data["graph"], _GRAPH_FIELDS, "graph")
    for index, root in enumerate(data["graph"].get("roots", ())):
        if root["node"] not in graph:
            raise _Misfit(f"graph.roots[{index}].node", f"{root['node']!r} is not the id of a node")
    graph.graph.update(data["graph"])
    return graph


class _Misfit(Exception):
    def __init__(self, path: str, problem: str):
        super().__init__(path, problem)
        self.path, self.problem = path, problem


# A type in the schema: a Python type, a tuple of them (any of), a literal set of
# strings, or _ListOf / _Record. JSON's own names appear in the messages.
class _Index:
    """An int >= 0 (a bool is not an int here)."""


class _Number:
    """An int or a float, NaN and infinities included."""


class _Values:
    """A number, or nested lists of numbers (a gradient's values)."""


class _ListOf:
    def __init__(self, item: Any):
        self.item = item


class _MapOf:
    def __init__(self, value: Any):
        self.value = value


class _Record:
    def __init__(self, fields: dict[str, Any], required: tuple[str, ...] = ()):
        self.fields, self.required = fields, required


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    names: dict[type, str] = {dict: "object", list: "list"}
    return names.get(type(value), type(value).__name__)


def _name(spec: Any) -> str:
    if isinstance(spec, tuple):
        return " or ".join(_name(item) for item in spec)
    if isinstance(spec, frozenset):
        return "one of " + ", ".join(sorted(spec))
    if isinstance(spec, _ListOf):
        return f"a list of {_name(spec.item)}"
    if isinstance(spec, _MapOf):
        return f"an object of {_name(spec.value)}"
    if isinstance(spec, _Record):
        return "object"
    return {type(None): "null", dict: "object", _Index: "int >= 0", _Number: "number", _Values: "number or list of numbers"}.get(
        spec, getattr(spec, "__name__", str(spec))
    )


def _fits(value: Any, spec: Any) -> bool:
    if isinstance(spec, tuple):
        return any(_fits(value, item) for item in spec)
    if isinstance(spec, frozenset):
        return isinstance(value, str) and value in spec
    if spec is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if spec is _Index:
        return _fits(value, int) and value >= 0
    if spec is _Number:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if spec is _Values:
        return _fits(value, _Number) or (isinstance(value, list) and all(_fits(item, _Values) for item in value))
    if spec is type(None):
        return value is None
    if isinstance(spec, (_ListOf, _MapOf, _Record)):
        return isinstance(value, list if isinstance(spec, _ListOf) else dict)
    return isinstance(value, spec)


def _check(value: Any, spec: Any, path: str) -> None:
    if not _fits(value, spec):
        if isinstance(spec, frozenset) and isinstance(value, str):
            raise _Misfit(path, f"expected {_name(spec)}, got {value!r}")
        raise _Misfit(path or "the document", f"expected {_name(spec)}, got {_show(value)}")
    if isinstance(spec, _ListOf):
        for index, item in enumerate(value):
            _check(item, spec.item, f"{path}[{index}]")
    elif isinstance(spec, _MapOf):
        for name, item in value.items():
            _check(item, spec.value, f"{path}[{name!r}]")
    elif isinstance(spec, _Record):
        for name in spec.required:
            if name not in value:
                raise _Misfit(f"{path}.{name}", "missing")
        _check_fields(value, spec.fields, path)


def _check_fields(record: dict[str, Any], fields: dict[str, Any], path: str) -> None:
    compiled = _QUICK_FIELDS.get(id(fields))
    if compiled is None:
        compiled = _QUICK_FIELDS[id(fields)] = (fields, {name: _quick(spec) for name, spec in fields.items()})
    checks = compiled[1]
    for name, value in record.items():
        check = checks.get(name)
        if check is not None and not check(value):
            _check(value, fields[name], f"{path}.{name}")


#: Compiled predicates of `_quick`, by ``id(spec)`` (the specs are module constants), with the spec kept alive.
_QUICK: dict[int, tuple[Any, Any]] = {}
_QUICK_FIELDS: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}


def _quick(spec: Any) -> Any:
    """A predicate that is True where ``value`` fits ``spec`` (`_check` would pass), compiled once per spec.

    False means "look closer": `_check` then runs and names the misfit. The
    walk of `_fits` and `_check` through the specs was 60% of `from_json`.
    """
    found = _QUICK.get(id(spec))
    if found is not None:
        return found[1]
    predicate: Any
    if isinstance(spec, tuple):
        parts = tuple(_quick(item) for item in spec)
        if len(parts) == 2:  # (type, None) mostly: no generator per value
            first, second = parts
            predicate = lambda value: first(value) or second(value)  # noqa: E731
        else:
            predicate = lambda value: any(part(value) for part in parts)  # noqa: E731
    elif isinstance(spec, frozenset):
        predicate = lambda value: type(value) is str and value in spec  # noqa: E731
    elif spec is int:
        predicate = lambda value: type(value) is int  # noqa: E731
    elif spec is _Index:
        predicate = lambda value: type(value) is int and value >= 0  # noqa: E731
    elif spec is _Number:
        predicate = lambda value: type(value) is float or type(value) is int  # noqa: E731
    elif spec is _Values:
        predicate = _is_values
    elif spec is type(None):
        predicate = lambda value: value is None  # noqa: E731
    elif isinstance(spec, _ListOf) and spec.item in (str, _Index):
        # Shapes, slots and names, on most records: their elements' types in one map, without a Python
        # call per element (measured 0.19 against 0.25 s for from_json of a 10^4-node chain).
        types = frozenset({spec.item if spec.item is str else int})
        if spec.item is str:
            predicate = lambda value: type(value) is list and types.issuperset(map(type, value))  # noqa: E731
        else:
            predicate = lambda value: type(value) is list and types.issuperset(map(type, value)) and min(value, default=0) >= 0  # noqa: E731
    elif isinstance(spec, _ListOf):
        item = _quick(spec.item)
        predicate = lambda value: type(value) is list and all(item(entry) for entry in value)  # noqa: E731
    elif isinstance(spec, _MapOf):
        entry = _quick(spec.value)
        predicate = lambda value: type(value) is dict and all(entry(item) for item in value.values())  # noqa: E731
    elif isinstance(spec, _Record):
        fields = {name: _quick(field) for name, field in spec.fields.items()}
        required = spec.required

        def predicate(value: Any) -> bool:
            if type(value) is not dict or any(name not in value for name in required):
                return False
            for name, item in value.items():
                check = fields.get(name)
                if check is not None and not check(item):
                    return False
            return True
    else:
        predicate = lambda value: isinstance(value, spec)  # noqa: E731
    _QUICK[id(spec)] = (spec, predicate)
    return predicate


def _is_values(value: Any) -> bool:
    if type(value) is float or type(value) is int:
        return True
    return type(value) is list and all(_is_values(item) for item in value)


_SHAPE = _ListOf(_Index)
_GRADIENT = _Record(
    {
        "shape": _SHAPE,
        "dtype": str,
        "norm": _Number,
        "min": (_Number, type(None)),
        "max": (_Number, type(None)),
        "has_nan": bool,
        "has_inf": bool,
        "values": _Values,
    }
)
_TENSOR_FIELDS = {"shape": _SHAPE, "dtype": str, "device": str}
_SOURCE_FIELDS = {"source": str, "source_code": str, "source_function": str}
#: A compiled region's backward graph (gradexport.tracing.compiled).
_COMPILED_GRAPH = _Record(
    {
        "ops": _ListOf(
            _Record({"id": str, "op": str, "inputs": _ListOf(str), "seq_nr": int, "forward_op": str, **_SOURCE_FIELDS}, required=("id", "op", "inputs"))
        ),
        "inputs": _ListOf(_Record({"id": str, "role": frozenset({"saved", "gradient"})}, required=("id", "role"))),
        "outputs": _ListOf(_Record({"id": str, "next_index": _Index}, required=("id", "next_index"))),
        "metadata_kept": bool,
    },
    required=("ops", "inputs", "outputs", "metadata_kept"),
)
#: The documented attributes (gradexport.tracing.graph, .flow, .simplify) and their JSON types.
_NODE_FIELDS: dict[str, Any] = {
    "kind": frozenset((*KINDS, "module")),
    **_TENSOR_FIELDS,
    "root": str,
    "op": str,
    "torch_name": str,
    "sequence_nr": int,
    "num_next": _Index,
    "none_slots": _ListOf(_Index),
    "special": frozenset(SPECIAL_KINDS),
    "saved": dict,
    "module": (str, type(None)),
    "names": _ListOf(str),
    "num_nodes": _Index,
    "num_edges": _Index,
    "ops": _MapOf(_Index),
    "hidden_leaves": _Index,
    **_SOURCE_FIELDS,
    "source_stack": _ListOf(str),
    "compiled_graph": _COMPILED_GRAPH,
}
_EDGE_FIELDS: dict[str, Any] = {
    "next_index": _Index,
    "input_nr": (_Index, type(None)),
    **_TENSOR_FIELDS,
    "grad": _GRADIENT,
    "count": _Index,
    "via": _ListOf(str),
}
_GRAPH_FIELDS: dict[str, Any] = {
    "torch_version": str,
    "roots": _ListOf(_Record({"name": str, "node": str, "input_nr": (_Index, type(None))}, required=("name", "node"))),
    "num_nodes": _Index,
    "num_edges": _Index,
    "num_none_slots": _Index,
    "collapsed_depth": _Index,
}


def read_json(path: str | os.PathLike[str], *, caller: str = "read_json") -> nx.MultiDiGraph:
    """Read a graph from a file written by `write_json` (``caller`` names the function that asked, in messages).

    Raises:
        MissingFileError: there is no file at ``path``.
        UnreadableFileError: it cannot be read (a folder, no permission).
        GraphFormatError: the file is not UTF-8, not JSON, or not a graph
            (see `from_json`); the message names the file and the place.
    """
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as error:
        raise file_error(error, path, caller) from error
    return from_json(_utf8(data, os.fspath(path)))


def _utf8(data: bytes, whose: str) -> str:
    """``data`` decoded as UTF-8, the only encoding a gradexport graph is written in; a BOM stays, for `json` to refuse."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise GraphFormatError(f"{whose}: not UTF-8 text: byte {error.start} ({error.reason})") from None
