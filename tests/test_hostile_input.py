"""Hostile input, round three (issue 27): names, JSON files and root collections an attacker would try."""

from __future__ import annotations

import json
import re

import pytest
import torch

import gradexport


def test_a_lone_surrogate_in_a_root_name_writes_both_json_and_html(tmp_path):
    x = torch.ones(2, requires_grad=True)
    paths = gradexport.write({"a\ud800": (x * 2).sum()}, tmp_path, "json,html")
    page = paths["html"].read_bytes().decode("utf-8")  # strict UTF-8: no surrogate escaped into the file
    assert "<title>autograd graph: a\\ud800</title>" in page
    graph = gradexport.formats.read_json(paths["json"])
    assert [root["name"] for root in graph.graph["roots"]] == ["a\ud800"]
    assert json.loads(paths["json"].read_text(encoding="utf-8"))["graph"]["roots"][0]["name"] == "a\ud800"


def graph_document(**node: object) -> dict:
    return {"directed": True, "multigraph": True, "graph": {}, "nodes": [{"id": "n0", "kind": "leaf", **node}], "edges": []}


@pytest.mark.parametrize("depth", [990, 1_000, 100_000])
def test_json_nested_deep_is_one_graph_format_error(tmp_path, depth):
    text = json.dumps(graph_document()).replace('"kind": "leaf"', '"kind": "leaf", "mine": ' + "[" * depth + "]" * depth)
    with pytest.raises(gradexport.errors.GraphFormatError, match="nested deeper than 100 levels") as caught:
        gradexport.from_json(text)
    assert "\n" not in str(caught.value)


def test_json_nested_at_the_limit_loads_and_writes_back():
    nested: list = []
    for _ in range(97):  # the document 0, nodes 1, the record 2, "mine" 3: the innermost list at level 100
        nested = [nested]
    graph = gradexport.from_json(json.dumps(graph_document(mine=nested)))
    assert gradexport.from_json(gradexport.to_json(graph)).nodes["n0"]["mine"] == nested


def test_a_root_node_without_its_root_is_refused_when_read():
    with pytest.raises(gradexport.errors.GraphFormatError, match=r"nodes\[0\]\.root: missing"):
        gradexport.from_json(json.dumps(graph_document(kind="root")))


def test_a_json_file_that_is_not_utf8_names_the_file_and_the_byte(tmp_path):
    from gradexport.formats import read_json

    path = tmp_path / "latin1.json"
    path.write_bytes(json.dumps(graph_document(names=["é"]), ensure_ascii=False).encode("latin-1"))
    with pytest.raises(gradexport.errors.GraphFormatError, match=rf"{path.name}: not UTF-8 text: byte \d+"):
        read_json(path)
    with pytest.raises(gradexport.errors.GraphFormatError, match=r"not UTF-8 text: byte \d+"):
        gradexport.from_json(path.read_bytes())


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(graph_document()).replace('"kind": "leaf"', '"kind": "leaf", "mine": ' + "[" * 1000 + "]" * 1000),
        json.dumps(graph_document(kind="root")),
    ],
    ids=["nested", "rootless"],
)
def test_gradexport_diff_of_a_hostile_file_prints_one_line(tmp_path, text):
    import subprocess
    import sys

    good = tmp_path / "good.json"
    x = torch.ones(2, requires_grad=True)
    gradexport.formats.write_json(gradexport.to_networkx((x * 2).sum()), good)
    bad = tmp_path / "bad.json"
    bad.write_text(text, encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "gradexport", "diff", str(good), str(bad)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("gradexport: error: ")


@pytest.mark.parametrize(
    ("roots", "shown"),
    [
        (range(10**18), "a range of 1,000,000,000,000,000,000 items"),
        (range(10**30), "a range of more items than len() can count"),
        ({"a": range(2_000_000)}, "root 'a' is a range of 2,000,000 items"),
    ],
    ids=["range-10**18", "range-10**30", "nested"],
)
def test_huge_root_collections_are_refused_before_they_are_read(roots, shown):
    with pytest.raises(gradexport.errors.RootError, match=re.escape(shown)):
        gradexport.to_networkx(roots)


def test_the_limit_counts_the_items_of_every_collection_in_all(monkeypatch):
    from gradexport.tracing import roots

    y = torch.ones(1, requires_grad=True) * 2
    nested = [[y, y], [y, y]]  # 2 + 2 + 2 items
    monkeypatch.setattr(roots, "MAX_ROOT_ITEMS", 6)
    assert len(roots.collect_roots(nested)) == 4
    monkeypatch.setattr(roots, "MAX_ROOT_ITEMS", 5)
    with pytest.raises(gradexport.errors.RootError, match=r"root '1' is a list of 2 items; the root collections may hold 5 items in all"):
        roots.collect_roots(nested)
