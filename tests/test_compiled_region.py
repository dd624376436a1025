"""Inside a compiled region: the backward graph on the CompiledFunctionBackward node, checked against torch's own print of it.

Torch logs every backward graph AOTAutograd makes (``torch._logging.set_logs(aot_graphs=True)``):
each op as ``NAME: ... = torch.ops.OP(...)`` under a ``# File: PATH:LINE in FUNCTION, code: CODE``
comment. The region's ops, their order and their lines are compared with that text; the region's
outputs with the node's ``next_functions``; the DOT cluster with Graphviz. Compiling takes seconds: ``slow``.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import networkx as nx
import pytest
import torch
from torch import nn

import gradexport
from gradexport.core.errors import TorchVersionError
from gradexport.formats.dot import to_dot
from gradexport.formats.json import from_json, to_json
from gradexport.tracing._torch import COMPILED_GRAPH_TORCH, TORCH_VERSION

needs_compiled_graph = pytest.mark.skipif(TORCH_VERSION < COMPILED_GRAPH_TORCH, reason="CompiledFunction keeps its backward graph from torch 2.3")
pytestmark = pytest.mark.slow

BACKENDS = ["aot_eager", "inductor"]


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.lin(x)
        return torch.tanh(hidden).sum()


_SECTION = re.compile(r"===== Backward graph \d+ =====\n(?P<body>.*?)\n\s*return ", re.DOTALL)
# torch 2.15 writes "# Backward of forward node: File: ...", 2.13 "# File: ...".
_FILE = re.compile(r"#.*\bFile: (?P<path>.+):(?P<line>\d+) in (?P<function>\w+), code: (?P<code>.*)$")
_OP = re.compile(r"^\s*(?P<id>\w+): .*? = torch\.ops\.(?P<op>[\w.]+)\(")


def torch_printed_ops(log: str) -> list[dict[str, str]]:
    """The backward graph's ops as torch's aot_graphs log prints them: id, op and the ``# File:`` line above."""
    sections = _SECTION.findall(log)
    assert len(sections) == 1, f"expected one backward graph in torch's log, found {len(sections)}"
    ops: list[dict[str, str]] = []
    where: dict[str, str] = {}
    for line in sections[0].splitlines():
        if found := _FILE.search(line):
            where = {"path": found["path"], "line": found["line"], "code": found["code"].strip()}
        elif found := _OP.match(line):
            ops.append({"id": found["id"], "op": found["op"], **where})
    return ops


@pytest.fixture
def aot_graph_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    torch._dynamo.reset()
    torch._logging.set_logs(aot_graphs=True)
    try:
        with caplog.at_level(logging.INFO):
            yield caplog
    finally:
        torch._logging.set_logs()


def compiled_loss(backend: str) -> tuple[Tiny, torch.Tensor]:
    model = Tiny()
    with gradexport.tools.capture_compiled():
        loss = torch.compile(model, backend=backend)(torch.randn(4, 3, requires_grad=True))
    return model, loss


@needs_compiled_graph
@pytest.mark.parametrize("backend", BACKENDS)
def test_region_ops_are_the_backward_graph_torch_prints(backend: str, aot_graph_log: pytest.LogCaptureFixture) -> None:
    model, loss = compiled_loss(backend)
    printed = torch_printed_ops("\n".join(record.getMessage() for record in aot_graph_log.records))
    graph = gradexport.to_networkx(loss, params=dict(model.named_parameters()), open_compiled=True)
    (region_id,) = [node for node, data in graph.nodes(data=True) if data.get("special") == "compiled"]
    region = graph.nodes[region_id]["compiled_graph"]
    assert [(op["id"], op["op"]) for op in region["ops"]] == [(op["id"], op["op"]) for op in printed]
    assert region["metadata_kept"]
    for ours, torchs in zip(region["ops"], printed):
        assert os.path.abspath(ours["source"].rpartition(":")[0]) == torchs["path"], ours
        assert ours["source"].rpartition(":")[2] == torchs["line"] and ours["source_code"] == torchs["code"], ours
    # The user's two lines, both differentiated inside the region.
    assert {op["source_code"] for op in region["ops"]} == {"hidden = self.lin(x)", "return torch.tanh(hidden).sum()"}
    # Every value an op reads is an input or an earlier op.
    known = {value["id"] for value in region["inputs"]}
    for op in region["ops"]:
        assert set(op["inputs"]) <= known, op
        known.add(op["id"])
    # One gradient arrives (the loss's), and the gradients leave along the node's next_functions to the parameters.
    assert [value["role"] for value in region["inputs"]].count("gradient") == 1
    leaving = {output["next_index"]: output["id"] for output in region["outputs"]}
    next_functions = loss.grad_fn.next_functions
    for index, (child, _) in enumerate(next_functions):
        assert (child is not None) == (index in leaving), (index, child)
    targets = {(graph.nodes[target]["names"] or ["the input"])[0]: key for _, target, key in graph.out_edges(region_id, keys=True)}
    assert set(targets) == {"lin.weight", "lin.bias", "the input"} and set(targets.values()) == set(leaving)


