"""Mermaid flowchart text for an autograd graph, for mermaid.js 11 as it ships.

It shows what the DOT writer shows (see the legend in
`gradexport.formats.dot`): nodes styled by kind with ``classDef``,
edges labelled ``i→k`` (position ``i`` in the parent's ``next_functions``,
input slot ``k`` of the child), module boxes as nested ``subgraph`` blocks.

Safety: ids are ``n0``, ``n1``... (see `gradexport.formats.labels.element_id`),
never names, so no name can be read as a keyword such as ``end``. Every label
is quoted, edge labels too (an unquoted ``|next[0]|`` does not parse), and any
character that Mermaid or HTML could read as syntax (quotes, ``#``, ``<``,
``&``, ``:``, brackets, pipes...) is written as a Mermaid entity code such as
``#35;``, which mermaid.js turns back into the character, so a name shows
literally. Line breaks inside a label are ``<br>``.

Mermaid refuses diagrams over 50,000 characters or 500 edges by default
(``maxTextSize``, ``maxEdges``; a page cannot raise them from the diagram).
Above those, the writer still writes the text and warns with
`MermaidSizeWarning`.

Examples:
    >>> import networkx as nx
    >>> g = nx.MultiDiGraph()
    >>> g.add_node("n0", kind="backward", op="AddBackward0")
    >>> g.add_node("n1", kind="leaf", op="AccumulateGrad", names=['a<b>"'], shape=[2], dtype="float32", device="cpu")
    >>> _ = g.add_edge("n0", "n1", key=0, next_index=0, input_nr=0)
    >>> _ = g.add_edge("n0", "n1", key=1, next_index=1, input_nr=0)
    >>> print(to_mermaid(g))  # doctest: +ELLIPSIS
    flowchart TB
      classDef root ...
      ...
      n0("AddBackward0"):::backward
      n1["a#60;b#62;#34;<br>(2,)"]:::leaf
      n0 -->|"0→0"| n1
      n0 -->|"1→0"| n1
"""

from __future__ import annotations

import re
import unicodedata
import warnings
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import NamedTuple

from ..core.errors import MermaidSizeWarning
from ..core.limits import LIMITS, MermaidLimits
from ..core.options import DiagramOptions
from ..core.source import GraphSource, Source
from .diagram import DiagramNode, ModuleBoxes, diagram
from .files import TextOutput, text_output
from .styles import GRAD_COLORS, MARK_STYLES, NODE_STYLES, STYLES

__all__ = [
    "LIMITS",
    "MAX_EDGES",
    "MAX_TEXT_SIZE",
    "MermaidLimits",
    "MermaidSizeWarning",
    "MermaidText",
    "generate_mermaid",
    "render_mermaid",
    "to_mermaid",
    "write_mermaid",
]


#: mermaid.js's default ``maxTextSize``: longer diagrams are refused.
MAX_TEXT_SIZE = LIMITS.max_text_size
#: mermaid.js's default ``maxEdges``: diagrams with more edges are refused.
MAX_EDGES = LIMITS.max_edges


_SHAPES = {
    "stadium": ('(["', '"])'),
    "rounded": ('("', '")'),
    "box": ('["', '"]'),
    "hexagon": ('{{"', '"}}'),
    "note": ('["', '"]'),
    "subroutine": ('[["', '"]]'),
}

# Kept as they are: ASCII letters, digits and punctuation that is inert inside
# a quoted Mermaid string and in HTML. Everything else ASCII becomes an entity.
_SAFE_ASCII = re.compile(r"[A-Za-z0-9 _.,()+=*/\-]*")
# mermaid.js encodes entities with these characters as placeholders
# ("ﬂ°°35¶ß") and decodes every occurrence back, so they must be encoded too.
_PLACEHOLDER_CHARS = frozenset("ﬂ°¶ß")


def _keep(char: str) -> bool:
    if char.isascii():
        return _SAFE_ASCII.fullmatch(char) is not None
    return char not in _PLACEHOLDER_CHARS and unicodedata.category(char)[0] not in "CZ"


def label_text(text: str) -> str:
    """``text`` for a quoted Mermaid label, each special character as an entity code.

    Examples:
        >>> label_text('end "x" #1 <b>')
        'end #34;x#34; #35;1 #60;b#62;'
    """
    if _SAFE_ASCII.fullmatch(text):
        return text
    return "".join(char if _keep(char) else f"#{ord(char)};" for char in text)


def _label(lines: Sequence[str]) -> str:
    if len(lines) == 1:  # most labels: no generator to set up
        return label_text(lines[0])
    return "<br>".join(label_text(line) for line in lines)


def _utf16_units(text: str) -> int:
    """The length of ``text`` as mermaid.js measures it: in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def _with_surplus(text: str) -> tuple[str, int]:
    return text, _utf16_units(text) - len(text)


def _class_definition(name: str) -> str:
    style = STYLES[name]
    dash = ",stroke-dasharray:4 3" if style.dashed else ""
    return f"  classDef {name} fill:{style.fill},stroke:{style.stroke},color:{style.text}{dash}"


class MermaidText(NamedTuple):
    """A Mermaid diagram's text with the sizes mermaid.js checks."""

    text: str
    #: Length in UTF-16 code units, as mermaid.js counts it.
    size: int
    edges: int

    @property
    def fits(self) -> bool:
        """Whether mermaid.js draws it with its default `LIMITS`."""
        return self.size <= LIMITS.max_text_size and self.edges <= LIMITS.max_edges

    def size_warning(self) -> MermaidSizeWarning | None:
        """The warning for a diagram over the limits, or None."""
        return None if self.fits else _size_warning(self.size, self.edges)


