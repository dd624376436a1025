"""The sizes the consumers of gradexport's output accept, which analyses and writers both plan for.

`gradexport.tools.fit` folds a graph until it is within mermaid.js's edge limit;
the Mermaid writer warns past both limits.

Examples:
    >>> LIMITS.max_edges, LIMITS.max_text_size
    (500, 50000)
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["GRAPHVIZ_SLOW_NODES", "LIMITS", "MermaidLimits"]


class MermaidLimits(NamedTuple):
    """The sizes above which mermaid.js refuses a diagram."""

    #: ``maxTextSize``: the most characters (UTF-16 code units) of a diagram's text.
    max_text_size: int = 50_000
    #: ``maxEdges``: the most edges.
    max_edges: int = 500


#: mermaid.js's default limits, which a diagram cannot raise from its own text.
LIMITS = MermaidLimits()


#: Above this many nodes, Graphviz's ``dot`` takes seconds to minutes: `gradexport.to_svg`
#: warns before it starts and `gradexport.show` draws its picture folded. Measured with dot
#: 2.43 on GPT-2-like graphs (benchmarks/graphviz_sizes.py, docs/performance.md): 603 nodes
#: 0.2 s; 1,191 nodes 0.7 s with module boxes but 7.5 s without; 2,367 nodes 6 s with boxes.
GRAPHVIZ_SLOW_NODES = 1_000
