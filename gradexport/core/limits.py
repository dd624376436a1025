"""The sizes the consumers of gradexport's output accept, which analyses and writers both plan for.

`gradexport.fit` folds a graph until it is within mermaid.js's edge limit;
the Mermaid writer warns past both limits.

Examples:
    >>> LIMITS.max_edges, LIMITS.max_text_size
    (500, 50000)
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["LIMITS", "MermaidLimits"]


class MermaidLimits(NamedTuple):
    """The sizes above which mermaid.js refuses a diagram."""

    #: ``maxTextSize``: the most characters (UTF-16 code units) of a diagram's text.
    max_text_size: int = 50_000
    #: ``maxEdges``: the most edges.
    max_edges: int = 500


#: mermaid.js's default limits, which a diagram cannot raise from its own text.
LIMITS = MermaidLimits()
