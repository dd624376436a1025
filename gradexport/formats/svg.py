"""SVG for an autograd graph, laid out and drawn by Graphviz.

The program that renders it is, in order: the ``prog`` argument, the
``GRADEXPORT_DOT`` environment variable (a program name or path), the system
``dot`` (``apt-get install graphviz``), then ``graphviz-pure`` (a static
Graphviz port from PyPI: ``pip install gradexport[svg]``). Where none exists,
`GraphvizNotFoundError` says how to install one. DOT, Mermaid and JSON
never need Graphviz. ``graphviz-pure`` knows the widths of ASCII characters
only: it sizes others (the ``→`` of edge labels, non-Latin names) as a space
and warns.

The same DOT and the same program give the same SVG bytes. Graphviz escapes
label text for XML itself, so a name never becomes markup in the SVG.

Examples:
    >>> import networkx as nx
    >>> g = nx.MultiDiGraph()
    >>> g.add_node("n0", kind="leaf", names=["<script>alert(1)</script>"], shape=[])
    >>> svg = to_svg(g)
    >>> "<script>" in svg, "&lt;script&gt;alert(1)&lt;/script&gt;" in svg
    (False, True)
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sysconfig
import warnings

from ..core.children import run_child
from ..core.errors import GraphvizNotFoundError, GraphvizSizeWarning, GraphvizWarning, RenderError, RenderTimeoutError
from ..core.limits import GRAPHVIZ_SLOW_NODES
from ..core.options import DiagramOptions
from ..core.source import GraphSource
from .dot import to_dot
from .files import TextOutput, text_output

__all__ = ["ENV_VAR", "GraphvizNotFoundError", "RenderError", "count_nodes", "find_graphviz", "render_svg", "size_advice", "to_svg", "write_svg"]

#: Environment variable naming the Graphviz program that renders SVG.
ENV_VAR = "GRADEXPORT_DOT"
_DEFAULT_PROGRAMS = ("dot", "graphviz-pure")


def _which(program: str) -> str | None:
    # pip puts graphviz-pure next to this interpreter; that folder is on PATH
    # only while its virtual environment is activated.
    return shutil.which(program) or shutil.which(program, path=sysconfig.get_path("scripts"))


def find_graphviz(prog: str | os.PathLike[str] | None = None) -> str:
    """The path of the Graphviz program to use (see the module docstring for the order).

    Raises:
        GraphvizNotFoundError: when the chosen program, or every default, is missing.
    """
    chosen = prog if prog is not None else os.environ.get(ENV_VAR) or None
    if chosen is not None:
        found = _which(os.fspath(chosen))
        if found is None:
            origin = "prog" if prog is not None else ENV_VAR
            raise GraphvizNotFoundError(f"Graphviz program {os.fspath(chosen)!r} (from {origin}) was not found or is not executable")
        return found
    for name in _DEFAULT_PROGRAMS:
        found = _which(name)
        if found is not None:
            return found
    raise GraphvizNotFoundError(
        "SVG needs Graphviz and none was found: install it (apt-get install graphviz, brew install graphviz) "
        f"or the pip-installable renderer (pip install gradexport[svg]), or set {ENV_VAR} to a dot program. "
        "DOT, Mermaid and JSON need no Graphviz."
    )


def render_svg(dot_text: str, prog: str | os.PathLike[str] | None = None, timeout: float | None = None) -> str:
    """Render DOT text to SVG text with Graphviz (see `find_graphviz`).

    Graphviz's warnings (its stderr on success) become `RuntimeWarning`.
    Over `gradexport.core.limits.GRAPHVIZ_SLOW_NODES` nodes, a
    `GraphvizSizeWarning` says before Graphviz starts that it may take
    minutes, and what draws faster. ``timeout`` stops it after that many
    seconds.

    Raises:
        GraphvizNotFoundError: no program to run.
        RenderTimeoutError: the program ran longer than ``timeout`` and was killed.
        RenderError: the program failed; when it crashed (a signal such as
            SIGSEGV, as ``dot`` does on graphs of some 10^5 nodes), the
            message names the signal and the number of nodes, and says what
            works at that size.
    """
    program = find_graphviz(prog)
    nodes = count_nodes(dot_text)
    if nodes > GRAPHVIZ_SLOW_NODES:
        warnings.warn(
            GraphvizSizeWarning(f"Graphviz may take minutes to lay out {nodes:,} nodes (it slows sharply past {GRAPHVIZ_SLOW_NODES:,}); {size_advice()}"),
            stacklevel=3,
        )
    # Piping the text to the program directly: pydot's create() would first
    # parse the whole graph into its object model only to write it back out.
    try:
        # On a timeout, and when this process ends, run_child kills the program (see gradexport.core.children).
        result = run_child([program, "-Tsvg"], input=dot_text.encode("utf-8"), timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RenderTimeoutError(
            f"{program} did not finish laying out {nodes:,} nodes within dot_timeout={timeout:g} s and was stopped; {size_advice()}"
        ) from None
    message = result.stderr.decode("utf-8", "replace").strip()
    if result.returncode < 0:
        raise RenderError(_crash_message(program, -result.returncode, dot_text, message))
    if result.returncode != 0:
        raise RenderError(f"{program} -Tsvg failed with exit code {result.returncode}: {message or 'no message'}")
    if message:
        warnings.warn(GraphvizWarning(f"{program}: {message}"), stacklevel=2)
    return result.stdout.decode("utf-8")


def size_advice() -> str:
    """What to do about a graph too large for Graphviz, as the size messages say it."""
    return (
        "fold modules into one node each with depth= (depth=2 or 3 for a transformer), or gradexport.collapse, "
        "gradexport.tools.only_reaching, gradexport.tools.hide; or use the interactive viewer (format html, gradexport view), "
        "which draws any size"
    )


def count_nodes(dot_text: str) -> int:
    """The node statements in DOT text as `gradexport.formats.dot` writes it.

    Examples:
        >>> count_nodes('digraph {\\n  "n0" [label="a"];\\n  "n0" -> "n1" [label="0"];\\n}')
        1
    """
    return sum(1 for line in dot_text.splitlines() if _NODE_STATEMENT.match(line))


def _crash_message(program: str, number: int, dot_text: str, message: str) -> str:
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    nodes = count_nodes(dot_text)
    said = f" ({_flat(message)})" if message else ""
    return (
        f"Graphviz crashed ({name}) laying out {nodes:,} nodes with {program}{said}. Graphviz is reliable up to a few "
        "thousand nodes: draw fewer (collapse modules with depth= or gradexport.collapse, gradexport.tools.only_reaching, "
        "gradexport.tools.hide), or use the interactive viewer (format html), which draws any size"
    )


# A node statement of DOT text: a quoted id, then its attributes (edges have "->" first).
_NODE_STATEMENT = re.compile(r'\s*"(?:[^"\\]|\\.)*"\s*\[')


def _flat(text: str) -> str:
    return " ".join(text.split())


def to_svg(graph: GraphSource, options: DiagramOptions | None = None, prog: str | os.PathLike[str] | None = None, timeout: float | None = None) -> str:
    """The SVG text of ``graph``, rendered from `gradexport.formats.dot.to_dot` (see `render_svg`)."""
    return render_svg(to_dot(graph, options), prog, timeout)


def write_svg(
    graph: GraphSource,
    path: TextOutput,
    options: DiagramOptions | None = None,
    prog: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
) -> None:
    """Render ``graph`` and write the SVG; a path changes only once rendering succeeded."""
    svg = to_svg(graph, options, prog, timeout)
    with text_output(path) as file:
        file.write(svg)
