"""Helpers shared by the format, export, CLI and notebook tests.

Test modules import it by name: ``pythonpath = ["tests"]`` in pyproject.toml
puts this folder on ``sys.path``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ElementTree
from html import unescape
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
import torch
from cases import CASES
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent
MERMAID_PARSER = REPO / "tests" / "mermaid_parse.mjs"

#: The graph-model cases every format is checked on (compiled costs seconds of torch.compile; the model tests cover it).
FORMAT_CASES = {name: builder for name, builder in CASES.items() if name != "compiled"}

#: Names that broke, or could break, some syntax: quotes, escapes, markup, entities, keywords, separators.
NASTY_NAMES = [
    '"',
    "\\",
    "a\\nb",
    "line\nbreak",
    "<script>alert(1)</script>",
    "&amp; &lt; &",
    "{x}",
    "[0]",
    "a|b",
    "torch::autograd::AccumulateGrad",
    "end",
    "subgraph",
    "graph",
    "style: a#35;b;",
    "#quot;",
    "ﬂ°°35¶ß",
    "%% comment",
    "\\N \\G \\E",
    "-->",
    "naïve 名前 🙂",
    "   ",
    "x\u2028y",
    "\ufffe",
]

#: Names hypothesis draws: any text, with the known troublemakers mixed in.
names = st.one_of(st.sampled_from(NASTY_NAMES), st.text(max_size=24))


def named_graph(param: str, root: str, **model_options: Any) -> nx.MultiDiGraph:
    """``root: (w * 2).sum()`` with the leaf ``w`` named ``param``: one name on a leaf, one on the root."""
    import gradexport

    w = torch.ones(2, requires_grad=True)
    return gradexport.to_networkx({root: (w * 2).sum()}, params={param: w}, **model_options)


def case_graph(name: str, **model_options: Any) -> nx.MultiDiGraph:
    import gradexport

    case = FORMAT_CASES[name]()
    return gradexport.to_networkx(case.roots, params=case.params or None, module=case.module, **model_options)


def torch_edge_labels(grad_fn: Any) -> list[tuple[str, str]]:
    """``(child op, "i→k")`` for each non-None entry of ``grad_fn.next_functions``, from torch itself."""
    return [(type(child).__name__, f"{index}→{input_nr}") for index, (child, input_nr) in enumerate(grad_fn.next_functions) if child is not None]


# --- Graphviz -----------------------------------------------------------------

#: Under ``make`` (which exports MAKELEVEL) or in CI (CI=true), a missing tool fails the tests that need
#: it instead of skipping them, so that a run that claims to test everything does.
TOOLS_REQUIRED = "MAKELEVEL" in os.environ or os.environ.get("CI", "").lower() == "true"


def needs_tool(missing: bool, reason: str) -> pytest.MarkDecorator:
    """Skip when ``missing``, or fail with ``reason`` where tools are required (see :data:`TOOLS_REQUIRED`)."""
    if missing and TOOLS_REQUIRED:
        return pytest.mark.tool_missing(reason)  # conftest.py fails these at setup
    return pytest.mark.skipif(missing, reason=reason)


needs_dot = needs_tool(shutil.which("dot") is None, "Graphviz dot is not installed (make setup installs it)")

SVG_TAGS = {"svg", "g", "title", "text", "polygon", "polyline", "path", "ellipse"}


def render_with_dot(dot_text: str) -> str:
    """SVG from the system ``dot``; fails the test on any error or warning."""
    result = subprocess.run(["dot", "-Tsvg"], input=dot_text.encode(), capture_output=True, check=False)
    assert result.returncode == 0 and not result.stderr, result.stderr.decode()
    return result.stdout.decode()


def svg_text_lines(svg: str) -> list[str]:
    """The text the SVG shows, one entry per ``<text>`` element, after checking it holds only Graphviz's markup."""
    root = ElementTree.fromstring(svg)
    tags = {element.tag.rpartition("}")[2] for element in root.iter()}
    assert tags <= SVG_TAGS, f"unexpected elements {tags - SVG_TAGS}"
    return [element.text or "" for element in root.iter() if element.tag.endswith("}text")]


