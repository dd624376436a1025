"""The forward origin of a NaN or Inf, planted in real torch.nn architectures, against where torch itself made it.

Each case runs its forward inside `gradexport.tools.capture_source` and, around
it, two witnesses written here: a ``TorchFunctionMode`` that notes the first
torch function whose floating-point result held NaN or Inf (and whether its
inputs were finite, and the test file's line that called it), and forward
hooks on every module that note the first module whose output went
non-finite. The victims are checked against the ``.grad`` torch left on each
parameter; the opaque regions against the node types in torch's own graph.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.checkpoint import checkpoint

import gradexport
from gradexport.frontends.cli import main
from gradexport.tracing._torch import TORCH_VERSION, is_compiling, next_sequence_nr, tensor_leaves
from gradexport.tracing.graph import trace

#: Where gradexport reads each result's values: those reads are its own calls, not the model's.
_VALUE_READS = os.path.join(os.path.dirname(os.path.abspath(gradexport.__file__)), "tracing", "forward_values.py")


def _readable(tensor: torch.Tensor) -> bool:
    """A tensor with values to read: not a fake or functional one of a compiler's tracing (torch 2.1 traces without is_compiling)."""
    return type(tensor) in (torch.Tensor, nn.Parameter) and tensor.device.type != "meta" and tensor.is_floating_point()


def _nonfinite(tensor: torch.Tensor) -> bool:
    return _readable(tensor) and not bool(torch.isfinite(tensor.detach()).all())


@dataclass
class Witnessed:
    op: str
    inputs_finite: bool
    line: int | None


class FirstNonfinite(TorchFunctionMode):
    """The first torch function whose result held NaN or Inf (``nan_only``: NaN); gradexport's own reads of the values are not counted."""

    def __init__(self, nan_only: bool = False) -> None:
        super().__init__()
        self.found: Witnessed | None = None
        self.bad = _has_nan if nan_only else _nonfinite

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if is_compiling():  # Dynamo traces the model: the witness stays out of its graph
            return func(*args, **kwargs)
        result = func(*args, **kwargs)
        caller = sys._getframe(1)
        if self.found is None and caller.f_code.co_filename != _VALUE_READS:
            if any(self.bad(tensor) for tensor in tensor_leaves(result)):
                inputs_finite = not any(self.bad(tensor) for tensor in tensor_leaves((args, kwargs)))
                frame: Any = caller
                while frame is not None and frame.f_code.co_filename != __file__:
                    frame = frame.f_back
                self.found = Witnessed(getattr(func, "__name__", str(func)), inputs_finite, frame.f_lineno if frame else None)
        return result


def _has_nan(tensor: torch.Tensor) -> bool:
    return _readable(tensor) and bool(torch.isnan(tensor.detach()).any())


def first_module(model: nn.Module, run: Callable[[], Any]) -> tuple[Any, str | None]:
    """Run ``run`` with forward hooks on every module: its result and the module where the NaN or Inf appeared.

    That is the first module (hooks fire innermost first) whose output went
    non-finite from finite inputs; when there is none, the value came in from
    outside: the first module whose output went non-finite.
    """
    names = {module: name for name, module in model.named_modules()}
    made: list[str] = []
    passed_on: list[str] = []

    def hook(module: nn.Module, args: Any, output: Any) -> None:
        if any(_nonfinite(tensor) for tensor in tensor_leaves(output)):
            inputs_finite = not any(_nonfinite(tensor) for tensor in tensor_leaves(args))
            (made if inputs_finite else passed_on).append(names[module])

    handles = [module.register_forward_hook(hook) for module in names]
    try:
        result = run()
        return result, (made or passed_on or [None])[0]
    finally:
        for handle in handles:
            handle.remove()


def nonfinite_grads(model: nn.Module) -> set[str]:
    return {name for name, parameter in model.named_parameters() if parameter.grad is not None and _nonfinite(parameter.grad)}


