"""Finding one's way on a large drawing in the viewer (issue 24, item 11), in headless Chromium with a real mouse and keys.

A diff's page opens at its first change and steps through the changes; a
search centres and zooms in; Fit on a deep net is fitted across, not a thin
strip; a minimap goes where it is clicked; a button lays the drawing out top to
bottom or left to right. What is checked is where things are on the screen
(``getBoundingClientRect``) and the graph gradexport wrote, never the
viewer's own idea of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from model_zoo import REAL_MODELS, GPTLike
from test_site_browser import browser  # noqa: F401  (a fixture: Debian's Chromium through Playwright)
from test_viewer_browser import (  # noqa: F401  (open_page and pages are fixtures)
    PANEL_JS,
    Opened,
    click,
    drawing,
    drawn_after,
    open_page,
    pages,
    press,
    screenshot,
    transform,
)
from torch import nn

import gradexport
from gradexport.formats.html import write_html

pytestmark = pytest.mark.browser

#: The selected items' ids, and where the first is on screen against the canvas's middle.
SELECTED_JS = """() => {
  const selected = [...document.querySelectorAll('.gx-node.gx-selected')];
  const canvas = document.querySelector('.gx-canvas').getBoundingClientRect();
  const r = selected.length ? selected[0].querySelector('.gx-shape').getBoundingClientRect() : null;
  return {
    ids: selected.map((g) => g.dataset.id),
    dx: r ? r.left + r.width / 2 - (canvas.left + canvas.width / 2) : null,
    dy: r ? r.top + r.height / 2 - (canvas.top + canvas.height / 2) : null,
  };
}"""
#: The drawing's size in its own units, and on screen against the canvas.
SIZES_JS = """() => {
  const viewport = document.querySelector('.gx-viewport');
  const box = viewport.getBBox();
  const shown = viewport.getBoundingClientRect();
  const canvas = document.querySelector('.gx-canvas').getBoundingClientRect();
  return { width: box.width, height: box.height, shownWidth: shown.width, shownHeight: shown.height,
           top: shown.top - canvas.top, canvasWidth: canvas.width, canvasHeight: canvas.height };
}"""
#: Centres of drawn nodes by id, in the drawing's coordinates.
CENTRES_JS = """() => Object.fromEntries([...document.querySelectorAll('.gx-node')].map((g) => {
  const b = g.querySelector('.gx-shape').getBBox();
  return [g.dataset.id, [b.x + b.width / 2, b.y + b.height / 2]];
}))"""


def gpt_graph(activation: type[nn.Module] | None = None) -> Any:
    torch.manual_seed(0)
    model = GPTLike(blocks=4)
    if activation is not None:
        for block in (1, 3):  # changes deep inside, folded on opening
            model.transformer["h"][block].mlp[1] = activation()
    with gradexport.capture_modules():
        output = model(torch.randint(0, 11, (2, 5)))
    return gradexport.to_networkx(output.sum(), module=model)


def deep_graph() -> Any:
    model, inputs = REAL_MODELS["encoder12"]()
    with gradexport.capture_modules():
        output = model(inputs)
    return gradexport.to_networkx(output.sum(), module=model)


@pytest.fixture(scope="module")
def navigation_pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    folder = tmp_path_factory.mktemp("viewer-navigation")
    graphs = {"diff": gradexport.diff(gpt_graph(), gpt_graph(nn.ReLU)), "deep": deep_graph()}
    made = {}
    for name, graph in graphs.items():
        write_html(graph, folder / f"{name}.html")
        made[name] = (folder / f"{name}.html", graph)
    return made


def assert_centred(opened: Opened, node: str) -> None:
    selected = opened.call(SELECTED_JS)
    assert selected["ids"] == [node]
    assert abs(selected["dx"]) < 2 and abs(selected["dy"]) < 2, selected  # in the middle of the canvas
    assert transform(opened)[2] >= 1  # and readable: at 1:1 or closer


def test_a_diff_opens_at_its_first_change_and_steps_through_the_changes(navigation_pages, open_page):  # noqa: F811
    path, graph = navigation_pages["diff"]
    changes = [node for node, state in graph.nodes(data="diff") if state in ("added", "removed", "changed")]
    assert len(changes) >= 2
    assert {graph.nodes[node]["module"] for node in changes} == {"transformer.h.1.mlp.1", "transformer.h.3.mlp.1"}  # GELU against ReLU
    opened = open_page(path)
    assert_centred(opened, changes[0])
    assert opened.call(PANEL_JS)["fields"]["id"] == changes[0]
    count = opened.page.locator(".gx-change-count")
    assert count.text_content() == f"change 1 of {len(changes)}"

    before = drawing(opened)
    opened.page.get_by_role("button", name="Change ›").click()  # a real click on the toolbar button
    drawn_after(opened, before)
    assert_centred(opened, changes[1])
    assert count.text_content() == f"change 2 of {len(changes)}"
    press(opened, "p", draws=True)
    assert_centred(opened, changes[0])
    press(opened, "p", draws=True)  # before the first: the last
    assert_centred(opened, changes[-1])
    assert count.text_content() == f"change {len(changes)} of {len(changes)}"
    press(opened, "n", draws=True)
    assert_centred(opened, changes[0])
    screenshot(opened, "diff-first-change")


def test_search_centres_and_zooms_in_on_the_first_match(pages, open_page):  # noqa: F811
    path, graph = pages["encoder"]
    opened = open_page(path)
    press(opened, "f")
    for _ in range(4):
        press(opened, "-")
    assert transform(opened)[2] < 1
    press(opened, "/")
    op = "NativeLayerNormBackward0"
    opened.page.keyboard.type(op)
    press(opened, "Enter", draws=True)
    shown = opened.call(PANEL_JS)
    assert shown["heading"].endswith("matches")
    selected = opened.call(SELECTED_JS)
    assert selected["ids"] and opened.call("window.gradexportViewer.select(document.querySelector('.gx-node.gx-selected').dataset.id).op") == op
    assert abs(selected["dx"]) < 2 and abs(selected["dy"]) < 2
    assert transform(opened)[2] >= 1
    assert sum(attribute == op for _, attribute in graph.nodes(data="op")) == int(shown["heading"].split()[0])


def test_fit_on_a_deep_net_is_fitted_across_and_scrolls_from_the_top(navigation_pages, open_page):  # noqa: F811
    path, _ = navigation_pages["deep"]
    opened = open_page(path)
    opened.call("window.gradexportViewer.expandAll()")  # every layer open, drawn: a drawing many screens tall
    opened.page.locator(".gx-canvas").click(position={"x": 5, "y": 5})  # the keys go to the page
    press(opened, "f")
    sizes = opened.call(SIZES_JS)
    assert sizes["height"] > 8 * sizes["canvasHeight"]  # deep: the whole of it would be a strip
    # Fitted across: the drawing's width fills the canvas's, or shows at 1:1 when narrower.
    assert sizes["shownWidth"] >= min(0.9 * sizes["canvasWidth"], 0.99 * sizes["width"]), sizes
    assert transform(opened)[2] >= 0.5
    assert 0 <= sizes["top"] <= 10  # from the top, where the loss is
    screenshot(opened, "fit-deep")

    # The minimap: a click near its bottom brings the bottom of the drawing to the middle of the canvas.
    minimap = opened.page.locator(".gx-minimap-svg").bounding_box()
    assert minimap is not None and minimap["height"] > 100
    fraction = 0.9
    click(opened, {"x": minimap["x"] + minimap["width"] / 2, "y": minimap["y"] + fraction * minimap["height"]})
    x, y, k = transform(opened)
    middle = (sizes["canvasHeight"] / 2 - y) / k  # the drawing's y at the canvas's middle
    top = opened.call("document.querySelector('.gx-viewport').getBBox().y")
    assert middle - top == pytest.approx(fraction * sizes["height"], rel=0.03)
    view = opened.page.locator(".gx-minimap-view").bounding_box()
    assert view is not None and view["y"] > minimap["y"] + minimap["height"] / 2  # its frame followed
    press(opened, "m")
    assert not opened.page.locator(".gx-minimap").is_visible()
    press(opened, "m")
    assert opened.page.locator(".gx-minimap").is_visible()


def test_the_direction_button_and_key_lay_the_drawing_out_left_to_right_and_back(navigation_pages, open_page):  # noqa: F811
    path, graph = navigation_pages["deep"]
    opened = open_page(path)
    root = next(node for node, kind in graph.nodes(data="kind") if kind == "root")
    before = drawing(opened)
    opened.page.get_by_role("button", name="↓ Top-down").click()
    drawn_after(opened, before)
    assert opened.call("window.gradexportViewer.layoutRequest().direction") == "LR"
    centres = opened.call(CENTRES_JS)
    others = [centre for item, centre in centres.items() if item != root]
    assert len(others) > 5 and all(centres[root][0] < other[0] for other in others)  # the loss on the left of all
    assert opened.page.get_by_role("button", name="→ Left-right").is_visible()
    sizes = opened.call(SIZES_JS)
    assert sizes["shownWidth"] <= sizes["canvasWidth"] + 1 or sizes["top"] >= 0  # fitted anew
    press(opened, "l", draws=True)
    assert opened.call("window.gradexportViewer.layoutRequest().direction") == "TB"
    centres = opened.call(CENTRES_JS)
    assert all(centres[root][1] < centre[1] for item, centre in centres.items() if item != root)  # the loss at the top
