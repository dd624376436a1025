"""from_json checks documents against the graph model's schema; everything to_json writes still loads."""

from __future__ import annotations

import copy
import json as std_json
import math
from typing import Any

import networkx as nx
import pytest
import torch
from examples_budget import budget
from format_fixtures import FORMAT_CASES
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_versions import EDGE_METADATA

import gradexport
from gradexport.analysis.simplify import collapse, hide, module_depth
from gradexport.formats import GraphFormatError, from_json, read_json, to_dot, to_json, to_mermaid


def assert_equal_graphs(left: nx.MultiDiGraph, right: nx.MultiDiGraph) -> None:
    # NaN norms compare unequal to themselves: compare the JSON texts, which spell them NaN.
    assert to_json(left) == to_json(right)
    assert list(left.nodes) == list(right.nodes)
    assert list(left.edges(keys=True)) == list(right.edges(keys=True))


def corpus() -> dict[str, nx.MultiDiGraph]:
    """Every case with every model option, gradients recorded where backward runs, and each folded."""
    graphs: dict[str, nx.MultiDiGraph] = {}
    for name, builder in FORMAT_CASES.items():
        with gradexport.capture_modules():
            case = builder()
        options = {"params": case.params or None, "module": case.module}
        graphs[name] = gradexport.to_networkx(case.roots, show_none=True, show_saved=True, edge_metadata=EDGE_METADATA, **options)
        graph = graphs[name]
        for depth in range(module_depth(graph) + 1) if case.module is not None else ():
            graphs[f"{name} collapsed to {depth}"] = collapse(graph, depth)
        graphs[f"{name} hidden"] = hide(graph, leaves=True, ops=gradexport.constants.VIEW_OPS)
        try:
            graphs[f"{name} gradients"] = gradexport.record_gradients(case.roots, **options)
        except RuntimeError:  # freed buffers, an error node: no backward to record
            pass
    return graphs


CORPUS = corpus()


def test_the_corpus_covers_every_documented_kind_and_record():
    kinds = {data["kind"] for graph in CORPUS.values() for _, data in graph.nodes(data=True)}
    assert kinds == {*gradexport.constants.KINDS, "module"}
    edge_keys = {key for graph in CORPUS.values() for *_, data in graph.edges(data=True) for key in data}
    assert {"grad", "count", "via", *(("shape", "dtype", "device") if EDGE_METADATA else ())} <= edge_keys
    node_keys = {key for graph in CORPUS.values() for _, data in graph.nodes(data=True) for key in data}
    assert {"saved", "module", "names", "special", "none_slots", "ops", "hidden_leaves"} <= node_keys
    assert any(graph.graph.get("collapsed_depth") is not None for graph in CORPUS.values())


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_everything_to_json_writes_loads_back_equal(name):
    graph = CORPUS[name]
    assert_equal_graphs(graph, from_json(to_json(graph)))


def blog_document() -> dict[str, Any]:
    return std_json.loads(to_json(CORPUS["blog_multiply_then_sum"]))


def load(document: Any) -> nx.MultiDiGraph:
    return from_json(std_json.dumps(document))


@pytest.mark.parametrize(
    "text, message",
    [
        ("[]", "the document: expected object, got list"),
        ("null", "the document: expected object, got null"),
        ("42", "the document: expected object, got int"),
        ('"graph"', "the document: expected object, got str"),
        ("{}", "directed: expected true"),
        ('{"directed": true, "multigraph": true}', "graph: missing"),
        ('{"directed": true, "multigraph": false, "graph": {}, "nodes": [], "edges": []}', "multigraph: expected true"),
        ("{", "not JSON: Expecting property name"),
        (b"\xff", "not UTF-8 text: byte 0"),
    ],
)
def test_documents_that_are_not_graphs_are_clear_errors(text, message):
    with pytest.raises(GraphFormatError, match=f"^not a gradexport graph: {message}"):
        from_json(text)


def test_the_error_is_a_value_error_exported_at_the_top():
    assert gradexport.errors.GraphFormatError is GraphFormatError and issubclass(GraphFormatError, ValueError)
    assert gradexport.formats.GraphFormatError is GraphFormatError


def test_ids_one_and_true_are_not_merged_but_refused():
    document = {"directed": True, "multigraph": True, "graph": {}, "edges": [], "nodes": [{"id": 1, "kind": "leaf"}, {"id": True, "kind": "leaf"}]}
    with pytest.raises(GraphFormatError, match=r"nodes\[0\]\.id: expected str, got int$"):
        load(document)
    document["nodes"][0]["id"] = "1"
    with pytest.raises(GraphFormatError, match=r"nodes\[1\]\.id: expected str, got bool$"):
        load(document)
    document["nodes"][1]["id"] = "true"
    assert list(load(document)) == ["1", "true"]


def test_duplicate_ids_unknown_ends_repeated_keys_and_unknown_roots_are_refused():
    document = blog_document()
    document["nodes"].append(dict(document["nodes"][1]))
    with pytest.raises(GraphFormatError, match=r"nodes\[5\]\.id: the id 'n1' is already the id of another node"):
        load(document)
    document = blog_document()
    document["edges"][2]["target"] = "n99"
    with pytest.raises(GraphFormatError, match=r"edges\[2\]\.target: 'n99' is not the id of a node"):
        load(document)
    document = blog_document()
    document["edges"].append(dict(document["edges"][0]))
    with pytest.raises(GraphFormatError, match=r"edges\[4\]\.key: 'n0' -> 'n1' already has an edge with key 0"):
        load(document)
    document = blog_document()
    document["graph"]["roots"][0]["node"] = "n7"
    with pytest.raises(GraphFormatError, match=r"graph\.roots\[0\]\.node: 'n7' is not the id of a node"):
        load(document)