# ---------------------------------------------------------------- the planted failures


class MaskedAttention(nn.Module):
    """Self-attention over a padded batch whose second sequence is padding only: its every key is masked."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.attention = nn.MultiheadAttention(16, 2, batch_first=True)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        padding = torch.zeros(x.shape[:2], dtype=torch.bool)
        padding[1] = True
        hidden = self.embed(x)
        attended, _ = self.attention(hidden, hidden, hidden, key_padding_mask=padding)
        return self.head(self.norm(hidden + attended)).mean()


class LogHead(nn.Module):
    """An MLP whose output goes through a log: negative outputs make NaN."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(self.body(x) - 2.0).mean()


class NaiveSoftmax(nn.Module):
    """A classifier with a hand-written softmax: exp overflows to Inf, then Inf - Inf is NaN."""

    def __init__(self) -> None:
        super().__init__()
        self.scores = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.scores(x) * 100.0
        exps = torch.exp(scores)
        centred = exps - exps.max(dim=-1, keepdim=True).values
        return (centred / exps.sum(dim=-1, keepdim=True)).sum()


class Normalised(nn.Module):
    """Rows divided by their norm: a zero row divides zero by zero."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8, bias=False)
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.proj(x)
        return self.head(hidden / hidden.norm(dim=-1, keepdim=True)).sum()


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))


def masked_attention() -> tuple[nn.Module, torch.Tensor]:
    return MaskedAttention(), torch.randn(3, 5, 8)


def log_of_negative() -> tuple[nn.Module, torch.Tensor]:
    return LogHead(), torch.randn(6, 8)


def exp_overflow() -> tuple[nn.Module, torch.Tensor]:
    return NaiveSoftmax(), torch.randn(6, 8) * 10


def nan_weight() -> tuple[nn.Module, torch.Tensor]:
    model = _mlp()
    with torch.no_grad():
        model[2].weight[3, 5] = float("nan")
    return model, torch.randn(6, 8)


def nan_batch() -> tuple[nn.Module, torch.Tensor]:
    inputs = torch.randn(6, 8)
    inputs[4, 1] = float("nan")
    return _mlp(), inputs


def zero_norm() -> tuple[nn.Module, torch.Tensor]:
    inputs = torch.randn(6, 8)
    inputs[3] = 0.0
    return Normalised(), inputs


#: Each planted failure; all but the overflow plant a NaN, and the witness looks for the first NaN
#: (torch's own attention turns its boolean mask into a -inf one: an Inf given on purpose).
PLANTED: dict[str, Callable[[], tuple[nn.Module, torch.Tensor]]] = {
    "masked attention": masked_attention,
    "log of a negative": log_of_negative,
    "exp overflow then inf - inf": exp_overflow,
    "NaN weight": nan_weight,
    "NaN batch": nan_batch,
    "division by a zero norm": zero_norm,
}


@pytest.mark.parametrize("name", PLANTED)
def test_planted_failure_forward_origin_is_where_torch_made_it(name: str) -> None:
    torch.manual_seed(0)
    model, inputs = PLANTED[name]()
    witness = FirstNonfinite(nan_only=name != "exp overflow then inf - inf")
    with witness, gradexport.tools.capture_source(), gradexport.capture_modules():
        loss, witnessed_module = first_module(model, lambda: model(inputs).sum())
    assert witness.found is not None and witnessed_module is not None  # torch made a NaN or Inf: the case is real
    report = gradexport.find_nonfinite(loss, module=model)
    assert report is not None and report.forward_origin is not None
    origin = report.forward_origin
    assert origin.op == witness.found.op
    assert origin.cause == ("made" if witness.found.inputs_finite else "input")
    assert origin.source is not None and origin.source.endswith(f":{witness.found.line}")
    assert origin.module == witnessed_module
    assert set(report.nonfinite_parameters) == nonfinite_grads(model)


def test_nan_weight_and_nan_batch_name_the_input_that_held_it() -> None:
    torch.manual_seed(0)
    model, inputs = nan_weight()
    with gradexport.tools.capture_source():
        loss = model(inputs).sum()
    origin = gradexport.find_nonfinite(loss, module=model).forward_origin  # type: ignore[union-attr]
    assert origin is not None and origin.cause == "input"
    bad = [item for item in origin.inputs if not item.finite]
    assert [item.name for item in bad] == ["2.weight"] and bad[0].values is not None
    assert bad[0].values.indices == tuple(tuple(index) for index in (~torch.isfinite(model[2].weight)).nonzero().tolist())
    model, inputs = nan_batch()
    with gradexport.tools.capture_source():
        loss = model(inputs).sum()
    origin = gradexport.find_nonfinite(loss, module=model).forward_origin  # type: ignore[union-attr]
    assert origin is not None and [(item.position, item.name) for item in origin.inputs if not item.finite] == [("0", None)]


def test_sqrt_of_sqrt_forward_origin_is_the_inner_sqrt_and_its_input_value() -> None:
    x = torch.tensor([1.0, 3.0, 6.0], requires_grad=True)
    with gradexport.tools.capture_source():
        y = torch.sqrt(torch.sqrt(x - 2)).sum()
    inner = y.grad_fn.next_functions[0][0].next_functions[0][0]  # type: ignore[union-attr]
    shifted = (x - 2).detach()
    report = gradexport.find_nonfinite(y, params={"x": x})
    assert report is not None and report.forward_origin is not None
    origin = report.forward_origin
    graph_ops = {node: data.get("op") for node, data in report.graph.nodes(data=True)}
    assert origin.node is not None and graph_ops[origin.node] == type(inner).__name__ == "SqrtBackward0"
    assert origin.op == "sqrt" and origin.cause == "made"
    first = origin.output.indices[0]
    assert torch.isnan(torch.sqrt(shifted))[first] and origin.inputs[0].at_first == float(shifted[first])
    # The backward first met the NaN at the outer square root: the two origins differ.
    assert report.first is not None and report.first.node != origin.node


def test_nan_loss_with_finite_gradients_is_reported_and_says_how_to_find_the_origin() -> None:
    x = torch.tensor([1.0, 3.0], requires_grad=True)
    loss = torch.log(-x).sum()
    assert torch.isnan(loss)
    report = gradexport.find_nonfinite(loss, params={"x": x})
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())  # torch's gradient -1/x... is finite
    assert report is not None and report.origins == () and report.forward_origin is None and not report.forward_captured
    assert [name for name, _ in report.nonfinite_roots] == ["output"] and not report.absorbed
    assert "gradexport.tools.capture_source()" in report.to_text()
    status, _ = gradexport.backward.nonfinite.check_command(torch.log(-x).sum(), params={"x": x})
    assert status == 1
    with gradexport.tools.capture_source():
        loss = torch.log(-x).sum()
    report = gradexport.find_nonfinite(loss, params={"x": x})
    assert report is not None and report.forward_origin is not None and report.forward_origin.op == "log"


def test_finite_forward_has_no_forward_origin() -> None:
    x = torch.tensor([0.0, 4.0], requires_grad=True)
    with gradexport.tools.capture_source():
        loss = x.sqrt().sum()  # finite forward, infinite gradient at 0
    report = gradexport.find_nonfinite(loss, params={"x": x})
    assert report is not None and report.forward_captured and report.forward_origin is None
    assert "every op's result was finite" in report.to_text()


# ---------------------------------------------------------------- victims behind opaque regions


class Checkpointed(nn.Module):
    """Two blocks of four Linear layers each, every block under a reentrant checkpoint."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 6)) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=True)
        return x.sum()


