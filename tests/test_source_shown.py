"""capture_source's lines where a user looks: DOT/SVG tooltips, JSON, Model Explorer, find_nonfinite, diff, the viewer."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any

import pydot
import pytest
import torch
from model_explorer import graph_builder
from test_viewer_browser import browser, open_page  # noqa: F401  (fixtures: Chromium, a viewer page)

import gradexport
from gradexport.formats.html import write_html


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))


def _line_of(text: str) -> str:
    """``PATH:LINE`` of the line of this file holding ``text`` (PATH relative to the working directory)."""
    lines, start = inspect.getsourcelines(_captured)
    number = next(start + index for index, line in enumerate(lines) if text in line)
    return f"{Path(__file__).resolve().relative_to(Path.cwd())}:{number}"


def _captured() -> tuple[Any, torch.nn.Module]:
    model = _model()
    with gradexport.capture_modules(), gradexport.tools.capture_source():
        hidden = model(torch.randn(2, 3))
        loss = hidden.pow(2).mean()
    return gradexport.to_networkx(loss, module=model), model


def _dot_nodes(graph: Any) -> list[Any]:
    """Every node statement of a pydot graph, inside module boxes (subgraphs) too."""
    return [*graph.get_nodes(), *(node for sub in graph.get_subgraphs() for node in _dot_nodes(sub))]


def test_dot_and_svg_tooltips_name_the_line() -> None:
    graph, _ = _captured()
    dot = gradexport.to_dot(graph)
    tooltips = {node.get_name().strip('"'): node.get("tooltip") for node in _dot_nodes(pydot.graph_from_dot_data(dot)[0]) if node.get("tooltip")}
    expected = {node: f'"{data["source"]}: {data["source_code"]}"' for node, data in graph.nodes(data=True) if "source" in data}
    assert tooltips == expected and expected
    assert _line_of("hidden.pow(2).mean()") + ": loss = hidden.pow(2).mean()" in dot
    svg = gradexport.to_svg(graph)
    titles = set(re.findall(r'xlink:title="([^"]*)"', svg))
    assert {value.strip('"') for value in expected.values()} <= titles


def test_without_capture_dot_has_no_tooltip() -> None:
    model = _model()
    graph = gradexport.to_networkx(model(torch.randn(2, 3)).sum())
    assert "tooltip" not in gradexport.to_dot(graph)


def test_json_round_trips_the_source() -> None:
    graph, _ = _captured()
    back = gradexport.from_json(gradexport.to_json(graph))
    for node, data in graph.nodes(data=True):
        for key in ("source", "source_code", "source_function"):
            assert back.nodes[node].get(key) == data.get(key)


def test_json_refuses_a_source_of_the_wrong_type() -> None:
    graph, _ = _captured()
    document = json.loads(gradexport.to_json(graph))
    node = next(node for node in document["nodes"] if "source" in node)
    node["source"] = 12
    with pytest.raises(gradexport.errors.GraphFormatError, match=r"source: expected str"):
        gradexport.from_json(json.dumps(document))


def test_model_explorer_nodes_carry_the_source() -> None:
    graph, _ = _captured()
    collection = gradexport.tools.to_model_explorer(graph)
    assert isinstance(collection, graph_builder.GraphCollection)
    attributes = {node.id: {item.key: item.value for item in node.attrs} for node in collection.graphs[0].nodes}
    sourced = {node: data["source"] for node, data in graph.nodes(data=True) if "source" in data}
    assert sourced and all(attributes[node]["source"] == source for node, source in sourced.items())


def test_find_nonfinite_names_the_origins_line_without_anomaly_mode() -> None:
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    with gradexport.tools.capture_source():
        logged = x.log()  # the origin: log at 0 has an infinite gradient
        loss = logged.sum()
    report = gradexport.find_nonfinite(loss)
    assert report is not None
    assert report.first.op == "LogBackward0" and report.first.traceback is None
    assert report.first.source is not None and report.first.source.endswith(f":{inspect.currentframe().f_lineno - 5}")  # type: ignore[union-attr]
    assert "made at" in report.to_text() and "logged = x.log()" in report.to_text()
    assert "set_detect_anomaly" not in report.to_text()


def test_diff_says_which_line_changed() -> None:
    x = torch.ones(3, requires_grad=True)
    with gradexport.tools.capture_source():
        before = x.relu().sum()
    with gradexport.tools.capture_source():
        after = x.tanh().sum()
    merged = gradexport.diff(gradexport.to_networkx(before, params={"x": x}), gradexport.to_networkx(after, params={"x": x}))
    changed = [data for _, data in merged.nodes(data=True) if data["diff"] == "changed"]
    assert [data["op"] for data in changed] == ["TanhBackward0"]
    assert changed[0]["source_code"] == "after = x.tanh().sum()"
    assert f"at {changed[0]['source']}" in gradexport.records.describe_diff(merged)


@pytest.mark.browser
def test_viewer_shows_and_searches_the_line(tmp_path: Path, open_page: Any) -> None:  # noqa: F811
    graph, _ = _captured()
    path = tmp_path / "page.html"
    write_html(graph, path)
    opened = open_page(path)
    where = _line_of("hidden.pow(2).mean()")
    expected = [node for node, data in graph.nodes(data=True) if data.get("source") == where]
    assert expected and opened.call("t => window.gradexportViewer.search(t)", where) == expected
    by_file = opened.call("t => window.gradexportViewer.search(t)", Path(__file__).name)
    assert by_file == [node for node, data in graph.nodes(data=True) if "source" in data]
    opened.call("id => window.gradexportViewer.select(id)", expected[0])
    shown = opened.call("document.querySelector('.gx-source').textContent")
    assert shown == f"made at {where}: {graph.nodes[expected[0]]['source_code']}"