@pytest.mark.parametrize(
    "place, value, message",
    [
        (("nodes", 3, "module"), 5, r"nodes\[3\]\.module: expected str or null, got int"),
        (("nodes", 3, "names"), ["x", 1], r"nodes\[3\]\.names\[1\]: expected str, got int"),
        (("nodes", 3, "shape"), [4, -1], r"nodes\[3\]\.shape\[1\]: expected int >= 0, got int"),
        (("nodes", 1, "kind"), "loss", r"nodes\[1\]\.kind: expected one of backward, leaf, module, none, root, got 'loss'"),
        (("nodes", 1, "special"), "magic", r"nodes\[1\]\.special: expected one of .*checkpoint.*, got 'magic'"),
        (("nodes", 1, "sequence_nr"), True, r"nodes\[1\]\.sequence_nr: expected int, got bool"),
        (("edges", 0, "input_nr"), "0", r"edges\[0\]\.input_nr: expected int >= 0 or null, got str"),
        (("edges", 0, "key"), 0.5, r"edges\[0\]\.key: expected int >= 0, got float"),
        (("edges", 1, "grad"), {"norm": "big"}, r"edges\[1\]\.grad\.norm: expected number, got str"),
        (("edges", 1, "grad"), {"values": [[1.0], ["x"]]}, r"edges\[1\]\.grad\.values: expected number or list of numbers"),
        (("graph", "roots"), [{"name": 1, "node": "n0"}], r"graph\.roots\[0\]\.name: expected str, got int"),
        (("graph", "roots"), [{"name": "loss"}], r"graph\.roots\[0\]\.node: missing"),
        (("graph", "num_nodes"), None, r"graph\.num_nodes: expected int >= 0, got null"),
    ],
)
def test_wrongly_typed_attributes_name_the_field(place, value, message):
    document = blog_document()
    *parents, last = place
    target = document
    for step in parents:
        target = target[step]
    target[last] = value
    with pytest.raises(GraphFormatError, match=f"^not a gradexport graph: {message}"):
        load(document)


def test_a_folded_modules_op_counts_are_checked():
    document = copy.deepcopy(MODULE_BASE)
    index = next(index for index, node in enumerate(document["nodes"]) if node["kind"] == "module")
    document["nodes"][index]["ops"] = {"AddBackward0": "2"}
    with pytest.raises(GraphFormatError, match=rf"nodes\[{index}\]\.ops\['AddBackward0'\]: expected int >= 0, got str$"):
        load(document)


def test_the_missing_kind_is_named():
    document = blog_document()
    del document["nodes"][2]["kind"]
    with pytest.raises(GraphFormatError, match=r"nodes\[2\]\.kind: missing"):
        load(document)


def test_attributes_the_schema_does_not_name_are_kept():
    document = blog_document()
    document["nodes"][0]["note"] = {"any": ["json", 1]}
    document["graph"]["author"] = "me"
    graph = load(document)
    assert graph.nodes["n0"]["note"] == {"any": ["json", 1]} and graph.graph["author"] == "me"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 2**65) | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


def places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += places(item, (*path, index))
    return found


MODULE_BASE = std_json.loads(to_json(CORPUS["multihead_attention collapsed to 1"]))
GRADIENTS = std_json.loads(to_json(CORPUS["blog_unbind_then_add gradients"]))


@settings(max_examples=budget(300), deadline=None)
@given(data=st.data(), base=st.sampled_from([MODULE_BASE, GRADIENTS]), replacement=json_values)
def test_any_change_to_a_document_either_loads_into_a_drawable_graph_or_is_refused(data, base, replacement):
    document = copy.deepcopy(base)
    place = data.draw(st.sampled_from(places(document)))
    if place:
        target = document
        for step in place[:-1]:
            target = target[step]
        target[place[-1]] = replacement
    else:
        document = replacement
    try:
        graph = load(document)
    except GraphFormatError as error:
        assert str(error).startswith("not a gradexport graph: ") and "\n" not in str(error)
        return
    # Whatever loads, the writers draw, and it writes back what was read.
    options = gradexport.options.DiagramOptions(show_saved=True, edge_shapes=True, grad_norms=True)
    to_dot(graph, options)
    to_mermaid(graph, options)
    again = std_json.loads(to_json(graph))
    assert std_json.dumps(again, sort_keys=True) == std_json.dumps(document, sort_keys=True) or any(
        isinstance(value, float) and math.isnan(value) for value in places_values(document)
    )


def places_values(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [item for child in value.values() for item in places_values(child)]
    if isinstance(value, list):
        return [item for child in value for item in places_values(child)]
    return [value]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-8-sig"])
def test_from_json_refuses_bytes_that_read_json_refuses(tmp_path, encoding):
    """The guarantees page: a file that is not UTF-8 is refused; from_json(bytes) decoded UTF-16 and UTF-32 itself."""
    x = torch.ones(2, requires_grad=True)
    path = tmp_path / "graph.json"
    path.write_bytes(to_json(gradexport.to_networkx((x * 2).sum(), params={"x": x})).encode(encoding))
    with pytest.raises(GraphFormatError) as from_file:
        read_json(path)
    with pytest.raises(GraphFormatError) as from_bytes:
        from_json(path.read_bytes())
    assert str(from_file.value).partition(": ")[2] == str(from_bytes.value).partition(": ")[2]
