"""gradexport.replay against torch's own backward: same .grad values and dtypes, and clear errors where it cannot match."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import networkx as nx
import pytest
import torch
from cases import CASES, Case
from replay_cases import REPLAY_CASES, grad_outputs_for
from torch import nn
from torch.autograd.function import once_differentiable
from torch_versions import needs_input_metadata

import gradexport
from gradexport.tracing._torch import GradientEdge
from gradexport.tracing.graph import trace
from gradexport.tracing.roots import collect_roots

pytestmark = needs_input_metadata

ALL_CASES: dict[str, Callable[[], Case]] = {**CASES, **REPLAY_CASES}


def leaves_of(case: Case) -> list[torch.Tensor]:
    return [node.variable for node in trace(case.roots).ids if type(node).__name__ == "AccumulateGrad"]


def engine_backward(case: Case, grad_outputs: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
    """The leaves' .grad after torch.autograd.backward (graph retained), then reset to None."""
    leaves = leaves_of(case)
    targets = [root.tensor if root.tensor is not None else GradientEdge(root.node, root.input_nr) for root in collect_roots(case.roots)]
    torch.autograd.backward(targets, grad_outputs, retain_graph=True)
    expected = [None if leaf.grad is None else leaf.grad.clone() for leaf in leaves]
    for leaf in leaves:
        leaf.grad = None
    return expected


def assert_same_grads(actual: list[torch.Tensor | None], expected: list[torch.Tensor | None]) -> None:
    assert [grad is None for grad in actual] == [grad is None for grad in expected]
    for got, want in zip(actual, expected, strict=True):
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)  # also checks dtype and device
            assert got.grad_fn is None and not got.requires_grad


@pytest.mark.parametrize("name", sorted(ALL_CASES))
def test_replay_leaves_the_grads_backward_leaves(name: str) -> None:
    case = ALL_CASES[name]()
    grad_outputs = grad_outputs_for(case.roots)
    try:
        expected = engine_backward(case, grad_outputs)
    except RuntimeError as engine_error:
        with pytest.raises(gradexport.errors.ReplayError) as caught:
            gradexport.replay(case.roots, grad_outputs)
        assert str(engine_error).split(".")[0] in str(caught.value)
        return
    record = gradexport.replay(case.roots, grad_outputs, params=case.params, module=case.module)
    leaves = leaves_of(case)
    assert_same_grads([leaf.grad for leaf in leaves], expected)

    # The record: the graph of to_networkx, every node run once after all its parents,
    # and each AccumulateGrad step received exactly the engine's gradient for its leaf.
    graph = gradexport.to_networkx(case.roots, params=case.params, module=case.module)
    order = {step.node: index for index, step in enumerate(record.steps)}
    assert {node: data.pop("exec_order") for node, data in record.graph.nodes(data=True) if "exec_order" in data} == {
        node: index + 1 for node, index in order.items()
    }
    assert nx.utils.graphs_equal(record.graph, graph)
    assert set(order) == {node for node, kind in graph.nodes(data="kind") if kind != "root"}
    assert all(order[u] < order[v] for u, v in graph.edges() if u in order)
    for step in record.steps:
        assert step.op == graph.nodes[step.node]["op"]
        assert len(step.outputs) == len(step.targets) == graph.nodes[step.node]["num_next"]
    ids = trace(case.roots).ids
    for leaf, want in zip(leaves, expected, strict=True):
        step = record.step(ids[torch.autograd.graph.get_gradient_edge(leaf).node])
        assert_same_grads([step.inputs[0]], [want])


@pytest.mark.parametrize("name", sorted(ALL_CASES))
def test_every_step_receives_what_the_engine_hands_its_node(name: str) -> None:
    # What reaches each node along its edges (each reduced to its slot's shape and cast to
    # its dtype by replay's _fit_to_slot, whose shortcut for gradients that already fit is
    # included), summed, is what backward() gives the node, as a pre-hook on every node sees it.
    case = ALL_CASES[name]()
    grad_outputs = grad_outputs_for(case.roots)
    ids = trace(case.roots).ids
    received: dict[str, tuple[torch.Tensor | None, ...]] = {}

    def seen(node_id: str) -> Callable[[tuple[torch.Tensor | None, ...]], None]:
        def hook(grads: tuple[torch.Tensor | None, ...]) -> None:
            received[node_id] = tuple(None if grad is None else grad.detach().clone() for grad in grads)

        return hook

    handles = [node.register_prehook(seen(node_id)) for node, node_id in ids.items()]
    try:
        engine_backward(case, grad_outputs)
    except RuntimeError:
        pytest.skip("backward() itself fails on this graph")
    finally:
        for handle in handles:
            handle.remove()
    record = gradexport.replay(case.roots, grad_outputs, params=case.params, module=case.module)
    assert {step.node for step in record.steps} == set(received)
    arrived: dict[tuple[str, int], torch.Tensor] = {(start.node, start.input_nr): start.grad for start in record.starts}
    for step in record.steps:
        for grad, target in zip(step.outputs, step.targets, strict=True):
            if grad is not None and target is not None:
                arrived[target] = grad if target not in arrived else arrived[target] + grad
    for step in record.steps:
        # The engine's tensor-hook step fits the node's inputs again, so its outputs are checked too.
        assert_same_grads(list(step.inputs), list(received[step.node]))
        assert_same_grads([arrived.get((step.node, slot)) for slot in range(len(step.inputs))], list(received[step.node]))


