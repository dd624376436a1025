"""An interactive HTML page for an autograd graph: one self-contained file, nothing fetched.

The page embeds the graph model's data as JSON and the viewer's script (built
from ``gradexport/viewer/src`` into ``gradexport/viewer/viewer.bundle.js``,
with the layout library dagre inside it). It opens folded so that at most
about 150 nodes are visible: modules (the ``module`` attribute) fold into
boxes named with the module's class (from the graph attribute
``module_classes``), linear runs into one ``×N`` node and fans of leaves into
one node. A click expands a fold in place; layout runs in a Web Worker, only
on what is visible. See ``docs/guides/viewer.md`` for the page and its script
API (``window.gradexportViewer``).

Marks look as in the other formats (see ``docs/guides/viewer.md``): the
node where a non-finite gradient started (graph attribute ``nonfinite``,
the page opens with it shown and selected), a diff's added, removed and
changed nodes and edges (graph attribute ``diff``), each with a legend; a
folded group that holds a marked node is outlined in the mark's colour.

Edges are labelled ``i→k`` as in the other formats: position ``i`` of the
parent's ``next_functions``, input slot ``k`` of the child.

The embedded data holds every node attribute, both indices and the key of
every edge (parallel edges stay distinct) and every other edge attribute
(``grad`` records, shapes), so the page's side panel shows what the graph
model holds. Strings that repeat (op names, module paths, dtypes) are stored
once. Non-finite floats (a NaN gradient norm), which JSON cannot hold, become
the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``.

Examples:
    >>> import torch
    >>> from gradexport import to_networkx
    >>> x = torch.ones(3, requires_grad=True)
    >>> page = to_html(to_networkx((x * 2).sum(), params={"x": x}), title="x * 2")
    >>> page.startswith("<!DOCTYPE html>") and "<title>x * 2</title>" in page
    True
    >>> iframe = notebook_iframe(page)
    >>> iframe.startswith("<iframe") and "<script" not in iframe
    True
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Hashable, Iterator, Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

from ..core.errors import ArgumentValueError, GradexportError, MissingFileError, ViewerTooLargeError
from ..core.options import DiagramOptions
from ..core.source import GraphSource, adjacency, graph_attributes
from .diagram import drawn_none_slots
from .files import TextOutput, text_output
from .labels import DIFF_MARKS, element_id, node_lines, printable
from .styles import (
    GRAD_BAD_COLOR,
    GRAD_BOUNDS,
    GRAD_COLORS,
    GRAD_COLORS_DARK,
    MARK_COLORS,
    STYLES,
    WATCH_GRAD_BOUNDS,
    WATCH_GRAD_COLORS,
    WATCH_GRAD_COLORS_DARK,
    grad_legend,
)

__all__ = [
    "MAX_VIEWER_EDGES",
    "MAX_VIEWER_NODES",
    "ViewerTooLargeError",
    "generate_bundle_html",
    "generate_html",
    "notebook_iframe",
    "to_html",
    "viewer_bundle",
    "write_html",
]

#: The most nodes a page may hold: a browser tab needs about 1 KB of memory per node
#: for the page's tables, and the page file about 60 bytes per node.
MAX_VIEWER_NODES = 2_000_000
#: The most edges a page may hold.
MAX_VIEWER_EDGES = 4_000_000

#: The graph attribute holding a replay's steps (`gradexport.backward.steps.step_data`), embedded as the page's ``steps``.
STEPS_ATTRIBUTE = "replay_steps"

#: Node attributes whose string values are stored once in the page's string table.
_INTERNED = frozenset({"kind", "op", "torch_name", "module", "dtype", "device", "special", "root"})

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False)
_BATCH = 1024
# Characters that could end the script element or start a comment in it; JSON
# has them only inside strings, where \\u escapes mean the same.
_SCRIPT_UNSAFE = re.compile("[<>&]")
_MODEL_ID = re.compile("n[0-9]+").fullmatch

#: The words of each node mark, as every other format writes them in a label's first line.
_MARK_WORDS = {"nonfinite": node_lines({"nonfinite": "origin"}, False, False)[0], **DIFF_MARKS}


@lru_cache(maxsize=1)
def viewer_bundle() -> str:
    """The viewer's script, as shipped in the package (``gradexport/viewer/viewer.bundle.js``).

    Raises:
        FileNotFoundError: when the package was installed without it (rebuild with ``npm run build-viewer``).
    """
    path = resources.files("gradexport") / "viewer" / "viewer.bundle.js"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise MissingFileError(
            f"the viewer's script {path} is missing from this installation of gradexport; in a source checkout, build it with `npm ci && npm run build-viewer`"
        ) from error
    if "</script" in text.lower() or "<!--" in text:
        raise GradexportError(f"{path} contains '</script' or '<!--' and cannot be inlined in a page; rebuild it")
    return text


def generate_html(source: GraphSource, options: DiagramOptions | None = None, *, title: str | None = None) -> Iterator[str]:
    """Yield the page for ``source`` (a graph or a stream, see `gradexport.core.source`) in chunks.

    The whole source is read before the first chunk, so a graph over
    `MAX_VIEWER_NODES` or `MAX_VIEWER_EDGES` raises
    `ViewerTooLargeError` before anything is written.

    Options (see `gradexport.formats.labels.DiagramOptions`):
    ``direction`` sets where the loss is, ``show_none`` adds or hides None
    slots, ``edge_shapes`` adds the gradient's shape to edge labels,
    ``grad_norms`` colours edges by their ``grad`` record, and
    ``group_modules=False`` ignores modules (folding by structure only),
    ``exec_order`` numbers nodes ``#k`` by their ``exec_order`` and
    ``saved_bytes`` adds a line ``saved 1.0 KiB`` and a bar for the bytes a node
    saved. Marks (``nonfinite``, ``diff``) are always drawn, as in the other formats.
    ``show_saved=False`` leaves out what each node saved (the side panel shows it otherwise).
    """
    options = options or DiagramOptions()
    data = _encode(source, options)
    name = title if title is not None else _default_title(data["graph"])
    data["title"] = name
    bundle = viewer_bundle()
    yield (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="generator" content="gradexport">\n'
        f"<title>{html.escape(printable(name))}</title>\n</head>\n<body>\n"
        '<div id="gradexport-viewer"></div>\n'
        "<noscript>This page draws the autograd graph with JavaScript, which is turned off.</noscript>\n"
        '<script type="application/json" id="gradexport-data">'
    )
    yield from _data_chunks(data)
    yield "</script>\n<script>\n"
    yield bundle
    yield "</script>\n</body>\n</html>\n"


def generate_bundle_html(
    bad: GraphSource,
    healthy: GraphSource | None,
    summary: Mapping[str, Any],
    options: DiagramOptions | None = None,
    *,
    title: str,
) -> Iterator[str]:
    """Yield the page of a flight-recorder bundle: the bad step's graph and the healthy step's, side by side.

    The page holds both graphs' data and ``summary`` (what its header shows:
    ``bad_step``, ``reasons``, ``healthy_step``, ``healthy_every``,
    ``divergence``, ``divergence_op``, ``divergence_source``,
    ``divergence_step``, ``forward_origin``, ``reproduced``) in one
    ``<script id="gradexport-bundle">`` element; the viewer's script finds it
    and opens each step in a viewer of its own (an ``<iframe>`` it writes from
    its own text), the divergent node selected in both. The page keeps
    working from ``file://`` on a machine without gradexport.

    Examples:
        >>> import networkx as nx
        >>> bad = nx.MultiDiGraph()
        >>> bad.add_node("n0", kind="backward", op="SqrtBackward0")
        >>> page = "".join(generate_bundle_html(bad, None, {"bad_step": 3}, title="bad step 3"))
        >>> 'id="gradexport-bundle"' in page and "<title>bad step 3</title>" in page
        True
    """
    options = options or DiagramOptions()
    pages = [_encode(graph, options) if graph is not None else None for graph in (bad, healthy)]
    script = viewer_bundle()
    yield (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="generator" content="gradexport">\n'
        f"<title>{html.escape(printable(title))}</title>\n</head>\n<body>\n"
        '<div id="gradexport-viewer"></div>\n'
        "<noscript>This page draws the two steps' autograd graphs with JavaScript, which is turned off.</noscript>\n"
        '<script type="application/json" id="gradexport-bundle">'
    )
    yield '{"title":' + _safe(_encode_json(title)) + ',"summary":' + _safe(_encode_json(dict(summary)))
    for name, data in zip(("bad", "healthy"), pages):
        yield f',"{name}":'
        if data is None:
            yield "null"
            continue
        data["title"] = f"{name} step {summary.get(f'{name}_step')}"
        yield from _data_chunks(data)
    yield "}</script>\n<script>\n"
    yield script
    yield "</script>\n</body>\n</html>\n"


def to_html(source: GraphSource, options: DiagramOptions | None = None, *, title: str | None = None) -> str:
    """The viewer page for ``source`` as one string (see `generate_html`)."""
    return "".join(generate_html(source, options, title=title))


def write_html(
    source: GraphSource,
    file_or_path: TextOutput,
    options: DiagramOptions | None = None,
    *,
    title: str | None = None,
) -> None:
    """Write the viewer page to an open text file, or atomically to a path.

    Nothing is written when the graph is too large (`ViewerTooLargeError`).
    """
    chunks = generate_html(source, options, title=title)
    first = next(chunks)  # reads and checks the whole graph
    with text_output(file_or_path) as file:
        file.write(first)
        file.writelines(chunks)


def notebook_iframe(page: str, height: int = 640) -> str:
    """An ``<iframe srcdoc=...>`` holding ``page``, for notebooks (classic Jupyter, JupyterLab, VS Code).

    The page is an attribute value, escaped, so its scripts and styles cannot
    touch the notebook; the sandbox lets it run scripts and nothing else.

    Examples:
        >>> notebook_iframe('<p title="a">x</p>', height=200)
        '<iframe srcdoc="&lt;p title=&quot;a&quot;&gt;x&lt;/p&gt;" sandbox="allow-scripts" style="width: 100%; height: 200px; border: 0" title="autograd graph"></iframe>'
    """
    if not isinstance(height, int) or isinstance(height, bool) or height <= 0:
        raise ArgumentValueError(f"notebook_iframe: height must be a positive number of pixels, got {height!r}")
    return (
        f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" '
        f'style="width: 100%; height: {height}px; border: 0" title="autograd graph"></iframe>'
    )


def _default_title(attributes: Mapping[str, Any]) -> str:
    names = [str(root.get("name")) for root in attributes.get("roots", ()) if isinstance(root, Mapping)]
    return "autograd graph" + (f": {', '.join(names)}" if names else "")


def _encode(source: GraphSource, options: DiagramOptions) -> dict[str, Any]:
    """The page's data: nodes as ``[schema, values...]``, edges as five numbers each, strings stored once."""
    strings: dict[str, int] = {}
    schemas: dict[tuple[tuple[str, ...], int], int] = {}
    records: list[list[Any]] = []
    node_ids: list[str] = []
    index_of: dict[Hashable, int] = {}
    kinds: list[Any] = []
    # (source index, target id, key, attributes); a None slot drawn from none_slots has its target's index.
    raw_edges: list[tuple[int, Hashable, Any, dict[str, Any], int | None]] = []
    hide_none = options.show_none is False
    hide_saved = options.show_saved is False
    edge_count = 0

    # Per key tuple, the positions of the keys whose string values go to the string table.
    plans: dict[tuple[str, ...], list[int]] = {}

    def add_node(node_id: str, attributes: Mapping[str, Any]) -> int:
        keys = tuple(attributes)
        plan = plans.get(keys)
        if plan is None:
            plan = plans[keys] = [position for position, key in enumerate(keys) if key in _INTERNED]
        values = list(attributes.values())
        flags = 0
        for position in plan:
            value = values[position]
            if type(value) is str:
                index = strings.get(value)
                if index is None:
                    index = strings[value] = len(strings)
                values[position] = index
                flags |= 1 << position
        schema = schemas.get((keys, flags))
        if schema is None:
            schema = schemas[keys, flags] = len(schemas)
        values.insert(0, schema)
        records.append(values)
        node_ids.append(node_id)
        kinds.append(attributes.get("kind"))
        return len(records) - 1

    for node, attributes, out in adjacency(source):
        if hide_none and attributes.get("kind") == "none":
            continue
        node_id = node if type(node) is str else element_id(node)
        if hide_saved and "saved" in attributes:
            attributes = {key: value for key, value in attributes.items() if key != "saved"}
        index = index_of[node] = add_node(node_id, attributes)
        for target, keyed in out.items():
            for key, data in keyed.items():
                raw_edges.append((index, target, key, data, None))
        edge_count += sum(len(keyed) for keyed in out.values())
        if options.show_none:
            for slot in drawn_none_slots(attributes, out):
                none_index = add_node(f"{node_id}_none{slot}", {"kind": "none"})
                raw_edges.append((index, None, slot, {"next_index": slot, "input_nr": 0}, none_index))
                edge_count += 1
        if len(records) > MAX_VIEWER_NODES or edge_count > MAX_VIEWER_EDGES:
            _too_large(len(records), edge_count)
    attributes_of_graph = dict(graph_attributes(source))
    steps = attributes_of_graph.pop(STEPS_ATTRIBUTE, None)

    edges: list[Any] = []
    extra: dict[str, Any] = {}
    for source_index, target, key, data, target_index in raw_edges:
        if target_index is None:
            target_index = index_of.get(target)
            if target_index is None:
                if hide_none:
                    continue  # an edge to a hidden None slot
                raise ArgumentValueError(f"the graph has an edge to {target!r}, which is not one of its nodes")
        if hide_none and kinds[target_index] == "none":
            continue
        next_index = data.get("next_index")
        input_nr = data.get("input_nr")
        if len(data) != 2 or "next_index" not in data or "input_nr" not in data:
            extra[str(len(edges) // 5)] = data
        edges += (source_index, target_index, key, next_index, input_nr)

    contiguous = all(node_id == f"n{position}" for position, node_id in enumerate(node_ids))
    # A watch history's page (gradexport.to_html(history)) colours on its wider scale: a vanishing gradient spans many decades.
    watched = "watch_steps" in attributes_of_graph
    bounds, colors, dark = (WATCH_GRAD_BOUNDS, WATCH_GRAD_COLORS, WATCH_GRAD_COLORS_DARK) if watched else (GRAD_BOUNDS, GRAD_COLORS, GRAD_COLORS_DARK)
    data = {
        "format": "gradexport-viewer",
        "version": 1,
        "title": None,
        "options": {
            "direction": options.direction,
            "show_none": options.show_none,
            "edge_shapes": options.edge_shapes,
            "grad_norms": options.grad_norms,
            "group_modules": options.group_modules,
            "exec_order": options.exec_order,
            "saved_bytes": options.saved_bytes,
        },
        "styles": {name: style._asdict() for name, style in STYLES.items()},
        "mark_colors": MARK_COLORS,
        "mark_words": _MARK_WORDS,
        "grad_colors": list(colors),
        "grad_colors_dark": list(dark),
        "grad_bounds": list(bounds),
        "grad_legend": [text for text, _, _ in grad_legend(bounds, colors)],
        "grad_bad_color": GRAD_BAD_COLOR,
        "graph": attributes_of_graph,
        "strings": list(strings),
        "schemas": [[list(keys), "".join("1" if flags >> position & 1 else "0" for position in range(len(keys)))] for keys, flags in schemas],
        "ids": None if contiguous else node_ids,
        "nodes": records,
        "edges": edges,
        "edge_extra": extra,
    }
    if steps is not None:
        data["steps"] = steps  # only replay pages carry it, so every other page stays as it was
    return data


def _too_large(nodes: int, edges: int) -> None:
    raise ViewerTooLargeError(
        f"graph has over {nodes:,} nodes and {edges:,} edges; the viewer holds at most {MAX_VIEWER_NODES:,} nodes "
        f"and {MAX_VIEWER_EDGES:,} edges: fold it first with gradexport.collapse(graph, depth) or gradexport.tools.fit "
        "(build it with module= inside gradexport.capture_modules() to have modules to fold by), "
        "or keep a part with gradexport.tools.only_reaching"
    )


def _data_chunks(data: dict[str, Any]) -> Iterator[str]:
    """The JSON of ``data``, safe inside a script element, with the node records encoded a batch at a time."""
    records = data.pop("nodes")
    edges = data.pop("edges")
    steps = data.pop("steps", None)
    head = _safe(_encode_json(data))
    yield head[:-1] + ',"nodes":['
    separator = ""
    for start in range(0, len(records), _BATCH):
        yield separator + _safe(_encode_json(records[start : start + _BATCH]))[1:-1]
        separator = ","
    yield '],"edges":'
    yield _ENCODER.encode(edges) if all(type(v) is int or v is None for v in edges) else _safe(_encode_json(edges))
    if steps is not None:
        yield ',"steps":' + _safe(_encode_json(steps))
    yield "}"


def _encode_json(value: Any) -> str:
    try:
        return _ENCODER.encode(value)
    except (ValueError, TypeError):
        return _ENCODER.encode(_jsonable(value))


def _jsonable(value: Any) -> Any:
    """``value`` with non-finite floats as strings, tuples and sets as lists, other objects as their ``str``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else ("NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity"))
    if value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(item) for item in value), key=repr)
    return str(value)


def _safe(text: str) -> str:
    return _SCRIPT_UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
