"""DOT: what it shows against torch's own next_functions, parsed back by pydot and drawn by the real dot."""

from __future__ import annotations

import re
from xml.etree import ElementTree

import networkx as nx
import pydot
import pytest
import torch
from examples_budget import budget
from format_fixtures import (
    FORMAT_CASES,
    SVG_TAGS,
    case_graph,
    drawn_edges,
    module_graph,
    named_graph,
    names,
    needs_dot,
    render_with_dot,
    svg_text_lines,
    torch_edges,
)
from hypothesis import HealthCheck, example, given, settings
from torch_versions import needs_input_metadata

import gradexport
from gradexport.formats import DiagramOptions, dot
from gradexport.formats.labels import element_id, printable
from gradexport.formats.styles import GRAD_BAD_COLOR, GRAD_COLORS


def label_lines(quoted: str) -> list[str]:
    """The lines Graphviz shows for a quoted DOT label as the writer escapes it."""
    lines, current, index = [], [], 0
    body = quoted[1:-1]
    while index < len(body):
        char = body[index]
        if char == "\\":
            if body[index + 1] == "n":
                lines.append("".join(current))
                current = []
            else:
                current.append(body[index + 1])
            index += 2
        else:
            current.append(char)
            index += 1
    lines.append("".join(current))
    return [line.replace("&amp;", "&") for line in lines]


def parsed(dot_text: str) -> tuple[dict[str, tuple[str, str]], list[tuple[str, str, str]]]:
    """Nodes (id -> (class, first label line)) and edges (source, target, label) as pydot reads the DOT."""
    graphs = pydot.graph_from_dot_data(dot_text)
    assert graphs and len(graphs) == 1
    graph = graphs[0]
    scopes = [graph]
    for scope in scopes:  # module clusters nest: read every subgraph's nodes too
        # but not the {rank="same"; ...} groups, which only name nodes declared elsewhere
        scopes.extend(sub for sub in scope.get_subgraphs() if sub.get("rank") is None)
    node_defaults: dict[str, str] = {}
    for defaults in graph.get_node_defaults():  # the `node [...]` statement: backward functions' look
        node_defaults.update(defaults)
    nodes = {
        node.get_name().strip('"'): ((node.get("class") or node_defaults["class"]).strip('"'), label_lines(node.get_label())[0])
        for scope in scopes
        for node in scope.get_nodes()
        if node.get_name() not in ("node", "edge", "graph")
    }
    edges = [(edge.get_source().strip('"'), edge.get_destination().strip('"'), label_lines(edge.get_label())[0]) for edge in graph.get_edges()]
    return nodes, edges


@needs_dot
@pytest.mark.parametrize("name", sorted(FORMAT_CASES))
def test_every_case_draws_torchs_edges_and_renders(name):
    case = FORMAT_CASES[name]()
    text = gradexport.to_dot(case.roots, params=case.params or None, module=case.module, show_none=True)
    nodes, edges = parsed(text)
    assert drawn_edges(nodes, edges) == torch_edges(case.roots)
    render_with_dot(text)  # no error and no warning (fonts included)


def test_blog_unbind_shows_two_distinct_edges_into_unbind():
    torch.manual_seed(6)
    x = torch.randn(2, requires_grad=True)
    x1, x2 = x.unbind()
    loss = x1 + x2
    nodes, edges = parsed(gradexport.to_dot(loss, params={"x": x}))
    into_unbind = sorted(label for _, target, label in edges if nodes[target][1] == "UnbindBackward0")
    expected = sorted(f"{i}→{k}" for i, (_, k) in enumerate(loss.grad_fn.next_functions))
    assert into_unbind == expected == ["0→0", "1→1"]
    assert sum(1 for _, (kind, line) in nodes.items() if kind == "leaf" and line == "x") == 1


def test_a_plus_a_shows_two_edges_into_one_leaf():
    a = torch.ones(3, requires_grad=True)
    total = a + a
    nodes, edges = parsed(gradexport.to_dot(total, params={"a": a}))
    leaf = next(node for node, (kind, _) in nodes.items() if kind == "leaf")
    assert nodes[leaf][1] == "a"
    expected = sorted(f"{i}→{k}" for i, (_, k) in enumerate(total.grad_fn.next_functions))
    assert sorted(label for _, target, label in edges if target == leaf) == expected == ["0→0", "1→0"]