def test_blog_first_example_shows_the_blog_values() -> None:
    torch.manual_seed(6)
    x = torch.randn(4, 4, requires_grad=True)
    y = torch.randn(4, 4, requires_grad=True)
    record = gradexport.replay((x * y).sum(), params={"x": x, "y": y})

    assert [(step.node, step.op) for step in record.steps] == [
        ("n1", "SumBackward0"),
        ("n2", "MulBackward0"),
        ("n3", "AccumulateGrad"),
        ("n4", "AccumulateGrad"),
    ]
    # The numbers the blog printed for x.grad[0] and y.grad[0].
    blog_x0 = torch.tensor([-1.4801, -1.0631, 0.3630, 0.3995])
    blog_y0 = torch.tensor([-1.2113, 0.6304, -1.4713, -1.3352])
    dx, dy = record.step("n2").outputs
    torch.testing.assert_close(dx[0], blog_x0, atol=5e-5, rtol=0)
    torch.testing.assert_close(dy[0], blog_y0, atol=5e-5, rtol=0)
    torch.testing.assert_close(record.grads["x"][0], blog_x0, atol=5e-5, rtol=0)
    assert record.step("n2").targets == (("n3", 0), ("n4", 0))
    text = record.to_text()
    assert "[-1.4801, -1.0631,  0.3630,  0.3995]" in text
    assert "[-1.2113,  0.6304, -1.4713, -1.3352]" in text
    assert str(record) == text
    assert x.grad.grad_fn is None and y.grad.grad_fn is None

    x.grad.zero_()  # the record owns its tensors
    torch.testing.assert_close(record.step("n3").inputs[0][0], blog_x0, atol=5e-5, rtol=0)
    torch.testing.assert_close(dx[0], blog_x0, atol=5e-5, rtol=0)


def test_blog_second_example_routes_both_outputs_to_one_node() -> None:
    torch.manual_seed(6)
    x = torch.randn(2, requires_grad=True)
    x1, x2 = x.unbind()
    loss = x1 + x2
    record = gradexport.replay(loss, params={"x": x})

    add, unbind, _ = record.steps
    assert add.targets == (("n2", 0), ("n2", 1))
    with torch.no_grad():
        dx1, dx2 = loss.grad_fn(torch.tensor(1.0))  # the blog's own manual step
    assert unbind.op == "UnbindBackward0"
    assert torch.equal(unbind.inputs[0], dx1) and torch.equal(unbind.inputs[1], dx2)
    assert torch.equal(record.grads["x"], torch.ones(2))


def test_parallel_edges_are_summed() -> None:
    a = torch.randn(3, requires_grad=True)
    record = gradexport.replay((a + a).sum(), params={"a": a})
    add = record.steps[1]
    assert add.targets == (("n3", 0), ("n3", 0))
    assert torch.equal(record.step("n3").inputs[0], torch.full((3,), 2.0))


def test_none_where_nothing_arrives_and_for_none_slots() -> None:
    a = torch.randn(6, 4, requires_grad=True)
    first, _, third = (a * 2).split(2)
    record = gradexport.replay([first.sum(), third.sum()], params={"a": a})
    (split,) = [step for step in record.steps if step.op == "SplitBackward0"]
    assert [grad is None for grad in split.inputs] == [False, True, False]
    (mul,) = [step for step in record.steps if step.op == "MulBackward0"]
    assert mul.targets[1] is None and mul.outputs[1] is None  # the constant 2
    expected, _, _ = torch.autograd.grad(first.sum() + third.sum(), [a, first, third])
    assert torch.equal(a.grad, expected)


