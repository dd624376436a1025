"""Replay with Tensor.register_hook hooks on intermediate tensors: the same gradients, and the same hook calls, as backward()."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch_versions import needs_input_metadata

import gradexport

pytestmark = needs_input_metadata

#: Builds (root, leaves, calls) from fresh leaves; ``calls`` collects what the hooks saw.
Build = Callable[[], tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]]


def _scaling_hook() -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    # The report of issue 13: backward gives 20, a replay that skips the hook gives 2.
    x = torch.ones(1, requires_grad=True)
    hidden = x * 2
    hidden.register_hook(lambda grad: grad * 10)
    return (hidden * 1).sum(), [x], []


def _observing_hook() -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    x = torch.randn(3, requires_grad=True)
    calls: list[torch.Tensor] = []
    hidden = x.sin()
    hidden.register_hook(lambda grad: calls.append(grad.clone()))  # returns None: observes only
    return (hidden * x).sum(), [x], calls


def _in_place_hook() -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    x = torch.randn(3, requires_grad=True)
    hidden = x.exp()
    hidden.register_hook(lambda grad: grad.mul_(-3))  # modifies the buffer, returns it
    return hidden.pow(2).sum(), [x], []


def _hook_on_a_freed_tensor() -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    # The tensor is gone; its hook lives on only in C++, on its grad_fn.
    x = torch.randn(2, 3, requires_grad=True)
    w = torch.randn(3, 4, requires_grad=True)
    hidden = x @ w
    hidden.register_hook(lambda grad: grad + 1)
    root = hidden.relu().sum()
    del hidden
    return root, [x, w], []


def _several_hooks_in_order() -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    x = torch.randn(3, requires_grad=True)
    hidden = x * 2
    hidden.register_hook(lambda grad: grad * 3)
    hidden.register_hook(lambda grad: grad - 1)  # sees the first hook's result
    return hidden.square().sum(), [x], []


def _hook_on_one_output_of_several() -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    x = torch.randn(4, requires_grad=True)
    calls: list[torch.Tensor] = []
    first, second = x.mul(2).split(2)
    second.register_hook(lambda grad: grad * 5)
    first.register_hook(lambda grad: calls.append(grad.clone()))
    return (first.sum() + second.exp().sum()), [x], calls


def _hook_on_an_unused_output() -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    x = torch.randn(4, requires_grad=True)
    calls: list[torch.Tensor] = []
    first, second = x.mul(2).split(2)
    second.register_hook(lambda grad: calls.append(grad))  # no gradient reaches it
    return first.sum(), [x], calls


def _module_forward_hook_registers_tensor_hooks() -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    # Grad-CAM style: a forward hook puts a hook on each activation, which is then dropped.
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    calls: list[torch.Tensor] = []

    def on_forward(module: nn.Module, args: Any, output: torch.Tensor) -> None:
        output.register_hook(lambda grad: calls.append(grad.clone()) or grad * 0.5)

    for layer in model:
        layer.register_forward_hook(on_forward)
    return model(torch.randn(5, 3)).sum(), list(model.parameters()), calls


def _retained_intermediate() -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    x = torch.randn(3, requires_grad=True)
    hidden = x.cos()
    hidden.retain_grad()
    hidden.register_hook(lambda grad: grad * 2)
    root = (hidden * 3).sum()
    # The retained tensor's .grad is what backward sets besides the leaves'; compare it too.
    return root, [x, hidden], []


def _post_accumulate_grad_hook() -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    # Run by AccumulateGrad itself, so a direct call runs it too.
    x = torch.randn(3, requires_grad=True)
    calls: list[torch.Tensor] = []

    def hook(leaf: torch.Tensor) -> None:
        calls.append(leaf.grad.clone())
        leaf.grad.mul_(2)

    x.register_post_accumulate_grad_hook(hook)
    return (x * 3).sum(), [x], calls


BUILDS: dict[str, Build] = {
    build.__name__.lstrip("_"): build
    for build in (
        _scaling_hook,
        _observing_hook,
        _in_place_hook,
        _hook_on_a_freed_tensor,
        _several_hooks_in_order,
        _hook_on_one_output_of_several,
        _hook_on_an_unused_output,
        _module_forward_hook_registers_tensor_hooks,
        _retained_intermediate,
        _post_accumulate_grad_hook,
    )
}


def _run(build: Build, run: Callable[[torch.Tensor], Any]) -> tuple[list[torch.Tensor | None], list[torch.Tensor]]:
    torch.manual_seed(0)
    root, tensors, calls = build()
    run(root)
    return [None if tensor.grad is None else tensor.grad.clone() for tensor in tensors], calls


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_replay_applies_intermediate_tensor_hooks_as_backward_does(name: str) -> None:
    expected, expected_calls = _run(BUILDS[name], lambda root: root.backward())
    actual, actual_calls = _run(BUILDS[name], gradexport.replay)
    assert [grad is None for grad in actual] == [grad is None for grad in expected]
    for got, want in zip(actual, expected, strict=True):
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    assert len(actual_calls) == len(expected_calls), "the hooks must run as often as under backward()"
    for got, want in zip(actual_calls, expected_calls, strict=True):
        torch.testing.assert_close(got, want)


def test_issue_13_report() -> None:
    x = torch.ones(1, requires_grad=True)
    t = x * 2
    t.register_hook(lambda g: g * 10)
    gradexport.replay((t * 1).sum())
    assert x.grad.item() == 20.0  # backward() gives 20.0; a replay that skipped the hook gave 2.0


def test_a_step_records_what_its_node_was_called_with_after_the_hooks() -> None:
    x = torch.ones(2, requires_grad=True)
    hidden = x * 2
    hidden.register_hook(lambda grad: grad * 10)
    record = gradexport.replay((hidden * 1).sum())
    before, after = record.steps[1], record.steps[2]  # (hidden * 1)'s node, then hidden's
    assert after.node == before.targets[0][0]
    assert torch.equal(before.outputs[0], torch.ones(2))  # what flowed along the edge
    assert torch.equal(after.inputs[0], torch.full((2,), 10.0))  # what the hook made of it


def test_a_failing_tensor_hook_names_the_node() -> None:
    x = torch.ones(2, requires_grad=True)
    hidden = x * 2

    def broken(grad: torch.Tensor) -> torch.Tensor:
        raise ValueError("hook failed on purpose")

    hidden.register_hook(broken)
    with pytest.raises(gradexport.errors.ReplayError, match=r"\(MulBackward0\).*tensor hook.*hook failed on purpose"):
        gradexport.replay((hidden * 1).sum())


def test_the_hook_step_benchmark_runs() -> None:
    from benchmarks.replay_hooks import measure

    figures = measure(length=20, repeats=1)
    assert set(figures) == {"replay", "replay without the hook step", "hook step alone"}
    assert all(value > 0 for value in figures.values())
    assert gradexport.backward.replay.run_tensor_hooks is gradexport.tracing._torch.run_tensor_hooks  # put back
