"""gradexport.record_gradients: per-edge gradients against torch.autograd.grad, hooks removed, user grads unchanged."""

from __future__ import annotations

from typing import Any

import networkx as nx
import pytest
import torch
from cases import CASES, Case
from replay_cases import (
    REPLAY_CASES,
    custom_functions,
    grad_outputs_for,
    mlp_two_heads,
    transformer_block,
)
from torch.autograd.graph import Node
from torch_versions import needs_input_metadata

import gradexport
from gradexport.core.marks import GRAD_KEYS
from gradexport.tracing._torch import GradientEdge
from gradexport.tracing.graph import trace

EVERY_VALUE = 10**6


def slot_gradients(case: Case, grad_outputs: list[torch.Tensor | None]) -> dict[tuple[str, int], torch.Tensor | None]:
    """The engine's total gradient arriving at every input slot of every node, by torch.autograd.grad."""
    result = trace(case.roots)
    slots = [(node_id, slot) for node, node_id in result.ids.items() for slot in range(len(node._input_metadata))]
    nodes = {node_id: node for node, node_id in result.ids.items()}
    targets = [root.tensor if root.tensor is not None else GradientEdge(root.node, root.input_nr) for root in result.roots]
    grads = torch.autograd.grad(
        targets,
        [GradientEdge(nodes[node_id], slot) for node_id, slot in slots],
        grad_outputs,
        retain_graph=True,
        allow_unused=True,
    )
    return dict(zip(slots, grads, strict=True))


# Not here: "compiled" (torch.compile is slow; test_replay runs it once), "freed_buffers" (the
# engine fails; see test_hooks_are_removed_when_backward_fails) and "checkpoint_reentrant"
# (torch.autograd.grad, the reference, refuses reentrant checkpoints).
FLOW_CASES = {name: build for name, build in {**CASES, **REPLAY_CASES}.items() if name not in {"compiled", "freed_buffers", "checkpoint_reentrant"}}


def values_of(grad: dict[str, Any]) -> torch.Tensor:
    values = torch.tensor(grad["values"], dtype=torch.float64)
    return (torch.view_as_complex(values) if grad["dtype"].startswith("complex") else values).to(getattr(torch, grad["dtype"]))


@needs_input_metadata  # the reference, torch.autograd.grad of every input slot, counts slots from _input_metadata
@pytest.mark.parametrize("name", sorted(FLOW_CASES))
def test_edge_gradients_agree_with_autograd_grad(name: str) -> None:
    case = FLOW_CASES[name]()
    grad_outputs = grad_outputs_for(case.roots)
    expected = slot_gradients(case, grad_outputs)
    graph = gradexport.record_gradients(case.roots, params=case.params, module=case.module, grad_outputs=grad_outputs, values_up_to=EVERY_VALUE)

    arriving: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for _, target, data in graph.edges(data=True):
        if "grad" in data:
            assert set(GRAD_KEYS) <= set(data["grad"])
            arriving.setdefault((target, data["input_nr"]), []).append(data["grad"])
    assert arriving, "no gradient was recorded"
    for slot, want in expected.items():
        recorded = arriving.get(slot, [])
        if want is None:
            assert recorded == []
            continue
        assert all(grad["shape"] == list(want.shape) and grad["dtype"] == str(want.dtype)[6:] for grad in recorded)
        total = sum(values_of(grad) for grad in recorded)
        torch.testing.assert_close(total, want, rtol=1e-5, atol=1e-6)


def test_edges_of_a_small_graph_hold_the_intermediate_gradients() -> None:
    x = torch.randn(3, requires_grad=True)
    y = torch.randn(3, requires_grad=True)
    product = x * y
    loss = product.sin().sum()
    grad_product, grad_x, grad_y = torch.autograd.grad(loss, [product, x, y], retain_graph=True)
    graph = gradexport.record_gradients(loss, params={"x": x, "y": y})

    ids = trace(loss).ids
    by_edge = {(u, v): data["grad"] for u, v, data in graph.edges(data=True)}
    mul, sin = ids[product.grad_fn], ids[loss.grad_fn.next_functions[0][0]]
    leaf_x, leaf_y = (ids[child] for child, _ in product.grad_fn.next_functions)
    assert by_edge[("n0", "n1")]["values"] == 1.0  # the root's starting gradient
    assert by_edge[(sin, mul)]["values"] == pytest.approx(grad_product.tolist())
    assert by_edge[(mul, leaf_x)]["values"] == pytest.approx(grad_x.tolist())
    assert by_edge[(mul, leaf_y)]["values"] == pytest.approx(grad_y.tolist())
    summary = by_edge[(mul, leaf_x)]
    assert summary["norm"] == pytest.approx(float(grad_x.norm()))
    assert (summary["min"], summary["max"]) == pytest.approx((float(grad_x.min()), float(grad_x.max())))
    assert summary["shape"] == [3] and summary["dtype"] == "float32"