@needs_compiled_graph
def test_the_option_only_adds_the_region_attribute() -> None:
    model, loss = compiled_loss("aot_eager")
    params = dict(model.named_parameters())
    plain = gradexport.to_networkx(loss, params=params)
    opened = gradexport.to_networkx(loss, params=params, open_compiled=True)
    assert list(opened.edges(keys=True, data=True)) == list(plain.edges(keys=True, data=True))
    assert opened.graph == plain.graph
    added = {node: data.pop("compiled_graph") for node, data in opened.nodes(data=True) if "compiled_graph" in data}
    assert list(added) == [node for node, data in plain.nodes(data=True) if data.get("special") == "compiled"]
    assert dict(opened.nodes(data=True)) == dict(plain.nodes(data=True))


@needs_compiled_graph
def test_the_region_round_trips_through_json_and_draws_as_a_graphviz_cluster() -> None:
    model, loss = compiled_loss("aot_eager")
    graph = gradexport.to_networkx(loss, params=dict(model.named_parameters()), open_compiled=True)
    back = from_json(to_json(graph))
    assert nx.utils.graphs_equal(back, graph) and dict(back.nodes(data=True)) == dict(graph.nodes(data=True))
    (region_id,) = [node for node, data in graph.nodes(data=True) if "compiled_graph" in data]
    region: dict[str, Any] = graph.nodes[region_id]["compiled_graph"]
    svg = subprocess.run(["dot", "-Tsvg"], input=to_dot(graph), capture_output=True, text=True, check=True).stdout
    root = ET.fromstring(svg)
    namespace = {"svg": "http://www.w3.org/2000/svg"}

    def titles(kind: str) -> set[str | None]:
        return {
            group.findtext("svg:title", namespaces=namespace) for group in root.iter("{http://www.w3.org/2000/svg}g") if kind in group.get("class", "").split()
        }

    assert f"cluster_{region_id}_compiled" in titles("cluster")
    assert {f"{region_id}/op{number}" for number in range(len(region["ops"]))} <= titles("node")
    texts = " ".join(text.text or "" for text in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "hidden = self.lin(x)" not in texts  # the code is the hover text; the label holds the line
    assert f"test_compiled_region.py:{Tiny.forward.__code__.co_firstlineno + 1}" in texts


def test_opening_compiled_regions_needs_torch_2_3() -> None:
    if TORCH_VERSION >= COMPILED_GRAPH_TORCH:
        pytest.skip("this torch keeps the compiled backward graph")
    with pytest.raises(TorchVersionError, match="open_compiled"):
        gradexport.to_networkx((torch.ones(1, requires_grad=True) * 2).sum(), open_compiled=True)


@needs_compiled_graph
def test_compiled_autograd_inlines_the_regions_graph_that_is_shown() -> None:
    """With compiled autograd on, backward() traces one graph that holds each region's AOTAutograd ops (renamed aot<k>_<id>) with the same lines."""
    from torch._dynamo import compiled_autograd

    if not hasattr(compiled_autograd, "_enable"):
        pytest.skip("this torch's compiled autograd has no _enable(compiler) context")
    model, loss = compiled_loss("aot_eager")
    region = gradexport.tools.compiled_region(loss)
    assert region is not None
    traced: list[torch.fx.GraphModule] = []

    def keep(graph_module: torch.fx.GraphModule) -> Any:
        traced.append(graph_module)
        return torch.compile(graph_module, backend="eager")

    with compiled_autograd._enable(keep):
        loss.backward()
    (whole,) = traced
    inlined = {found[1]: node for node in whole.graph.nodes if (found := re.fullmatch(r"aot\d+_(\w+)", node.name))}
    assert {op["id"] for op in region["ops"]} <= set(inlined)
    for op in region["ops"]:
        frames = [line for line in inlined[op["id"]].meta.get("stack_trace", "").splitlines() if line.strip().startswith("File ")]
        assert frames and f"line {op['source'].rpartition(':')[2]}, in forward" in frames[-1], (op, frames)
    assert model.lin.weight.grad is not None
