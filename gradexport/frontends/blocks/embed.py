"""The HTML of a block's diagram, for every host that writes HTML (MkDocs, Sphinx).

Examples:
    >>> diagram_html("dot", "digraph { a -> b }")
    '<div class="gradexport-diagram gradexport-text" data-search-exclude><pre><code class="language-dot">digraph { a -&gt; b }</code></pre></div>'
"""

from __future__ import annotations

import html
import importlib

__all__ = ["MERMAID_FRONT_MATTER", "diagram_html"]

#: Front matter for every Mermaid diagram: draw it at its natural size, as the SVGs
#: are (nodes 40 px apart, not 50, so that more graphs fit a phone). By default mermaid.js
#: scales a diagram down to the column's width, so a large graph's text shrinks until it
#: cannot be read; the container scrolls instead.
MERMAID_FRONT_MATTER = "---\nconfig:\n  flowchart:\n    useMaxWidth: false\n    nodeSpacing: 40\n---\n"

#: Tells the viewer in the iframe just before it the page's theme, read where the themes
#: keep it: Material's ``data-md-color-scheme`` on ``<body>`` (``slate`` is dark), furo's
#: ``data-theme`` on ``<body>`` and pydata-sphinx-theme's on ``<html>`` (``auto``: the
#: system's), else the system's preference. The viewer asks once it listens
#: (``gradexportReady``); the frame's ``load`` and a MutationObserver cover the rest
#: (every toggle). The sandbox lets nothing else through.
_FOLLOW_THEME = (
    "<script>(function (frame) {"
    "var root = document.documentElement, body = document.body;"
    "var dark = function () { var scheme = body.getAttribute('data-md-color-scheme');"
    " if (scheme) return scheme === 'slate';"
    " var theme = body.getAttribute('data-theme') || root.getAttribute('data-theme');"
    " if (theme === 'dark' || theme === 'light') return theme === 'dark';"
    " return window.matchMedia('(prefers-color-scheme: dark)').matches; };"
    "var send = function () { if (frame.contentWindow) frame.contentWindow.postMessage({gradexportTheme: dark() ? 'dark' : 'light'}, '*'); };"
    " frame.addEventListener('load', send);"
    " window.addEventListener('message', function (event) { if (event.source === frame.contentWindow && event.data && event.data.gradexportReady) send(); });"
    " var watched = {attributes: true, attributeFilter: ['data-md-color-scheme', 'data-theme']};"
    " new MutationObserver(send).observe(body, watched); new MutationObserver(send).observe(root, watched);"
    "})(document.currentScript.previousElementSibling);</script>"
)


def diagram_html(name: str, text: str, *, mermaid_code: bool = True) -> str:
    """The HTML that shows diagram ``text`` of format ``name`` in a page.

    Mermaid goes in a ``<pre class="mermaid">`` for the page's mermaid.js to draw,
    its source inside a ``<code>`` as Material for MkDocs expects (``mermaid_code``)
    or bare, as mermaid.js itself reads it.
    """
    # data-search-exclude keeps the diagram's text (Mermaid source, SVG labels, the
    # viewer's data) out of Material's search index: it matches the prose, not node ids.
    if name == "mermaid":
        source = html.escape(MERMAID_FRONT_MATTER + text)
        if mermaid_code:  # the markup pymdownx.superfences writes for a mermaid fence, which Material renders
            source = f"<code>{source}</code>"
        return f'<div class="gradexport-diagram" data-search-exclude><pre class="mermaid">{source}</pre></div>'
    if name == "html":
        # The viewer, isolated in an iframe (its own document, scripts and styles) at a readable height.
        frame = importlib.import_module("gradexport.formats.html").notebook_iframe(text, height=560)
        return f'<div class="gradexport-diagram gradexport-viewer" data-search-exclude>{frame}{_FOLLOW_THEME}</div>'
    if name in ("dot", "json"):  # text: shown as code, highlighted as its language
        language = "json" if name == "json" else "dot"
        source = html.escape(text.rstrip())
        return f'<div class="gradexport-diagram gradexport-text" data-search-exclude><pre><code class="language-{language}">{source}</code></pre></div>'
    return f'<div class="gradexport-diagram gradexport-svg">{text.replace("<svg", "<svg data-search-exclude", 1)}</div>'
