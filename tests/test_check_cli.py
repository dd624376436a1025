"""``gradexport check`` and the CLI's reporting: absorbed non-finite values, in-place errors, torch's warnings, the user's errors.

Every expectation is checked against torch first: the engine's own ``.grad``,
its own in-place error, the warning it issues and the line of the user's code.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest
import torch

from gradexport.backward.nonfinite import check_command
from gradexport.frontends.cli import main
from gradexport.tracing.graph import trace

TARGETS = '''
import torch
from torch import nn


class Rooted(nn.Module):
    """A layer whose ReLU zeroes one unit, followed by a square root: d sqrt/dy is infinite at 0."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 2)
        with torch.no_grad():
            self.layer.weight.copy_(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]))
            self.layer.bias.zero_()
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.layer(x)).sqrt().sum()


def absorbed():
    model = Rooted()
    return model(torch.tensor([[1.0, 1.0]])), model


def reaches_parameters():
    x = torch.tensor([0.0, 4.0], requires_grad=True)
    return x.sqrt().sum(), {"x": x}


class EditsInPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 3)
        self.act = nn.ReLU()

    def forward(self, x):
        hidden = self.act(self.layer(x))
        hidden += 1  # ReluBackward0 saved its result, now at version 1
        return hidden.sum()


def in_place():
    torch.manual_seed(0)
    model = EditsInPlace()
    return model(torch.ones(1, 3)), model


def copies_a_tensor():
    x = torch.ones(2, requires_grad=True)
    y = torch.tensor(x * 2)  # torch warns: copy construct from a tensor
    return (x * y).sum(), {"x": x}


def softmax_without_dim():
    x = torch.ones(2, 3, requires_grad=True)
    probabilities = nn.Softmax()(x)  # torch warns, naming its own module.py as the place
    return probabilities.sum(), {"x": x}


def broken():
    x = torch.ones(2, requires_grad=True)
    raise ValueError("no loss today")