@needs_dot
@settings(max_examples=budget(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(param=names, root=names)
@example(param='"', root="0  ")  # a run of spaces: Graphviz keeps it as no-break spaces
def test_any_name_parses_and_shows_literally_without_markup(param, root):
    text = dot.to_dot(named_graph(param, root))
    nodes, _ = parsed(text)
    assert len(nodes) == 4
    assert all(re.fullmatch(r"n\d+", node) for node in nodes)  # names never become ids
    shown = svg_text_lines(render_with_dot(text))  # also checks the SVG holds no element from a name
    # Graphviz writes a run of spaces as a space and no-break spaces, so that the SVG shows them all.
    seen = {line.replace("\xa0", " ") for line in shown}
    for name in (param, root):
        if name.strip():
            assert printable(name).replace("\xa0", " ") in seen


def test_ids_are_opaque_even_for_arbitrary_node_ids():
    graph = nx.MultiDiGraph()
    graph.add_node('a"b::c', kind="backward", op="Op")
    graph.add_node(7, kind="leaf", names=["w"], shape=[1])
    graph.add_edge('a"b::c', 7, key=0, next_index=0, input_nr=0)
    nodes, edges = parsed(dot.to_dot(graph))
    assert all(re.fullmatch(r"u_[A-Za-z0-9_]*[0-9a-f]{16}", node) for node in nodes)
    assert edges == [(next(iter(nodes)), list(nodes)[1], "0→0")]


@needs_dot
def test_a_compiled_regions_ops_are_a_cluster_whatever_their_names():
    """A graph read from JSON may hold any text in a region's ids and lines: each is quoted, drawn literally."""
    hostile = 'a"b\\c];\n<x>'
    graph = nx.MultiDiGraph()
    graph.add_node(
        "n0",
        kind="backward",
        op="CompiledFunctionBackward",
        special="compiled",
        compiled_graph={
            "ops": [
                {"id": hostile, "op": "aten.mm.default", "inputs": ["tangents_1"], "forward_op": "linear", "source": f"{hostile}.py:3"},
                {"id": "view", "op": hostile, "inputs": [hostile, "saved"]},
            ],
            "inputs": [{"id": "saved", "role": "saved"}, {"id": "tangents_1", "role": "gradient"}],
            "outputs": [{"id": "view", "next_index": 0}],
            "metadata_kept": True,
        },
    )
    graph.add_node("n1", kind="leaf", names=["w"], shape=[1])
    graph.add_edge("n0", "n1", key=0, next_index=0, input_nr=0)
    svg = ElementTree.fromstring(render_with_dot(dot.to_dot(graph)))
    # A hover text (the op's line) makes Graphviz wrap the node in <a>; nothing from the names becomes an element.
    assert {element.tag.rpartition("}")[2] for element in svg.iter()} <= SVG_TAGS | {"a"}
    shown = [element.text for element in svg.iter() if element.tag.endswith("}text")]
    assert printable(hostile) in shown and f"linear {printable(hostile)}.py:3" in shown and "→ 0" in shown
    # Graphviz titles each node and edge with its ids as it read them: opaque ones, inputs then ops in order.
    titles = {element.text for element in svg.iter() if element.tag.endswith("}title")}
    assert {"cluster_n0_compiled", "n0/in0", "n0/in1", "n0/op0", "n0/op1", "n0->n0/in1", "n0/in1->n0/op0", "n0/op0->n0/op1", "n0/in0->n0/op1"} <= titles


def test_direction_is_rankdir_and_rejects_unknown():
    a = torch.ones(1, requires_grad=True)
    assert 'rankdir="TB"' in gradexport.to_dot(a * 2)
    assert 'rankdir="LR"' in gradexport.to_dot(a * 2, direction="LR")
    with pytest.raises(ValueError, match="direction"):
        gradexport.to_dot(a * 2, direction="up")


def test_none_slots_drawn_from_the_graph_or_from_none_slots_and_hidden_on_request():
    x = torch.ones(2, requires_grad=True)
    constant = torch.ones(2)
    product = x * constant
    none_positions = [i for i, (child, _) in enumerate(product.grad_fn.next_functions) if child is None]
    assert none_positions == [1]

    def none_edges(text):
        nodes, edges = parsed(text)
        return [label for _, target, label in edges if nodes[target][0] == "none"]

    assert none_edges(gradexport.to_dot(product)) == []
    assert none_edges(gradexport.to_dot(product, show_none=True)) == ["1→0"]
    plain = gradexport.to_networkx(product)
    assert none_edges(dot.to_dot(plain, DiagramOptions(show_none=True))) == ["1→0"]
    with_none = gradexport.to_networkx(product, show_none=True)
    assert none_edges(dot.to_dot(with_none)) == ["1→0"]
    assert none_edges(dot.to_dot(with_none, DiagramOptions(show_none=False))) == []


@needs_input_metadata
def test_saved_values_and_edge_shapes_on_request():
    x = torch.ones(4, 3, requires_grad=True)
    y = torch.ones(4, 3, requires_grad=True)
    loss = (x * y).sum()
    saved_shape = tuple(loss.grad_fn.next_functions[0][0]._saved_self.shape)
    text = gradexport.to_dot(loss, params={"x": x, "y": y}, show_saved=True, edge_shapes=True)
    assert f"self: {saved_shape}" in text
    assert f'label="0→0\\n{tuple(x.shape)}"' in text
    assert "self:" not in gradexport.to_dot(loss)


def test_special_nodes_are_marked():
    case = FORMAT_CASES["custom_function"]()
    text = gradexport.to_dot(case.roots)
    assert re.search(r'label="[^"]*\\nspecial: custom_function", class="special"', text)


def test_module_path_is_shown_under_the_op_when_modules_are_not_boxed():
    graph = nx.MultiDiGraph()
    graph.add_node("n0", kind="backward", op="AddmmBackward0", module="encoder.layers.3")
    options = DiagramOptions(group_modules=False)
    assert '"n0" [label="AddmmBackward0\\nencoder.layers.3"' in dot.to_dot(graph, options)


@needs_dot
def test_modules_are_nested_clusters_that_graphviz_draws():
    graph = module_graph("encoder.norm")
    (parsed_graph,) = pydot.graph_from_dot_data(dot.to_dot(graph))
    (encoder,) = parsed_graph.get_subgraphs()
    assert encoder.get_label() == '"encoder"'
    assert sorted(sub.get_label() for sub in encoder.get_subgraphs()) == ['"encoder.layers"', '"encoder.norm"']
    (layers,) = [sub for sub in encoder.get_subgraphs() if sub.get_label() == '"encoder.layers"']
    assert [node.get_name() for node in layers.get_nodes()] == [f'"{element_id("module:encoder.layers.4")}"']
    assert [node.get_name() for sub in layers.get_subgraphs() for node in sub.get_nodes()] == ['"n1"']
    nodes, edges = parsed(dot.to_dot(graph))
    assert ("n2", element_id("module:encoder.layers.4"), "0→0 ×3") in edges
    assert nodes[element_id("module:encoder.layers.4")] == ("module", "encoder.layers.4")
    assert "encoder.layers" in "".join(svg_text_lines(render_with_dot(dot.to_dot(graph))))


def test_gradient_norms_label_and_colour_edges_by_log_magnitude():
    graph = nx.MultiDiGraph()
    for node in ("n0", "n1", "n2", "n3", "n4"):
        graph.add_node(node, kind="backward", op="Op")
    norms = {"n1": 1e-3, "n2": 1.0, "n3": 1e3, "n4": float("nan")}
    for index, (target, norm) in enumerate(norms.items()):
        grad = {"norm": norm, "has_nan": norm != norm, "has_inf": False}
        graph.add_edge("n0", target, key=index, next_index=index, input_nr=0, grad=grad)
    lines = {line.split('"')[3]: line for line in dot.to_dot(graph).splitlines() if "->" in line}
    # The fixed decades: 0.001 starts step 1, 1 step 4, 1000 is past the last bound (10).
    assert "‖g‖ 0.001" in lines["n1"] and f'color="{GRAD_COLORS[1]}"' in lines["n1"]
    assert f'color="{GRAD_COLORS[4]}"' in lines["n2"] and f'color="{GRAD_COLORS[-1]}"' in lines["n3"]
    assert "fontcolor" not in lines["n1"]  # the label keeps the edge default, dark enough to read
    assert f'color="{GRAD_BAD_COLOR}"' in lines["n4"] and "‖g‖ nan" in lines["n4"]
    assert "color=" not in dot.to_dot(graph, DiagramOptions(grad_norms=False)).split("->", 1)[1]


def test_to_pydot_matches_the_text():
    torch.manual_seed(6)
    x = torch.randn(4, 4, requires_grad=True)
    y = torch.randn(4, 4, requires_grad=True)
    as_object = gradexport.tools.to_pydot((x * y).sum(), params={"x": x, "y": y})
    assert isinstance(as_object, pydot.Dot)
    assert len(as_object.get_edges()) == 4
    assert sorted(node.get_name() for node in as_object.get_nodes() if node.get_name().startswith('"n')) == [f'"n{i}"' for i in range(5)]


def test_write_dot_streams_to_a_file_object(tmp_path):
    graph = case_graph("blog_multiply_then_sum")
    path = tmp_path / "g.dot"
    with path.open("w", encoding="utf-8") as file:
        dot.write_dot(graph, file)
    assert path.read_text(encoding="utf-8") == dot.to_dot(graph)


def test_gradient_colours_are_the_same_in_every_graph_and_have_a_legend():
    """The scale is fixed: a norm gets the same colour whatever else the graph holds; Graphviz draws the legend."""

    def drawn(norms: list[float]) -> tuple[str, dict[str, str]]:
        graph = nx.MultiDiGraph()
        graph.add_node("n0", kind="backward", op="Op")
        for index, norm in enumerate(norms):
            graph.add_node(f"n{index + 1}", kind="backward", op="Op")
            graph.add_edge("n0", f"n{index + 1}", key=index, next_index=index, input_nr=0, grad={"norm": norm, "has_nan": False, "has_inf": False})
        text = dot.to_dot(graph)
        return text, {line.split('"')[3]: re.search(r'color="([^"]+)"', line)[1] for line in text.splitlines() if "->" in line}

    text, alone = drawn([3.6, 4.54])
    _, beside = drawn([3.6, 1e-5])
    assert alone["n1"] == alone["n2"] == beside["n1"] and beside["n2"] != beside["n1"]
    svg = "".join(svg_text_lines(render_with_dot(text)))
    assert "‖g‖ on an edge" in svg and "1 – 10" in svg and "NaN or Inf" in svg
    plain = nx.MultiDiGraph()
    plain.add_edge("n0", "n1", key=0, next_index=0, input_nr=0)
    assert "‖g‖ on an edge" not in dot.to_dot(plain)
