"""Mermaid: parsed by mermaid.js itself (Node.js + jsdom), checked against torch's next_functions."""

from __future__ import annotations

import warnings

import networkx as nx
import pytest
import torch
from examples_budget import budget
from format_fixtures import (
    FORMAT_CASES,
    drawn_edges,
    mermaid_shown,
    module_graph,
    named_graph,
    names,
    needs_mermaid,
    parse_mermaid,
    torch_edges,
)
from hypothesis import HealthCheck, given, settings
from torch_versions import EDGE_METADATA

import gradexport
from gradexport.formats import DiagramOptions, MermaidSizeWarning, mermaid
from gradexport.formats.labels import MAX_LINE_CHARS, element_id, printable
from gradexport.formats.styles import GRAD_BAD_COLOR


def drawing(result: dict) -> tuple[dict[str, tuple[str, str]], list[tuple[str, str, str]]]:
    """Nodes (id -> (class, first shown line)) and edges (source, target, shown label) as mermaid.js parsed them."""
    assert result["ok"], result.get("error")
    nodes = {node: (vertex["classes"][0], mermaid_shown(vertex["text"])[0]) for node, vertex in result["vertices"].items()}
    edges = [(edge["start"], edge["end"], mermaid_shown(edge["text"])[0]) for edge in result["edges"]]
    return nodes, edges


def unbind_then_add():
    torch.manual_seed(6)
    x = torch.randn(2, requires_grad=True)
    x1, x2 = x.unbind()
    return x1 + x2, x


def grad_graph() -> nx.MultiDiGraph:
    graph = nx.MultiDiGraph()
    graph.add_node("n0", kind="backward", op="Op")
    graph.add_node("n1", kind="leaf", names=["w"], shape=[2])
    graph.add_edge("n0", "n1", key=0, next_index=0, input_nr=0, grad={"norm": 0.5, "has_nan": False, "has_inf": False})
    graph.add_edge("n0", "n1", key=1, next_index=1, input_nr=0, grad={"norm": float("inf"), "has_nan": False, "has_inf": True})
    return graph


@needs_mermaid
def test_every_case_and_option_parses_and_draws_torchs_edges():
    cases = {name: builder() for name, builder in FORMAT_CASES.items()}
    texts = [gradexport.to_mermaid(case.roots, params=case.params or None, module=case.module, show_none=True) for case in cases.values()]
    loss, x = unbind_then_add()
    extras = [
        gradexport.to_mermaid(loss, params={"x": x}, direction="RL", edge_shapes=EDGE_METADATA, show_saved=True),
        mermaid.to_mermaid(grad_graph()),
    ]
    results = parse_mermaid(texts + extras)
    for (name, case), result in zip(cases.items(), results[: len(texts)], strict=True):
        assert drawn_edges(*drawing(result)) == torch_edges(case.roots), name
    nodes, edges = drawing(results[len(texts)])
    assert sorted(label for _, target, label in edges if nodes[target][1] == "UnbindBackward0") == ["0→0", "1→1"]
    assert [label for _, target, label in edges if nodes[target][0] == "leaf"] == ["0→0"]
    nodes, edges = drawing(results[-1])
    assert [label for *_, label in edges] == ["0→0", "1→0"]  # a + a style: two edges into one leaf


def test_blog_unbind_text():
    loss, x = unbind_then_add()
    text = gradexport.to_mermaid(loss, params={"x": x})
    assert text.startswith("flowchart TB\n")
    assert '  n1 -->|"0→0"| n2\n  n1 -->|"1→1"| n2\n' in text
    assert '  n3["x<br>(2,)"]:::leaf\n' in text


def test_gradient_norms_become_link_styles():
    text = mermaid.to_mermaid(grad_graph())
    assert "linkStyle 0 stroke:" in text
    assert f"linkStyle 1 stroke:{GRAD_BAD_COLOR}" in text
    assert "linkStyle" not in mermaid.to_mermaid(grad_graph(), DiagramOptions(grad_norms=False))


