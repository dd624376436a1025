"""The viewer page in headless Chromium, opened from file:// with the network blocked.

Screenshots go to tests/artifacts/ (ignored by git) for a person to look at.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
import torch
from format_fixtures import REPO
from test_site_browser import browser  # noqa: F401  (a fixture: Debian's Chromium through Playwright)
from torch import nn

import gradexport
from gradexport.formats.html import notebook_iframe, write_html

pytestmark = pytest.mark.browser

ARTIFACTS = REPO / "tests" / "artifacts"
XSS = {
    "param": "<img src=x onerror=window.__pwned=1>",
    "param2": "</script><script>window.__pwned=2</script>",
    "root": "<!--<script>window.__pwned=3</script>",
    "module": "<img src=y onerror=__pwned=4>",
    "class": "<svg onload=__pwned=5>",
}

#: Relative luminance contrast (WCAG 2) of every visible text against what is behind it.
CONTRAST_JS = """() => {
  const rgba = (c) => { const p = c.match(/[\\d.]+/g).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const lin = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const lum = ([r, g, b]) => 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const shown = (e) => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden';
  const htmlBackground = (e) => {
    for (let a = e; a; a = a.parentElement) { const c = rgba(getComputedStyle(a).backgroundColor); if (c[3] > 0) return c; }
    return [255, 255, 255, 1];
  };
  const out = [];
  for (const t of document.querySelectorAll('.gx svg text')) {
    if (!shown(t) || !t.textContent.trim()) continue;
    const bg = t.parentNode.querySelector(':scope > .bg');
    out.push({ text: t.textContent, ratio: ratio(rgba(getComputedStyle(t).fill), rgba(getComputedStyle(bg).fill)) });
  }
  for (const e of document.querySelectorAll('.gx *:not(svg *)')) {
    const own = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!own || !shown(e)) continue;
    out.push({ text: e.textContent.slice(0, 40), ratio: ratio(rgba(getComputedStyle(e).color), htmlBackground(e)) });
  }
  return out;
}"""


def encoder_graph(layers: int = 2) -> Any:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
    with gradexport.capture_modules():
        out = model(torch.randn(2, 3, 16))
    return gradexport.record_gradients(out.pow(2).mean(), module=model)


def xss_graph() -> Any:
    evil_class = type(XSS["class"], (nn.Linear,), {})
    model = nn.Sequential()
    model.add_module(XSS["module"], evil_class(3, 3))
    model.add_module("act", nn.Tanh())
    weight = model.get_submodule(XSS["module"]).weight
    with gradexport.capture_modules():
        out = model(torch.randn(2, 3))
    extra = torch.randn(3, requires_grad=True)
    params = {XSS["param"]: weight, XSS["param2"]: extra}
    return gradexport.to_networkx({XSS["root"]: (out * extra).sum()}, module=model, params=params)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("viewer-pages")
    made = {}
    for name, graph in {"encoder": encoder_graph(), "xss": xss_graph()}.items():
        write_html(graph, folder / f"{name}.html")
        made[name] = (folder / f"{name}.html", graph)
    return made


class Opened:
    def __init__(self, page: Any, target: Any, outside: list[str], errors: list[str]):
        self.page = page
        self.target = target  # the page, or the frame the viewer runs in
        self.outside = outside
        self.errors = errors

    def call(self, expression: str, *args: Any) -> Any:
        return self.target.evaluate(expression, *args)


@pytest.fixture
def open_page(browser: Any) -> Iterator[Any]:  # noqa: F811
    opened: list[Opened] = []

    def open_(path: Path, in_frame: bool = False) -> Opened:
        page = browser.new_page()
        page.set_viewport_size({"width": 1280, "height": 860})
        outside: list[str] = []
        errors: list[str] = []

        def only_the_page(route: Any) -> None:
            if route.request.url == path.as_uri():
                route.continue_()
            else:
                outside.append(route.request.url)
                route.abort()

        page.route("**/*", only_the_page)
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(path.as_uri(), wait_until="load")
        target = page.frames[1] if in_frame else page
        target.wait_for_function("window.gradexportViewer !== undefined")
        target.evaluate("window.gradexportViewer.ready")
        result = Opened(page, target, outside, errors)
        opened.append(result)
        return result

    yield open_
    for result in opened:
        assert result.outside == [], f"requests left the page: {result.outside}"
        assert result.errors == [], f"console errors: {result.errors}"
        result.page.close()


def screenshot(opened: Opened, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    opened.page.screenshot(path=str(ARTIFACTS / f"viewer-{name}.png"))


def module_children(graph: Any, path: str) -> set[str]:
    """What the graph model puts directly under module ``path``: its nodes, and its submodules that have nodes."""
    paths = {module for _, module in graph.nodes(data="module") if module is not None}
    prefix = "" if path == "" else path + "."
    children = {f"module:{p[: len(prefix) + p[len(prefix):].find('.')] if '.' in p[len(prefix):] else p}" for p in paths if p != path and p.startswith(prefix)}
    return children | {node for node, module in graph.nodes(data="module") if module == path}


def expand_structural_folds(opened: Opened, visible: list[str], keep: list[str]) -> list[str]:
    """Expand every linear-run or fan fold not in ``keep`` until only modules and nodes are new."""
    while folds := [item for item in visible if item.startswith(("chain:", "fan:")) and item not in keep]:
        for fold in folds:
            visible = opened.call("id => window.gradexportViewer.expand(id)", fold)
    return visible


def test_opens_offline_folded_within_budget(pages, open_page):
    path, graph = pages["encoder"]
    opened = open_page(path)
    visible = opened.call("window.gradexportViewer.visible()")
    assert 0 < len(visible) <= 150
    assert any(item.startswith("module:") for item in visible)
    assert opened.call("document.querySelectorAll('.gx-node').length") == len(visible)
    screenshot(opened, "encoder-open")


def test_expand_and_collapse_follow_the_modules(pages, open_page):
    path, graph = pages["encoder"]
    opened = open_page(path)
    before = opened.call("window.gradexportViewer.visible()")
    modules = [item for item in before if item.startswith("module:")]
    assert modules
    for module in modules:
        after = opened.call("id => window.gradexportViewer.expand(id)", module)
        after = expand_structural_folds(opened, after, before)
        assert set(after) == (set(before) - {module}) | module_children(graph, module.removeprefix("module:")), module
        assert opened.call("id => window.gradexportViewer.collapse(id)", module) == before
    screenshot(opened, "encoder-collapsed-again")


def test_the_box_of_an_expanded_module_names_its_class(pages, open_page):
    path, graph = pages["encoder"]
    opened = open_page(path)
    opened.call("window.gradexportViewer.expand('module:layers.0.linear1')")
    titles = opened.call("[...document.querySelectorAll('.gx-box-title text')].map(t => t.textContent)")
    assert "layers.0: TransformerEncoderLayer ▾" in titles
    assert "layers.0.linear1: Linear ▾" in titles


def test_search_finds_a_parameter_and_an_op(pages, open_page):
    path, graph = pages["encoder"]
    opened = open_page(path)
    found = opened.call("window.gradexportViewer.search('layers.1.linear2.weight')")
    leaf = next(node for node, names in graph.nodes(data="names") if names and "layers.1.linear2.weight" in names)
    assert found == [leaf]
    ops = opened.call("window.gradexportViewer.search('NativeLayerNormBackward0')")
    assert ops == [node for node, op in graph.nodes(data="op") if op == "NativeLayerNormBackward0"]


def test_select_returns_the_graph_models_attributes(pages, open_page):
    path, graph = pages["encoder"]
    opened = open_page(path)
    for node in [node for node, kind in graph.nodes(data="kind") if kind in ("root", "leaf")][:3] + ["n1", "n5"]:
        expected = json.loads(json.dumps(graph.nodes[node]))
        assert opened.call("id => window.gradexportViewer.select(id)", node) == expected
    panel = opened.call("document.querySelector('.gx-panel').textContent")
    assert graph.nodes["n5"]["op"] in panel
    with pytest.raises(Exception, match="no node or group"):
        opened.call("window.gradexportViewer.select('nope')")
    opened.errors.clear()


def test_selecting_a_parameter_highlights_the_paths_from_the_loss(pages, open_page):
    path, graph = pages["encoder"]
    opened = open_page(path)
    leaf = next(node for node, names in graph.nodes(data="names") if names and "layers.0.linear1.weight" in names)
    opened.call("window.gradexportViewer.search('layers.0.linear1.weight')")
    opened.call("id => { window.gradexportViewer.select(id); }", leaf)
    lit = set(opened.call("[...document.querySelectorAll('.gx-node.gx-on-path')].map(g => g.dataset.id)"))
    visible = opened.call("window.gradexportViewer.visible()")
    assert "n0" in lit and "n1" in lit
    ancestors = nx.ancestors(graph, leaf) | {leaf}
    shown_nodes = {item for item in visible if item in graph}
    assert lit & shown_nodes == ancestors & shown_nodes
    screenshot(opened, "encoder-path")


def test_gradient_norms_colour_edges_with_a_legend(pages, open_page):
    path, graph = pages["encoder"]
    opened = open_page(path)
    assert opened.call("document.querySelectorAll('.gx-ramp span').length") == 6
    coloured = opened.call("[...document.querySelectorAll('.gx-edge-line')].filter(p => p.style.stroke).length")
    assert coloured > 0


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_text_contrast_in_both_themes(pages, open_page, theme):
    path, graph = pages["encoder"]
    opened = open_page(path)
    assert opened.call("name => window.gradexportViewer.theme(name)", theme) == theme
    opened.call("window.gradexportViewer.expand('module:layers.0.self_attn')")
    opened.call("window.gradexportViewer.select('n1')")
    ratios = opened.call(CONTRAST_JS)
    assert len(ratios) > 50
    low = [(entry["text"], round(entry["ratio"], 2)) for entry in ratios if entry["ratio"] < 4.5]
    assert low == []
    screenshot(opened, f"encoder-{theme}")


def test_names_are_shown_literally_and_run_nothing(pages, open_page):
    path, graph = pages["xss"]
    opened = open_page(path)
    visible = opened.call("window.gradexportViewer.visible()")
    for _ in range(10):
        folded = [item for item in visible if item.startswith(("module:", "chain:", "fan:"))]
        if not folded:
            break
        for item in folded:
            visible = opened.call("id => window.gradexportViewer.expand(id)", item)
    leaf = next(node for node, names in graph.nodes(data="names") if names and XSS["param"] in names)
    opened.call("id => window.gradexportViewer.select(id)", leaf)
    opened.page.wait_for_timeout(300)
    assert opened.call("typeof window.__pwned") == "undefined"
    assert opened.call("document.querySelectorAll('.gx img, .gx script, .gx svg svg').length") == 0
    text = opened.call("document.querySelector('.gx').textContent")
    for name in (XSS["param"], XSS["param2"], XSS["root"], XSS["module"], XSS["class"]):
        assert name in text, name
    assert opened.call("t => window.gradexportViewer.search(t)", "onerror=window") == [leaf]
    screenshot(opened, "names")


def test_runs_inside_a_notebook_iframe(pages, open_page, tmp_path):
    path, graph = pages["encoder"]
    host = tmp_path / "notebook.html"
    host.write_text("<!DOCTYPE html><html><body>" + notebook_iframe(path.read_text(encoding="utf-8")) + "</body></html>", encoding="utf-8")
    opened = open_page(host, in_frame=True)
    visible = opened.call("window.gradexportViewer.visible()")
    assert 0 < len(visible) <= 150
    assert opened.call("document.querySelectorAll('.gx-node').length") == len(visible)
    assert opened.page.evaluate("typeof window.gradexportViewer") == "undefined"  # isolated from the notebook
