"""The Model Explorer format: read back through Model Explorer's own classes, every node and both indices of every edge are the graph model's."""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
import socket
import subprocess
import sys
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from cases import CASES

import gradexport
from gradexport.core.options import DiagramOptions
from gradexport.formats.model_explorer import (
    DIFF_VALUES,
    EXTENSION,
    GRAPH_ID,
    NONFINITE_VALUES,
    diff_panes,
    gradient_node_data,
    mark_node_data,
    node_data_for,
    to_model_explorer,
    write_model_explorer,
)
from gradexport.formats.styles import MARK_STYLES
from gradexport.tracing.graph import GraphStream

REPO = Path(__file__).resolve().parents[1]

needs_explorer = pytest.mark.skipif(
    importlib.util.find_spec("model_explorer") is None,
    reason="Model Explorer is not installed (pip install gradexport[explorer]; make setup installs it)",
)


def read_back(path: Path) -> Any:
    """The written file as Model Explorer's GraphCollection, checked field by field against its dataclasses."""
    dacite = pytest.importorskip("dacite")
    from model_explorer.graph_builder import GraphCollection

    data = json.loads(path.read_text(encoding="ascii"))
    return dacite.from_dict(GraphCollection, data, config=dacite.Config(strict=True))


def decoded(attrs: list[Any], reference: dict[str, Any]) -> dict[str, Any]:
    """KeyValues back to values: a reference string compares as text, anything else as JSON."""
    values = {item.key: item.value for item in attrs}
    assert len(values) == len(attrs), "a key appears twice"
    return {key: text if isinstance(reference.get(key), str) else json.loads(text) for key, text in values.items()}


def build(name: str, **model: Any) -> Any:
    case = CASES[name]()
    return gradexport.to_networkx(case.roots, params=case.params or None, module=case.module, **model)


def written(graph: Any, tmp_path: Path, options: DiagramOptions | None = None) -> Any:
    path = tmp_path / f"graph{EXTENSION}"
    write_model_explorer(graph, path, options)
    return read_back(path)