'''


@pytest.fixture
def targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(sys, "path", list(sys.path))
    path = tmp_path / "targets.py"
    path.write_text(TARGETS)
    return path


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_targets", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def line_of(path: Path, text: str) -> int:
    return next(number for number, line in enumerate(path.read_text().splitlines(), start=1) if text in line)


# ---------------------------------------------------------------- item 5: absorbed or reaching the parameters


def test_the_absorbing_case_is_absorbed_in_torch(targets: Path) -> None:
    loss, model = load(targets).absorbed()
    hidden = model.act(model.layer(torch.tensor([[1.0, 1.0]])))
    hidden.retain_grad()
    hidden.sqrt().sum().backward()
    assert hidden.grad is not None and torch.isinf(hidden.grad).any()  # a non-finite gradient on the way
    loss.backward()
    assert all(torch.isfinite(parameter.grad).all() for parameter in model.parameters())  # and none in .grad


def test_check_exits_0_when_the_nonfinite_gradient_is_absorbed_and_says_the_parameters_are_fine(targets: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", f"{targets}:absorbed"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("absorbed: a non-finite gradient appeared on the way")
    names = re.search(r"every parameter's gradient is finite \((.*)\)$", out.splitlines()[0])
    assert names is not None and sorted(names[1].split(", ")) == ["layer.bias", "layer.weight"]
    assert "SqrtBackward0" in out


def test_check_strict_exits_1_on_an_absorbed_nonfinite_gradient(targets: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--strict", f"{targets}:absorbed"]) == 1
    assert "every parameter's gradient is finite" in capsys.readouterr().out


def test_check_exits_1_when_parameters_receive_nonfinite_gradients(targets: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loss, names = load(targets).reaches_parameters()
    loss.backward()
    assert torch.isinf(names["x"].grad).any()
    assert main(["check", f"{targets}:reaches_parameters"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "parameters received non-finite gradients: x"


def test_check_command_strict() -> None:
    x = torch.tensor([1.0, -1.0], requires_grad=True)
    loss = torch.relu(x).sqrt().sum()  # inf at the zeroed unit, absorbed by ReluBackward0
    status, text = check_command(loss, params={"x": x})
    assert status == 0 and "every parameter's gradient is finite (x)" in text
    x.grad = None
    status, _ = check_command(torch.relu(x).sqrt().sum(), params={"x": x}, strict=True)
    assert status == 1 and x.grad is not None and torch.isfinite(x.grad).all()


# ---------------------------------------------------------------- item 6: in-place errors


def test_check_names_the_node_module_and_tensor_of_an_in_place_error(targets: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import gradexport

    with gradexport.capture_modules():
        loss, model = load(targets).in_place()
    relu = loss.grad_fn.next_functions[0][0].next_functions[0][0]  # Sum <- Add <- Relu
    assert type(relu).__name__ == "ReluBackward0"
    node_id = trace(loss).ids[relu]
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0") as torch_error:
        loss.backward()
    assert main(["check", f"{targets}:in_place"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    first = captured.err.splitlines()[0]
    assert first.startswith(f"gradexport: error: in-place error at {node_id} ReluBackward0 in module 'act':")
    # torch's own words name the tensor ("output 0 of Relu"; "of ReluBackward0" on older torch)
    what = re.search(r"which is (output 0 of \w+), is at version", str(torch_error.value))
    assert what is not None and f"its saved result (float32 [1, 3], {what[1]})" in first
    assert "saved at version 0, now at version 1" in first
    assert "torch: one of the variables needed for gradient computation" in first
    assert "modified by an inplace operation" in str(torch_error.value)


def test_find_nonfinite_raises_an_in_place_error_naming_the_node() -> None:
    import gradexport

    x = torch.ones(3, requires_grad=True)
    hidden = x.exp()
    hidden.mul_(2)
    loss = hidden.sum()
    node_id = trace(loss).ids[hidden.grad_fn.next_functions[0][0]]
    with pytest.raises(gradexport.errors.InPlaceError) as caught:
        gradexport.find_nonfinite(loss, params={"x": x})
    error = caught.value
    assert isinstance(error, RuntimeError)
    assert (error.node, error.op, error.saved, error.saved_version, error.version) == (node_id, "ExpBackward0", "result", 0, 1)


# ---------------------------------------------------------------- item 9: --traceback, torch's warnings, the user's line


@pytest.mark.parametrize("command", ["check", "view"])
def test_view_and_check_take_traceback_and_show_the_users_line(command: str, targets: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = ["--no-open", "-o", str(tmp_path / "page.html")] if command == "view" else []
    line = line_of(targets, 'raise ValueError("no loss today")')
    assert main([command, f"{targets}:broken", *extra]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"raised ValueError: no loss today (at {targets}:{line}, in broken)" in err
    assert main([command, "--traceback", f"{targets}:broken", *extra]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and f'File "{targets}", line {line}, in broken' in err


@pytest.mark.parametrize("command", ["check", "view", None])
def test_torchs_warnings_are_printed_as_themselves(command: str | None, targets: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load(targets).copies_a_tensor()
    (torch_warning,) = caught
    line = line_of(targets, "y = torch.tensor(x * 2)")
    assert (torch_warning.lineno, torch_warning.category) == (line, UserWarning)
    first_words = str(torch_warning.message).split(".")[0]
    if command == "view":
        argv = ["view", "--no-open", "-o", str(tmp_path / "page.html"), f"{targets}:copies_a_tensor"]
    elif command == "check":
        argv = ["check", f"{targets}:copies_a_tensor"]
    else:
        argv = [f"{targets}:copies_a_tensor", "-f", "json", "-o", str(tmp_path)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert re.search(rf"^{re.escape(str(targets))}:{line}: UserWarning: {re.escape(first_words)}", err, re.M), err
    assert "gradexport: warning" not in err


def test_a_torch_warning_that_names_torchs_own_file_is_shown_at_the_users_line(targets: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load(targets).softmax_without_dim()
    (torch_warning,) = caught
    assert torch_warning.filename.startswith(os.path.dirname(torch.__file__))  # torch's stacklevel stops inside torch
    line = line_of(targets, "probabilities = nn.Softmax()(x)")
    assert main(["check", f"{targets}:softmax_without_dim"]) == 0
    err = capsys.readouterr().err
    assert re.search(rf"^{re.escape(str(targets))}:{line}: UserWarning: Implicit dimension choice for softmax", err, re.M), err
    # The place torch names, after the message: module.py here; under check's capture_source (a
    # TorchFunctionMode adds frames between the user's call and torch) torch's stacklevel stops elsewhere in torch.
    assert f"(issued at {os.path.dirname(torch.__file__)}{os.sep}" in err
