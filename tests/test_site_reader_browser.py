"""The built site as a learner reads it, in headless Chromium (issue 37).

Every ``gradexport`` block is rendered, and the nodes the prose names are in
view when a diagram first shows, at desktop and phone widths, in both themes.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from browser_fixtures import browser  # noqa: F401  (a fixture)
from site_fixtures import REPO, BuiltSite, built_site  # noqa: F401  (a fixture)
from test_site_browser import (  # noqa: F401  (site_url is a fixture)
    _SETUP_PAGE,
    DARK_PALETTE,
    PALETTE_KEY,
    _wait_for_mermaid,
    site_pages,
    site_url,
)

pytestmark = pytest.mark.browser

#: Desktop and phone, the widths the issue was reported at.
WIDTHS = (1280, 390)
PHONE_HEIGHT = 844
THEMES = {"light": None, "dark": DARK_PALETTE}

#: Text that only a gradexport block left as Markdown shows: its fence line, or (inside a
#: paragraph, where the fence became an inline code span) the word and an option or the code.
_RAW_BLOCKS = r"""() => {
  const fence = /(^|\n)[ \t]*(`{3,}|~{3,})[ \t]*gradexport(\s|$)/;
  const spilled = /^\s*gradexport(\s+[a-z_]+=|\s*\n)/;
  const raw = [];
  for (const pre of document.querySelectorAll(".md-content pre")) {
    // A ````markdown fence that documents the block syntax shows it on purpose: highlighted
    // as Markdown, its fence line is one string token (Pygments' "sb").
    if ([...pre.querySelectorAll("span.sb")].some(token => fence.test(token.textContent))) continue;
    if (fence.test(pre.textContent)) raw.push("code block: " + pre.textContent.trim().slice(0, 60));
  }
  for (const code of document.querySelectorAll(".md-content code")) {
    if (!code.closest("pre") && spilled.test(code.textContent)) raw.push("inline code: " + code.textContent.slice(0, 60));
  }
  for (const text of document.querySelectorAll(".md-content p, .md-content li, .md-content dd, .md-content td")) {
    const own = [...text.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join("");
    if (fence.test(own)) raw.push("text: " + own.trim().slice(0, 60));
  }
  return raw;
}"""


def _open(browser: Any, url: str, width: int, palette: str | None) -> Any:
    page = browser.new_page()
    page.set_viewport_size({"width": width, "height": PHONE_HEIGHT})
    page.add_init_script(f"({_SETUP_PAGE})({json.dumps([palette, PALETTE_KEY])})")
    page.goto(url, wait_until="load")
    return page


def test_no_page_shows_an_unrendered_block(built_site: BuiltSite, site_url: str, browser: Any) -> None:
    """No page shows a gradexport block as text (the glossary's blocks inside a definition list did)."""
    problems: list[str] = []
    pages = site_pages(built_site)
    for path in pages:
        page = browser.new_page()
        page.goto(site_url + path, wait_until="load")
        problems += [f"/{path}: {raw}" for raw in page.evaluate(_RAW_BLOCKS)]
        page.close()
    assert len(pages) >= 30
    assert not problems, "\n".join(problems)


def test_the_glossarys_examples_print_torchs_values(built_site: BuiltSite, site_url: str, browser: Any) -> None:
    """The glossary's definitions hold their examples' output, as the torch running this test prints it."""
    import torch

    x = torch.randn(4, 4, requires_grad=True)
    chosen = torch.where(x > 0, x, torch.zeros(4, 4))
    entries = str([(None if g is None else type(g).__name__, k) for g, k in chosen.grad_fn.next_functions])
    page = browser.new_page()
    page.goto(site_url + "concepts/glossary/", wait_until="load")
    outputs = page.evaluate(
        "[...document.querySelectorAll('dd .highlight')].filter(h => h.querySelector('.filename')).map(h => h.querySelector('code').textContent.trim())"
    )
    page.close()
    markdown = (REPO / "docs" / "concepts" / "glossary.md").read_text(encoding="utf-8")
    in_definitions = re.findall(r'^    ```gradexport show="[a-z ]*output', markdown, re.M)
    assert len(in_definitions) >= 6 and len(outputs) == len(in_definitions), outputs
    assert entries in outputs, (entries, outputs)


#: For each page: which diagram (its index among the page's diagram boxes) and the node
#: labels its prose names. The reader must see them without scrolling the diagram's box.
NAMED_IN_PROSE = {
    "": (0, ["output", "weight", "bias"]),
    "concepts/execution-order/": (0, [f"#{k}" for k in range(1, 9)]),
    "blog/hand-replay/": (-1, ["output", "0.weight", "0.bias"]),
}

#: The named nodes that do not lie wholly inside the first view of the diagram's box.
_OUT_OF_VIEW = r"""([index, names]) => {
  const boxes = [...document.querySelectorAll(".gradexport-diagram")].filter(b => !b.classList.contains("gradexport-svg") || b.offsetParent);
  const box = boxes.at(index);
  const outer = box.getBoundingClientRect();
  const view = {left: outer.left + box.clientLeft, top: outer.top + box.clientTop};
  view.right = view.left + box.clientWidth;
  view.bottom = view.top + box.clientHeight;
  const roots = [box].concat([...box.querySelectorAll("*")].filter(e => e.shadowRoot).map(e => e.shadowRoot));
  const nodes = roots.flatMap(root => [...root.querySelectorAll("g.node")]);
  const label = node => [...node.querySelectorAll("text, span, p, div")].map(e => [...e.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent.trim()))
    .flat().filter(Boolean);
  return names.flatMap(name => {
    const matching = nodes.filter(node => label(node).includes(name));
    if (matching.length !== 1) return [`${name}: ${matching.length} nodes carry this label`];
    const r = matching[0].getBoundingClientRect();
    const inside = r.left >= view.left - 0.5 && r.right <= view.right + 0.5 && r.top >= view.top - 0.5 && r.bottom <= view.bottom + 0.5;
    return inside ? [] : [`${name}: node at (${Math.round(r.left - view.left)}, ${Math.round(r.top - view.top)}) `
      + `size ${Math.round(r.width)}x${Math.round(r.height)}, the box shows ${Math.round(view.right - view.left)}x${Math.round(view.bottom - view.top)}`];
  });
}"""


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("theme", list(THEMES))
def test_nodes_the_prose_names_are_in_the_first_view(built_site: BuiltSite, site_url: str, browser: Any, width: int, theme: str) -> None:
    problems: list[str] = []
    for path, (index, names) in NAMED_IN_PROSE.items():
        page = _open(browser, site_url + path, width, THEMES[theme])
        cdp = browser.new_cdp_session(page)
        _wait_for_mermaid(page, cdp, (built_site.directory / path / "index.html").read_text(encoding="utf-8").count('<pre class="mermaid">'))
        page.wait_for_timeout(200)  # fit-diagrams.js shrinks a diagram once mermaid.js drew it
        problems += [f"/{path} at {width} px ({theme}): {problem}" for problem in page.evaluate(_OUT_OF_VIEW, [index, names])]
        cdp.detach()
        page.close()
    assert not problems, "\n".join(problems)
