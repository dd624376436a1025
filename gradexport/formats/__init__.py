"""Format writers: a `networkx.MultiDiGraph` of `gradexport.tracing.graph` in, text out.

One module per format, in NetworkX's readwrite style (``generate_*`` yields
lines, ``to_*`` returns text, ``write_*`` writes a file atomically). Writers
know nothing of torch; what a diagram shows is decided once, in
`gradexport.formats.labels`, for DOT and Mermaid alike. Every writer
also takes the same graph as a one-pass stream of adjacency records
(`gradexport.core.source`), and writes the same bytes for it.

May import: core.

Examples:
    >>> import networkx as nx
    >>> from gradexport.formats import DiagramOptions, to_mermaid
    >>> g = nx.MultiDiGraph()
    >>> g.add_node("n0", kind="backward", op="SumBackward0")
    >>> to_mermaid(g, DiagramOptions(direction="LR")).splitlines()[0]
    'flowchart LR'
"""

from ..core.options import DIRECTIONS, DiagramOptions
from .dot import generate_dot, to_dot, to_pydot, write_dot
from .files import OutputError, StagedFiles, atomic_open
from .json import GraphFormatError, from_json, generate_json, read_json, to_json, write_json
from .mermaid import MermaidSizeWarning, generate_mermaid, to_mermaid, write_mermaid
from .svg import (
    GraphvizNotFoundError,
    RenderError,
    find_graphviz,
    render_svg,
    to_svg,
    write_svg,
)

__all__ = [
    "DIRECTIONS",
    "DiagramOptions",
    "GraphFormatError",
    "GraphvizNotFoundError",
    "MermaidSizeWarning",
    "OutputError",
    "RenderError",
    "StagedFiles",
    "atomic_open",
    "find_graphviz",
    "from_json",
    "generate_dot",
    "generate_json",
    "generate_mermaid",
    "read_json",
    "render_svg",
    "to_dot",
    "to_json",
    "to_mermaid",
    "to_pydot",
    "to_svg",
    "write_dot",
    "write_json",
    "write_mermaid",
    "write_svg",
]