@needs_explorer
@pytest.mark.parametrize("show_none", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_every_node_and_edge(name: str, show_none: bool, tmp_path: Path) -> None:
    graph = build(name, show_none=show_none, edge_metadata=True)
    (me_graph,) = written(graph, tmp_path).graphs
    assert me_graph.id == GRAPH_ID
    nodes = {node.id: node for node in me_graph.nodes}
    assert list(nodes) == list(graph.nodes)
    for node_id, attributes in graph.nodes(data=True):
        node = nodes[node_id]
        assert decoded(node.attrs, attributes) == attributes
        assert node.namespace == attributes.get("module", "").replace(".", "/") or attributes["kind"] == "none"
    edges = Counter(
        (edge.sourceNodeId, node.id, int(edge.sourceNodeOutputId), int(edge.targetNodeInputId)) for node in me_graph.nodes for edge in node.incomingEdges
    )
    assert edges == Counter((u, v, key, data["input_nr"]) for u, v, key, data in graph.edges(keys=True, data=True))
    for u, v, key, data in graph.edges(keys=True, data=True):
        extra = {name: value for name, value in data.items() if name not in ("next_index", "input_nr")}
        assert data["next_index"] == key
        items = [item for item in nodes[u].outputsMetadata if item.id == str(key)]
        if not extra:  # a node type without _input_metadata: nothing but the indices
            assert items == []
            continue
        (item,) = items
        values = decoded(item.attrs, {**extra, "tensor_shape": "text"})
        if "shape" in extra:
            shape = ", ".join(map(str, data["shape"]))
            assert values.pop("tensor_shape") == f"{data['dtype']}[{shape}]"
        assert values == extra
    model_class = graph.graph.get("module_classes", {}).get("")  # the model's class goes on the top level too
    assert me_graph.groupNodeAttributes[""] == {
        name: value if isinstance(value, str) else json.dumps(value, sort_keys=True) for name, value in graph.graph.items()
    } | ({"class": model_class} if model_class is not None else {})


def outgoing(me_graph: Any, source: str) -> list[tuple[int, str, int]]:
    labels = {node.id: node.label for node in me_graph.nodes}
    return sorted(
        (int(edge.sourceNodeOutputId), labels[node.id], int(edge.targetNodeInputId))
        for node in me_graph.nodes
        for edge in node.incomingEdges
        if edge.sourceNodeId == source
    )


@needs_explorer
@pytest.mark.parametrize("name", ["add_to_itself", "blog_unbind_then_add"])
def test_parallel_edges_are_next_functions(name: str, tmp_path: Path) -> None:
    case = CASES[name]()
    graph = gradexport.to_networkx(case.roots, params=case.params)
    (me_graph,) = written(graph, tmp_path).graphs
    grad_fn = case.roots.grad_fn
    expected = sorted((i, type(child).__name__, k) for i, (child, k) in enumerate(grad_fn.next_functions) if child is not None)
    # A leaf's label is its parameter name, not AccumulateGrad.
    expected = [(i, ", ".join(case.params) if op == "AccumulateGrad" else op, k) for i, op, k in expected]
    assert len(expected) == 2 and expected[0][1] == expected[1][1]
    assert outgoing(me_graph, "n1") == expected


@needs_explorer
def test_none_slots_follow_show_none(tmp_path: Path) -> None:
    case = CASES["none_slot"]()
    positions: dict[str, list[int]] = {}
    stack, seen = [case.roots.grad_fn], {case.roots.grad_fn}
    while stack:  # every Node, from torch's own next_functions
        node = stack.pop()
        positions[type(node).__name__] = [i for i, (child, _) in enumerate(node.next_functions) if child is None]
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                stack.append(child)
    assert any(positions.values())
    traced = gradexport.to_networkx(case.roots, params=case.params, show_none=True)
    plain = gradexport.to_networkx(case.roots, params=case.params)

    def none_edges(me_graph: Any) -> list[tuple[str, int, str]]:
        labels = {node.id: node.label for node in me_graph.nodes}
        namespaces = {node.id: node.namespace for node in me_graph.nodes}
        found = []
        for node in me_graph.nodes:
            if node.label == "None":
                (edge,) = node.incomingEdges
                assert edge.targetNodeInputId == "0" and namespaces[edge.sourceNodeId] == node.namespace
                found.append((labels[edge.sourceNodeId], int(edge.sourceNodeOutputId)))
        return sorted(found)

    expected = sorted((op, slot) for op, slots in positions.items() for slot in slots)
    for graph, options in [(traced, None), (traced, DiagramOptions(show_none=True)), (plain, DiagramOptions(show_none=True))]:
        assert none_edges(written(graph, tmp_path, options).graphs[0]) == expected
    for graph, options in [(plain, None), (traced, DiagramOptions(show_none=False)), (plain, DiagramOptions(show_none=False))]:
        me_graph = written(graph, tmp_path, options).graphs[0]
        assert none_edges(me_graph) == []
        ids = {node.id for node in me_graph.nodes}
        assert all(edge.sourceNodeId in ids for node in me_graph.nodes for edge in node.incomingEdges)


@needs_explorer
def test_modules_become_nested_layers(tmp_path: Path) -> None:
    graph = build("mlp_tied")
    graph.graph["module_classes"] = {"": "TiedMLP", "hidden": "Linear"}
    (me_graph,) = written(graph, tmp_path).graphs
    modules = {data["module"] for _, data in graph.nodes(data=True) if data.get("module")}
    assert {"embed", "hidden", "out"} <= modules
    groups = me_graph.groupNodeAttributes
    assert {namespace for namespace in groups if namespace} == {module.replace(".", "/") for module in modules}
    assert groups["hidden"] == {"module": "hidden", "class": "Linear"}
    assert groups[""]["class"] == "TiedMLP"


@needs_explorer
def test_the_same_graph_gives_the_same_bytes_in_every_process(tmp_path: Path) -> None:
    # The module layers came from a set, so their order followed the process's string hash seed.
    code = (
        "import sys; sys.path.insert(0, 'tests'); from cases import CASES; import gradexport;"
        "case = CASES['mlp_tied'](); graph = gradexport.to_networkx(case.roots, params=case.params or None, module=case.module);"
        "from gradexport.formats.model_explorer import write_model_explorer; write_model_explorer(graph, sys.argv[1])"
    )
    files = []
    for seed in ("1", "2", "3"):
        path = tmp_path / f"seed{seed}.me.json"
        subprocess.run([sys.executable, "-c", code, str(path)], cwd=REPO, check=True, env={**os.environ, "PYTHONHASHSEED": seed})
        files.append(path.read_bytes())
    assert len(json.loads(files[0])["graphs"][0]["groupNodeAttributes"]) > 2
    assert files[0] == files[1] == files[2]


@needs_explorer
def test_a_stream_writes_the_same_file(tmp_path: Path) -> None:
    case = CASES["multihead_attention"]()
    graph_path, stream_path = tmp_path / "graph.me.json", tmp_path / "stream.me.json"
    write_model_explorer(gradexport.to_networkx(case.roots, module=case.module), graph_path)
    write_model_explorer(GraphStream(case.roots, module=case.module), stream_path)
    assert graph_path.read_bytes() == stream_path.read_bytes()


@needs_explorer
def test_names_with_any_character_survive(tmp_path: Path) -> None:
    x = torch.ones(2, requires_grad=True)
    name = 'a"b\\c\n\u00e9\ud800'
    graph = gradexport.to_networkx((x * 2).sum(), params={name: x})
    path = tmp_path / "graph.me.json"
    write_model_explorer(graph, path)
    path.read_text(encoding="ascii")
    (leaf,) = [node for node in json.loads(path.read_text())["graphs"][0]["nodes"] if node["id"] == "n3"]
    assert json.loads({item["key"]: item["value"] for item in leaf["attrs"]}["names"]) == [name]
    assert "\n" not in leaf["label"]


@needs_explorer
def test_gradient_node_data_is_torch_gradients() -> None:
    x = torch.tensor([3.0, 4.0], requires_grad=True)
    w = torch.tensor([0.0, 1.0], requires_grad=True)
    graph = gradexport.record_gradients((x * 10).sum() + w.sqrt().sum(), params={"x": x, "w": w})
    leaf = {data["names"][0]: node for node, data in graph.nodes(data=True) if data["kind"] == "leaf"}
    assert not torch.isfinite(w.grad).all()

    norms = gradient_node_data(graph, "norm").graphsData[GRAPH_ID]
    assert norms.results[leaf["x"]].value == pytest.approx(x.grad.norm().item())
    assert leaf["w"] not in norms.results
    logs = gradient_node_data(graph, "log10_norm").graphsData[GRAPH_ID]
    assert logs.results[leaf["x"]].value == pytest.approx(math.log10(x.grad.norm().item()))
    assert norms.gradient and logs.gradient  # Model Explorer's colour scale
    flags = gradient_node_data(graph, "non_finite").graphsData[GRAPH_ID]
    assert flags.results[leaf["w"]].value == 1 and flags.results[leaf["x"]].value == 0
    assert set(flags.results) == set(graph.nodes)

    text = gradient_node_data(graph, "norm").to_json_string()  # Model Explorer's own serialisation
    assert set(json.loads(text)[GRAPH_ID]["results"]) == set(norms.results)


@needs_explorer
def test_gradient_node_data_needs_gradients() -> None:
    with pytest.raises(ValueError, match="record_gradients"):
        gradient_node_data(build("blog_multiply_then_sum"))
    x = torch.ones(1, requires_grad=True)
    with pytest.raises(ValueError, match="metric must be one of"):
        gradient_node_data(gradexport.record_gradients(x * 2), "mean")


def test_without_model_explorer_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "model_explorer", None)  # what a missing package looks like to import
    # The plugin's tests may have re-imported the library (as `mkdocs serve` does): use the modules in use now.
    writer = importlib.import_module("gradexport.formats.model_explorer")
    graph = build("blog_multiply_then_sum")
    with pytest.raises(writer.ModelExplorerNotInstalledError, match=r"pip install gradexport\[explorer\]"):
        writer.to_model_explorer(graph)
    with pytest.raises(ImportError, match=r"pip install gradexport\[explorer\]"):
        writer.write_model_explorer(graph, tmp_path / "graph.me.json")
    assert not (tmp_path / "graph.me.json").exists()
    with pytest.raises(writer.ModelExplorerNotInstalledError):
        importlib.import_module("gradexport.frontends.model_explorer_server").serve_model_explorer(graph, open_browser=False)
    importlib.import_module("gradexport").write(graph, tmp_path, "json")  # everything else works


