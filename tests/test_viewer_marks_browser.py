"""Marks in the viewer page (find_nonfinite, diff, exec_order, saved bytes), in headless Chromium.

Expectations come from torch (which module holds the op that goes non-finite,
which layer a model gained) and from the graph model's attributes; the words
and colours are the ones every other format uses (gradexport.formats.labels,
gradexport.formats.styles). Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from test_site_browser import browser  # noqa: F401  (a fixture: Debian's Chromium through Playwright)
from test_viewer_browser import CONTRAST_JS, open_page, screenshot  # noqa: F401  (open_page is a fixture)
from torch import nn

import gradexport
from gradexport.core.options import DiagramOptions
from gradexport.formats.html import write_html
from gradexport.formats.labels import DIFF_MARKS, byte_text, node_lines
from gradexport.formats.styles import MARK_COLORS, MARK_STYLES

pytestmark = pytest.mark.browser

#: 40 blocks of 5 nodes: the page opens with the blocks folded (over 150 nodes otherwise).
BLOCKS = 40
#: The block whose middle module takes the square root of zeros.
SICK = 27
NONFINITE_WORDS = node_lines({"nonfinite": "origin"}, False, False)[0]

NODES_JS = """() => Object.fromEntries([...document.querySelectorAll('.gx-node')].map(g => [g.dataset.id, {
  cls: [...g.classList], mark: g.dataset.mark || null, stroke: g.querySelector('.gx-shape').getAttribute('stroke'),
  lines: [...g.querySelectorAll(':scope > text')].map(t => t.textContent),
  bar: g.querySelector('.gx-saved-bar') ? Number(g.querySelector('.gx-saved-bar').dataset.fraction) : null,
}]))"""
EDGES_JS = """() => [...document.querySelectorAll('.gx-edge')].map(g => ({
  mark: g.dataset.mark || null, first: g.querySelector('text').textContent, stroke: g.querySelector('.gx-edge-line').style.stroke,
}))"""
LEGEND_JS = "() => [...document.querySelectorAll('.gx-legend-row')].map(r => [r.dataset.legend || null, r.textContent])"


class Sqrt(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(x)


def nonfinite_report() -> gradexport.records.NonfiniteReport:
    torch.manual_seed(0)
    blocks: list[nn.Module] = [nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(BLOCKS)]
    sick = nn.Sequential(nn.Linear(4, 4), Sqrt())
    with torch.no_grad():
        sick[0].weight.zero_()  # the square root of zeros, where its derivative is infinite
        sick[0].bias.zero_()
    blocks[SICK] = sick
    model = nn.Sequential(*blocks)
    with gradexport.capture_modules():
        out = model(torch.randn(2, 4)).sum()
    report = gradexport.find_nonfinite(out, module=model)
    assert report is not None
    return report


def traced(model: nn.Module) -> Any:
    torch.manual_seed(1)
    with gradexport.capture_modules():
        out = model(torch.randn(2, 3)).sum()
    return gradexport.to_networkx(out, module=model)


def small() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), nn.Tanh())


def grown() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))


@pytest.fixture(scope="module")
def marked_pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    folder = tmp_path_factory.mktemp("viewer-marks")
    a, b = traced(small()), traced(grown())
    graphs: dict[str, tuple[Any, DiagramOptions | None]] = {
        "nonfinite": (nonfinite_report().graph, None),
        "added": (gradexport.diff(a, b), None),
        "removed": (gradexport.diff(b, a), None),
        "grown": (b, None),
    }
    made = {}
    for name, (graph, options) in graphs.items():
        write_html(graph, folder / f"{name}.html", options)
        made[name] = (folder / f"{name}.html", graph)
    return made


def test_the_nonfinite_origin_shows_on_first_render_inside_its_module(marked_pages, open_page):  # noqa: F811
    path, graph = marked_pages["nonfinite"]
    [origin] = graph.graph["nonfinite"]
    # What torch says: the square root, in the module that takes it.
    assert graph.nodes[origin]["op"] == "SqrtBackward0" and graph.nodes[origin]["module"] == f"{SICK}.1"
    opened = open_page(path)
    visible = opened.call("window.gradexportViewer.visible()")
    assert origin in visible
    assert sum(item.startswith("module:") for item in visible) >= BLOCKS - 1  # the other blocks stay folded
    # On screen, not just in the drawing: inside the canvas, selected, its attributes in the panel.
    inside = opened.call(
        """id => { const r = document.querySelector(`.gx-node[data-id="${id}"]`).getBoundingClientRect();
        const c = document.querySelector('.gx-canvas').getBoundingClientRect();
        return r.width > 0 && r.left >= c.left && r.right <= c.right && r.top >= c.top && r.bottom <= c.bottom; }""",
        origin,
    )
    assert inside
    node = opened.call(NODES_JS)[origin]
    assert "gx-selected" in node["cls"] and "SqrtBackward0" in opened.call("document.querySelector('.gx-panel h2').textContent")
    assert "gx-nonfinite" in node["cls"] and node["mark"] == "nonfinite"
    assert node["stroke"] == MARK_STYLES["nonfinite"].stroke
    assert node["lines"] == [NONFINITE_WORDS, "SqrtBackward0"]
    # The edges out of the origin (into a folded module, here) carry its mark.
    edges = opened.call(EDGES_JS)
    assert [edge["mark"] for edge in edges].count("origin") == graph.out_degree(origin)
    legend = dict(opened.call(LEGEND_JS))
    assert legend["nonfinite"] == NONFINITE_WORDS and "edge" in legend
    assert not any(key in legend for key in DIFF_MARKS)
    screenshot(opened, "nonfinite-open")
    # Opened all the way, every edge carries the graph's mark (the path to the parameters).
    opened.call("window.gradexportViewer.expandAll()")
    edges = opened.call(EDGES_JS)
    assert len(edges) == graph.number_of_edges()
    marks = sorted(mark for _, _, mark in graph.edges(data="nonfinite") if mark)
    assert "path" in marks and sorted(edge["mark"] for edge in edges if edge["mark"]) == marks


def test_a_folded_group_shows_the_origin_inside(marked_pages, open_page):  # noqa: F811
    path, graph = marked_pages["nonfinite"]
    [origin] = graph.graph["nonfinite"]
    opened = open_page(path)
    block = f"module:{SICK}"
    visible = opened.call("id => window.gradexportViewer.collapse(id)", block)
    assert origin not in visible and block in visible
    nodes = opened.call(NODES_JS)
    assert nodes[block]["mark"] == "nonfinite" and nodes[block]["stroke"] == MARK_STYLES["nonfinite"].stroke
    assert "non-finite gradient starts inside" in nodes[block]["lines"]
    healthy = [item for item in visible if item.startswith("module:") and item != block]
    assert healthy and all(nodes[item]["mark"] is None for item in healthy)
    screenshot(opened, "nonfinite-folded")


class TwoHeads(nn.Module):
    """Two branches that each take the square root of zeros: two origins in one pass."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(BLOCKS)])
        self.left = nn.Sequential(nn.Linear(4, 4), Sqrt())
        self.right = nn.Sequential(nn.Linear(4, 4), Sqrt())
        with torch.no_grad():
            for head in (self.left, self.right):
                head[0].weight.zero_()
                head[0].bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.trunk(x)
        return self.left(x) + self.right(x) * 2


