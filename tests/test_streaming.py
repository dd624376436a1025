"""Streams: writers draw a GraphStream while it walks, with the very bytes they write for the built graph."""

from __future__ import annotations

import re

import networkx as nx
import pytest
import torch
from cases import deep_chain
from format_fixtures import FORMAT_CASES
from torch_versions import EDGE_METADATA

import gradexport
from gradexport.formats import DiagramOptions, dot, json, mermaid
from gradexport.tracing._torch import TORCH_VERSION
from gradexport.tracing.graph import GraphStream

#: Diagram options that change what the stream must carry or what the writers draw from it.
OPTION_SETS = [
    {},
    {"show_none": True},
    {"show_none": False},
    {"show_saved": True},
    {"edge_shapes": True, "direction": "LR"},
    {"group_modules": False},
]


def walk_options(options: dict[str, object]) -> dict[str, bool]:
    """What the export functions trace roots with for these diagram options."""
    return {
        "show_none": bool(options.get("show_none")),
        "show_saved": bool(options.get("show_saved")),
        "edge_metadata": bool(options.get("edge_shapes")),
    }


@pytest.mark.parametrize("name", sorted(FORMAT_CASES))
def test_a_stream_is_drawn_with_the_bytes_of_its_graph(name: str) -> None:
    case = FORMAT_CASES[name]()
    model = {"params": case.params or None, "module": case.module}
    for options in OPTION_SETS:
        if options.get("edge_shapes") and not EDGE_METADATA:
            continue
        diagram = DiagramOptions(**options)
        graph = gradexport.to_networkx(case.roots, **model, **walk_options(options))
        for write in (dot.to_dot, mermaid.to_mermaid):
            for drawn_only in (False, True):  # the export functions leave out what no diagram draws
                streamed = write(GraphStream(case.roots, **model, **walk_options(options), drawn_only=drawn_only), diagram)
                assert streamed == write(graph, diagram), (write.__module__, options, drawn_only)
    # None nodes in the stream, hidden by the diagram: found from the parent's none_slots.
    hidden = DiagramOptions(show_none=False)
    graph = gradexport.to_networkx(case.roots, **model, show_none=True)
    for write in (dot.to_dot, mermaid.to_mermaid):
        for drawn_only in (False, True):
            assert write(GraphStream(case.roots, **model, show_none=True, drawn_only=drawn_only), hidden) == write(graph, hidden)
    graph = gradexport.to_networkx(case.roots, **model, edge_metadata=EDGE_METADATA, show_none=True)
    assert json.to_json(GraphStream(case.roots, **model, edge_metadata=EDGE_METADATA, show_none=True)) == json.to_json(graph)


def test_module_boxes_from_a_stream_match_the_graph() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Tanh()))
    with gradexport.capture_modules():
        loss = model(torch.randn(5, 3)).sum()
    graph = gradexport.to_networkx(loss, module=model)
    assert {"0", "2.0", "2.1"} <= {path for _, path in graph.nodes(data="module")}
    for grouped in (True, False):
        diagram = DiagramOptions(group_modules=grouped)
        for write in (dot.to_dot, mermaid.to_mermaid):
            assert write(GraphStream(loss, module=model), diagram) == write(graph, diagram)


@pytest.mark.parametrize("name", sorted(FORMAT_CASES))
def test_stream_records_are_the_graphs_nodes_and_out_edges_in_order(name: str) -> None:
    case = FORMAT_CASES[name]()
    graph = gradexport.to_networkx(case.roots, params=case.params or None, show_none=True)
    stream = GraphStream(case.roots, params=case.params or None, show_none=True)
    assert stream.graph_attributes == {}  # only known at the end
    records = [(node, attributes, out) for node, attributes, out in stream]
    assert records == [(node, graph.nodes[node], dict(graph.succ[node])) for node in graph]
    assert stream.graph_attributes == graph.graph
    assert all(re.fullmatch("n[0-9]+", node) for node, _, _ in records)  # what model_ids vouches for


def other_roots() -> dict[str, object]:
    """Roots that are not a tensor with a grad_fn: a leaf, a Node, a GradientEdge, and a mix with shared nodes."""
    x = torch.randn(3, requires_grad=True)
    hidden = x.exp()
    loss = hidden.sum()
    roots: dict[str, object] = {"leaf": x, "node": loss.grad_fn, "mixed": {"loss": loss, "node": hidden.grad_fn, "x": x}}
    if TORCH_VERSION >= (2, 2):  # GradientEdge
        roots["gradient edge"] = torch.autograd.graph.get_gradient_edge(hidden)
        roots["mixed"]["edge"] = torch.autograd.graph.get_gradient_edge(hidden)  # type: ignore[index]
    return roots


