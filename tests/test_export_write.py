"""gradexport.write and the to_* facade: what lands on disk, and what does not when something fails."""

from __future__ import annotations

import json as std_json
import os
import shutil
from pathlib import Path

import networkx as nx
import pytest
import torch
from format_fixtures import needs_dot
from torch_versions import needs_input_metadata

import gradexport
from gradexport.errors import OutputError, RenderError
from gradexport.formats import dot, mermaid


def blog():
    torch.manual_seed(6)
    x = torch.randn(4, 4, requires_grad=True)
    y = torch.randn(4, 4, requires_grad=True)
    return (x * y).sum(), {"x": x, "y": y}


def leftovers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name.endswith(".tmp"))


@needs_dot
def test_writes_every_format_into_a_new_folder_matching_the_text_functions(tmp_path):
    loss, params = blog()
    folder = tmp_path / "a" / "b"
    paths = gradexport.write(loss, folder, params=params)
    assert list(paths) == ["dot", "svg", "mermaid", "json"]
    assert {name: path.name for name, path in paths.items()} == {"dot": "graph.dot", "svg": "graph.svg", "mermaid": "graph.mmd", "json": "graph.json"}
    graph = gradexport.to_networkx(loss, params=params)
    assert paths["dot"].read_text(encoding="utf-8") == gradexport.to_dot(graph)
    assert paths["mermaid"].read_text(encoding="utf-8") == gradexport.to_mermaid(graph)
    assert paths["json"].read_text(encoding="utf-8") == gradexport.to_json(graph)
    assert paths["svg"].read_text(encoding="utf-8") == gradexport.to_svg(graph)
    assert all(path.stat().st_mode & 0o777 == 0o644 for path in paths.values())
    assert leftovers(folder) == []


def test_stem_format_string_and_options_reach_the_graph(tmp_path):
    x = torch.ones(2, requires_grad=True)
    product = x * torch.ones(2)
    paths = gradexport.write(product, tmp_path, "json, mermaid", stem="product", show_none=True, show_saved=True)
    assert [path.name for path in paths.values()] == ["product.json", "product.mmd"]
    data = std_json.loads(paths["json"].read_text(encoding="utf-8"))
    assert [node["kind"] for node in data["nodes"]].count("none") == 1
    assert "saved" in next(node for node in data["nodes"] if node.get("op") == "MulBackward0")
    assert "None" in paths["mermaid"].read_text(encoding="utf-8")


@needs_input_metadata
def test_edge_metadata_is_an_option_of_the_json_from_roots(tmp_path):
    x = torch.ones(2, 3, requires_grad=True)
    loss = (x * 2).sum()
    plain = std_json.loads(gradexport.to_json(loss))
    assert all("shape" not in edge for edge in plain["edges"])  # the graph's defaults, as to_networkx(loss)
    paths = gradexport.write(loss, tmp_path, "json", edge_metadata=True)
    shapes = [edge["shape"] for edge in std_json.loads(paths["json"].read_text(encoding="utf-8"))["edges"]]
    assert shapes == [[], [2, 3], [2, 3]]  # the gradient of the loss, of x * 2, of x
    with pytest.raises(TypeError, match="edge_metadata applies only while tracing roots"):
        gradexport.to_json(gradexport.to_networkx(loss), edge_metadata=True)


def test_replaces_old_files_keeping_their_mode(tmp_path):
    loss, params = blog()
    old = tmp_path / "graph.dot"
    old.write_text("old")
    old.chmod(0o600)
    gradexport.write(loss, tmp_path, ["dot"], params=params)
    assert old.read_text(encoding="utf-8").startswith("digraph autograd {")
    assert old.stat().st_mode & 0o777 == 0o600