def test_importing_gradexport_does_not_import_model_explorer() -> None:
    code = "import sys, gradexport, gradexport.frontends.model_explorer_server, gradexport.formats.model_explorer; print('model_explorer' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert result.stdout.strip() == "False"


@needs_explorer
def test_serve_refuses_what_it_cannot_serve(tmp_path: Path) -> None:
    from gradexport.frontends.model_explorer_server import serve_model_explorer

    with pytest.raises(FileNotFoundError, match="no Model Explorer graph file"):
        serve_model_explorer(tmp_path / "missing.me.json", open_browser=False)
    other = tmp_path / "graph.dot"
    other.write_text("digraph {}")
    with pytest.raises(ValueError, match=r"ending in \.json"):
        serve_model_explorer(other, open_browser=False)
    path = tmp_path / "graph.me.json"
    write_model_explorer(build("blog_multiply_then_sum"), path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match="is in use"):
            serve_model_explorer(path, port=taken.getsockname()[1], open_browser=False)


@needs_explorer
def test_a_folded_module_sits_in_its_parents_layer(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()), torch.nn.Linear(4, 1))
    with gradexport.capture_modules():
        out = model(torch.randn(2, 3))
    folded = gradexport.collapse(gradexport.to_networkx(out.sum(), module=model), depth=2)
    (me_graph,) = written(folded, tmp_path).graphs
    nodes = {node.id: node for node in me_graph.nodes}
    for node_id, data in folded.nodes(data=True):
        assert decoded(nodes[node_id].attrs, data) == data
        if data["kind"] == "module":
            parent, _, name = data["module"].rpartition(".")
            assert (nodes[node_id].label, nodes[node_id].namespace) == (name, parent.replace(".", "/"))
    assert any(data["kind"] == "module" and "." in data["module"] for _, data in folded.nodes(data=True))
    edges = Counter((edge.sourceNodeId, node.id, edge.sourceNodeOutputId) for node in me_graph.nodes for edge in node.incomingEdges)
    assert edges == Counter((u, v, str(key)) for u, v, key in folded.edges(keys=True))


