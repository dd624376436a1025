"""The viewer page without a browser: the embedded data against torch and the graph model, escaping, errors, packaging."""

from __future__ import annotations

import html.parser
import io
import json
import math
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from format_fixtures import FORMAT_CASES, NASTY_NAMES, REPO
from torch import nn

import gradexport
from gradexport.core.options import DiagramOptions
from gradexport.formats import html as viewer_html
from gradexport.formats.html import ViewerTooLargeError, notebook_iframe, to_html, write_html
from gradexport.tracing.graph import GraphStream, trace


class _Scripts(html.parser.HTMLParser):
    """The page as a browser's parser splits it: the text of each script element, and every start tag."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.tags: list[str] = []
        self.title = ""
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag in ("script", "title"):
            self._in = tag
            if tag == "script":
                self.scripts.append((dict(attrs), ""))

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "script":
            attributes, text = self.scripts[-1]
            self.scripts[-1] = (attributes, text + data)
        elif self._in == "title":
            self.title += data


def page_parts(page: str) -> _Scripts:
    parser = _Scripts()
    parser.feed(page)
    parser.close()
    return parser


def page_data(page: str) -> dict[str, Any]:
    """The JSON the page embeds, read as the page's script reads it (JSON.parse of the element's text)."""
    scripts = page_parts(page).scripts
    data = [text for attributes, text in scripts if attributes.get("id") == "gradexport-data"]
    assert len(data) == 1
    return json.loads(data[0])


def decoded_nodes(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Node id -> attributes, decoding the page's compact records (schema, string table)."""
    nodes = {}
    for position, record in enumerate(data["nodes"]):
        keys, flags = data["schemas"][record[0]]
        values = [data["strings"][value] if flag == "1" else value for value, flag in zip(record[1:], flags, strict=True)]
        node_id = data["ids"][position] if data["ids"] is not None else f"n{position}"
        nodes[node_id] = dict(zip(keys, values, strict=True))
    return nodes