def test_a_failed_render_changes_no_file_and_leaves_no_temporary(tmp_path):
    loss, params = blog()
    for name in ("graph.dot", "graph.svg", "graph.json"):
        (tmp_path / name).write_text(f"old {name}")
    failing = tmp_path / "failing-dot"
    failing.write_text("#!/bin/sh\necho broken >&2\nexit 1\n")
    failing.chmod(0o755)
    with pytest.raises(RenderError, match="broken"):
        gradexport.write(loss, tmp_path, ["dot", "mermaid", "svg", "json"], prog=failing, params=params)
    for name in ("graph.dot", "graph.svg", "graph.json"):
        assert (tmp_path / name).read_text() == f"old {name}"
    assert not (tmp_path / "graph.mmd").exists()
    assert leftovers(tmp_path) == []


def test_a_writer_failing_midway_leaves_the_old_file(tmp_path, monkeypatch):
    (tmp_path / "graph.mmd").write_text("old")

    def broken(graph, options, sizes):
        yield "flowchart TB"
        raise MemoryError("out of memory halfway")

    monkeypatch.setattr(mermaid, "_lines", broken)
    w = torch.ones(1, requires_grad=True)
    with pytest.raises(MemoryError):
        gradexport.write(w * 2, tmp_path, "mermaid")
    assert (tmp_path / "graph.mmd").read_text() == "old"
    assert leftovers(tmp_path) == []


def test_unwritable_paths_are_clear_errors(tmp_path):
    w = torch.ones(1, requires_grad=True)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutputError, match=r"cannot create folder '.*file/sub'"):
        gradexport.write(w * 2, blocker / "sub", "dot")
    (tmp_path / "graph.dot").mkdir()
    with pytest.raises(OutputError, match=r"graph\.dot': it is a folder"):
        gradexport.write(w * 2, tmp_path, "dot")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() == 0:  # root ignores permission bits (CI runs as root): a folder no one can create files in
        if not Path("/proc/self").is_dir():
            pytest.skip("running as root without Linux's /proc: no folder root cannot write in")
        locked = Path("/proc/self")
    with pytest.raises(OutputError, match="cannot write in folder"):
        gradexport.write(w * 2, locked, "dot")


def test_bad_arguments(tmp_path):
    w = torch.ones(1, requires_grad=True)
    graph = gradexport.to_networkx(w * 2)
    with pytest.raises(ValueError, match="unknown format.*png.*choose from dot, svg, mermaid, json"):
        gradexport.write(graph, tmp_path, "dot,png")
    with pytest.raises(ValueError, match="stem"):
        gradexport.write(graph, tmp_path, "dot", stem="../escape")
    with pytest.raises(TypeError, match="unknown option.*colour"):
        gradexport.to_dot(graph, colour="red")
    with pytest.raises(TypeError, match="params applies only while tracing roots"):
        gradexport.to_dot(graph, params={"w": w})
    with pytest.raises(TypeError, match="MultiDiGraph"):
        gradexport.to_dot(nx.DiGraph(graph))
    with pytest.raises(gradexport.errors.RootError, match="gradexport.to_mermaid"):
        gradexport.to_mermaid("not a tensor")
    assert list(tmp_path.iterdir()) == []


def test_write_dot_to_a_path_is_atomic_too(tmp_path, monkeypatch):
    target = tmp_path / "g.dot"
    target.write_text("old")
    drawn = dot.diagram

    def fails_after_the_nodes(graph, options):
        yield from drawn(graph, options)
        raise RuntimeError("failed halfway")

    monkeypatch.setattr(dot, "diagram", fails_after_the_nodes)
    w = torch.ones(1, requires_grad=True)
    with pytest.raises(RuntimeError, match="halfway"):
        dot.write_dot(gradexport.to_networkx(w * 2), target)
    assert target.read_text() == "old"
    assert leftovers(tmp_path) == []


def test_svg_needs_graphviz_but_other_formats_do_not(tmp_path, without_graphviz):
    w = torch.ones(1, requires_grad=True)
    assert len(gradexport.write(w * 2, tmp_path / "out", "dot,mermaid,json")) == 3
    with pytest.raises(gradexport.errors.GraphvizNotFoundError):
        gradexport.write(w * 2, tmp_path / "out2", "dot,svg")
    assert not (tmp_path / "out2" / "graph.dot").exists()
    assert shutil.which("dot") is None