def test_several_origins_all_show_and_the_first_is_selected(open_page, tmp_path):  # noqa: F811
    torch.manual_seed(0)
    model = TwoHeads()
    with gradexport.capture_modules():
        out = model(torch.randn(2, 4)).sum()
    report = gradexport.find_nonfinite(out, module=model)
    assert report is not None
    origins = [origin.node for origin in report.origins]
    assert {report.graph.nodes[node]["module"] for node in origins} == {"left.1", "right.1"}
    write_html(report.graph, tmp_path / "two.html")
    opened = open_page(tmp_path / "two.html")
    nodes = opened.call(NODES_JS)
    assert all(nodes[node]["mark"] == "nonfinite" for node in origins)
    assert [node for node in origins if "gx-selected" in nodes[node]["cls"]] == origins[:1]
    assert any(item.startswith("module:trunk") and nodes[item]["mark"] is None for item in nodes)
    screenshot(opened, "nonfinite-two")


@pytest.mark.parametrize("name", ["added", "removed"])
def test_a_diff_marks_nodes_and_edges_with_a_legend(marked_pages, open_page, name):  # noqa: F811
    path, graph = marked_pages[name]
    opened = open_page(path)
    opened.call("window.gradexportViewer.expandAll()")
    # What the model change says: the layer at index 2 is what one side has and the other lacks.
    layer = {node for node, module in traced(grown()).nodes(data="module") if module == "2"}
    marked = {node for node, mark in graph.nodes(data="diff") if mark == name}
    assert len(marked) == len(layer) > 0
    assert {graph.nodes[node]["module"] for node in marked} == {"2"}
    nodes = opened.call(NODES_JS)
    for node, mark in graph.nodes(data="diff"):
        drawn = nodes[node]
        if mark in DIFF_MARKS:
            assert f"gx-{mark}" in drawn["cls"] and drawn["stroke"] == MARK_STYLES[mark].stroke
            assert drawn["lines"][0] == DIFF_MARKS[mark]
        else:
            assert drawn["mark"] is None and drawn["lines"][0] != DIFF_MARKS.get(mark)
    edges = opened.call(EDGES_JS)
    expected = sorted(mark for _, _, mark in graph.edges(data="diff") if mark in DIFF_MARKS)
    assert sorted(edge["mark"] for edge in edges if edge["mark"]) == expected
    for edge in edges:
        if edge["mark"]:
            assert edge["first"].endswith(" " + DIFF_MARKS[edge["mark"]][0])
            assert edge["stroke"] == _rgb(MARK_COLORS[edge["mark"]])
    legend = dict(opened.call(LEGEND_JS))
    assert [legend[mark] for mark in DIFF_MARKS] == list(DIFF_MARKS.values())
    assert "nonfinite" not in legend
    opened.call("window.gradexportViewer.collapse('module:2')")
    folded = opened.call(NODES_JS)["module:2"]
    assert folded["mark"] == name
    assert f"{DIFF_MARKS[name][0]}{len(layer)} {name}" in folded["lines"]
    screenshot(opened, f"diff-{name}")