@needs_mermaid
def test_any_name_parses_and_shows_literally():
    drawn: list[tuple[str, str, str]] = []

    @settings(max_examples=budget(60), deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(param=names, root=names)
    def collect(param, root):
        drawn.append((param, root, mermaid.to_mermaid(named_graph(param, root))))

    collect()
    results = parse_mermaid([text for *_, text in drawn])
    for (param, root, text), result in zip(drawn, results, strict=True):
        assert result["ok"], (param, root, result.get("error"), text)
        shown = {vertex["classes"][0]: mermaid_shown(vertex["text"]) for vertex in result["vertices"].values()}
        # mermaid.js trims the ASCII spaces that start a label (the name is its first line; HTML
        # would collapse them anyway); every other space character is an entity code, which it keeps.
        if param.strip(" "):
            assert shown["leaf"][0] == printable(param).lstrip(" "), (param, text)
        if root.strip(" "):
            assert shown["root"][0] == printable(root).lstrip(" "), (root, text)


def chain(edges: int, name: str = "w") -> nx.MultiDiGraph:
    graph = nx.MultiDiGraph()
    graph.add_node("n0", kind="leaf", names=[name], shape=[1])
    for index in range(1, edges + 1):
        graph.add_node(f"n{index}", kind="backward", op="AddBackward0")
        graph.add_edge(f"n{index}", f"n{index - 1}", key=0, next_index=0, input_nr=0)
    return graph


def fan(leaves: int, name: str) -> nx.MultiDiGraph:
    """One node with ``leaves`` leaves, each named ``name`` (a label line holds at most MAX_LINE_CHARS characters)."""
    graph = nx.MultiDiGraph()
    graph.add_node("n0", kind="backward", op="AddBackward0")
    for index in range(1, leaves + 1):
        graph.add_node(f"n{index}", kind="leaf", names=[name], shape=[1])
        graph.add_edge("n0", f"n{index}", key=index - 1, next_index=index - 1, input_nr=0)
    return graph


def test_warns_above_mermaids_default_limits():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mermaid.to_mermaid(chain(500))
        mermaid.to_mermaid(chain(3, name="x" * 50_001))  # one name is cut to one readable line
    with pytest.warns(MermaidSizeWarning, match=r"501 edges.*format html"):
        mermaid.to_mermaid(chain(501))
    with pytest.warns(MermaidSizeWarning, match="characters"):
        mermaid.to_mermaid(fan(300, "x" * MAX_LINE_CHARS))


def test_size_is_counted_in_utf16_units_as_mermaid_js_does():
    # 🙂 is one character but two UTF-16 code units.
    name = "🙂" * (MAX_LINE_CHARS - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = mermaid.to_mermaid(fan(100, name))
    assert len(text.encode("utf-16-le")) // 2 < mermaid.MAX_TEXT_SIZE
    with pytest.warns(MermaidSizeWarning, match=r"5\d,\d{3} characters"):
        text = mermaid.to_mermaid(fan(130, name))
    assert len(text) < mermaid.MAX_TEXT_SIZE < len(text.encode("utf-16-le")) // 2


@needs_mermaid
def test_modules_are_nested_subgraphs_and_folded_modules_parse():
    graph = module_graph("end")  # a module named like a Mermaid keyword
    (result,) = parse_mermaid([mermaid.to_mermaid(graph)])
    nodes, edges = drawing(result)
    folded = element_id("module:encoder.layers.4")
    assert nodes[folded] == ("module", "encoder.layers.4")
    assert ("n2", folded, "0→0 ×3") in edges
    titles = {sub["id"]: (mermaid_shown(sub["title"])[0], sorted(sub["nodes"])) for sub in result["subgraphs"]}
    by_title = {title: members for title, members in titles.values()}
    assert by_title["end"] == ["n2"]
    assert by_title["encoder.layers.3"] == ["n1"]
    layers = [sub_id for sub_id, (title, _) in titles.items() if title == "encoder.layers"]
    assert folded in by_title["encoder.layers"] and layers[0] in by_title["encoder"]


@needs_mermaid
def test_spaces_around_a_name_show_as_mermaid_keeps_them():
    params = ["  a b  ", "x\xa0", "\u2003x\u2003", "\x1c\x9c'\x12a\xa0"]
    results = parse_mermaid([mermaid.to_mermaid(named_graph(param, "loss")) for param in params])
    for param, result in zip(params, results, strict=True):
        shown = {vertex["classes"][0]: mermaid_shown(vertex["text"]) for vertex in result["vertices"].values()}
        assert shown["leaf"][0] == printable(param).lstrip(" "), param