@needs_explorer
def test_the_benchmark_script_runs() -> None:
    command = [sys.executable, "-m", "benchmarks.model_explorer", "--blocks", "20", "--no-browser", "--no-save"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300, check=True)
    assert "| `write_model_explorer(graph, path)`: the `.me.json` file |" in result.stdout
    assert "written from the stream it is byte for byte the same" in result.stdout


def grad_fns(tensor: torch.Tensor) -> list[Any]:
    """Every Node of ``tensor``'s backward graph, from torch's own next_functions."""
    stack, seen = [tensor.grad_fn], [tensor.grad_fn]
    while stack:
        for child, _ in stack.pop().next_functions:
            if child is not None and child not in seen:
                seen.append(child)
                stack.append(child)
    return seen


def values(data: Any, graph_id: str = GRAPH_ID) -> dict[str, float]:
    """Node id to value, read back from Model Explorer's own JSON of the node data."""
    return {node: result["value"] for node, result in json.loads(data.to_json_string())[graph_id]["results"].items()}


@needs_explorer
def test_nonfinite_node_data_is_the_report_and_grad() -> None:
    x = torch.tensor([0.0, 4.0], requires_grad=True)
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    report = gradexport.find_nonfinite(x.sqrt().sum() + (w * 3).sum(), params={"x": x, "w": w})
    assert report is not None
    found = values(mark_node_data(report.graph, "nonfinite"))
    assert set(found) == set(report.graph.nodes)
    assert {node for node, value in found.items() if value == NONFINITE_VALUES["origin"]} == {o.node for o in report.origins}
    leaves = {data["names"][0]: node for node, data in report.graph.nodes(data=True) if data["kind"] == "leaf"}
    for name, tensor in {"x": x, "w": w}.items():  # the leaves' .grad, as the engine left them
        reached = found[leaves[name]] == NONFINITE_VALUES["reached"]
        assert reached == (not torch.isfinite(tensor.grad).all().item())
    thresholds = json.loads(mark_node_data(report.graph, "nonfinite").to_json_string())[GRAPH_ID]["thresholds"]
    assert [item["value"] for item in thresholds] == sorted(NONFINITE_VALUES.values())


