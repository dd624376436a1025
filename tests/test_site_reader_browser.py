"""The built site as a learner reads it, in headless Chromium (issue 37).

Every ``gradexport`` block is rendered, and the nodes the prose names are in
view when a diagram first shows, at desktop and phone widths, in both themes.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import re
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from browser_fixtures import browser  # noqa: F401  (a fixture)
from site_fixtures import REPO, BuiltSite, built_site  # noqa: F401  (a fixture)
from test_site_browser import (  # noqa: F401  (site_url is a fixture)
    _MEASURE_TEXT,
    _SETUP_PAGE,
    DARK_PALETTE,
    MIN_CONTRAST,
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

#: Functions the measuring scripts share: the diagram boxes a reader sees (an SVG tab
#: hidden by Material's tabs is skipped, unless the test set-up shows every tab), the part of
#: a box shown before any scrolling, the nodes drawn in a box (Mermaid's inside its shadow
#: root too), each node's id, label and graph edges, and the problem of a node not wholly in view.
_DIAGRAM_VIEWS = r"""
  const diagramBoxes = () => [...document.querySelectorAll(".gradexport-diagram")].filter(b => !b.classList.contains("gradexport-svg") || b.offsetParent);
  const firstView = box => {
    const outer = box.getBoundingClientRect();
    const view = {left: outer.left + box.clientLeft, top: outer.top + box.clientTop};
    view.right = view.left + box.clientWidth;
    view.bottom = view.top + box.clientHeight;
    return view;
  };
  const drawnIn = box => [box].concat([...box.querySelectorAll("*")].filter(e => e.shadowRoot).map(e => e.shadowRoot));
  const nodesIn = box => drawnIn(box).flatMap(root => [...root.querySelectorAll("g.node")]);
  const label = node => [...node.querySelectorAll("text, span, p, div")].map(e => [...e.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent.trim()))
    .flat().filter(Boolean);
  // Graphviz titles a node with its id and an edge "tail->head"; Mermaid ids a node
  // "<diagram>-flowchart-<id>-<k>" and gives an edge the data-id "L_<tail>_<head>_<k>"
  // (the writers' ids are letters, digits and underscores).
  const nodeId = node => node.querySelector(":scope > title")?.textContent ?? node.id.match(/flowchart-(\w+)-\d+$/)?.[1];
  const pointedTo = box => {
    const titles = drawnIn(box).flatMap(root => [...root.querySelectorAll("g.edge > title")].map(title => title.textContent.split("->")[1]));
    const mermaid = drawnIn(box).flatMap(root => [...root.querySelectorAll("[data-id^='L_']")].map(edge => edge.dataset.id));
    return id => titles.includes(id) || mermaid.some(edge => new RegExp(`^L_\\w+_${id}_\\d+$`).test(edge));
  };
  const notInView = (node, view, name) => {
    const r = node.getBoundingClientRect();
    const inside = r.left >= view.left - 0.5 && r.right <= view.right + 0.5 && r.top >= view.top - 0.5 && r.bottom <= view.bottom + 0.5;
    return inside ? [] : [`${name}: node at (${Math.round(r.left - view.left)}, ${Math.round(r.top - view.top)}) `
      + `size ${Math.round(r.width)}x${Math.round(r.height)}, the box shows ${Math.round(view.right - view.left)}x${Math.round(view.bottom - view.top)}`];
  };
