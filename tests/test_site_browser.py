"""Every page of the built site in headless Chromium: diagrams drawn, images loaded, no errors, nothing fetched from outside."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from browser_fixtures import block_outside, browser, serve_folder, viewer_frame  # noqa: F401  (browser is a fixture)
from site_fixtures import BuiltSite, built_site  # noqa: F401  (built_site is a fixture)

pytestmark = pytest.mark.browser

#: How long mermaid.js may take to draw a page's diagrams.
RENDER_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def site_url(built_site: BuiltSite) -> Iterator[str]:
    with serve_folder(built_site.directory) as url:
        yield url


def _walk(node: dict[str, Any], in_shadow: bool = False) -> Iterator[tuple[dict[str, Any], bool]]:
    """Every node of a ``DOM.getDocument(pierce=True)`` tree, with whether it lies in a shadow root."""
    stack = [(node, in_shadow)]
    while stack:
        current, shadowed = stack.pop()
        yield current, shadowed
        stack.extend((child, shadowed) for child in current.get("children", ()))
        stack.extend((root, True) for root in current.get("shadowRoots", ()))


def _attributes(node: dict[str, Any]) -> dict[str, str]:
    values = node.get("attributes", [])
    return dict(zip(values[::2], values[1::2], strict=True))


def mermaid_diagrams(cdp: Any) -> list[dict[str, Any]]:
    """The diagrams mermaid.js drew, read through Material's closed shadow roots.

    ``querySelector`` cannot enter a closed shadow root; the DevTools protocol
    can. Each result says whether the diagram is mermaid's error picture.
    """
    document = cdp.send("DOM.getDocument", {"depth": -1, "pierce": True})["root"]
    diagrams = []
    for node, shadowed in _walk(document):
        if not shadowed or node.get("nodeName", "").lower() != "svg":
            continue
        attributes = _attributes(node)
        if attributes.get("id", "").startswith("__mermaid") or "aria-roledescription" in attributes:
            error = attributes.get("aria-roledescription") == "error" or any("error-icon" in _attributes(inner).get("class", "") for inner, _ in _walk(node))
            diagrams.append({"id": attributes.get("id"), "error": error})
    return diagrams


def site_pages(site: BuiltSite) -> list[str]:
    return sorted(page.relative_to(site.directory).as_posix().removesuffix("index.html") for page in site.directory.rglob("index.html"))


def test_every_page_renders_offline_without_errors(built_site, site_url, browser):
    outside = block_outside(browser)
    problems: list[str] = []
    pages = site_pages(built_site)
    assert len(pages) >= 10
    for path in pages:
        expected = (built_site.directory / path / "index.html").read_text(encoding="utf-8").count('<pre class="mermaid">')
        page = browser.new_page()
        errors: list[str] = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(site_url + path, wait_until="load")
        cdp = browser.new_cdp_session(page)
        deadline = time.monotonic() + RENDER_TIMEOUT_S
        diagrams = mermaid_diagrams(cdp)
        while len(diagrams) < expected and time.monotonic() < deadline:
            page.wait_for_timeout(200)
            diagrams = mermaid_diagrams(cdp)
        if len(diagrams) != expected:
            problems.append(f"/{path}: {len(diagrams)} of {expected} Mermaid diagrams rendered")
        problems += [f"/{path}: Mermaid diagram {d['id']} is a syntax error" for d in diagrams if d["error"]]
        broken_images = page.evaluate("[...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)")
        problems += [f"/{path}: image did not load: {src}" for src in broken_images]
        empty_svgs = page.evaluate(
            "[...document.querySelectorAll('.gradexport-svg svg')]"
            ".filter(s => !s.viewBox.baseVal || s.viewBox.baseVal.width === 0 || !s.querySelector('g.node'))"
            ".length"
        )
        if empty_svgs:
            problems.append(f"/{path}: {empty_svgs} inline SVG diagram(s) without a drawing")
        problems += [f"/{path}: console error: {error}" for error in errors]
        cdp.detach()
        page.close()
    problems += [f"request left 127.0.0.1: {url}" for url in outside]
    assert not problems, "\n".join(problems)


#: WCAG AA for normal text.
MIN_CONTRAST = 4.5
#: The smallest diagram text a reader gets at 1:1 zoom, in CSS pixels.
MIN_TEXT_PX = 11.0
#: Material keeps the chosen palette here (its key is the site's root path + ".__palette").
PALETTE_KEY = "/.__palette"
DARK_PALETTE = '{"index": 1, "color": {"media": "", "scheme": "slate", "primary": "deep-orange", "accent": "indigo"}}'

#: Runs before the page's scripts: shadow roots open (so that the measuring script can enter
#: the ones Material draws Mermaid in; nothing else changes), every content tab shown (the
#: diagrams in inactive tabs are measured too), and the palette chosen (dark or the default).
_SETUP_PAGE = """([palette, key]) => {
  const attach = Element.prototype.attachShadow;
  Element.prototype.attachShadow = function (init) { return attach.call(this, {...init, mode: "open"}); };
  if (palette) localStorage.setItem(key, palette); else localStorage.removeItem(key);
  document.addEventListener("DOMContentLoaded", () => {
    const style = document.createElement("style");
    style.textContent = ".md-typeset .tabbed-set > .tabbed-content > .tabbed-block { display: block !important; }";
    document.head.append(style);
  });
}"""

#: Every piece of diagram text with its colour, the colour it is drawn on and its size on screen.
#: The background is found the way the text is painted: walking up from the text, the shapes
#: drawn before it that lie under its centre (a node's fill, a cluster's box), then the CSS
#: backgrounds of its HTML ancestors (an edge label's box, the diagram's panel, the page),
#: composed until one is opaque.
_MEASURE_TEXT = r"""() => {
  const parse = (text) => {
    const match = /rgba?\(([^)]*)\)/.exec(text || "");
    if (!match) return null;
    const parts = match[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
    return [parts[0], parts[1], parts[2], parts.length > 3 ? parts[3] : 1];
  };
  const over = (top, below) => [0, 1, 2].map(i => top[i] * top[3] + below[i] * (1 - top[3])).concat([1]);
  const channel = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  const luminance = c => 0.2126 * channel(c[0]) + 0.7152 * channel(c[1]) + 0.0722 * channel(c[2]);
  const contrast = (a, b) => { const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x); return (hi + 0.05) / (lo + 0.05); };
  const SHAPES = "rect, polygon, ellipse, circle, path";
  const up = node => node.parentNode instanceof ShadowRoot ? node.parentNode.host : node.parentNode;
  const background = (text) => {
    const box = text.getBoundingClientRect();
    const x = box.left + box.width / 2, y = box.top + box.height / 2;
    const layers = [];
    for (let node = text; node && node.nodeType === 1; node = up(node)) {
      if (node instanceof SVGElement) {
        const before = [...node.children].filter(child => !child.contains(text)
          && (child.compareDocumentPosition(text) & Node.DOCUMENT_POSITION_FOLLOWING));
        const shapes = before.flatMap(child => child.matches(SHAPES) ? [child] : [...child.querySelectorAll(SHAPES)]);
        for (const shape of shapes.reverse()) {
          const style = getComputedStyle(shape);
          const fill = parse(style.fill);
          const r = shape.getBoundingClientRect();
          if (!fill || style.visibility === "hidden" || x < r.left || x > r.right || y < r.top || y > r.bottom) continue;
          fill[3] *= Number(style.fillOpacity) * Number(style.opacity);
          if (fill[3] > 0) layers.push(fill);
          if (fill[3] >= 1) return layers;
        }
      }
      if (!(node instanceof SVGElement) || node.localName === "svg") {
        const fill = parse(getComputedStyle(node).backgroundColor);
        if (fill && fill[3] > 0) layers.push(fill);
        if (fill && fill[3] >= 1) return layers;
      }
    }
    return layers.concat([[255, 255, 255, 1]]);
  };
  const roots = [...document.querySelectorAll(".gradexport-diagram")].flatMap(diagram =>
    [...diagram.querySelectorAll("svg")].concat([...diagram.querySelectorAll("*")]
      .filter(e => e.shadowRoot).flatMap(e => [...e.shadowRoot.querySelectorAll("svg")])));
  const found = [];
  for (const svg of new Set(roots)) {
    for (const element of svg.querySelectorAll("*")) {
      if (["style", "title", "desc", "defs", "marker"].includes(element.localName) || element.closest("defs, title")) continue;
      const own = [...element.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join("").trim();
      const box = element.getBoundingClientRect();
      if (!own || box.width === 0 || box.height === 0) continue;
      const style = getComputedStyle(element);
      if (style.visibility === "hidden" || style.display === "none") continue;
      const isSvgText = element instanceof SVGElement;
      const colour = parse(isSvgText ? style.fill : style.color);
      if (!colour) continue;
      const layers = background(element);
      let paint = layers.pop();
      while (layers.length) paint = over(layers.pop(), paint);
      const graphic = isSvgText ? element : element.closest("foreignObject") || svg;
      const matrix = graphic.getScreenCTM();
      const scale = matrix ? Math.hypot(matrix.a, matrix.b) : 1;
      found.push({
        text: own.slice(0, 40),
        contrast: contrast(over(colour, paint), paint),
        px: parseFloat(style.fontSize) * scale,
        colour: style.color + " / " + style.fill,
        background: `rgb(${paint.slice(0, 3).map(Math.round).join(", ")})`,
      });
    }
  }
  return found;
}"""


def _open_page(browser: Any, url: str, palette: str | None) -> tuple[Any, Any]:
    page = browser.new_page()
    page.add_init_script(f"({_SETUP_PAGE})({json.dumps([palette, PALETTE_KEY])})")
    page.goto(url, wait_until="load")
    return page, browser.new_cdp_session(page)


def _wait_for_mermaid(page: Any, cdp: Any, expected: int) -> None:
    deadline = time.monotonic() + RENDER_TIMEOUT_S
    while len(mermaid_diagrams(cdp)) < expected and time.monotonic() < deadline:
        page.wait_for_timeout(200)
    page.wait_for_timeout(100)  # let the last diagram's labels settle


#: Diagrams wider or taller than their box must scroll into view: nothing may lie left of or above
#: the box's scrolled-to-the-start position (a box that opens scrolled, as fit-diagrams.js opens a wide
#: Mermaid diagram at its middle, still reaches all of it).
_CUT_OFF = """() => [...document.querySelectorAll(".gradexport-diagram")].flatMap((box, index) => {
  const outer = box.getBoundingClientRect();
  return [...box.children].map(child => child.getBoundingClientRect())
    .filter(inner => inner.width > 0 && (inner.left + box.scrollLeft < outer.left - 1 || inner.top + box.scrollTop < outer.top - 1))
    .map(inner => `diagram ${index + 1} starts ${Math.round(outer.left - inner.left - box.scrollLeft)} px left of its box`);
})"""


def _text_problems(page: Any, where: str) -> tuple[list[str], int]:
    measured = page.evaluate(_MEASURE_TEXT)
    cut_off = [f"{where}: {problem}" for problem in page.evaluate(_CUT_OFF)]
    problems = [
        f"{where}: {item['text']!r} has contrast {item['contrast']:.2f} ({item['colour']} on {item['background']})"
        for item in measured
        if item["contrast"] < MIN_CONTRAST
    ]
    problems += [f"{where}: {item['text']!r} is drawn at {item['px']:.1f} px" for item in measured if item["px"] < MIN_TEXT_PX - 0.05]
    return problems + cut_off, len(measured)


def test_diagram_text_is_readable_in_both_themes(built_site, site_url, browser):
    """Every diagram label, on every page, in the light theme, after the toggle and on a fresh load in dark."""
    problems: list[str] = []
    counted = 0
    for path in site_pages(built_site):
        html_text = (built_site.directory / path / "index.html").read_text(encoding="utf-8")
        if "gradexport-diagram" not in html_text:
            continue
        expected = html_text.count('<pre class="mermaid">')
        page, cdp = _open_page(browser, site_url + path, None)
        _wait_for_mermaid(page, cdp, expected)
        assert page.evaluate("document.body.dataset.mdColorScheme") == "default"
        found, count = _text_problems(page, f"/{path} (light)")
        problems += found
        counted += count
        page.locator("form[data-md-component=palette] label:visible").first.click()
        page.wait_for_timeout(300)
        assert page.evaluate("document.body.dataset.mdColorScheme") == "slate"
        problems += _text_problems(page, f"/{path} (dark, toggled)")[0]
        cdp.detach()
        page.close()

        page, cdp = _open_page(browser, site_url + path, DARK_PALETTE)
        _wait_for_mermaid(page, cdp, expected)
        assert page.evaluate("document.body.dataset.mdColorScheme") == "slate"
        problems += _text_problems(page, f"/{path} (dark, fresh load)")[0]
        cdp.detach()
        page.close()
    assert counted > 500, f"only {counted} pieces of diagram text found: the measuring script finds no labels"
    assert not problems, f"{len(problems)} unreadable labels:\n" + "\n".join(problems[:60])


def test_figures_are_shown_at_full_size(built_site, site_url, browser):
    """Images in a figure box (the benchmark plot) are not squeezed: the box scrolls instead."""
    shown = 0
    for path in site_pages(built_site):
        if "gradexport-figure" not in (built_site.directory / path / "index.html").read_text(encoding="utf-8"):
            continue
        page = browser.new_page()
        page.goto(site_url + path, wait_until="load")
        sizes = page.evaluate("[...document.querySelectorAll('.gradexport-figure img')].map(i => [i.src, i.naturalWidth, i.width])")
        for src, natural, width in sizes:
            assert natural > 0 and width == natural, f"/{path}: {src} shown {width} px wide, its natural width is {natural}"
            shown += 1
        page.close()
    assert shown >= 1


def test_long_code_lines_scroll_clear_of_the_copy_button(built_site, site_url, browser):
    """A code or output block wider than the column scrolls, and scrolled to its end, its text stops left of the copy button."""
    page = browser.new_page()
    page.goto(site_url + "blog/multiply-then-sum/", wait_until="load")
    # Material adds its copy button only where the browser can copy (not headless Chromium):
    # add the same markup, so that the theme's own CSS places and sizes it.
    blocks = page.evaluate("""() => [...document.querySelectorAll('.md-typeset pre')].map(pre => {
      const code = pre.querySelector(':scope > code');
      if (!code) return null;
      let nav = pre.querySelector('.md-code__nav');
      if (!nav) {
        nav = Object.assign(document.createElement('nav'), {className: 'md-code__nav'});
        nav.append(Object.assign(document.createElement('button'), {className: 'md-code__button'}));
        code.before(nav);
      }
      // Scrolled to the end, the longest line ends where the code box's padding starts.
      const textEnd = code.getBoundingClientRect().right - parseFloat(getComputedStyle(code).paddingRight);
      return {overflows: code.scrollWidth > code.clientWidth, scrolls: getComputedStyle(code).overflowX,
              textEnd, button: nav.getBoundingClientRect().left};
    }).filter(Boolean)""")
    page.close()
    assert blocks, "no code block found"
    assert any(block["overflows"] for block in blocks), "the page has no long line to check"
    assert all(block["scrolls"] in ("auto", "scroll") for block in blocks)
    covered = [block for block in blocks if block["overflows"] and block["textEnd"] > block["button"] + 0.5]
    assert not covered, f"the end of a long line lies under the copy button: {covered}"


def test_blog_pages_step_through_the_replay_with_torchs_values(built_site, site_url, browser):
    """Each blog example has the stepping viewer; its steps carry the gradients torch computes (node hooks)."""
    import torch
    from torch.autograd.graph import Node

    from gradexport.tracing.graph import trace

    def engine_calls(roots: Any) -> list[tuple[str, list[str], list[str]]]:
        ids = trace(roots).ids
        calls: list[tuple[str, list[str], list[str]]] = []

        def hook(node: Node) -> Any:
            return lambda grad_inputs, grad_outputs: calls.append((ids[node], [repr(g) for g in grad_outputs], [repr(g) for g in grad_inputs]))

        for node in ids:
            if type(node).__name__ != "AccumulateGrad":
                node.register_hook(hook(node))
        torch.autograd.backward(roots)
        return calls

    torch.manual_seed(6)
    x = torch.randn(4, 4, requires_grad=True)
    y = torch.randn(4, 4, requires_grad=True)
    first = engine_calls((x * y).sum())
    torch.manual_seed(6)
    x = torch.randn(2, requires_grad=True)
    x1, x2 = x.unbind()
    second = engine_calls(x1 + x2)
    for path, calls in [("blog/multiply-then-sum/", first), ("blog/unbind-then-add/", second)]:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(site_url + path, wait_until="load")
        page.locator("iframe").last.scroll_into_view_if_needed()
        frame = next(f for f in page.frames if f.evaluate("() => Boolean(window.gradexportViewer && window.gradexportViewer.steps())"))
        frame.evaluate("window.gradexportViewer.ready")
        steps = frame.evaluate("() => { const v = window.gradexportViewer; return [...Array(v.steps()).keys()].map((k) => v.step(k)); }")
        shown = [(s["node"], [i["values"] for i in s["inputs"]], [o["values"] for o in s["outputs"]]) for s in steps if s["op"] != "AccumulateGrad"]
        assert shown == calls, path
        assert errors == [], path
        page.close()


def test_site_follows_the_systems_dark_mode_preference(built_site, site_url, browser):
    """A first visit (nothing stored) takes the scheme from prefers-color-scheme; the toggle still overrides it."""
    for preference, scheme in (("dark", "slate"), ("light", "default")):
        page = browser.new_page()
        page.emulate_media(color_scheme=preference)
        page.goto(site_url + "concepts/edges/", wait_until="load")
        assert page.evaluate("document.body.dataset.mdColorScheme") == scheme, preference
        page.locator("form[data-md-component=palette] label:visible").first.click()
        page.wait_for_timeout(200)
        assert page.evaluate("document.body.dataset.mdColorScheme") != scheme, preference
        page.close()


def test_search_suggests_and_highlights(built_site):
    """Material's search.suggest and search.highlight are on (they are read from the page's config)."""
    text = (built_site.directory / "index.html").read_text(encoding="utf-8")
    config = json.loads(re.search(r'<script id="__config" type="application/json">(.*?)</script>', text, re.S)[1])
    assert {"search.suggest", "search.highlight"} <= set(config["features"])


def test_embedded_viewer_follows_the_site_theme(built_site, site_url, browser):
    """On every load the viewer takes the page's scheme (light or slate), and follows the toggle."""
    for palette, expected in [(None, "light"), (DARK_PALETTE, "dark")] * 3:
        page, cdp = _open_page(browser, site_url + "gallery/mlp/", palette)
        frame = viewer_frame(page, RENDER_TIMEOUT_S)
        theme = "document.getElementById('gradexport-viewer').dataset.theme"
        frame.wait_for_function(f"{theme} === {json.dumps(expected)}", timeout=5000)
        page.locator("form[data-md-component=palette] label:visible").first.click()
        flipped = "dark" if expected == "light" else "light"
        frame.wait_for_function(f"{theme} === {json.dumps(flipped)}", timeout=5000)
        cdp.detach()
        page.close()