# --- mermaid.js ---------------------------------------------------------------

needs_mermaid = needs_tool(
    shutil.which("node") is None or not (REPO / "node_modules" / "mermaid").is_dir() or not (REPO / "node_modules" / "jsdom").is_dir(),
    "Node.js with mermaid and jsdom from npm is needed (make setup installs them)",
)


def parse_mermaid(texts: list[str]) -> list[dict[str, Any]]:
    """Parse each diagram with mermaid.js (one Node process for the batch); see mermaid_parse.mjs."""
    result = subprocess.run(["node", str(MERMAID_PARSER)], input=json.dumps(texts).encode(), capture_output=True, cwd=REPO, check=False)
    assert result.stdout, result.stderr.decode()
    return json.loads(result.stdout)


# mermaid.js encodes "#35;" as "ﬂ°°35¶ß" while parsing and turns it into "&#35;" for the browser.
_PLACEHOLDERS = (("ﬂ°°", "&#"), ("ﬂ°", "&"), ("¶ß", ";"))


def mermaid_shown(parsed_text: str) -> list[str]:
    """The lines a browser shows for a label as mermaid.js parsed it: ``<br>`` splits, entities decode."""
    lines = []
    for line in parsed_text.split("<br>"):
        for placeholder, entity in _PLACEHOLDERS:
            line = line.replace(placeholder, entity)
        lines.append(unescape(line))
    return lines


def torch_edges(roots: Any) -> list[tuple[str, str, str]]:
    """``(parent op, child op or "leaf", "i→k")`` for every edge below the roots, walked in torch itself."""
    from gradexport.streams import collect_roots

    seen = set()
    pending = [root.node for root in collect_roots(roots)]
    edges = []
    while pending:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        for index, (child, input_nr) in enumerate(node.next_functions):
            if child is not None:
                child_label = "leaf" if type(child).__name__ == "AccumulateGrad" else type(child).__name__
                edges.append((type(node).__name__, child_label, f"{index}→{input_nr}"))
                pending.append(child)
    return sorted(edges)


def drawn_edges(nodes: dict[str, tuple[str, str]], edges: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The same triples read from a drawing: ``nodes`` maps id to (class, first label line), ``edges`` are (source, target, label)."""
    triples = []
    for source, target, label in edges:
        source_class, source_line = nodes[source]
        target_class, target_line = nodes[target]
        if source_class in ("backward", "special") and target_class != "none":
            triples.append((source_line, "leaf" if target_class == "leaf" else target_line, label))
    return sorted(triples)


def module_graph(second_module: str) -> nx.MultiDiGraph:
    """A graph with nested modules and a folded module, as capture_modules and collapse make them.

    ``n1`` was made in ``encoder.layers.3``, ``n2`` in ``second_module``, and
    ``encoder.layers.4`` is folded into one node, reached by an edge that stands for three.
    """
    graph = nx.MultiDiGraph()
    graph.add_node("n0", kind="root", root="loss", shape=[], dtype="float32", device="cpu")
    graph.add_node("n1", kind="backward", op="AddmmBackward0", module="encoder.layers.3")
    graph.add_node("n2", kind="backward", op="NativeLayerNormBackward0", module=second_module)
    graph.add_node("module:encoder.layers.4", kind="module", module="encoder.layers.4", num_nodes=7)
    graph.add_edge("n0", "n2", key=0, next_index=0, input_nr=0)
    graph.add_edge("n2", "module:encoder.layers.4", key=0, next_index=0, input_nr=0, count=3)
    graph.add_edge("module:encoder.layers.4", "n1", key=0, next_index=0, input_nr=0)
    return graph