@pytest.mark.parametrize("kind", sorted(other_roots()))
def test_streams_of_any_kind_of_root_match_the_graph(kind: str) -> None:
    roots = other_roots()[kind]
    graph = gradexport.to_networkx(roots, show_none=True)
    stream = GraphStream(roots, show_none=True)
    assert [(node, attributes, out) for node, attributes, out in stream] == [(n, graph.nodes[n], dict(graph.succ[n])) for n in graph]
    assert stream.graph_attributes == graph.graph
    assert gradexport.to_dot(roots, show_none=True) == dot.to_dot(graph)


def test_export_functions_draw_roots_without_building_the_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: GraphStream) -> nx.MultiDiGraph:
        raise AssertionError("built a MultiDiGraph")

    w = torch.ones(3, requires_grad=True)
    loss = (w * w).sum()
    expected = {
        "dot": gradexport.to_dot(gradexport.to_networkx(loss, params={"w": w})),
        "mermaid": gradexport.to_mermaid(gradexport.to_networkx(loss, params={"w": w})),
        "json": gradexport.to_json(gradexport.to_networkx(loss, params={"w": w})),
    }
    monkeypatch.setattr(GraphStream, "to_networkx", refuse)
    assert gradexport.to_dot(loss, params={"w": w}) == expected["dot"]
    assert gradexport.to_mermaid(loss, params={"w": w}) == expected["mermaid"]
    assert gradexport.to_json(loss, params={"w": w}) == expected["json"]
    with pytest.raises(AssertionError, match="built a MultiDiGraph"):  # folding modules needs the graph
        gradexport.to_dot(loss, params={"w": w}, depth=1)


def test_a_stream_is_walked_once() -> None:
    w = torch.ones(2, requires_grad=True)
    stream = GraphStream(w * 2)
    assert dot.to_dot(stream).count("->") == 2
    with pytest.raises(RuntimeError, match="only once"):
        dot.to_dot(stream)


def test_bad_roots_fail_before_any_text_is_written() -> None:
    with pytest.raises(gradexport.errors.RootError, match="gradexport.to_dot"):
        gradexport.to_dot([torch.ones(2)])


def test_writers_name_what_they_accept() -> None:
    with pytest.raises(TypeError, match="MultiDiGraph or a stream of adjacency records"):
        dot.to_dot([("n0", {"kind": "root"}, {})])
    with pytest.raises(TypeError, match="MultiDiGraph"):
        json.to_json(nx.DiGraph())


class Records(list):
    """A hand-made stream: a list of adjacency records with graph attributes."""

    def __init__(self, records: list) -> None:
        super().__init__(records)
        self.graph_attributes: dict[str, object] = {}


def test_gradient_colours_of_a_stream_are_those_of_the_whole_graph() -> None:
    # The colour scale is fixed (decades of the norm), so a stream needs no pass over the graph first.
    edge = {"next_index": 0, "input_nr": 0, "grad": {"norm": 2.0}}
    records = Records([("n0", {"kind": "backward", "op": "MulBackward0"}, {"n1": {0: edge}}), ("n1", {"kind": "leaf", "names": ["w"]}, {})])
    graph = nx.MultiDiGraph()
    graph.add_node("n0", kind="backward", op="MulBackward0")
    graph.add_node("n1", kind="leaf", names=["w"])
    graph.add_edge("n0", "n1", key=0, **edge)
    assert dot.to_dot(records) == dot.to_dot(graph)
    assert "‖g‖ 2" in dot.to_dot(records)
    assert '"0→0"' in dot.to_dot(records, DiagramOptions(grad_norms=False))


def test_a_stream_of_other_ids_is_drawn_with_safe_ids() -> None:
    records = Records(
        [("end", {"kind": "backward", "op": "A"}, {'x" y': {0: {"next_index": 0, "input_nr": 1}}}), ('x" y', {"kind": "leaf", "names": ["w"]}, {})]
    )
    text = mermaid.to_mermaid(records)
    assert "\n  end" not in text.split("flowchart", 1)[1].split("classDef")[0]
    assert re.search(r"^  u\w+ -->\|\"0→1\"\| u\w+$", text, re.MULTILINE)


def chain_to_dot(length: int) -> tuple[int, int]:
    text = gradexport.to_dot(deep_chain(length))
    return text.count(" -> "), text.count("[label=")


@pytest.mark.slow
def test_a_deep_chain_is_drawn_from_its_root() -> None:
    # 200,000 steps: well past any recursion limit, and freed on the large stack.
    edges, labelled = gradexport.streams.run_with_large_stack(chain_to_dot, 200_000)
    assert edges == 200_001 and labelled == 200_002 + 200_001


def test_nodes_with_unhashable_values_are_still_drawn() -> None:
    graph = nx.MultiDiGraph()
    graph.add_node("n0", kind="leaf", names=[["odd"]], shape=[[2]])
    graph.add_node("n1", kind="leaf", names=["w"], shape=[2])
    text = dot.to_dot(graph)
    assert "[['odd']]" not in text and "['odd']" in text and "([2],)" in text and '"w\\n(2,)"' in text
