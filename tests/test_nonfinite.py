"""gradexport.find_nonfinite against torch: independent node hooks, anomaly mode, the leaves' .grad."""

from __future__ import annotations

import sysconfig
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from cases import Case
from torch import nn
from torch.autograd.graph import Node

import gradexport
from gradexport.backward.nonfinite import check_command
from gradexport.tracing.graph import trace


def nonfinite(grad: torch.Tensor | None) -> bool:
    return grad is not None and not bool(torch.isfinite(grad).all())


def engine_origins(case: Case) -> list[tuple[str, list[int]]]:
    """(graph id, offending next_functions positions) of every node that returned a non-finite gradient from
    finite ones, in the order the engine called them, seen by hooks registered here."""
    ids = trace(case.roots).ids
    order: list[Node] = []
    bad_inputs: set[Node] = set()
    bad_outputs: dict[Node, list[int]] = {}

    def before(node: Node, grads: tuple[torch.Tensor | None, ...]) -> None:
        order.append(node)
        if any(nonfinite(grad) for grad in grads):
            bad_inputs.add(node)

    def after(node: Node, grads: tuple[torch.Tensor | None, ...], _: Any) -> None:
        bad_outputs[node] = [position for position, grad in enumerate(grads) if nonfinite(grad)]

    handles = [node.register_prehook(lambda grads, node=node: before(node, grads)) for node in ids]
    handles += [node.register_hook(lambda grads, _, node=node: after(node, grads, _)) for node in ids]
    torch.autograd.backward(case.roots)
    for handle in handles:
        handle.remove()
    return [(ids[node], bad_outputs[node]) for node in order if node not in bad_inputs and bad_outputs.get(node)]


def sqrt_at_zero() -> Case:
    x = torch.tensor([0.0, 1.0, 4.0], requires_grad=True)
    return Case(x.sqrt().sum(), {"x": x})


def log_of_zero() -> Case:
    x = torch.tensor([[1.0, 0.0], [2.0, 0.0]], requires_grad=True)
    return Case(x.log().sum(), {"x": x})


def where_trap() -> Case:
    # The unselected branch still runs backward: LogBackward0 computes 0 / 0 where x == 0.
    x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
    return Case(torch.where(x > 0, torch.log(x), torch.zeros_like(x)).sum(), {"x": x})


class Ratio(nn.Module):
    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden / hidden.sum(dim=-1, keepdim=True)


def division_in_model() -> Case:
    model = nn.Sequential(nn.Linear(3, 3), Ratio())
    with torch.no_grad():
        model[0].weight.copy_(torch.eye(3))
        model[0].bias.zero_()
    inputs = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])  # the first row sums to 0
    with gradexport.capture_modules():
        out = model(inputs)
    return Case(out.nan_to_num().sum(), module=model)


def two_at_once() -> Case:
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    y = torch.tensor([2.0, 0.0], requires_grad=True)
    return Case(x.sqrt().sum() + y.log().sum(), {"x": x, "y": y})


BUILDERS: dict[str, Callable[[], Case]] = {builder.__name__: builder for builder in (sqrt_at_zero, log_of_zero, where_trap, division_in_model, two_at_once)}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_origins_are_the_nodes_the_engine_saw_go_nonfinite(name: str) -> None:
    expected = engine_origins(BUILDERS[name]())
    case = BUILDERS[name]()
    report = gradexport.find_nonfinite(case.roots, params=case.params, module=case.module)
    assert report is not None
    assert [(origin.node, [gradient.slot for gradient in origin.gradients]) for origin in report.origins] == expected
    assert all(origin.cause == "output" for origin in report.origins)
    assert report.graph.graph["nonfinite"] == [node for node, _ in expected]
    assert len(report.origins) == (2 if name == "two_at_once" else 1)


@pytest.mark.parametrize("name", ["sqrt_at_zero", "log_of_zero", "where_trap", "two_at_once"])
def test_reported_elements_are_where_the_leaf_grad_is_nonfinite(name: str) -> None:
    # In these cases each origin sends its gradient straight to one leaf's AccumulateGrad,
    # whose .grad (the engine's) is that gradient plus finite ones.
    case = BUILDERS[name]()
    report = gradexport.find_nonfinite(case.roots, params=case.params)
    assert report is not None
    seen = set()
    for origin in report.origins:
        (gradient,) = origin.gradients
        ((_, target, _),) = gradient.edges
        (leaf_name,) = report.graph.nodes[target]["names"]
        seen.add(leaf_name)
        grad = case.params[leaf_name].grad
        assert origin.parameters == (leaf_name,)
        assert [tuple(index) for index in (~torch.isfinite(grad)).nonzero().tolist()] == list(gradient.indices)
        assert gradient.nan == int(torch.isnan(grad).sum())
        assert gradient.inf == int(torch.isinf(grad).sum())
        assert gradient.shape == tuple(grad.shape)
        finite = grad[~torch.isnan(grad)]
        assert (gradient.min, gradient.max) == (float(finite.min()), float(finite.max()))
    assert seen == set(case.params)


