"""Every page of the built site in headless Chromium: diagrams drawn, images loaded, no errors, nothing fetched from outside."""

from __future__ import annotations

import functools
import http.server
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from browser_fixtures import block_outside, browser  # noqa: F401  (browser is a fixture)
from site_fixtures import BuiltSite, built_site  # noqa: F401  (built_site is a fixture)

pytestmark = pytest.mark.browser

#: How long mermaid.js may take to draw a page's diagrams.
RENDER_TIMEOUT_S = 30


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site_url(built_site: BuiltSite) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(built_site.directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    thread.join()
    server.server_close()


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
            error = attributes.get("aria-roledescription") == "error" or any(
                "error-icon" in _attributes(inner).get("class", "") for inner, _ in _walk(node)
            )
            diagrams.append({"id": attributes.get("id"), "error": error})
    return diagrams


def site_pages(site: BuiltSite) -> list[str]:
    return sorted(
        page.relative_to(site.directory).as_posix().removesuffix("index.html")
        for page in site.directory.rglob("index.html")
    )


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
        broken_images = page.evaluate(
            "[...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)"
        )
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