def test_reentrant_checkpoint_victims_are_every_nonfinite_grad_and_the_region_is_named() -> None:
    torch.manual_seed(0)
    model = Checkpointed()
    with torch.no_grad():
        model.blocks[1][0].weight[2, 2] = float("nan")
    inputs = torch.randn(4, 6, requires_grad=True)
    loss = model(inputs)
    regions = {type(node).__name__ for node in trace(loss).ids}
    report = gradexport.find_nonfinite(loss, module=model, params={"inputs": inputs})
    victims = nonfinite_grads(model)
    assert len(victims) >= 4  # torch: the NaN went back through both blocks
    assert inputs.grad is not None and _nonfinite(inputs.grad)
    assert report is not None and set(report.nonfinite_parameters) == victims | {"inputs"}
    assert set(report.hidden_parameters) == victims  # none of them is in autograd's graph
    assert "CheckpointFunctionBackward" in regions and report.regions
    assert {region.op for region in report.regions} == {"CheckpointFunctionBackward"}
    assert report.first is not None and report.first.region == "checkpoint"
    assert "reentrant checkpoint" in report.to_text()


@pytest.mark.slow
@pytest.mark.skipif(TORCH_VERSION < (2, 3), reason="torch before 2.3 fails to compile a model under a second TorchFunctionMode (the witness)")
def test_compiled_region_victims_and_region_are_named() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, inputs = exp_overflow()
    compiled = torch.compile(model, backend="aot_eager")
    witness = FirstNonfinite()
    with witness, gradexport.tools.capture_source():
        loss = compiled(inputs) * 1.0
    assert "CompiledFunctionBackward" in {type(node).__name__ for node in trace(loss).ids}
    report = gradexport.find_nonfinite(loss, module=model)
    assert report is not None
    assert set(report.nonfinite_parameters) == nonfinite_grads(model) != set()
    assert [region.op for region in report.regions] == ["CompiledFunctionBackward"]
    assert report.first is not None and report.first.region == "compiled"
    # aot_eager runs the region's aten ops one by one, from torch's generated code: the capture sees them as torch does.
    origin = report.forward_origin
    assert origin is not None and witness.found is not None
    assert (origin.op, origin.cause) == (witness.found.op, "made" if witness.found.inputs_finite else "input")