@pytest.mark.filterwarnings("ignore:Anomaly Detection:UserWarning", "ignore:Error detected:UserWarning")
def test_nan_origins_agree_with_anomaly_mode() -> None:
    for build in (where_trap, division_in_model):
        case = build()
        report = gradexport.find_nonfinite(case.roots, module=case.module)
        assert report is not None
        first = report.first
        case = build()
        message = f"Function '{first.op}' returned nan values in its {first.gradients[0].slot}th output"
        with pytest.raises(RuntimeError, match=message), torch.autograd.detect_anomaly():
            torch.autograd.backward(case.roots)


def test_division_in_model_names_module_edges_and_parameters() -> None:
    case = division_in_model()
    report = gradexport.find_nonfinite(case.roots, module=case.module)
    assert report is not None
    first = report.first
    assert first.module == "1"  # the Ratio module
    assert set(first.parameters) == {"0.weight", "0.bias"}
    assert all(nonfinite(parameter.grad) for parameter in case.module.parameters())
    graph = report.graph
    assert graph.nodes[first.node]["nonfinite"] == "origin"
    for gradient in first.gradients:
        ((source, target, key),) = gradient.edges
        assert source == first.node and key == gradient.slot
        assert graph.edges[source, target, key]["nonfinite"] == "origin"
        assert graph.edges[source, target, key]["grad"]["has_nan"]
    # Every edge marked as carrying a non-finite gradient did carry one (recorded grad summary), and back.
    for _, _, data in graph.edges(data=True):
        carried = "grad" in data and (data["grad"]["has_nan"] or data["grad"]["has_inf"])
        assert ("nonfinite" in data) == carried
    for name in ("0.weight", "0.bias"):
        (leaf,) = [node for node, names in graph.nodes(data="names") if names == [name]]
        assert graph.nodes[leaf]["nonfinite"] == "reached"


def test_forward_traceback_from_anomaly_mode() -> None:
    with torch.autograd.set_detect_anomaly(True):
        x = torch.tensor([0.0, 1.0], requires_grad=True)
        loss = x.sqrt().sum()  # the line the report must point at
    node = loss.grad_fn.next_functions[0][0]
    expected = "".join(node.metadata["traceback_"])
    report = gradexport.find_nonfinite(loss, params={"x": x})
    assert report is not None
    assert report.first.traceback == expected
    assert "loss = x.sqrt().sum()" in report.first.traceback and __file__ in report.first.traceback
    assert "loss = x.sqrt().sum()" in str(report)


def test_forward_traceback_leaves_out_the_standard_library() -> None:
    """A forward run in a thread (as the MkDocs plugin runs a page): the report's frames name no file of the standard library (issue 37)."""
    results: list[torch.Tensor] = []

    def forward() -> None:
        with torch.autograd.set_detect_anomaly(True):
            x = torch.tensor([0.0, 1.0], requires_grad=True)
            results.append(x.sqrt().sum())  # the line the report must point at

    worker = threading.Thread(target=forward)
    worker.start()
    worker.join()
    (loss,) = results
    node = loss.grad_fn.next_functions[0][0]
    assert threading.__file__ in "".join(node.metadata["traceback_"])  # torch recorded the thread's frames
    report = gradexport.find_nonfinite(loss)
    assert report is not None
    text = str(report)
    assert "results.append(x.sqrt().sum())" in text and __file__ in text
    assert threading.__file__ not in text and sysconfig.get_paths()["stdlib"] not in text


def test_without_anomaly_mode_the_text_says_how_to_get_a_traceback() -> None:
    case = log_of_zero()
    report = gradexport.find_nonfinite(case.roots, params=case.params)
    assert report is not None and report.first.traceback is None
    text = str(report)
    assert report.first.op in text and "set_detect_anomaly(True)" in text and "x" in text