def test_no_mark_legend_without_marks(marked_pages, open_page):  # noqa: F811
    path, _ = marked_pages["grown"]
    opened = open_page(path)
    legend = dict(opened.call(LEGEND_JS))
    assert not any(key in legend for key in (*DIFF_MARKS, "nonfinite", "edge"))
    assert all(node["mark"] is None for node in opened.call(NODES_JS).values())


@pytest.mark.parametrize("name", ["nonfinite", "added"])
@pytest.mark.parametrize("theme", ["light", "dark"])
def test_marks_and_legend_contrast(marked_pages, open_page, name, theme):  # noqa: F811
    path, _ = marked_pages[name]
    opened = open_page(path)
    opened.call("name => window.gradexportViewer.theme(name)", theme)
    ratios = opened.call(CONTRAST_JS)
    low = [(entry["text"], round(entry["ratio"], 2)) for entry in ratios if entry["ratio"] < 4.5]
    assert low == []
    assert any(entry["text"] in (NONFINITE_WORDS, DIFF_MARKS["added"]) for entry in ratios)
    screenshot(opened, f"{name}-{theme}")


def test_exec_order_numbers_the_nodes(open_page, tmp_path):  # noqa: F811
    torch.manual_seed(0)
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    shared = x * w
    loss = (shared.sin() + shared.exp() * w).sum() + x.pow(2).mean()
    graph = gradexport.record_gradients(loss, params={"x": x, "w": w})
    ran = {node: order for node, order in graph.nodes(data="exec_order") if order is not None}
    assert sorted(ran.values()) == list(range(1, len(ran) + 1))
    write_html(graph, tmp_path / "order.html", DiagramOptions(exec_order=True))
    opened = open_page(tmp_path / "order.html")
    opened.call("window.gradexportViewer.expandAll()")
    nodes = opened.call(NODES_JS)
    assert set(graph) <= set(nodes)
    for node in graph:
        first = nodes[node]["lines"][0]
        if node in ran:
            assert first == f"#{ran[node]}", node
        else:
            assert not first.startswith("#"), node
    write_html(graph, tmp_path / "plain.html")
    plain = open_page(tmp_path / "plain.html")
    plain.call("window.gradexportViewer.expandAll()")
    assert not any(node["lines"][0].startswith("#") for node in plain.call(NODES_JS).values())
    screenshot(opened, "exec-order")


