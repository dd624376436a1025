"""The viewer page in headless Chromium, opened from file:// with the network blocked.

Screenshots go to tests/artifacts/ (ignored by git) for a person to look at.
"""

from __future__ import annotations

import json
import re
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
from gradexport.formats.styles import GRAD_BOUNDS, GRAD_COLORS, GRAD_COLORS_DARK, GradScale, grad_legend

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
    children = {
        f"module:{p[: len(prefix) + p[len(prefix) :].find('.')] if '.' in p[len(prefix) :] else p}" for p in paths if p != path and p.startswith(prefix)
    }
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
    legend = opened.call("[...document.querySelectorAll('[data-legend^=grad-]')].map(row => row.textContent)")
    assert legend == [text for text, _, _ in grad_legend()]
    # Every line's colour is the fixed scale's step of its gradient, as Python's GradScale gives it, in each theme.
    strokes = opened.call(
        "[...document.querySelectorAll('.gx-edge')].map(g => [g.querySelector('.gx-edge-line').style.stroke,"
        " getComputedStyle(g.querySelector('.gx-edge-line')).stroke, g.querySelector('.gx-edge-label').textContent])"
    )
    coloured = [item for item in strokes if item[0]]
    assert coloured
    for theme, colours in (("light", GRAD_COLORS), ("dark", GRAD_COLORS_DARK)):
        opened.call("name => window.gradexportViewer.theme(name)", theme)
        computed = opened.call("[...document.querySelectorAll('.gx-edge-line')].filter(p => p.style.stroke).map(p => getComputedStyle(p).stroke)")
        rgb = {f"rgb({int(c[1:3], 16)}, {int(c[3:5], 16)}, {int(c[5:7], 16)})": c for c in colours}
        assert set(computed) <= set(rgb), (theme, set(computed) - set(rgb))
    # A single edge's step is the one Python's GradScale gives its printed norm (3 digits: skip norms at a bound).
    for stroke, _, label in coloured:
        if "‖g‖" in label and "×" not in label:
            norm = float(label.split("‖g‖ ")[1])
            if all(abs(norm - bound) > 0.01 * bound for bound in GRAD_BOUNDS):
                assert stroke == f"var(--gx-grad-{GRAD_COLORS.index(GradScale().style({'norm': norm})[0])})", label


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


# ---- a real mouse and keyboard ----------------------------------------------------------------
# The tests above drive the page through window.gradexportViewer; these click and press keys as a person does.

#: The middle of the drawn item with data-id ``id``, if a click there reaches it (on screen, nothing on top); else null.
POINT_JS = """id => {
  const g = [...document.querySelectorAll('.gx-node')].find((e) => e.dataset.id === id);
  if (!g) return null;
  const r = g.querySelector('.gx-shape').getBoundingClientRect();
  const x = r.left + r.width / 2, y = r.top + r.height / 2;
  const hit = document.elementFromPoint(x, y);
  return hit && hit.closest('.gx-node') === g ? { x, y } : null;
}"""
#: A point of the canvas with nothing drawn on it.
EMPTY_POINT_JS = """() => {
  const svg = document.querySelector('.gx-canvas');
  const r = svg.getBoundingClientRect();
  for (let y = r.top + 4; y < r.bottom; y += 6) for (let x = r.left + 4; x < r.right; x += 6) if (document.elementFromPoint(x, y) === svg) return { x, y };
  return null;
}"""
PANEL_JS = """() => ({
  heading: document.querySelector('.gx-panel h2').textContent,
  fields: Object.fromEntries([...document.querySelectorAll('.gx-panel dt')].map((dt) => [dt.textContent, dt.nextElementSibling.textContent])),
  buttons: [...document.querySelectorAll('.gx-panel > button')].map((b) => b.textContent),
  crumbs: [...document.querySelectorAll('.gx-crumbs button')].map((b) => b.textContent),
  here: document.querySelector('.gx-crumbs .gx-here')?.textContent ?? null,
})"""


def clickable(opened: Opened, ids: list[str]) -> tuple[str, dict[str, float]]:
    """The first of ``ids`` that a mouse can click where it is drawn, and where."""
    for item in ids:
        point = opened.call(POINT_JS, item)
        if point is not None:
            return item, point
    raise AssertionError(f"none of {ids} can be clicked")


def drawing(opened: Opened) -> str:
    """The serial of the layout now drawn (the canvas's data-rendered)."""
    return opened.call("document.querySelector('.gx-canvas').dataset.rendered")