@needs_explorer
def test_saved_bytes_node_data_is_the_distinct_storages() -> None:
    x = torch.randn(4, 5, requires_grad=True)
    w = torch.randn(5, 3, requires_grad=True)
    h = (x @ w).tanh()
    out = (h * h).sum() + (h.exp() * x.sum()).sum()
    storages: dict[tuple[Any, int], int] = {}
    held: dict[str, int] = {}
    for node in grad_fns(out):  # every saved tensor, from torch: the _saved_ attributes of every Node
        mine = {}
        for name in dir(node):
            if name.startswith("_saved_") and not name.endswith("_raw"):
                value = getattr(node, name)
                if isinstance(value, torch.Tensor):
                    storage = value.untyped_storage()
                    mine[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
        storages |= mine
        held[type(node).__name__] = held.get(type(node).__name__, 0) + sum(mine.values())
    graph = gradexport.to_networkx(out, params={"x": x, "w": w}, show_saved=True)
    fresh = values(mark_node_data(graph, "saved_bytes"))
    assert sum(fresh.values()) == sum(storages.values()) > 0
    totals = values(mark_node_data(graph, "saved_bytes_held"))
    by_op: dict[str, int] = {}
    for node, value in totals.items():
        op = graph.nodes[node]["op"]
        by_op[op] = by_op.get(op, 0) + value
    assert {op: value for op, value in by_op.items() if value} == {op: value for op, value in held.items() if value}
    with pytest.raises(ValueError, match="show_saved=True"):
        mark_node_data(gradexport.to_networkx(out), "saved_bytes")


@needs_explorer
def test_exec_order_node_data_is_the_engines_order() -> None:
    x = torch.randn(3, requires_grad=True)
    out = (x.exp() * x.sin()).sum()
    ran: list[str] = []
    for node in grad_fns(out):
        node.register_prehook(lambda grads, node=node: ran.append(type(node).__name__))
    graph = gradexport.record_gradients(out, params={"x": x})
    order = values(mark_node_data(graph, "exec_order"))
    assert [graph.nodes[node]["op"] for node in sorted(order, key=order.get)] == ran
    assert list(node_data_for(graph))[-1] == "gradient log10_norm"  # the gradients show


@needs_explorer
def test_diff_panes_are_each_graph_marked() -> None:
    x = torch.ones(3, requires_grad=True)
    a = gradexport.to_networkx((x * 2).relu().sum(), params={"x": x})
    b = gradexport.to_networkx((x * 2).exp().sum(), params={"x": x})
    merged = gradexport.diff(a, b)
    pane_a, pane_b = diff_panes(merged, a, b)
    for pane, graph, id_key in [(pane_a, a, "a_id"), (pane_b, b, "b_id")]:
        back = {node: data[id_key] for node, data in pane.nodes(data=True)}
        assert sorted(back.values()) == sorted(graph.nodes)
        assert Counter((back[u], back[v], k, d["input_nr"]) for u, v, k, d in pane.edges(keys=True, data=True)) == Counter(
            (u, v, k, d["input_nr"]) for u, v, k, d in graph.edges(keys=True, data=True)
        )
        for node, data in pane.nodes(data=True):
            assert {name: data[name] for name in graph.nodes[back[node]]} == graph.nodes[back[node]]
    # torch's own ops: what only one side's graph holds is changed or removed in a, changed or added in b.
    ops_a = {type(node).__name__ for node in grad_fns((x * 2).relu().sum())}
    ops_b = {type(node).__name__ for node in grad_fns((x * 2).exp().sum())}
    states_a = values(mark_node_data(pane_a, "diff"))
    states_b = values(mark_node_data(pane_b, "diff"))
    assert {pane_a.nodes[n]["op"] for n, v in states_a.items() if v in (1, 3)} == ops_a - ops_b == {"ReluBackward0"}
    assert {pane_b.nodes[n]["op"] for n, v in states_b.items() if v in (1, 2)} == ops_b - ops_a == {"ExpBackward0"}
    plain = gradexport.to_networkx((x * 2).sum(), params={"x": x})
    grown = diff_panes(gradexport.diff(plain, b), plain, b)[1]
    shrunk = diff_panes(gradexport.diff(b, plain), b, plain)[0]
    added, removed = values(mark_node_data(grown, "diff")), values(mark_node_data(shrunk, "diff"))
    assert [grown.nodes[n]["op"] for n, v in added.items() if v == DIFF_VALUES["added"]] == ["ExpBackward0"]
    assert [shrunk.nodes[n]["op"] for n, v in removed.items() if v == DIFF_VALUES["removed"]] == ["ExpBackward0"]
    same = {n for n, v in states_a.items() if v == DIFF_VALUES["same"]}
    assert same == {n for n, v in states_b.items() if v == DIFF_VALUES["same"]} and len(same) == 4  # ids shared
    for pane, state in [(grown, "added"), (shrunk, "removed"), (pane_b, "changed")]:  # the other diagrams' colours
        (exp,) = [item for item in to_model_explorer(pane).graphs[0].nodes if item.label == "ExpBackward0"]
        assert (exp.style.backgroundColor, exp.style.borderColor) == (MARK_STYLES[state].fill, MARK_STYLES[state].stroke)
    with pytest.raises(ValueError, match="does not match"):
        diff_panes(merged, b, a)


@needs_explorer
def test_serve_offers_every_node_data_and_the_diff_two_panes(monkeypatch: pytest.MonkeyPatch) -> None:
    import model_explorer

    from gradexport.frontends.model_explorer_server import serve_model_explorer, serve_model_explorer_diff

    configs: list[Any] = []
    monkeypatch.setattr(model_explorer, "visualize_from_config", lambda config, **_: configs.append(config))
    x = torch.tensor([0.0, 4.0], requires_grad=True)
    report = gradexport.find_nonfinite(x.sqrt().sum(), params={"x": x})
    url = serve_model_explorer(report.graph, open_browser=False)
    names = [source.split("//", 1)[1].rsplit("/", 1)[0] for source in configs[0].node_data_sources]
    assert names == ["exec_order", "gradient non_finite", "gradient norm", "gradient log10_norm", "nonfinite"]
    assert json.loads(configs[0].node_data_list[-1].to_json_string())[GRAPH_ID]["results"][report.first.node]["value"] == 2

    a = gradexport.to_networkx((x * 2).sum(), params={"x": x})
    b = gradexport.to_networkx((x * 2).exp().sum(), params={"x": x})
    url = serve_model_explorer_diff(a, b, labels=("before", "after"), open_browser=False)
    data = json.loads(urllib.parse.unquote(urllib.parse.urlsplit(url).query.removeprefix("data=")))
    panes = data["uiState"]["paneStates"]
    assert [(pane["selectedCollectionLabel"], pane["selectedGraphId"]) for pane in panes] == [("before", "a"), ("after", "b")]
    assert data["sync"] == {"mode": "match_node_id"} and data["nodeDataTargets"] == ["before", "after"]
    assert not any(Path(model["url"]).exists() for model in data["models"])  # gone with the server (here: returned)
    states = [json.loads(item.to_json_string()) for item in configs[1].node_data_list]
    assert [next(iter(state)) for state in states] == ["a", "b"]
    # Each pane's own node data: b has the ExpBackward0 that a lacks (added), a has nothing b lacks.
    assert sorted(result["value"] for result in states[1]["b"]["results"].values()) == [0, 0, 0, 0, DIFF_VALUES["added"]]
    assert {result["value"] for result in states[0]["a"]["results"].values()} == {DIFF_VALUES["same"]}
    with pytest.raises(ValueError, match="different labels"):
        serve_model_explorer_diff(a, b, labels=("x", "x"), open_browser=False)


def _without_none(value: Any) -> Any:
    """``dataclasses.asdict`` of a graph_builder object, without the fields that are ``None`` (as the file leaves them out)."""
    if isinstance(value, dict):
        return {key: _without_none(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_none(item) for item in value]
    return value


def _graphs_to_write() -> list[tuple[str, Any, DiagramOptions | None]]:
    found: list[tuple[str, Any, DiagramOptions | None]] = []
    for name in sorted(CASES):
        for show_none in (False, True):
            graph = build(name, show_none=show_none, edge_metadata=show_none, show_saved=show_none)
            found += [(f"{name}/{show_none}/{option}", graph, DiagramOptions(show_none=option)) for option in (None, True, False)]
    x = torch.randn(3, requires_grad=True)
    found.append(("gradients", gradexport.record_gradients((x.exp() * x).sum(), params={"x": x}), None))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()), torch.nn.Linear(4, 1))
    with gradexport.capture_modules():
        out = model(torch.randn(2, 3))
    found.append(("collapsed", gradexport.collapse(gradexport.to_networkx(out.sum(), module=model), depth=1), None))
    a = gradexport.to_networkx((x * 2).relu().sum(), params={"x": x})
    b = gradexport.to_networkx((x * 2).exp().sum(), params={"x": x})
    found += [(f"diff pane {side}", pane, None) for side, pane in zip("ab", diff_panes(gradexport.diff(a, b), a, b), strict=True)]
    return found


@needs_explorer
def test_the_file_is_model_explorers_objects_encoded(tmp_path: Path) -> None:
    """The writer writes the fields itself: the text must be the JSON of to_model_explorer's objects, and read back as them."""
    import dataclasses

    for name, graph, options in _graphs_to_write():
        collection = to_model_explorer(graph, options, label="a label", graph_id="an id")
        (me_graph,) = collection.graphs
        head = {field: value for field, value in _without_none(dataclasses.asdict(me_graph)).items() if field != "nodes"}
        expected = {
            "label": collection.label,
            "graphSorting": collection.graphSorting,
            "graphs": [{**head, "nodes": _without_none(dataclasses.asdict(me_graph))["nodes"]}],
        }
        path = tmp_path / f"graph{EXTENSION}"
        write_model_explorer(graph, path, options, label="a label", graph_id="an id")
        assert path.read_text(encoding="ascii") == json.dumps(expected, ensure_ascii=True, separators=(",", ":"), allow_nan=False) + "\n", name
        assert read_back(path) == collection, name
