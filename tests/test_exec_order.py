"""exec_order of record_gradients and replay against the order seen by node pre-hooks registered here."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from cases import CASES, Case
from replay_cases import REPLAY_CASES, grad_outputs_for
from torch.autograd.graph import Node
from torch_versions import needs_input_metadata

import gradexport
from gradexport.tracing._torch import GradientEdge
from gradexport.tracing.graph import trace

# Not here: "compiled" (slow; the engine's order inside it is its own) and "freed_buffers" (backward fails).
ORDER_CASES = {name: build for name, build in {**CASES, **REPLAY_CASES}.items() if name not in {"compiled", "freed_buffers"}}


def engine_order(case: Case, grad_outputs: list[torch.Tensor | None], inputs: Any = None) -> list[str]:
    """Graph ids of the nodes the engine called, in order, from pre-hooks registered on every Node here."""
    ids = trace(case.roots).ids
    called: list[Node] = []
    handles = [node.register_prehook(lambda _, node=node: called.append(node)) for node in ids]
    roots = [root.tensor if root.tensor is not None else GradientEdge(root.node, root.input_nr) for root in trace(case.roots).roots]
    torch.autograd.backward(roots, grad_outputs, inputs=inputs)
    for handle in handles:
        handle.remove()
    return [ids[node] for node in called]


def recorded_order(graph: Any) -> list[str]:
    numbered = {node: data["exec_order"] for node, data in graph.nodes(data=True) if "exec_order" in data}
    assert sorted(numbered.values()) == list(range(1, len(numbered) + 1))
    return sorted(numbered, key=numbered.__getitem__)


@pytest.mark.parametrize("name", sorted(ORDER_CASES))
def test_record_gradients_order_is_the_engines(name: str) -> None:
    case = ORDER_CASES[name]()
    expected = engine_order(case, grad_outputs_for(case.roots))
    case = ORDER_CASES[name]()
    graph = gradexport.record_gradients(case.roots, grad_outputs=grad_outputs_for(case.roots), params=case.params, module=case.module)
    assert recorded_order(graph) == expected
    assert all(graph.nodes[node]["kind"] != "root" for node in expected)


def test_shared_nodes_and_several_roots_run_once() -> None:
    case = CASES["shared_subgraph_roots"]()
    graph = gradexport.record_gradients(case.roots, params=case.params)
    order = recorded_order(graph)
    assert len(order) == len(set(order)) == sum(1 for _, kind in graph.nodes(data="kind") if kind != "root")


def branchy() -> tuple[Case, torch.Tensor, torch.Tensor]:
    x = torch.tensor([0.5, 1.0], requires_grad=True)
    w = torch.tensor([2.0, 3.0], requires_grad=True)
    loss = (x.exp() * w).sum() + w.sin().sum()
    return Case(loss, {"x": x, "w": w}), x, w


def test_nodes_pruned_by_inputs_have_no_exec_order() -> None:
    case, x, w = branchy()
    expected = engine_order(case, [None], inputs=[w])
    case, x, w = branchy()
    graph = gradexport.record_gradients(case.roots, params=case.params, inputs=[w])
    assert recorded_order(graph) == expected
    assert x.grad is None and w.grad is not None
    skipped = {graph.nodes[node]["op"] for node, data in graph.nodes(data=True) if data["kind"] != "root" and "exec_order" not in data}
    assert skipped == {"ExpBackward0", "AccumulateGrad"}
    (x_leaf,) = [node for node, names in graph.nodes(data="names") if names == ["x"]]
    assert "exec_order" not in graph.nodes[x_leaf]


@needs_input_metadata
def test_replay_order_is_its_steps_and_every_node_runs() -> None:
    case, _, _ = branchy()
    record = gradexport.replay(case.roots, params=case.params)
    assert recorded_order(record.graph) == [step.node for step in record.steps]