def drawn_after(opened: Opened, before: str) -> list[str]:
    """Wait until a drawing newer than ``before`` is on the page; the visible ids then."""
    opened.target.wait_for_function("before => document.querySelector('.gx-canvas').dataset.rendered !== before", arg=before, timeout=10_000)
    return opened.call("window.gradexportViewer.visible()")


def click(opened: Opened, point: dict[str, float]) -> None:
    opened.page.mouse.click(point["x"], point["y"])


def press(opened: Opened, key: str, *, draws: bool = False) -> list[str] | None:
    """Press ``key`` on the focused element; with ``draws``, wait for the drawing it starts."""
    before = drawing(opened)
    opened.page.keyboard.press(key)
    return drawn_after(opened, before) if draws else None


def reachable(opened: Opened, ids: list[str]) -> tuple[str, dict[str, float]]:
    """The first of ``ids`` a mouse can click, panning down the drawing with the arrow key until one shows."""
    for _ in range(80):
        try:
            return clickable(opened, ids)
        except AssertionError:
            press(opened, "ArrowDown")
    return clickable(opened, ids)


def click_to_open(opened: Opened) -> tuple[str, str, list[str], list[str]]:
    """Fit the drawing to the screen (key f; a long one is fitted across), pan down to the first folded module
    a mouse can reach and click it: its id, its label, the visible ids before and after."""
    press(opened, "f")
    before = opened.call("window.gradexportViewer.visible()")
    group, point = reachable(opened, [item for item in before if item.startswith("module:")])
    label = opened.call("id => [...document.querySelectorAll('.gx-node')].find((g) => g.dataset.id === id).querySelector('text').textContent", group)
    serial = drawing(opened)
    click(opened, point)
    return group, label, before, drawn_after(opened, serial)


def transform(opened: Opened) -> tuple[float, float, float]:
    """The drawing's pan and zoom: (x, y, scale)."""
    text = opened.call("document.querySelector('.gx-viewport').getAttribute('transform')")
    x, y, k = map(float, re.fullmatch(r"translate\(([-\d.]+),([-\d.]+)\) scale\(([-\d.]+)\)", text).groups())
    return x, y, k


def test_a_click_on_a_folded_group_opens_it_and_selects_it(pages, open_page):
    opened = open_page(pages["encoder"][0])
    group, label, before, after = click_to_open(opened)
    assert opened.errors == []
    assert group not in after and set(before) - {group} <= set(after)
    assert opened.call("id => [...document.querySelectorAll('.gx-box')].some((b) => b.dataset.id === id)", group)
    shown = opened.call(PANEL_JS)
    assert shown["heading"] == label
    assert shown["fields"]["id"] == group and shown["fields"]["expanded"] == "true"
    assert shown["buttons"] == ["Collapse"]
    assert shown["crumbs"][0] == "graph" and shown["here"] == label


def test_a_click_selects_a_node_and_the_box_title_folds_it_again(pages, open_page):
    path, graph = pages["encoder"]
    opened = open_page(path)
    group, label, before, after = click_to_open(opened)
    node, point = clickable(opened, [item for item in after if item in graph and item not in before])
    click(opened, point)
    shown = opened.call(PANEL_JS)
    assert shown["fields"]["id"] == node and shown["fields"]["op"] == graph.nodes[node]["op"]
    assert label in shown["crumbs"]
    assert opened.call("[...document.querySelectorAll('.gx-node.gx-selected')].map((g) => g.dataset.id)") == [node]
    title = opened.call(
        "id => { const r = [...document.querySelectorAll('.gx-box')].find((b) => b.dataset.id === id).querySelector('.gx-box-title rect').getBoundingClientRect();"
        " return { x: r.left + 6, y: r.top + r.height / 2 }; }",
        group,
    )
    serial = drawing(opened)
    click(opened, title)
    assert drawn_after(opened, serial) == before
    assert opened.errors == []