def _size_warning(size: int, edges: int) -> MermaidSizeWarning:
    return MermaidSizeWarning(
        f"this Mermaid diagram has {size:,} characters and {edges:,} edges; mermaid.js refuses more than "
        f"{LIMITS.max_text_size:,} characters or {LIMITS.max_edges:,} edges by default and a page cannot raise those "
        "limits from the diagram. Draw fewer nodes (collapse modules with depth=, or fewer roots), "
        "or use the interactive viewer (format html) for the whole graph; SVG suits graphs of up to a few thousand "
        "nodes (Graphviz takes minutes, or crashes, on much larger ones)."
    )


def generate_mermaid(graph: GraphSource, options: DiagramOptions | None = None) -> Iterator[str]:
    """Yield the Mermaid text of ``graph`` line by line (without newlines).

    Warns with `MermaidSizeWarning` once the text is complete when it
    is over `MAX_TEXT_SIZE` characters or `MAX_EDGES` edges.
    """
    sizes: list[int] = []
    yield from _lines(graph, options or DiagramOptions(), sizes)
    size, edges = sizes
    if size > LIMITS.max_text_size or edges > LIMITS.max_edges:
        warnings.warn(_size_warning(size, edges), stacklevel=2)


def render_mermaid(graph: GraphSource, options: DiagramOptions | None = None) -> MermaidText:
    """The Mermaid text of ``graph`` with its sizes, without warning (see `MermaidText.fits`)."""
    sizes: list[int] = []
    text = "\n".join(chain(_lines(graph, options or DiagramOptions(), sizes), ("",)))
    return MermaidText(text, *sizes)


def _lines(graph: GraphSource, options: DiagramOptions, sizes: list[int]) -> Iterator[str]:
    """The lines of the diagram; once they are all out, ``sizes`` holds its size and edge count."""
    size = edges = 0

    def counted(line: str) -> str:
        nonlocal size
        size += _utf16_units(line) + 1
        return line

    source = Source.of(graph)
    yield counted(f"flowchart {options.direction}")
    for name in (*NODE_STYLES, *MARK_STYLES) if source.marked else NODE_STYLES:
        yield counted(_class_definition(name))
    edge_lines: list[str] = []
    # Many nodes and edges look alike: each look's text is made once, with how
    # many more UTF-16 units than characters it has (characters beyond U+FFFF
    # count twice). Ids and syntax are ASCII, so a line's size is its length
    # plus its look's surplus, without encoding every line.
    node_texts: dict[tuple[str, tuple[str, ...]], tuple[str, int]] = {}
    edge_texts: dict[tuple[str, ...], tuple[str, int]] = {}

    def node_line(node: DiagramNode, indent: str) -> str:
        nonlocal size
        look = node[1:3]  # (style, lines)
        found = node_texts.get(look)
        if found is None:
            opening, closing = _SHAPES[STYLES[node.style].shape]
            found = node_texts[look] = _with_surplus(f"{opening}{_label(node.lines)}{closing}:::{node.style}")
        line = f"{indent}{node.id}{found[0]}"
        size += len(line) + found[1] + 1
        return line

    boxes = ModuleBoxes(source.graph_attributes.get("module_classes"))
    for node in diagram(source, options):
        for target, look in node.edges:
            found = edge_texts.get(look.lines)
            if found is None:
                found = edge_texts[look.lines] = _with_surplus(_label(look.lines))
            line = f'  {node.id} -->|"{found[0]}"| {target}'
            size += len(line) + found[1] + 1
            edge_lines.append(line)
            if look.color is not None:
                # A gradient's colour goes on the line only: its label stays dark enough to read.
                text_colour = "" if look.color in GRAD_COLORS else f",color:{look.color}"
                edge_lines.append(counted(f"  linkStyle {edges} stroke:{look.color},stroke-width:{look.width:g}px{text_colour}"))
            edges += 1
        if node.group is None:
            yield node_line(node, "  ")
        else:
            boxes.add(node)
    for event, item, indent in boxes.events():
        if isinstance(item, DiagramNode):
            yield node_line(item, indent)
        elif event == "open":
            yield counted(f'{indent}subgraph {item.id}["{_label([item.label])}"]')
        else:
            yield counted(f"{indent}end")
    yield from edge_lines
    sizes[:] = (size, edges)


def to_mermaid(graph: GraphSource, options: DiagramOptions | None = None) -> str:
    """The Mermaid text of ``graph``, ending with a newline; warns when mermaid.js would refuse it."""
    rendered = render_mermaid(graph, options)
    warning = rendered.size_warning()
    if warning is not None:
        warnings.warn(warning, stacklevel=2)
    return rendered.text


def write_mermaid(graph: GraphSource, path: TextOutput, options: DiagramOptions | None = None) -> None:
    """Write the Mermaid text of ``graph`` to an open text file, or atomically to a path."""
    with text_output(path) as file:
        file.writelines(line + "\n" for line in generate_mermaid(graph, options))