def test_clicking_a_folded_group_in_a_page_updates_the_panel(built_site, site_url, browser):
    """A real click on a folded group of the large model's viewer: no error in the frame, the panel and breadcrumbs follow."""
    page = browser.new_page()
    page.goto(site_url + "gallery/large-model/", wait_until="load")
    frame = viewer_frame(page, RENDER_TIMEOUT_S)
    frame.evaluate("window.__errors = []; window.addEventListener('error', (e) => window.__errors.push(String(e.message)))")
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.locator(".gradexport-viewer iframe").first.scroll_into_view_if_needed()
    # Fit the whole drawing into the canvas (key f), so that the folded groups lie on it.
    frame.locator("#gradexport-viewer").press("f")
    page.wait_for_timeout(300)
    # A folded group whose middle lies on the canvas, in the frame's coordinates.
    label, x, y = frame.evaluate("""() => {
      const stage = document.querySelector('.gx-canvas').getBoundingClientRect();
      for (const g of document.querySelectorAll('.gx-node.gx-fold, .gx-node.gx-module')) {
        const r = g.getBoundingClientRect(), x = r.left + r.width / 2, y = r.top + r.height / 2;
        if (x > stage.left + 5 && x < stage.right - 5 && y > stage.top + 5 && y < stage.bottom - 5) return [g.dataset.id, x, y];
      }
      return [null, 0, 0];
    }""")
    assert label, "no folded group on the canvas"
    panel_before = frame.evaluate("document.querySelector('.gx-panel').textContent")
    box = page.locator(".gradexport-viewer iframe").first.bounding_box()
    page.mouse.click(box["x"] + x, box["y"] + y)
    page.wait_for_timeout(1500)  # the group is laid out open, then selected
    assert frame.evaluate("window.__errors") == [] and errors == []
    panel = frame.evaluate("document.querySelector('.gx-panel').textContent")
    crumbs = frame.evaluate("document.querySelector('.gx-crumbs').textContent")
    assert panel != panel_before and label.split(":")[-1] in panel + crumbs, (label, panel[:200], crumbs)
    page.close()