def test_keys_pan_zoom_fit_theme_and_search(pages, open_page):
    path, graph = pages["encoder"]
    opened = open_page(path)
    assert opened.call("document.activeElement === document.querySelector('.gx')")  # focused on load
    theme = opened.call("window.gradexportViewer.theme()")
    press(opened, "t")
    assert opened.call("window.gradexportViewer.theme()") == ("dark" if theme == "light" else "light")
    press(opened, "t")
    assert opened.call("window.gradexportViewer.theme()") == theme

    press(opened, "f")
    fitted = transform(opened)
    for key, factor in (("+", 1.25), ("=", 1.25), ("-", 1 / 1.25)):
        k = transform(opened)[2]
        press(opened, key)
        assert transform(opened)[2] == pytest.approx(k * factor, rel=1e-3), key
    for key, (dx, dy) in {"ArrowLeft": (60, 0), "ArrowRight": (-60, 0), "ArrowUp": (0, 60), "ArrowDown": (0, -60)}.items():
        x, y, k = transform(opened)
        press(opened, key)
        assert transform(opened) == pytest.approx((x + dx, y + dy, k), abs=0.02), key
    assert transform(opened) != pytest.approx(fitted)
    press(opened, "f")
    assert transform(opened) == pytest.approx(fitted)

    press(opened, "/")
    assert opened.call("document.activeElement === document.querySelector('.gx-search')")
    op = "NativeLayerNormBackward0"
    opened.page.keyboard.type(op)
    press(opened, "Enter", draws=True)
    matches = [node for node, attribute in graph.nodes(data="op") if attribute == op]
    assert opened.call(PANEL_JS)["heading"] == f"{len(matches)} matches"
    assert opened.call("document.querySelectorAll('.gx-node.gx-match').length") > 0
    press(opened, "Escape")  # leaves the search box, keeps the search
    assert opened.call("document.activeElement !== document.querySelector('.gx-search')")
    click(opened, opened.call(EMPTY_POINT_JS))  # a click on the canvas clears the selection and gives it the keys
    assert opened.call("document.activeElement === document.querySelector('.gx')")
    assert opened.call(PANEL_JS)["heading"] == "Graph"
    press(opened, "Escape")
    assert opened.call("document.querySelector('.gx-search').value") == ""
    assert opened.call("document.querySelectorAll('.gx-match').length") == 0
    assert opened.errors == []


def test_enter_folds_the_selected_group_and_backspace_the_box_around_the_selection(pages, open_page):
    path, graph = pages["encoder"]
    opened = open_page(path)
    group, label, before, opened_up = click_to_open(opened)
    assert press(opened, "Enter", draws=True) == before
    shown = opened.call(PANEL_JS)
    assert shown["heading"] == label and shown["buttons"] == ["Expand"]
    assert shown["fields"]["id"] == group and shown["fields"]["expanded"] == "false"
    assert press(opened, "Enter", draws=True) == opened_up
    assert opened.call(PANEL_JS)["fields"]["expanded"] == "true"
    node, point = clickable(opened, [item for item in opened_up if item in graph and item not in before])
    click(opened, point)
    assert opened.call(PANEL_JS)["fields"]["id"] == node
    assert press(opened, "Backspace", draws=True) == before
    shown = opened.call(PANEL_JS)
    assert shown["heading"] == label and shown["here"] == label and shown["fields"]["expanded"] == "false"
    assert opened.errors == []


def test_what_is_selected_while_a_layout_is_on_its_way_shows_on_the_drawing_then_there(pages, open_page):
    path, graph = pages["encoder"]
    opened = open_page(path)
    before = opened.call("window.gradexportViewer.visible()")
    module = next(item for item in before if item.startswith("module:"))
    node = next(item for item in before if item in graph)
    edges = "() => window.gradexportViewer.layoutRequest().edges.map((e) => [e.from, e.to])"
    folded = opened.call(edges)
    opened.call("id => window.gradexportViewer.expand(id)", module)
    opened_up = opened.call(edges)
    assert opened.call("id => window.gradexportViewer.collapse(id)", module) == before
    # An edge whose number stands for another edge once the module is open.
    j = next(j for j, (a, b) in enumerate(zip(folded, opened_up)) if a != b)
    click_edge = f"() => document.querySelector('.gx-edge[data-edge=\"{j}\"]').dispatchEvent(new MouseEvent('click', {{ bubbles: true }}))"
    panel = "document.querySelector('.gx-panel').textContent"
    opened.call(click_edge)
    edge_panel = opened.call(panel)
    # The module opened, a node selected and edge j of the old drawing clicked in one task: the old drawing is still there.
    opened.call(
        f"([module, node]) => {{ const opening = window.gradexportViewer.expand(module); window.gradexportViewer.select(node); ({click_edge})(); return opening; }}",
        [module, node],
    )
    assert opened.errors == []
    assert opened.call(panel) == edge_panel
    assert opened.call("[...document.querySelectorAll('.gx-node.gx-selected')].map((g) => g.dataset.id)") == [node]  # on the new drawing
