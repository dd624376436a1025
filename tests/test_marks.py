"""What the debugging functions find, drawn: non-finite origins, the engine's order, saved bytes, diffs.

Each diagram is read back by its real consumer (Graphviz, pydot, mermaid.js) and
compared with what torch did, not with earlier output.
"""

from __future__ import annotations

import warnings

import pydot
import pytest
import torch
from format_fixtures import mermaid_shown, needs_dot, needs_mermaid, parse_mermaid, render_with_dot, svg_text_lines

import gradexport
from gradexport.formats.styles import MARK_COLORS


@pytest.fixture
def sqrt_at_zero():
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    report = gradexport.find_nonfinite((x.sqrt() * 2).sum(), params={"x": x})
    assert report is not None
    return report


def _pydot_nodes(dot_text: str) -> dict[str, pydot.Node]:
    (parsed,) = pydot.graph_from_dot_data(dot_text)
    return {node.get_name().strip('"'): node for node in parsed.get_nodes()}


@needs_dot
def test_the_origin_of_a_nonfinite_gradient_is_marked_in_dot(sqrt_at_zero):
    origin = sqrt_at_zero.first.node
    text = gradexport.to_dot(sqrt_at_zero.graph)
    node = _pydot_nodes(text)[origin]
    assert node.get("class") == '"nonfinite"'
    assert "non-finite gradient starts here" in node.get("label")
    shown = svg_text_lines(render_with_dot(text))
    assert "non-finite gradient starts here" in shown and "SqrtBackward0" in shown


@needs_mermaid
def test_marks_parse_in_mermaid_and_number_nodes_in_the_engines_order(sqrt_at_zero):
    graph = sqrt_at_zero.graph
    (parsed,) = parse_mermaid([gradexport.to_mermaid(graph, exec_order=True)])
    assert parsed["ok"], parsed.get("error")
    for node, order in graph.nodes(data="exec_order"):
        if order is not None:
            assert mermaid_shown(parsed["vertices"][node]["text"])[0].startswith(f"#{order}")
    assert parsed["vertices"][sqrt_at_zero.first.node]["classes"] == ["nonfinite"]
    plain = gradexport.to_mermaid(gradexport.to_networkx((torch.ones(2, requires_grad=True) * 2).sum()))
    assert "classDef nonfinite" not in plain  # unmarked graphs keep their text


@needs_mermaid
def test_a_diff_reads_without_colour_and_parses(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(3, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = gradexport.diff((x * 2).sum(), (x * 2).log().sum())
    states = {node: state for node, state in graph.nodes(data="diff")}
    (parsed,) = parse_mermaid([gradexport.to_mermaid(graph)])
    assert parsed["ok"], parsed.get("error")
    assert "added" in states.values()
    signs = {"added": "+ added", "removed": "− removed", "changed": "~ changed"}
    for node, state in states.items():
        shown = mermaid_shown(parsed["vertices"][node]["text"])
        if state == "same":
            assert not shown[0].startswith(tuple(signs.values())) and parsed["vertices"][node]["classes"][0] in ("root", "backward", "leaf")
        else:
            assert shown[0].startswith(signs[state]) and parsed["vertices"][node]["classes"] == [state]
    edge_states = [data["diff"] for _, _, data in graph.edges(data=True)]
    signs = [edge["text"].rsplit(" ", 1)[-1] if edge["text"][-1] in "+−~" else "" for edge in parsed["edges"]]
    assert sorted(signs) == sorted({"added": "+", "removed": "−", "changed": "~", "same": ""}[state] for state in edge_states)
    dot_text = gradexport.to_dot(graph)
    for source, target, data in graph.edges(data=True):
        if data["diff"] in MARK_COLORS:
            assert f'color="{MARK_COLORS[data["diff"]]}"' in dot_text


def test_saved_bytes_are_labelled_from_the_storages_torch_holds():
    x = torch.randn(256, requires_grad=True)
    loss = (x * x).sum()
    dot_text = gradexport.to_dot(loss, params={"x": x}, saved_bytes=True)
    label = _pydot_nodes(dot_text)["n2"].get("label")
    # MulBackward0 saved x twice (self and other): one 1 KiB storage, counted once.
    assert x.untyped_storage().nbytes() == 1024 and "saved 1.0 KiB" in label and "shared" not in label