def decoded_edges(data: dict[str, Any]) -> list[tuple[str, str, Any, dict[str, Any]]]:
    ids = list(decoded_nodes(data))
    flat = data["edges"]
    edges = []
    for e in range(len(flat) // 5):
        source, target, key, next_index, input_nr = flat[5 * e : 5 * e + 5]
        attributes = data["edge_extra"].get(str(e), {"next_index": next_index, "input_nr": input_nr})
        edges.append((ids[source], ids[target], key, attributes))
    return edges


def as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("name", sorted(FORMAT_CASES))
def test_the_page_holds_next_functions_as_torch_has_them(name):
    case = FORMAT_CASES[name]()
    result = trace(case.roots, params=case.params or None, module=case.module)
    data = page_data(to_html(result.graph))
    nodes = decoded_nodes(data)
    edges = decoded_edges(data)
    by_source: dict[str, dict[int, tuple[str, int]]] = {}
    for source, target, key, attributes in edges:
        assert attributes["next_index"] == key
        by_source.setdefault(source, {})[key] = (target, attributes["input_nr"])
    for node, node_id in result.ids.items():
        drawn = by_source.get(node_id, {})
        none_slots = set(nodes[node_id].get("none_slots", ()))
        expected = {index: (result.ids[child], input_nr) for index, (child, input_nr) in enumerate(node.next_functions) if child is not None}
        assert drawn == expected
        assert none_slots == {index for index, (child, _) in enumerate(node.next_functions) if child is None}
        assert nodes[node_id]["op"] == type(node).__name__
        assert nodes[node_id]["sequence_nr"] == (node._sequence_nr() if node._sequence_nr() < 2**63 else node._sequence_nr() - 2**64)


@pytest.mark.parametrize("name", sorted(FORMAT_CASES))
def test_the_page_holds_every_attribute_of_the_graph_model(name):
    case = FORMAT_CASES[name]()
    graph = gradexport.to_networkx(case.roots, params=case.params or None, module=case.module, show_saved=True, edge_metadata=True)
    data = page_data(to_html(graph))
    assert decoded_nodes(data) == as_json(dict(graph.nodes(data=True)))
    assert sorted(map(json.dumps, decoded_edges(data))) == sorted(json.dumps(as_json(edge)) for edge in graph.edges(keys=True, data=True))
    assert data["graph"] == as_json(graph.graph)


def test_a_stream_gives_the_same_page_as_its_graph():
    case = FORMAT_CASES["mlp_tied"]()
    graph = gradexport.to_networkx(case.roots, params=case.params)
    assert to_html(GraphStream(case.roots, params=case.params)) == to_html(graph)


_PROGRAM = """
import hashlib, sys, torch, gradexport
from gradexport.formats.html import to_html
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
with gradexport.capture_modules():
    out = model(torch.randn(3, 4))
page = to_html(gradexport.record_gradients(out.sum(), module=model))
sys.stdout.write(hashlib.sha256(page.encode()).hexdigest())
"""


def test_same_program_same_bytes():
    # Sequence numbers count every autograd node the process made, so each run gets a fresh process.
    digests = {subprocess.run([sys.executable, "-c", _PROGRAM], check=True, capture_output=True, text=True, timeout=120).stdout for _ in range(2)}
    assert len(digests) == 1 and len(digests.pop()) == 64


def test_module_classes_name_every_module_path():
    model = nn.Sequential(nn.Linear(4, 8), nn.Sequential(nn.ReLU(), nn.Linear(8, 2)))
    with gradexport.capture_modules():
        out = model(torch.randn(3, 4))
    graph = gradexport.to_networkx(out.sum(), module=model)
    classes = graph.graph["module_classes"]
    assert classes == {name: type(module).__name__ for name, module in model.named_modules()}
    assert {path for _, path in graph.nodes(data="module") if path is not None} <= set(classes)
    assert page_data(to_html(graph))["graph"]["module_classes"] == classes


def test_names_cannot_end_the_script_or_become_markup():
    names = [*NASTY_NAMES, "</script><script>window.__pwned=1</script>", "<!-- <script>", "</SCRIPT >", "a\u2029b", "<img src=x onerror=window.__pwned=1>"]
    tensors = {name: torch.randn(2, requires_grad=True) for name in names}
    loss = sum(tensor.sum() for tensor in tensors.values())
    graph = gradexport.to_networkx({"</script><b>root</b>": loss}, params=tensors)
    page = to_html(graph, title="</title><script>window.__pwned=1</script>")
    parts = page_parts(page)
    assert parts.tags.count("script") == 2
    assert parts.tags.count("img") == parts.tags.count("b") == 0
    assert parts.title == "</title><script>window.__pwned=1</script>"
    data_text = next(text for attributes, text in parts.scripts if attributes.get("id") == "gradexport-data")
    assert not any(char in data_text for char in "<>&\u2028\u2029")
    data = page_data(page)
    leaf_names = {name for attributes in decoded_nodes(data).values() for name in attributes.get("names", ())}
    assert leaf_names == set(names)
    assert data["graph"]["roots"][0]["name"] == "</script><b>root</b>"


def test_non_finite_gradients_survive_as_strings():
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    graph = gradexport.record_gradients(x.log().sum(), params={"x": x})
    norms = [data["grad"]["norm"] for *_, data in decoded_edges(page_data(to_html(graph))) if "grad" in data]
    model_norms = [grad["norm"] for _, _, grad in graph.edges(data="grad") if grad]
    assert any(not math.isfinite(norm) for norm in model_norms)
    assert norms == [norm if math.isfinite(norm) else ("NaN" if math.isnan(norm) else "Infinity" if norm > 0 else "-Infinity") for norm in model_norms]


def test_none_slots_as_asked():
    case = FORMAT_CASES["none_slot"]()
    plain = gradexport.to_networkx(case.roots, params=case.params)
    slots = {node: attributes["none_slots"] for node, attributes in plain.nodes(data=True) if "none_slots" in attributes}
    drawn = decoded_nodes(page_data(to_html(plain, DiagramOptions(show_none=True))))
    assert {node_id for node_id, attributes in drawn.items() if attributes["kind"] == "none"} == {
        f"{node}_none{slot}" for node, node_slots in slots.items() for slot in node_slots
    }
    with_none = gradexport.to_networkx(case.roots, params=case.params, show_none=True)
    hidden = decoded_nodes(page_data(to_html(with_none, DiagramOptions(show_none=False))))
    assert set(hidden) == {node for node, kind in with_none.nodes(data="kind") if kind != "none"}
    assert all(target in hidden for _, target, _, _ in decoded_edges(page_data(to_html(with_none, DiagramOptions(show_none=False)))))


def test_too_large_is_an_error_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(viewer_html, "MAX_VIEWER_NODES", 5)
    x = torch.ones(2, requires_grad=True)
    y = x
    for _ in range(10):
        y = y * 2
    graph = gradexport.to_networkx(y.sum())
    with pytest.raises(ViewerTooLargeError, match=r"over 6 nodes.*at most 5 nodes.*gradexport.collapse") as error:
        write_html(graph, tmp_path / "page.html")
    assert isinstance(error.value, gradexport.errors.GraphTooLargeError)
    assert not (tmp_path / "page.html").exists() and list(tmp_path.iterdir()) == []
    buffer = io.StringIO()
    with pytest.raises(ViewerTooLargeError):
        write_html(GraphStream(y.sum()), buffer)
    assert buffer.getvalue() == ""


def test_write_html_writes_what_to_html_returns(tmp_path):
    case = FORMAT_CASES["add_to_itself"]()
    graph = gradexport.to_networkx(case.roots, params=case.params)
    write_html(graph, tmp_path / "page.html", title="a + a")
    assert (tmp_path / "page.html").read_text(encoding="utf-8") == to_html(graph, title="a + a")


def test_the_notebook_iframe_holds_the_page_exactly():
    case = FORMAT_CASES["add_to_itself"]()
    page = to_html(gradexport.to_networkx(case.roots, params=case.params))
    parser = _Scripts()
    frames: list[dict[str, str | None]] = []
    parser.handle_starttag = lambda tag, attrs: frames.append(dict(attrs)) if tag == "iframe" else None  # type: ignore[method-assign]
    parser.feed(notebook_iframe(page, height=300))
    assert len(frames) == 1 and frames[0]["srcdoc"] == page and frames[0]["sandbox"] == "allow-scripts"
    with pytest.raises(ValueError, match="height"):
        notebook_iframe(page, height=0)


def _build_viewer(output: Path) -> None:
    if shutil.which("node") is None or not (REPO / "node_modules" / "esbuild").exists():
        pytest.skip("node and node_modules (npm ci) are needed to rebuild the viewer")
    subprocess.run(["node", str(REPO / "scripts" / "build-viewer.mjs"), str(output)], check=True, cwd=REPO, timeout=120)


def test_the_committed_bundle_is_built_from_the_sources(tmp_path):
    _build_viewer(tmp_path)
    shipped = REPO / "gradexport" / "viewer"
    for name in ("viewer.bundle.js", "LICENSE.dagre.txt", "LICENSE.graphlib.txt"):
        assert (tmp_path / name).read_bytes() == (shipped / name).read_bytes(), f"{name} is stale: run `npm run build-viewer`"


@pytest.mark.slow
def test_the_wheel_carries_the_viewer_and_its_licences(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("gradexport-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        bundle = archive.read("gradexport/viewer/viewer.bundle.js")
    assert {"gradexport/viewer/LICENSE.dagre.txt", "gradexport/viewer/LICENSE.graphlib.txt", "gradexport/formats/html.py"} <= names
    assert bundle == (REPO / "gradexport" / "viewer" / "viewer.bundle.js").read_bytes()
    assert not any(name.startswith("gradexport/viewer/src/") for name in names)
