"""What replaces a block in the page: its code, its output and its diagrams, as Markdown and HTML.

Diagrams go into the Markdown as placeholder paragraphs and are put into the
page's HTML after Markdown ran (`place_diagrams`), so that no Markdown
extension rewrites an SVG or the viewer's page.

Examples:
    >>> fenced("print(1)", "python")
    '```python\\nprint(1)\\n```'
"""

from __future__ import annotations

import html
import importlib
import re
import uuid

from mkdocs.exceptions import PluginError

__all__ = ["FORMATS", "NOT_EMBEDDED", "diagram_html", "fenced", "markdown_for", "place_diagrams"]

#: The formats a block can show, in the order of their tabs, with the tab titles.
FORMATS = {
    "mermaid": "Mermaid",
    "svg": "Graphviz (SVG)",
    "html": "Interactive viewer",
    "dot": "DOT",
    "json": "JSON",
}

#: Registered formats a page cannot show, and why (a test checks that every format is in one of the two).
NOT_EMBEDDED = {"model-explorer": "a file for Google's Model Explorer app, which a page cannot open"}


def markdown_for(code: str | None, output: str | None, diagrams: dict[str, str], indent: str, placeholders: dict[str, str], *, titled_fences: bool) -> list[str]:
    """The Markdown lines that replace a block: its code and output as fences, its diagrams as placeholders (tabs for several).

    ``placeholders`` receives the HTML each placeholder stands for (see `place_diagrams`).
    """
    parts: list[str] = []
    if code is not None:
        parts.append(fenced(code, "python"))
    if output:
        parts.append(fenced(output, 'text title="Output"' if titled_fences else "text"))
    tokens = []
    for name, text in diagrams.items():
        token = f"gradexport-diagram-{uuid.uuid4().hex}"
        placeholders[token] = diagram_html(name, text)
        tokens.append((name, token))
    if len(tokens) == 1:
        parts.append(tokens[0][1])
    elif tokens:
        parts.append("\n\n".join(f'=== "{FORMATS[name]}"\n\n    {token}' for name, token in tokens))
    text = "\n\n".join(parts)
    return [f"{indent}{line}" if line else "" for line in f"\n{text}\n".split("\n")]


def place_diagrams(html_text: str, placeholders: dict[str, str], where: str) -> str:
    """Put each placeholder's diagram into the page's HTML.

    Raises:
        PluginError: a placeholder is not a paragraph of its own (the block sat where no diagram can go).
    """
    for token, diagram in placeholders.items():
        paragraph = f"<p>{token}</p>"
        if paragraph not in html_text:
            raise PluginError(
                f"{where}: a gradexport diagram could not be placed; keep gradexport "
                "blocks at the top level, in admonitions or in content tabs"
            )
        html_text = html_text.replace(paragraph, diagram)
    return html_text


def fenced(text: str, info: str) -> str:
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (longest + 1)
    return f"{fence}{info}\n{text.rstrip()}\n{fence}"

#: Front matter for every Mermaid diagram: draw it at its natural size, as the SVGs
#: are (nodes 40 px apart, not 50, so that more graphs fit a phone). By default mermaid.js scales a diagram down to the column's width, so a
#: large graph's text shrinks until it cannot be read; the container scrolls instead.
_MERMAID_FRONT_MATTER = "---\nconfig:\n  flowchart:\n    useMaxWidth: false\n    nodeSpacing: 40\n---\n"

#: Tells the viewer in the iframe just before it the page's theme: Material sets
#: ``data-md-color-scheme`` on ``<body>`` (``slate`` is dark) on load and on every toggle.
#: The viewer asks once it listens (``gradexportReady``); the frame's ``load`` and a
#: MutationObserver cover the rest. The sandbox lets nothing else through.
_FOLLOW_THEME = (
    "<script>(function (frame) {"
    "var send = function () { var scheme = document.body.getAttribute('data-md-color-scheme');"
    " if (scheme && frame.contentWindow) frame.contentWindow.postMessage({gradexportTheme: scheme === 'slate' ? 'dark' : 'light'}, '*'); };"
    " frame.addEventListener('load', send);"
    " window.addEventListener('message', function (event) { if (event.source === frame.contentWindow && event.data && event.data.gradexportReady) send(); });"
    " new MutationObserver(send).observe(document.body, {attributes: true, attributeFilter: ['data-md-color-scheme']});"
    "})(document.currentScript.previousElementSibling);</script>"
)


def diagram_html(name: str, text: str) -> str:
    # data-search-exclude keeps the diagram's text (Mermaid source, SVG labels, the
    # viewer's data) out of Material's search index: it matches the prose, not node ids.
    if name == "mermaid":
        # The markup pymdownx.superfences writes for a mermaid fence, which Material renders.
        source = html.escape(_MERMAID_FRONT_MATTER + text)
        return f'<div class="gradexport-diagram" data-search-exclude><pre class="mermaid"><code>{source}</code></pre></div>'
    if name == "html":
        # The viewer, isolated in an iframe (its own document, scripts and styles) at a readable height.
        frame = importlib.import_module("gradexport.formats.html").notebook_iframe(text, height=560)
        return f'<div class="gradexport-diagram gradexport-viewer" data-search-exclude>{frame}{_FOLLOW_THEME}</div>'
    if name in ("dot", "json"):  # text: shown as code, highlighted as its language
        language = "json" if name == "json" else "dot"
        source = html.escape(text.rstrip())
        return f'<div class="gradexport-diagram gradexport-text" data-search-exclude><pre><code class="language-{language}">{source}</code></pre></div>'
    return f'<div class="gradexport-diagram gradexport-svg">{text.replace("<svg", "<svg data-search-exclude", 1)}</div>'