# ---------------------------------------------------------------- gradexport check


CHECK_TARGETS = """
import torch


def nan_loss():
    x = torch.tensor([1.0, 3.0], requires_grad=True)
    return torch.log(-x).sum(), {"x": x}


def sqrt_of_sqrt():
    x = torch.tensor([1.0, 3.0], requires_grad=True)
    return torch.sqrt(torch.sqrt(x - 2)).sum(), {"x": x}
"""


def test_check_captures_the_forward_and_prints_both_origins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    path = tmp_path / "planted.py"
    path.write_text(CHECK_TARGETS)
    assert main(["check", f"{path}:nan_loss"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("the loss is not finite (output)")
    assert re.search(r"forward origin: log .*planted\.py:7: return torch\.log\(-x\)\.sum\(\)", out), out
    assert main(["check", f"{path}:sqrt_of_sqrt"]) == 1
    out = capsys.readouterr().out
    assert "non-finite gradient: first at n2 SqrtBackward0" in out
    assert re.search(r"forward origin: sqrt \(node n3\) at .*planted\.py:12", out), out


# ---------------------------------------------------------------- an Inf given on purpose is no origin


class CausalAttention(nn.Module):
    """Hand-written causal self-attention with -inf masks, as many models write it; ``pad`` masks every key of one query."""

    def __init__(self, pad: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.pad = pad
        self.register_buffer("causal", torch.full((5, 5), float("-inf")).triu(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1) / 8**0.5 + self.causal
        if self.pad:
            blocked = torch.zeros(5, 5, dtype=torch.bool)
            blocked[3] = True
            scores = scores.masked_fill(blocked, float("-inf"))
        return (torch.softmax(scores, dim=-1) @ v).sum()


def test_a_minus_inf_mask_is_no_origin_and_the_softmax_of_a_fully_masked_row_is() -> None:
    torch.manual_seed(0)
    inputs = torch.randn(2, 5, 8)
    healthy = CausalAttention(pad=False)
    with gradexport.tools.capture_source():
        loss = healthy(inputs)
    assert bool(torch.isfinite(loss)) and not bool(torch.isfinite(healthy.causal).all())  # the -inf is there, on purpose
    assert gradexport.find_nonfinite(loss, module=healthy) is None
    padded = CausalAttention(pad=True)
    witness = FirstNonfinite(nan_only=True)
    with witness, gradexport.tools.capture_source():
        loss = padded(inputs)
    report = gradexport.find_nonfinite(loss, module=padded)
    assert report is not None and report.forward_origin is not None and witness.found is not None
    assert (report.forward_origin.op, report.forward_origin.cause) == (witness.found.op, "made") == ("softmax", "made")


def _witnessed_origin(forward: Callable[[], torch.Tensor]) -> tuple[Witnessed, Any]:
    witness = FirstNonfinite()
    with witness, gradexport.tools.capture_source():
        loss = forward()
    report = gradexport.find_nonfinite(loss)
    assert witness.found is not None and report is not None and report.forward_origin is not None
    return witness.found, report.forward_origin


def test_a_nonfinite_input_first_reshaped_is_found_at_the_reshape() -> None:
    """A view or relu is skipped only when its inputs were found finite: a NaN batch from outside is still caught at its first op."""
    weight = torch.randn(4, 6, requires_grad=True)
    batch = torch.randn(3, 2, 2)
    batch[1, 0, 1] = float("nan")
    found, origin = _witnessed_origin(lambda: torch.relu(batch.reshape(3, 4)).matmul(weight).sum())
    assert (origin.op, origin.cause) == (found.op, "input") == ("reshape", "input")


def test_a_checked_result_made_nonfinite_in_place_is_the_origin_not_its_later_views() -> None:
    weight = torch.randn(4, requires_grad=True)

    def forward() -> torch.Tensor:
        hidden = weight * 2
        hidden.div_(torch.zeros(4))
        return torch.relu(hidden.view(2, 2)).sum()

    found, origin = _witnessed_origin(forward)
    assert origin.op == found.op == "div_"


def test_views_and_relus_of_results_found_finite_are_not_summed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from gradexport.tracing import lines

    summed: list[str] = []
    first_nonfinite = lines.first_nonfinite

    def counted(result: Any) -> Any:
        summed.append(type(result.grad_fn).__name__ if isinstance(result, torch.Tensor) and result.grad_fn is not None else "")
        return first_nonfinite(result)

    monkeypatch.setattr(lines, "first_nonfinite", counted)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Flatten(0))
    with gradexport.tools.capture_source():
        model(torch.randn(4, 4)).sum()
    assert summed == ["", "AddmmBackward0", "SumBackward0"]  # randn, linear and sum; not relu nor flatten


def test_the_check_makes_no_node_and_leaves_the_grad_mode_as_it_was() -> None:
    """The check sums each result with autograd switched off for the sum: torch makes the same nodes as without the capture, and the grad mode is the caller's."""
    x = torch.ones(3, requires_grad=True)
    before = next_sequence_nr()
    (x * 2).exp()
    made_plain = next_sequence_nr() - before
    with gradexport.tools.capture_source():
        before = next_sequence_nr()
        (x * 2).exp()
        made_captured = next_sequence_nr() - before
        enabled_inside = torch.is_grad_enabled()
    with torch.no_grad(), gradexport.tools.capture_source():
        leaf = torch.ones(2).requires_grad_()  # a result that needs a gradient, made while grad mode is off
        enabled_under_no_grad = torch.is_grad_enabled()
    assert made_captured == made_plain
    assert enabled_inside and not enabled_under_no_grad and leaf.requires_grad
