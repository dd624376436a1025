"""JSON: node-link data that reads back to an equal graph, with stable bytes."""

from __future__ import annotations

import json as std_json

import networkx as nx
import pytest
import torch
from examples_budget import budget
from format_fixtures import FORMAT_CASES, case_graph, named_graph, names
from hypothesis import given, settings
from nx_compat import node_link_data

import gradexport
from gradexport.formats import json


def assert_equal_graphs(left: nx.MultiDiGraph, right: nx.MultiDiGraph) -> None:
    assert isinstance(right, nx.MultiDiGraph)
    assert list(left.nodes(data=True)) == list(right.nodes(data=True))
    assert list(left.edges(keys=True, data=True)) == list(right.edges(keys=True, data=True))
    assert left.graph == right.graph


@pytest.mark.parametrize("name", sorted(FORMAT_CASES))
def test_every_case_round_trips_to_an_equal_graph(name):
    graph = case_graph(name, show_none=True, show_saved=True)
    text = json.to_json(graph)
    assert_equal_graphs(graph, json.from_json(text))
    # Streamed record by record, yet the very bytes of json.dumps(networkx.node_link_data(...)).
    reference = std_json.dumps(node_link_data(graph), sort_keys=True, separators=(",", ":"))
    assert text == reference + "\n"


def test_blog_json_is_node_link_data_with_torchs_indices():
    torch.manual_seed(6)
    x = torch.randn(2, requires_grad=True)
    x1, x2 = x.unbind()
    loss = x1 + x2
    data = std_json.loads(gradexport.to_json(loss, params={"x": x}))
    assert data["directed"] and data["multigraph"]
    unbind = next(node["id"] for node in data["nodes"] if node.get("op") == "UnbindBackward0")
    into_unbind = sorted((edge["key"], edge["input_nr"]) for edge in data["edges"] if edge["target"] == unbind)
    assert into_unbind == [(i, k) for i, (_, k) in enumerate(loss.grad_fn.next_functions)] == [(0, 0), (1, 1)]
    assert [node["names"] for node in data["nodes"] if node["kind"] == "leaf"] == [["x"]]


@settings(max_examples=budget(60), deadline=None)
@given(param=names, root=names)
def test_any_name_round_trips_in_ascii(param, root):
    graph = named_graph(param, root)
    text = json.to_json(graph)
    assert text.isascii()
    assert_equal_graphs(graph, json.from_json(text))


def test_bytes_do_not_depend_on_attribute_order_and_nan_survives():
    first, second = nx.MultiDiGraph(b=1, a=2), nx.MultiDiGraph(a=2, b=1)
    first.add_node("n0", kind="backward", op="Op")
    second.add_node("n0", op="Op", kind="backward")
    first.add_edge("n0", "n0", key=0, next_index=0, input_nr=0, grad={"norm": float("nan"), "has_nan": True})
    second.add_edge("n0", "n0", key=0, input_nr=0, next_index=0, grad={"has_nan": True, "norm": float("nan")})
    assert json.to_json(first) == json.to_json(second)
    text = json.to_json(first)
    assert json.to_json(json.from_json(text)) == text


def test_write_and_read_back(tmp_path):
    graph = case_graph("add_to_itself")
    json.write_json(graph, tmp_path / "g.json")
    assert_equal_graphs(graph, json.read_json(tmp_path / "g.json"))
    assert (tmp_path / "g.json").read_text(encoding="utf-8") == json.to_json(graph)


def test_from_json_rejects_a_simple_graph():
    simple = node_link_data(nx.path_graph(2))
    with pytest.raises(ValueError, match="multigraph"):
        json.from_json(std_json.dumps(simple))