def test_saved_bytes_line_and_bar(open_page, tmp_path):  # noqa: F811
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    with gradexport.capture_modules():
        out = model(torch.randn(5, 8)).sum()
    graph = gradexport.to_networkx(out, module=model, show_saved=True)
    saved = {node: count for node, count in graph.nodes(data="saved_bytes") if count is not None}
    assert any(saved.values())
    write_html(graph, tmp_path / "saved.html", DiagramOptions(saved_bytes=True))
    opened = open_page(tmp_path / "saved.html")
    opened.call("window.gradexportViewer.expandAll()")
    nodes = opened.call(NODES_JS)
    most = max(saved.values())
    for node, count in saved.items():
        shared = graph.nodes[node].get("saved_bytes_shared", 0)
        line = f"saved {byte_text(count)}" + (f" (+{byte_text(shared)} shared)" if shared else "")
        assert nodes[node]["lines"][-1] == line, node
        assert nodes[node]["bar"] == pytest.approx(count / most), node
    assert all(nodes[node]["bar"] is None for node in graph if node not in saved)
    assert "saved_bytes" in dict(opened.call(LEGEND_JS))
    opened.call("window.gradexportViewer.collapse('module:0')")
    folded = opened.call(NODES_JS)["module:0"]
    inside = sum(count for node, count in saved.items() if graph.nodes[node].get("module") == "0")
    assert f"saved {byte_text(inside)}" in folded["lines"]
    screenshot(opened, "saved-bytes")


@pytest.mark.parametrize("name", ["nonfinite", "added", "removed"])
def test_every_node_looks_as_the_dot_writer_draws_it(marked_pages, open_page, tmp_path, name):  # noqa: F811
    graph = marked_pages[name][1]
    options = DiagramOptions(exec_order=name == "nonfinite")
    write_html(graph, tmp_path / "page.html", options)
    opened = open_page(tmp_path / "page.html")
    opened.call("window.gradexportViewer.expandAll()")
    drawn = opened.call(
        """() => Object.fromEntries([...document.querySelectorAll('.gx-node')].map(g => {
        const shape = g.querySelector('.gx-shape');
        return [g.dataset.id, [g.querySelector('text').textContent, shape.getAttribute('fill'), shape.getAttribute('stroke')]]; }))"""
    )
    dot = gradexport.tools.to_pydot(graph, exec_order=options.exec_order)
    defaults = next(node for node in dot.get_node_list() if node.get_name() == "node").get_attributes()
    seen = 0
    for node in _dot_nodes(dot):
        node_id = node.get_name().strip('"')
        if node_id not in graph:
            continue
        attributes = {**defaults, **node.get_attributes()}
        first = attributes["label"].strip('"').split("\\n")[0]
        assert drawn[node_id] == [first, attributes["fillcolor"].strip('"'), attributes["color"].strip('"')], node_id
        seen += 1
    assert seen == graph.number_of_nodes()


def _dot_nodes(graph: Any) -> list[Any]:
    nodes = list(graph.get_node_list())
    for subgraph in graph.get_subgraph_list():
        if subgraph.get("rank") is None:  # a {rank="same"; ...} group only names nodes declared in their box
            nodes += _dot_nodes(subgraph)
    return nodes


def _rgb(color: str) -> str:
    """A #rrggbb colour as Chromium reports a style's colour."""
    red, green, blue = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({red}, {green}, {blue})"
