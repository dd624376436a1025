"""The step-through viewer on the blog's pages, built as a small MkDocs site, in headless Chromium (issue 37).

The two blog pages with a stepping viewer are built on their own (the rest of the
site left out, so links to it only warn), then read at 1280 and 390 px in both
themes: the viewer draws the leaves in the order of the static Graphviz diagram
above it, names the nodes as the page's code does, shows each step's formula
with torch's values, and neither its legend nor any panel covers or cuts what
it shows.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from browser_fixtures import browser, serve_folder, viewer_frame  # noqa: F401  (browser is a fixture)
from site_fixtures import REPO
from test_site_browser import _OVERFLOWING, _SETUP_PAGE, DARK_PALETTE, PALETTE_KEY, RENDER_TIMEOUT_S
from torch_versions import needs_input_metadata

from gradexport.frontends.blocks.markdown import find_blocks

pytestmark = [pytest.mark.browser, needs_input_metadata]

PAGES = ("blog/multiply-then-sum.md", "blog/unbind-then-add.md")
WIDTHS = (1280, 390)
HEIGHT = 844
THEMES = {"light": None, "dark": DARK_PALETTE}


@pytest.fixture(scope="module")
def blog_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The blog's two stepping pages, built with the project's mkdocs.yml (its nav and the other pages left out), served."""
    root = tmp_path_factory.mktemp("stepper-site")
    docs = root / "docs"
    for folder in ("css", "js"):
        shutil.copytree(REPO / "docs" / folder, docs / folder)
    for page in PAGES:
        (docs / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "docs" / page, docs / page)
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    config = config.replace("docs_dir: docs", f"docs_dir: {docs}").split("\nnav:")[0]
    mermaid = REPO / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
    config = config.replace("\n  - gradexport\n", f"\n  - gradexport:\n      mermaid_js: {mermaid}\n")
    (root / "mkdocs.yml").write_text(config, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--config-file", str(root / "mkdocs.yml"), "--site-dir", str(root / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    with serve_folder(root / "site") as url:
        yield url


def page_namespace(page: str) -> dict[str, Any]:
    """The page's own blocks run in order, as the build ran them: the tensors the viewer must show."""
    path = REPO / "docs" / page
    namespace: dict[str, Any] = {}
    for block in find_blocks(path.read_text(encoding="utf-8").splitlines(), page):
        exec(compile(block.code, str(path), "exec"), namespace)
        if "record" in namespace:
            break
    return namespace


def open_viewer(browser: Any, url: str, width: int, theme: str) -> tuple[Any, Any]:  # noqa: F811
    page = browser.new_page()
    page.set_viewport_size({"width": width, "height": HEIGHT})
    page.add_init_script(f"({_SETUP_PAGE})({json.dumps([THEMES[theme], PALETTE_KEY])})")
    page.goto(url, wait_until="load")
    frame = viewer_frame(page, RENDER_TIMEOUT_S)
    frame.wait_for_function(f"document.getElementById('gradexport-viewer').dataset.theme === '{theme}'", timeout=RENDER_TIMEOUT_S * 1000)
    # As a reader scrolls to it (Chromium runs no resize observer in a frame out of view)...
    page.locator(".gradexport-viewer iframe").first.scroll_into_view_if_needed()
    # ...the page has laid its frame out after the viewer's first drawing, which fits itself again: wait until it holds still.
    transform = "document.querySelector('.gx-viewport').getAttribute('transform')"
    before = None
    while (now := frame.evaluate(transform)) != before:
        before = now
        frame.wait_for_timeout(400)
    return page, frame


#: The on-screen x of each leaf's name, in the static Graphviz SVG on the page and in the viewer.
_STATIC_LEAVES = """(names) => {
  const svg = [...document.querySelectorAll('.gradexport-svg svg')].at(-1);
  return names.map(name => [...svg.querySelectorAll('g.node')].filter(g => g.querySelector('text')?.textContent === name)
    .map(g => g.getBoundingClientRect().left)[0] ?? null);
}"""
_VIEWER_LEAVES = """(names) => names.map(name => [...document.querySelectorAll('.gx-node')]
  .filter(g => g.querySelector('text')?.textContent === name).map(g => g.getBoundingClientRect().left)[0] ?? null)"""

#: Every drawn node (its shape and the notes under it) that a box of the viewer (legend, status, minimap, help) covers.
_COVERED = """() => {
  const boxes = [...document.querySelectorAll('.gx-legend, .gx-status, .gx-minimap, .gx-help')]
    .filter(e => e.offsetParent !== null).map(e => [e.className, e.getBoundingClientRect()]);
  const canvas = document.querySelector('.gx-canvas').getBoundingClientRect();
  return [...document.querySelectorAll('.gx-node')].flatMap(g => {
    const r = g.getBoundingClientRect();
    if (r.right < canvas.left || r.left > canvas.right || r.bottom < canvas.top || r.top > canvas.bottom) return [];
    return boxes.filter(([, b]) => r.left < b.right && r.right > b.left && r.top < b.bottom && r.bottom > b.top)
      .map(([name]) => `${g.textContent} under ${name}`);
  });
}"""

#: Text of the step panel or the step bar that is cut (wider than its box, past the frame's edge), or the panel's
#: text hidden by its own height on a phone.
_CUT = """() => {
  const panel = document.querySelector('.gx-panel');
  const cut = [...document.querySelectorAll('.gx-panel *, .gx-stepbar *')]
    .filter(e => [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()))
    .filter(e => e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right > innerWidth + 1)
    .map(e => `${e.className || e.localName}: ${e.textContent.slice(0, 40)}`);
  if (panel.scrollHeight > panel.clientHeight + 1 && getComputedStyle(panel).overflowY !== 'visible' && innerWidth < 600)
    cut.push(`the panel shows ${panel.clientHeight} of its ${panel.scrollHeight} px`);
  return cut;
}"""


def panel_values(frame: Any) -> dict[str, str]:
    """Each value the step panel's formulas show, by what it is called there ("dz", "y", the result "dx")."""
    return frame.evaluate("""() => Object.fromEntries([...document.querySelectorAll('.gx-step-product')].flatMap(product =>
      [...product.querySelectorAll('.gx-step-term')].map(term => {
        let next = term.nextElementSibling;
        while (next && !next.classList.contains('gx-step-values')) next = next.nextElementSibling;
        return [product.dataset.position + ':' + term.textContent.replace(/ =$/, ''), next ? next.textContent : null];
      })))""")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("theme", list(THEMES))
def test_multiply_then_sum_steps_as_the_page_draws_and_names_them(blog_site: str, browser: Any, width: int, theme: str) -> None:  # noqa: F811
    page, frame = open_viewer(browser, blog_site + "blog/multiply-then-sum/", width, theme)
    # 1. The leaves in the order of the static diagram above (Graphviz's, from next_functions).
    static = page.evaluate(_STATIC_LEAVES, ["x", "y"])
    viewer = frame.evaluate(_VIEWER_LEAVES, ["x", "y"])
    assert None not in static + viewer, (static, viewer)
    assert (static[0] < static[1]) == (viewer[0] < viewer[1]), (static, viewer)
    # 2. The page's names for the nodes, as its code gives them.
    namespace = page_namespace("blog/multiply-then-sum.md")
    drawn = frame.evaluate("[...document.querySelectorAll('.gx-node')].map(g => [...g.querySelectorAll('text')].map(t => t.textContent))")
    for name in ("back_sum", "back_mul", "back_x", "back_y"):
        assert sum(name in lines for lines in drawn) == 1, (name, drawn)
    steps = frame.evaluate("window.gradexportViewer.steps()")
    problems: list[str] = []
    for k in range(steps):
        step = frame.evaluate(f"window.gradexportViewer.step({k})")
        frame.wait_for_timeout(100)
        # 4. Nothing over the drawing's nodes; 3. nothing of the panel cut, the 4×4 tensors whole.
        problems += [f"step {k + 1}: {text}" for text in frame.evaluate(_COVERED) + frame.evaluate(_CUT) + frame.evaluate(_OVERFLOWING)]
        if step["op"] == "MulBackward0":
            assert frame.locator(".gx-step-panel [data-fact='in the code']").text_content() == "back_mul"
            heads = frame.evaluate("[...document.querySelectorAll('.gx-step-slot .gx-step-head')].map(e => e.textContent)")
            assert heads == ["slot 0 ← back_sum[0]"]
            # 5. The formula with torch's values: dz as it arrived, y and x as the forward saved them, dx and dy as torch's backward gives them.
            x, y, loss = namespace["x"], namespace["y"], namespace["l"]
            dx, dy = torch.autograd.grad(loss, [x, y], retain_graph=True)
            texts = frame.evaluate("[...document.querySelectorAll('.gx-step-product .gx-step-head')].map(e => e.textContent)")
            assert [text.split("  (")[0] for text in texts] == ["dx = dz · y", "dy = dz · x"]
            assert panel_values(frame) == {
                "0:dz": repr(torch.ones(4, 4)),
                "0:y": repr(y.detach()),
                "0:dx": repr(dx),
                "1:dz": repr(torch.ones(4, 4)),
                "1:x": repr(x.detach()),
                "1:dy": repr(dy),
            }
    page.close()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("theme", list(THEMES))
def test_unbind_then_add_shows_each_steps_formula_and_covers_nothing(blog_site: str, browser: Any, width: int, theme: str) -> None:  # noqa: F811
    page, frame = open_viewer(browser, blog_site + "blog/unbind-then-add/", width, theme)
    drawn = frame.evaluate("[...document.querySelectorAll('.gx-node')].map(g => [...g.querySelectorAll('text')].map(t => t.textContent))")
    assert [lines for lines in drawn if "back_add" in lines or "back_unbind" in lines] == [["AddBackward0", "back_add"], ["UnbindBackward0", "back_unbind"]]
    namespace = page_namespace("blog/unbind-then-add.md")
    (expected,) = torch.autograd.grad(namespace["l"], [namespace["x"]], retain_graph=True)
    problems: list[str] = []
    formulas = {}
    for k in range(frame.evaluate("window.gradexportViewer.steps()")):
        step = frame.evaluate(f"window.gradexportViewer.step({k})")
        frame.wait_for_timeout(100)
        problems += [f"step {k + 1}: {text}" for text in frame.evaluate(_COVERED) + frame.evaluate(_CUT) + frame.evaluate(_OVERFLOWING)]
        formulas[step["op"]] = frame.evaluate("[...document.querySelectorAll('.gx-step-product .gx-step-head, .gx-step-note')].map(e => e.textContent)")
        if step["op"] == "UnbindBackward0":
            values = panel_values(frame)
            assert values["0:dx"] == repr(expected), values
    page.close()
    assert not problems, "\n".join(problems)
    assert [text.split("  (")[0] for text in formulas["AddBackward0"]] == ["dx = dz", "dy = dz"]
    assert re.fullmatch(r"dx = stack\(\[dz0, dz1\], dim=0\)", formulas["UnbindBackward0"][0].split("  (")[0]), formulas
    assert formulas["AccumulateGrad"][0].startswith("AccumulateGrad is the leaf's sink")