#: Text of the viewer that does not fit its box: cut (scrollWidth beyond the box) or out of the frame.
_OVERFLOWING = """() => [...document.querySelectorAll('.gx-bar *, .gx-crumbs *, .gx-panel *, .gx-legend *, .gx-status')]
  .filter(e => e.childNodes.length && [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()))
  .filter(e => e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right > innerWidth + 1 || e.getBoundingClientRect().left < -1)
  .map(e => `${e.className || e.localName}: ${e.textContent.slice(0, 30)}`)"""


def test_embedded_viewer_fits_a_phone(built_site, site_url, browser):
    """At 390 px wide no text of the viewer is cut off or runs out of its frame; the legend leaves the drawing room."""
    page = browser.new_page()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(site_url + "gallery/large-model/", wait_until="load")
    frame = viewer_frame(page, RENDER_TIMEOUT_S)
    frame.evaluate("window.gradexportViewer.select(window.gradexportViewer.visible()[1])")
    frame.evaluate("window.gradexportViewer.ready")
    assert frame.evaluate(_OVERFLOWING) == []
    stage, legend = frame.evaluate("['.gx-stage', '.gx-legend'].map(s => document.querySelector(s).getBoundingClientRect().toJSON())")
    assert legend["height"] * legend["width"] < 0.25 * stage["height"] * stage["width"], (legend, stage)
    page.close()


