"""The formula each replay step shows (gradexport.backward.vjp), held against torch: every vector–Jacobian product
must equal what torch.autograd.grad gives for the node's inputs, and the values it names must be torch's own."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch_versions import needs_input_metadata

import gradexport
from gradexport.backward.steps import name_nodes
from gradexport.backward.vjp import ACCUMULATE, OPS
from gradexport.tracing.graph import trace

pytestmark = needs_input_metadata
torch.manual_seed(0)

#: Per operation: the shapes of the leaves to make and the forward that uses each leaf once.
CASES: dict[str, tuple[list[tuple[int, ...]], Callable[..., torch.Tensor | tuple[torch.Tensor, ...]]]] = {
    "AddBackward0": ([(3, 4), (3, 4)], lambda x, y: x + y),
    "SubBackward0": ([(3, 4), (3, 4)], lambda x, y: torch.sub(x, y, alpha=2.5)),
    "MulBackward0": ([(4, 4), (4, 4)], lambda x, y: x * y),
    "DivBackward0": ([(3, 4), (3, 4)], lambda x, y: x / y),
    "SumBackward0": ([(3, 4)], lambda x: x.sum()),
    "SumBackward1": ([(2, 3, 4)], lambda x: x.sum(dim=(0, -1))),
    "MeanBackward0": ([(3, 4)], lambda x: x.mean()),
    "MeanBackward1": ([(3, 4)], lambda x: x.mean(dim=1, keepdim=True)),
    "PowBackward0": ([(3, 4)], lambda x: x**3),
    "ExpBackward0": ([(3, 4)], lambda x: x.exp()),
    "LogBackward0": ([(3, 4)], lambda x: x.log()),
    "ReluBackward0": ([(3, 4)], lambda x: x.relu()),
    "TanhBackward0": ([(3, 4)], lambda x: x.tanh()),
    "SigmoidBackward0": ([(3, 4)], lambda x: x.sigmoid()),
    "MmBackward0": ([(3, 4), (4, 2)], lambda x, w: x @ w),
    "ViewBackward0": ([(3, 4)], lambda x: x.view(2, 6)),
    "ExpandBackward0": ([(4,)], lambda x: x.expand(3, 4)),
    "TBackward0": ([(3, 4)], lambda x: x.t()),
    "NegBackward0": ([(3, 4)], lambda x: -x),
    "UnbindBackward0": ([(2, 4)], lambda x: x.unbind(0)),
}


def leaves(shapes: list[tuple[int, ...]], positive: bool = False) -> list[torch.Tensor]:
    made = [torch.randn(shape) for shape in shapes]
    return [(t.abs() + 0.5 if positive else t).requires_grad_() for t in made]


def loss_of(outputs: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor:
    """A loss whose gradient for each output is random, so that dz is not all ones."""
    if isinstance(outputs, tuple):
        return sum((out * torch.randn(out.shape)).sum() for out in outputs[1:]) + (outputs[0] * torch.randn(outputs[0].shape)).sum()
    return (outputs * torch.randn(outputs.shape)).sum()


@pytest.mark.parametrize("op", sorted(CASES))
def test_each_product_is_torchs_gradient_for_that_input(op: str) -> None:
    shapes, forward = CASES[op]
    inputs = leaves(shapes, positive=op in ("LogBackward0", "DivBackward0"))
    outputs = forward(*inputs)
    loss = loss_of(outputs)
    expected = torch.autograd.grad(loss, inputs, retain_graph=True)
    node = (outputs[0] if isinstance(outputs, tuple) else outputs).grad_fn
    node_id = trace(loss).ids[node]
    step = gradexport.replay(loss).step(node_id)
    assert step.op == op
    assert step.math is not None and step.math.note == "" and step.math.forward and step.math.local
    graph_inputs = [i for i, grad in enumerate(step.outputs) if grad is not None]
    assert [product.position for product in step.math.products] == graph_inputs
    # Every input here is a leaf of this op alone: torch's gradient for it is the op's VJP.
    products = {product.position: product for product in step.math.products}
    for position, want in zip(graph_inputs, [g for g in expected if g is not None], strict=True):
        got = products[position].value
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got, step.outputs[position])


def test_the_gradient_a_product_names_is_the_one_that_arrived_and_the_saved_values_are_the_forwards() -> None:
    x, y = leaves([(4, 4), (4, 4)])
    z = x * y
    loss = loss_of(z)
    (dz,) = torch.autograd.grad(loss, [z], retain_graph=True)
    step = gradexport.replay(loss).step(trace(loss).ids[z.grad_fn])
    assert step.math is not None
    (dx, dy) = step.math.products
    assert (dx.text, [t.symbol for t in dx.terms]) == ("dx = dz · y", ["dz", "y"])
    assert (dy.text, [t.symbol for t in dy.terms]) == ("dy = dz · x", ["dz", "x"])
    assert torch.equal(dx.terms[0].value, dz) and torch.equal(dx.terms[1].value, y.detach())
    assert torch.equal(dy.terms[1].value, x.detach())


def test_a_broadcast_input_gets_its_product_summed_to_its_shape() -> None:
    x, bias = leaves([(3, 4), (4,)])
    z = x + bias
    loss = loss_of(z)
    expected = torch.autograd.grad(loss, [bias], retain_graph=True)[0]
    step = gradexport.replay(loss).step(trace(loss).ids[z.grad_fn])
    assert step.math is not None
    product = step.math.products[1]
    assert product.text == "dy = dz, summed to shape (4,)"
    torch.testing.assert_close(product.value, expected)


def test_an_input_that_needs_no_gradient_gets_no_product() -> None:
    (x,) = leaves([(3,)])
    (step,) = [s for s in gradexport.replay((x * 0.5).sum()).steps if s.op == "MulBackward0"]
    assert step.math is not None and [p.position for p in step.math.products] == [0]


def test_an_operation_without_a_formula_says_so_and_accumulate_grad_says_what_it_does() -> None:
    (x,) = leaves([(5,)])
    record = gradexport.replay(x.cumsum(0).sum())
    by_op = {step.op: step.math for step in record.steps}
    assert by_op["CumsumBackward0"] is not None and by_op["CumsumBackward0"].products == ()
    assert by_op["CumsumBackward0"].note.startswith("gradexport has no formula for CumsumBackward0")
    assert by_op["AccumulateGrad"] is not None and by_op["AccumulateGrad"].note == ACCUMULATE
    assert "CumsumBackward0" not in OPS and set(CASES) <= set(OPS)


def test_every_operation_in_the_table_has_a_case_here() -> None:
    assert set(OPS) - set(CASES) == {"AccumulateGrad", "UnsafeViewBackward0"}


def test_the_pages_names_for_nodes_go_on_the_nodes_they_hold_and_a_rebuilt_graphs_nodes_match_nothing() -> None:
    x, y = leaves([(4, 4), (4, 4)])
    loss = (x * y).sum()
    record = gradexport.replay(loss, params={"x": x, "y": y})
    back_sum = loss.grad_fn
    back_mul = back_sum.next_functions[0][0]
    back_x, back_y = (child for child, _ in back_mul.next_functions)
    ids = trace(loss, params={"x": x, "y": y}).ids
    old_mul = (x * y).grad_fn  # a node of another graph, of the same type
    named = name_nodes(record, {"back_sum": back_sum, "back_mul": back_mul, "same": back_mul, "back_x": back_x, "_hidden": back_y, "old": old_mul})
    variables = {node: data.get("variables") for node, data in named.graph.nodes(data=True)}
    assert variables == {
        ids[loss.grad_fn]: ["back_sum"],
        ids[back_mul]: ["back_mul", "same"],
        ids[back_x]: ["back_x"],
        ids[back_y]: None,
        **{node: None for node, data in record.graph.nodes(data=True) if data["kind"] == "root"},
    }
    assert all("variables" not in data for _, data in record.graph.nodes(data=True))