"""

#: The named nodes that do not lie wholly inside the first view of the diagram's box.
_OUT_OF_VIEW = (
    "([index, names]) => {"
    + _DIAGRAM_VIEWS
    + r"""
  const box = diagramBoxes().at(index);
  const nodes = nodesIn(box);
  return names.flatMap(name => {
    const matching = nodes.filter(node => label(node).includes(name));
    return matching.length === 1 ? notInView(matching[0], firstView(box), name) : [`${name}: ${matching.length} nodes carry this label`];
  });
}"""
)

#: For every diagram box of the page, its number and the roots (the nodes no edge points to:
#: where the backward pass starts) that do not lie wholly inside its first view.
_ROOTS_OUT_OF_VIEW = (
    "() => {"
    + _DIAGRAM_VIEWS
    + r"""
  return diagramBoxes().filter(box => nodesIn(box).length).flatMap((box, index) => {
    const isHead = pointedTo(box);
    const roots = nodesIn(box).filter(node => !isHead(nodeId(node)));
    if (!roots.length) return [`diagram ${index + 1}: no root found among ${nodesIn(box).length} nodes`];
    return roots.flatMap(root => notInView(root, firstView(box), `diagram ${index + 1}, root ${label(root)[0]}`));
  });
}"""
)


def _measure_drawn(browser: Any, site_url: str, site: BuiltSite, path: str, width: int, theme: str, script: str, argument: Any = None) -> list[str]:
    """The problems ``script`` finds on page ``path`` at ``width`` px in ``theme``, once its diagrams are drawn and fitted."""
    page = _open(browser, site_url + path, width, THEMES[theme])
    cdp = browser.new_cdp_session(page)
    _wait_for_mermaid(page, cdp, (site.directory / path / "index.html").read_text(encoding="utf-8").count('<pre class="mermaid">'))
    page.wait_for_timeout(200)  # fit-diagrams.js shrinks a diagram once mermaid.js drew it
    problems = page.evaluate(script, argument)
    cdp.detach()
    page.close()
    return [f"/{path} at {width} px ({theme}): {problem}" for problem in problems]


def _diagram_pages(site: BuiltSite) -> list[str]:
    return [path for path in site_pages(site) if "gradexport-diagram" in (site.directory / path / "index.html").read_text(encoding="utf-8")]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("theme", list(THEMES))
def test_nodes_the_prose_names_are_in_the_first_view(built_site: BuiltSite, site_url: str, browser: Any, width: int, theme: str) -> None:
    problems: list[str] = []
    for path, (index, names) in NAMED_IN_PROSE.items():
        problems += _measure_drawn(browser, site_url, built_site, path, width, theme, _OUT_OF_VIEW, [index, names])
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("theme", list(THEMES))
def test_every_diagram_opens_on_its_roots(built_site: BuiltSite, site_url: str, browser: Any, width: int, theme: str) -> None:
    """Every diagram of every page, in every tab, shows its roots before the reader scrolls it: none opens on an empty corner."""
    pages = _diagram_pages(built_site)
    assert len(pages) >= 15, f"only {len(pages)} pages with diagrams"
    problems = [problem for path in pages for problem in _measure_drawn(browser, site_url, built_site, path, width, theme, _ROOTS_OUT_OF_VIEW)]
    assert not problems, "\n".join(problems)


#: What of the page's content runs off the screen where no box scrolls to it: an element that
#: reaches past the window's edges with no scrolling box around it (a box that hides its overflow
#: cuts it off), and the page itself scrolling sideways. Diagrams are measured as boxes; what
#: they draw scrolls inside them.
_OFF_SCREEN = r"""() => {
  const reachable = element => {
    for (let parent = element.parentElement; parent; parent = parent.parentElement) {
      const overflow = getComputedStyle(parent).overflowX;
      if (overflow === "auto" || overflow === "scroll") return true;
      if (overflow === "hidden" || overflow === "clip") return false;
    }
    return false;
  };
  const off = [...document.querySelectorAll(".md-content *")].filter(element => !element.closest("svg, .gradexport-diagram > *")).filter(element => {
    const r = element.getBoundingClientRect();
    return r.width > 0 && (r.right > innerWidth + 1 || r.left < -1) && !reachable(element);
  }).map(element => `${element.localName}.${element.className} spans ${Math.round(element.getBoundingClientRect().left)} to `
    + `${Math.round(element.getBoundingClientRect().right)} px: ${element.textContent.trim().slice(0, 40)}`);
  const width = document.documentElement.scrollWidth;
  return (width > innerWidth + 1 ? [`the page is ${width} px wide`] : []).concat(off);
}"""


@pytest.mark.slow
@pytest.mark.parametrize("theme", list(THEMES))
def test_nothing_runs_off_a_phones_screen(built_site: BuiltSite, site_url: str, browser: Any, theme: str) -> None:
    """At 390 px, on every page with diagrams, all content is on screen or in a box that scrolls to it."""
    pages = _diagram_pages(built_site)
    problems = [problem for path in pages for problem in _measure_drawn(browser, site_url, built_site, path, 390, theme, _OFF_SCREEN)]
    assert not problems, "\n".join(problems)


#: Seconds a copied block or a page's whole script may run.
COPIED_CODE_TIMEOUT_S = 300


def run_as_pasted(code: str) -> str | None:
    """Run ``code`` as a fresh interpreter runs a pasted script, in an empty folder; the error it ends with, or None."""
    with tempfile.TemporaryDirectory() as folder, open(os.devnull, "w") as quiet:
        os.chdir(folder)
        try:
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                exec(compile(code, "<copied>", "exec"), {"__name__": "__main__"})
        except BaseException as error:  # noqa: BLE001 - a SystemExit or KeyboardInterrupt of the pasted code is its result too
            return f"{type(error).__name__}: {error}"
    return None


@pytest.fixture(scope="module")
def fresh_interpreters() -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    """Processes forked, one per run, from a server that imported torch once: each run starts with nothing defined."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "gradexport"])
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=context, max_tasks_per_child=1) as pool:
        yield pool