def test_the_page_scrolls_past_an_embedded_viewer(built_site, site_url, browser):
    """The wheel over an embedded viewer scrolls the page; with Ctrl it zooms the viewer instead."""
    page = browser.new_page()
    page.set_viewport_size({"width": 1200, "height": 800})
    page.goto(site_url + "gallery/mlp/", wait_until="load")
    frame = viewer_frame(page, RENDER_TIMEOUT_S)
    box = page.locator(".gradexport-viewer iframe").first.bounding_box()
    page.evaluate(f"window.scrollTo(0, {box['y'] - 100})")
    page.wait_for_timeout(200)
    box = page.locator(".gradexport-viewer iframe").first.bounding_box()
    transform = "document.querySelector('.gx-viewport').getAttribute('transform')"
    before, top = frame.evaluate(transform), page.evaluate("window.scrollY")
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, 300)
    page.wait_for_timeout(400)
    assert page.evaluate("window.scrollY") > top and frame.evaluate(transform) == before
    top = page.evaluate("window.scrollY")
    box = page.locator(".gradexport-viewer iframe").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.keyboard.down("Control")
    page.mouse.wheel(0, -300)
    page.keyboard.up("Control")
    page.wait_for_timeout(400)
    assert frame.evaluate(transform) != before and page.evaluate("window.scrollY") == top
    page.close()


def test_copy_button_covers_no_code(built_site, site_url, browser):
    """Unscrolled, no line of any code block lies under its copy button (the first line of a long block included)."""
    page = browser.new_page()
    page.goto(site_url + "concepts/edges/", wait_until="load")
    covered = page.evaluate("""() => [...document.querySelectorAll('.md-typeset pre')].flatMap(pre => {
      const code = pre.querySelector(':scope > code');
      if (!code) return [];
      let nav = pre.querySelector('.md-code__nav');
      if (!nav) {
        nav = Object.assign(document.createElement('nav'), {className: 'md-code__nav'});
        nav.append(Object.assign(document.createElement('button'), {className: 'md-code__button'}));
        code.before(nav);
      }
      const button = nav.getBoundingClientRect();
      const range = document.createRange();
      range.selectNodeContents(code);
      return [...range.getClientRects()].filter(r => r.width > 0 && r.left < button.right && r.right > button.left
        && r.top < button.bottom && r.bottom > button.top).map(() => code.textContent.slice(0, 40));
    })""")
    page.close()
    assert not covered, covered