def test_bias_gradient_is_reduced_over_the_batch() -> None:
    case = REPLAY_CASES["linear_on_batch"]()
    record = gradexport.replay(case.roots, module=case.module)
    bias_node = next(node for node, names in record.graph.nodes(data="names") if names == ["bias"])
    arriving = [grad for step in record.steps for grad, target in zip(step.outputs, step.targets, strict=True) if target == (bias_node, 0)]
    assert [list(grad.shape) for grad in arriving] == [[2]]
    (grad_bias,) = torch.autograd.grad(case.roots, case.module.bias)
    assert torch.equal(case.module.bias.grad, grad_bias)


def test_float32_leaf_of_float64_work_gets_a_float32_grad() -> None:
    case = REPLAY_CASES["float32_leaf_in_float64_work"]()
    x, w = case.params["x"], case.params["w"]
    expected_x, expected_w = torch.autograd.grad(case.roots, [x, w], retain_graph=True)
    gradexport.replay(case.roots, params=case.params)
    assert (x.grad.dtype, w.grad.dtype) == (torch.float32, torch.float64)
    assert torch.equal(x.grad, expected_x) and torch.equal(w.grad, expected_w)


def test_custom_function_none_gradient_leaves_grad_unset() -> None:
    case = REPLAY_CASES["custom_functions"]()
    gradexport.replay(case.roots, params=case.params)
    assert case.params["d"].grad is None  # StraightThrough returned None for it, as with backward()
    assert case.params["c"].grad is not None


def test_existing_grad_is_accumulated_into() -> None:
    x = torch.randn(3, requires_grad=True)
    loss = (x * x).sum()
    (expected,) = torch.autograd.grad(loss, x, retain_graph=True)
    x.grad = torch.ones(3)
    before = x.grad
    gradexport.replay(loss)
    assert x.grad is before  # in place, as the engine does outside create_graph
    assert torch.equal(x.grad, torch.ones(3) + expected)


def test_graph_is_kept_so_replay_can_run_again() -> None:
    x = torch.randn(3, requires_grad=True)
    loss = (x.exp() * x).sum()
    first = gradexport.replay(loss, params={"x": x}).grads["x"].clone()
    second = gradexport.replay(loss, params={"x": x}).grads["x"]
    torch.testing.assert_close(second, 2 * first)


@pytest.mark.parametrize("form", ["mapping", "sequence", "gradient_edge", "node"])
def test_grad_outputs_forms(form: str) -> None:
    x = torch.randn(2, 3, requires_grad=True)
    first, second = (x * 3).unbind()
    grad_first, grad_second = torch.randn(3), torch.randn(3)
    expected = torch.stack([grad_first, grad_second]) * 3
    if form == "mapping":
        gradexport.replay({"first": first, "second": second}, {"second": grad_second, "first": grad_first})
    elif form == "sequence":
        gradexport.replay([first, second], [grad_first, grad_second])
    elif form == "gradient_edge":
        roots = [torch.autograd.graph.get_gradient_edge(first), torch.autograd.graph.get_gradient_edge(second)]
        gradexport.replay(roots, [grad_first, grad_second])
    else:
        gradexport.replay(first.grad_fn, [[grad_first, grad_second]])  # one gradient per input slot
    assert torch.equal(x.grad, expected)


def test_leaf_tensor_root_accumulates_its_grad_output() -> None:
    x = torch.randn(3, requires_grad=True)
    reference = x.detach().clone().requires_grad_()
    reference.backward(torch.arange(3.0))
    record = gradexport.replay(x, torch.arange(3.0), params={"x": x})
    assert [step.op for step in record.steps] == ["AccumulateGrad"]
    assert torch.equal(x.grad, reference.grad)


def test_grad_outputs_errors() -> None:
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="'output'.*only for scalar outputs"):
        gradexport.replay(x * 2)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        gradexport.replay(x * 2, torch.ones(2))
    with pytest.raises(ValueError, match="one tensor but there are 2 roots"):
        gradexport.replay([x * 2, x * 3], torch.ones(3))
    with pytest.raises(ValueError, match=r"names \['c'\] are not roots"):
        gradexport.replay({"a": (x * 2).sum()}, {"c": torch.ones(())})
    with pytest.raises(ValueError, match="1 grad_outputs for 2 roots"):
        gradexport.replay([(x * 2).sum(), x.sum()], [None])
    assert x.grad is None


def test_replay_json_summary() -> None:
    x = torch.tensor([1.0, -2.0], requires_grad=True)
    summary = gradexport.replay((x * x).sum(), params={"x": x}).to_dict()
    json.dumps(summary)
    assert summary["grads"]["x"]["values"] == [2.0, -4.0]
    mul = summary["steps"][1]
    assert mul["op"] == "MulBackward0" and [output["to"] for output in mul["outputs"]] == [["n3", 0], ["n3", 0]]
    assert [output["grad"]["values"] for output in mul["outputs"]] == [[1.0, -2.0], [1.0, -2.0]]