def test_all_finite_is_none_and_grads_are_the_engines() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 3, requires_grad=True)
    expected = torch.autograd.grad((x.exp() @ x).sum(), x)[0]
    assert gradexport.find_nonfinite((x.exp() @ x).sum()) is None
    torch.testing.assert_close(x.grad, expected)


def test_several_origins_are_listed_in_execution_order() -> None:
    case = two_at_once()
    report = gradexport.find_nonfinite(case.roots, params=case.params)
    assert report is not None
    orders = [origin.exec_order for origin in report.origins]
    assert orders == sorted(orders)
    assert [origin.parameters for origin in report.origins] == [
        tuple(report.graph.nodes[g.edges[0][1]]["names"]) for origin in report.origins for g in origin.gradients
    ]
    text = str(report)
    assert "1 more node(s)" in text and report.origins[1].op in text


def test_nonfinite_start_gradient_is_received_at_the_first_node() -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    report = gradexport.find_nonfinite(y, torch.tensor([float("nan"), 1.0]), params={"x": x})
    assert report is not None
    first = report.first
    assert (first.op, first.cause, first.exec_order) == (type(y.grad_fn).__name__, "received", 1)
    (gradient,) = first.gradients
    assert gradient.edges == (("n0", "n1", 0),) and gradient.nan == 1 and gradient.indices == ((0,),)
    assert first.parameters == ("x",)


def test_overflowing_sum_is_received() -> None:
    # Two finite gradients (3e38 each) meet at one input slot and their sum overflows float32.
    x = torch.tensor([1.0], requires_grad=True)
    h = x * 1.0
    loss = (h * 3e38).sum() + (h * 3e38).sum()
    report = gradexport.find_nonfinite(loss, params={"x": x})
    assert report is not None
    assert (report.first.op, report.first.cause) == (type(h.grad_fn).__name__, "received")
    assert len(report.first.gradients[0].edges) == 2
    assert torch.isinf(x.grad).all()


def test_check_command() -> None:
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    status, text = check_command((x + 1).pow(2).sum(), params={"x": x})
    assert status == 0 and "\n" not in text
    status, text = check_command(x.sqrt().sum(), params={"x": x})
    assert status == 1 and text.splitlines()[0] == "parameters received non-finite gradients: x"
    assert "SqrtBackward0" in text.splitlines()[1]


def test_tensor_hook_that_makes_inf_is_received_by_the_consumer() -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    hidden = x * 2
    hidden.register_hook(lambda grad: grad * float("inf"))
    loss = (hidden * 3).sum()
    expected = trace(loss).ids[hidden.grad_fn]
    report = gradexport.find_nonfinite(loss, params={"x": x})
    assert report is not None
    assert (report.first.node, report.first.cause, report.first.parameters) == (expected, "received", ("x",))
    # What the consumer sent along that edge was finite: the hook changed it on the way.
    ((source, target, key),) = report.first.gradients[0].edges
    assert not report.graph.edges[source, target, key]["grad"]["has_inf"]
    assert torch.isinf(x.grad).all()


def test_the_printed_traceback_leaves_out_gradexports_own_frames() -> None:
    """A forward run through gradexport (run_with_large_stack, the MkDocs runner) prints only the user's frames."""

    def forward() -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.tensor([0.0, 1.0], requires_grad=True)
        return x, x.sqrt().sum()  # the user's line

    with torch.autograd.set_detect_anomaly(True):
        x, loss = gradexport.streams.run_with_large_stack(forward)
    report = gradexport.find_nonfinite(loss, params={"x": x})
    assert report is not None and "stack.py" in (report.first.traceback or "")  # the stored traceback is complete
    text = str(report)
    assert "return x, x.sqrt().sum()" in text and "outside torch, gradexport and Python's standard library" in text
    assert str(Path(gradexport.__file__).parent) not in text


class RootOfInputs(nn.Module):
    """The square root at zero happens in the model's own forward, not in a submodule."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x).relu().sqrt().sum()


def test_an_origin_in_the_models_own_forward_is_named_the_model() -> None:
    torch.manual_seed(0)
    model = RootOfInputs()
    with torch.no_grad():
        model.layer.weight.copy_(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]))
        model.layer.bias.zero_()
    with gradexport.capture_modules():
        loss = model(torch.tensor([[1.0, 1.0]]))
    report = gradexport.find_nonfinite(loss, module=model)
    assert report is not None and report.first.module == "" and report.first.op == "SqrtBackward0"
    assert f"{report.first.node} SqrtBackward0 in the model" in str(report)
    assert "in module ''" not in str(report)