def test_root_edges_carry_the_given_grad_outputs() -> None:
    x = torch.randn(2, 3, requires_grad=True)
    first, second = (x * 2).unbind()
    given = {"a": torch.tensor([1.0, 2.0, 3.0]), "b": torch.tensor([4.0, 5.0, 6.0])}
    graph = gradexport.record_gradients({"a": first, "b": second}, grad_outputs=given)
    for record in graph.graph["roots"]:
        ((_, _, data),) = graph.out_edges(record["node"], data=True)
        assert data["grad"]["values"] == given[record["name"]].tolist()
    assert torch.equal(x.grad, torch.stack(list(given.values())) * 2)


def test_values_only_up_to_the_limit() -> None:
    x = torch.randn(4, 5, requires_grad=True)
    graph = gradexport.record_gradients((x * 2).sum(), values_up_to=16)
    for _, _, data in graph.edges(data=True):
        numel = torch.Size(data["grad"]["shape"]).numel()
        assert ("values" in data["grad"]) == (numel <= 16)


def test_edges_without_flow_have_no_grad() -> None:
    graph = gradexport.record_gradients(custom_functions().roots)
    # StraightThrough returns None for its second input: that edge carries nothing.
    (straight,) = [node for node, op in graph.nodes(data="op") if op == "StraightThroughBackward"]
    flows = {key: "grad" in data for _, _, key, data in graph.out_edges(straight, keys=True, data=True)}
    assert flows == {0: True, 1: False}


def test_user_grads_are_the_same_as_a_plain_backward() -> None:
    recorded = mlp_two_heads()
    gradexport.record_gradients(recorded.roots, module=recorded.module)
    plain = mlp_two_heads()
    torch.autograd.backward(list(plain.roots.values()))
    for (name, got), (_, want) in zip(recorded.module.named_parameters(), plain.module.named_parameters(), strict=True):
        assert torch.equal(got.grad, want.grad), name


def own_hooks(node: Node) -> int:
    """How many post-hooks and pre-hooks are registered on ``node`` (torch hands back the hook dict)."""
    count = 0
    for register in (node.register_hook, node.register_prehook):
        handle = register(lambda *_: None)
        hooks = handle.hooks_dict_ref()
        count += 0 if hooks is None else len(hooks) - 1
        handle.remove()
    return count


def test_hooks_are_removed_and_retain_graph_allows_a_second_backward() -> None:
    case = transformer_block()
    graph = gradexport.record_gradients(case.roots, module=case.module, retain_graph=True)
    nodes = list(trace(case.roots).ids)
    assert sum(map(own_hooks, nodes)) == 0
    before = {name: param.grad.clone() for name, param in case.module.named_parameters()}
    case.roots.backward()  # graph retained: a second, plain backward works and doubles .grad
    for name, param in case.module.named_parameters():
        torch.testing.assert_close(param.grad, 2 * before[name])
    assert graph.number_of_nodes() == len(nodes) + 1


def test_hooks_are_removed_when_backward_fails() -> None:
    x = torch.randn(3, requires_grad=True)
    loss = (x * x.exp()).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="second time"):
        gradexport.record_gradients(loss)
    assert sum(map(own_hooks, trace(loss).ids)) == 0


def test_nan_and_inf_are_flagged() -> None:
    x = torch.tensor([0.0, -1.0, 4.0], requires_grad=True)
    loss = x.sqrt().sum()
    (expected,) = torch.autograd.grad(loss, x, retain_graph=True)
    graph = gradexport.record_gradients(loss)
    (leaf,) = [node for node, kind in graph.nodes(data="kind") if kind == "leaf"]
    ((_, _, data),) = graph.in_edges(leaf, data=True)
    assert (data["grad"]["has_inf"], data["grad"]["has_nan"]) == (True, True)
    torch.testing.assert_close(torch.tensor(data["grad"]["values"]), expected, equal_nan=True)
    others = [d["grad"] for _, v, d in graph.edges(data=True) if v != leaf]
    assert others and not any(grad["has_inf"] or grad["has_nan"] for grad in others)


def test_complex_gradients_are_summarised() -> None:
    z = torch.tensor([1 + 2j, 3 - 1j], requires_grad=True)
    graph = gradexport.record_gradients((z * z.conj()).real.sum())
    (leaf,) = [node for node, kind in graph.nodes(data="kind") if kind == "leaf"]
    arriving = [data["grad"] for _, _, data in graph.in_edges(leaf, data=True)]
    assert len(arriving) == 2  # z directly and through ConjBackward0
    assert all(grad["dtype"] == "complex64" and grad["min"] is None and grad["max"] is None for grad in arriving)
    total = sum(values_of(grad) for grad in arriving)
    torch.testing.assert_close(total, z.grad)
    norms = sorted(grad["norm"] for grad in arriving)
    assert norms == pytest.approx([float(torch.linalg.vector_norm(z.grad / 2))] * 2)


def test_graph_is_the_to_networkx_graph_plus_grads() -> None:
    case = mlp_two_heads()
    graph = gradexport.to_networkx(case.roots, module=case.module)
    recorded = gradexport.record_gradients(case.roots, module=case.module)
    for _, _, data in recorded.edges(data=True):
        data.pop("grad", None)
    for _, data in recorded.nodes(data=True):
        data.pop("exec_order", None)
    assert nx.utils.graphs_equal(recorded, graph)