def test_text_shows_statistics_for_large_tensors() -> None:
    x = torch.tensor([3.0, -4.0, 0.0], requires_grad=True)
    text = gradexport.replay((x * x).sum() / 2, params={"x": x}).to_text(max_values=2, precision=2)
    assert "grad x  float32 [3]  norm=5.00  min=-4.00  max=3.00" in text.splitlines()


def test_deep_chain_replays_without_recursion() -> None:
    def run() -> bool:
        x = torch.ones(1, requires_grad=True)
        y = x
        for _ in range(1500):  # deeper than Python's recursion limit
            y = y * 1.001
        (expected,) = torch.autograd.grad(y.sum(), x, retain_graph=True)
        record = gradexport.replay(y.sum())
        return len(record.steps) == 1502 and torch.equal(x.grad, expected)

    assert gradexport.streams.run_with_large_stack(run)


# ------------------------------------------------------------------ where replay refuses


def test_freed_graph_names_the_node() -> None:
    x = torch.randn(3, requires_grad=True)
    loss = (x * x.exp()).sum()
    loss.backward()
    with pytest.raises(gradexport.errors.ReplayError, match=r"node n2 \(MulBackward0\).*backward through the graph a second time") as caught:
        gradexport.replay(loss)
    assert (caught.value.node, caught.value.op) == ("n2", "MulBackward0")


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, value: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(value)
        return value * value

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (value,) = ctx.saved_tensors
        return 2 * value * grad


def test_error_node_is_refused_before_anything_runs() -> None:
    x = torch.randn(3, requires_grad=True)
    (grad,) = torch.autograd.grad(Square.apply(x), x, torch.ones(3, requires_grad=True), create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        grad.sum().backward(retain_graph=True)  # the engine fails too
    with pytest.raises(gradexport.errors.ReplayError, match=r"\(Error\).*raises when backward reaches it"):
        gradexport.replay(grad.sum())
    assert x.grad is None


def test_op_without_derivative_names_the_node() -> None:
    a = torch.rand(3, requires_grad=True)
    with pytest.raises(gradexport.errors.ReplayError, match=r"\(IgammaBackward0\).*not implemented"):
        gradexport.replay(torch.igamma(a, torch.rand(3)).sum())


def _hook_on_root(x: torch.Tensor) -> Any:
    hidden = x * 2
    hidden.register_hook(lambda grad: grad * 10)
    return hidden


def _hook_on_leaf(x: torch.Tensor) -> Any:
    x.register_hook(lambda grad: grad * 10)
    return (x * 2).sum()


def _node_prehook(x: torch.Tensor) -> Any:
    hidden = x * 2
    hidden.grad_fn.register_prehook(lambda grads: tuple(grad * 10 for grad in grads))
    return hidden.sum()


def _node_posthook(x: torch.Tensor) -> Any:
    hidden = x * 2
    hidden.grad_fn.register_hook(lambda inputs, outputs: tuple(grad * 10 for grad in inputs))
    return hidden.sum()


def _module_backward_hook(x: torch.Tensor) -> Any:
    layer = nn.Linear(3, 3)
    layer.register_full_backward_hook(lambda module, grad_in, grad_out: None)
    return layer(x).sum()


@pytest.mark.parametrize("build", [_hook_on_root, _hook_on_leaf, _node_prehook, _node_posthook, _module_backward_hook])
def test_hooks_are_detected_and_refused(build: Callable[[torch.Tensor], Any]) -> None:
    x = torch.randn(3, requires_grad=True)
    roots = build(x)
    grad_outputs = torch.ones(3) if roots.dim() else None
    with pytest.raises(gradexport.errors.ReplayError, match="hook.*record_gradients"):
        gradexport.replay(roots, grad_outputs)
    assert x.grad is None  # refused before any node ran


def test_backward_hook_function_without_hooks_runs_through_apply() -> None:
    x = torch.randn(3, requires_grad=True)
    (passed,) = nn.modules._functions.BackwardHookFunction.apply(x * 2)
    record = gradexport.replay(passed.sum())
    assert [step.op for step in record.steps][:2] == ["SumBackward0", "BackwardHookFunctionBackward"]
    assert torch.equal(x.grad, torch.full((3,), 2.0))


def test_custom_op_without_autograd_names_the_node() -> None:
    @torch.library.custom_op("gradexport_test::twice", mutates_args=())
    def twice(value: torch.Tensor) -> torch.Tensor:
        return value * 2

    x = torch.randn(3, requires_grad=True)
    with pytest.raises(gradexport.errors.ReplayError, match=r"node n2 \(.*twice.*\).*no autograd formula"):
        gradexport.replay(twice(x).sum())