#: The Python blocks of the page, each as the copy button copies it, and the page's script if it has a "one script" note.
#: Blocks titled "Serves until you press Ctrl+C" (a server never returns) or "Runs on every rank of a
#: DDP job" / "of an FSDP2 job" (need a process group) are not run; page-script.js leaves them out of the script too.
_PYTHON_BLOCKS = """() => ({
  blocks: [...document.querySelectorAll(".md-content .language-python")]
    .filter(block => !["Serves until you press Ctrl+C", "Runs on every rank of a DDP job", "Runs on every rank of an FSDP2 job"]
      .includes(block.querySelector(".filename")?.textContent))
    .filter(block => !block.closest(".doc"))  // the API reference: signatures, and doctests that test_docstrings runs
    .map(block => block.querySelector("code").textContent),
  script: document.querySelector(".md-content .admonition.one-script") ? window.gradexportPageScript() : null,
  button: Boolean(document.querySelector(".md-content .admonition.one-script .gradexport-copy-script")),
})"""


@pytest.mark.slow
def test_copied_code_runs(built_site: BuiltSite, site_url: str, browser: Any, fresh_interpreters: Any) -> None:
    """Each Python block runs alone as copied; where one does not, the page has a "one script" note whose button copies all its blocks, and that script runs."""
    problems: list[str] = []
    runs: list[tuple[str, int | None, concurrent.futures.Future[str | None]]] = []
    marked: dict[str, bool] = {}
    for path in site_pages(built_site):
        page = browser.new_page()
        page.goto(site_url + path, wait_until="load")
        found = page.evaluate(_PYTHON_BLOCKS)
        page.close()
        runs += [(path, number, fresh_interpreters.submit(run_as_pasted, code)) for number, code in enumerate(found["blocks"], 1)]
        if found["script"] is not None:
            marked[path] = found["button"]
            runs.append((path, None, fresh_interpreters.submit(run_as_pasted, found["script"])))
    assert len(runs) > 50, f"only {len(runs)} Python blocks found"
    for path, number, run in runs:
        error = run.result(timeout=COPIED_CODE_TIMEOUT_S)
        if error is None:
            continue
        if number is None:
            problems.append(f"/{path}: the page's code copied as one script fails: {error}")
        elif path not in marked:
            problems.append(f"/{path}: Python block {number} copied alone fails ({error}) and the page has no one-script note")
    problems += [f"/{path}: the one-script note has no copy button" for path, button in marked.items() if not button]
    assert not problems, "\n".join(problems)


#: The readability measurement of test_site_browser, over every diagram of the page's content,
#: Mermaid fences written in the page included (not only the plugin's diagrams).
_MEASURE_PAGE_TEXT = _MEASURE_TEXT.replace('document.querySelectorAll(".gradexport-diagram")', 'document.querySelectorAll(".md-content")')


@pytest.mark.parametrize("theme", list(THEMES))
def test_the_architecture_diagrams_labels_have_contrast(built_site: BuiltSite, site_url: str, browser: Any, theme: str) -> None:
    """The architecture page's own Mermaid fence: every label at 4.5:1 or more against its node (2.3:1 and 3.0:1 before)."""
    assert _MEASURE_PAGE_TEXT != _MEASURE_TEXT
    page = _open(browser, site_url + "architecture/", 1280, THEMES[theme])
    cdp = browser.new_cdp_session(page)
    _wait_for_mermaid(page, cdp, (built_site.directory / "architecture" / "index.html").read_text(encoding="utf-8").count('<pre class="mermaid">'))
    measured = page.evaluate(_MEASURE_PAGE_TEXT)
    cdp.detach()
    page.close()
    labels = [item for item in measured if item["text"].startswith(("core", "tracing", "frontends"))]
    assert len(labels) >= 3, measured
    low = [f"{item['text']!r}: {item['contrast']:.2f} ({item['colour']} on {item['background']})" for item in measured if item["contrast"] < MIN_CONTRAST]
    assert not low, "\n".join(low)
