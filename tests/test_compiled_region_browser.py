"""A compiled region opened in the viewer, in headless Chromium: a click on its folded group shows its ops and their lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from test_compiled_region import Tiny, needs_compiled_graph
from test_site_browser import browser  # noqa: F401  (a fixture: Debian's Chromium through Playwright)
from test_viewer_browser import click, clickable, drawing, drawn_after, open_page, screenshot  # noqa: F401  (open_page: a fixture)

import gradexport
from gradexport.formats.html import write_html

pytestmark = [pytest.mark.browser, pytest.mark.slow, needs_compiled_graph]


def test_a_click_opens_the_region_to_its_ops_with_the_users_lines(tmp_path: Path, open_page: Any) -> None:  # noqa: F811
    model = Tiny()
    with gradexport.tools.capture_compiled():
        loss = torch.compile(model, backend="aot_eager")(torch.randn(4, 3))
    graph = gradexport.to_networkx(loss, params=dict(model.named_parameters()), open_compiled=True)
    (region_id,) = [node for node, data in graph.nodes(data=True) if "compiled_graph" in data]
    ops = graph.nodes[region_id]["compiled_graph"]["ops"]
    write_html(graph, tmp_path / "compiled.html")
    opened = open_page(tmp_path / "compiled.html")

    before = opened.call("window.gradexportViewer.visible()")
    group = f"region:{region_id}"
    assert group in before and not any(item.startswith(f"{region_id}/") for item in before), "the region opens folded"
    _, point = clickable(opened, [group])
    serial = drawing(opened)
    click(opened, point)
    after = drawn_after(opened, serial)
    # The ops fold into linear runs as any nodes do: open those too, then every op is drawn.
    for item in [item for item in after if item.startswith("chain:")]:
        after = opened.call("id => window.gradexportViewer.expand(id)", item)
    assert {f"{region_id}/{op['id']}" for op in ops} <= set(after)
    screenshot(opened, "compiled-region-open")

    line = f"test_compiled_region.py:{Tiny.forward.__code__.co_firstlineno + 1}"
    mm = next(op for op in ops if op.get("source", "").endswith(line) and "forward_op" in op)
    label = opened.call("id => [...document.querySelectorAll('.gx-node')].find((g) => g.dataset.id === id).textContent", f"{region_id}/{mm['id']}")
    assert mm["op"] in label and line in label
    shown = opened.call("id => window.gradexportViewer.select(id)", f"{region_id}/{mm['id']}")
    assert shown["source"] == mm["source"] and shown["op"] == mm["op"]
    panel = opened.call("document.querySelector('.gx-panel').textContent")
    assert f"made at {mm['source']}: hidden = self.lin(x)" in panel
