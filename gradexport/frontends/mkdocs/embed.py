"""What replaces a block in the page: its code, its output and its diagrams, as Markdown and HTML.

Diagrams go into the Markdown as placeholder paragraphs and are put into the
page's HTML after Markdown ran (`place_diagrams`), so that no Markdown
extension rewrites an SVG or the viewer's page.

Examples:
    >>> fenced("print(1)", "python")
    '```python\\nprint(1)\\n```'
"""

from __future__ import annotations

import uuid

from mkdocs.exceptions import PluginError

from ..blocks.embed import diagram_html
from ..blocks.markdown import fenced
from ..blocks.spec import FORMATS, NOT_EMBEDDED

__all__ = ["FORMATS", "NOT_EMBEDDED", "fenced", "markdown_for", "place_diagrams"]


def markdown_for(
    code: str | None, output: str | None, diagrams: dict[str, str], indent: str, placeholders: dict[str, str], *, titled_fences: bool
) -> list[str]:
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
            raise PluginError(f"{where}: a gradexport diagram could not be placed; keep gradexport blocks at the top level, in admonitions or in content tabs")
        html_text = html_text.replace(paragraph, diagram)
    return html_text
