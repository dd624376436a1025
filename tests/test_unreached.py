"""unreached: every reason a parameter gets no gradient has a case, checked against .grad after a real backward()."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from format_fixtures import REPO
from torch import nn

import gradexport


class Partly(nn.Module):
    """Runs, but its output never depends on ``spare``."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(2))
        self.spare = nn.Parameter(torch.ones(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :2] * self.weight


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        for name in ("used", "skipped", "nograd", "detached", "argmaxed", "compared", "intcast", "dropped", "aux", "frozen"):
            self.add_module(name, nn.Linear(3, 2))
        self.partly = Partly()
        self.frozen.requires_grad_(False)
        self.scale = nn.Parameter(torch.ones(2))  # the model's own parameter, used under no_grad

    def forward(self, x: torch.Tensor, branch: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.used(x)
        if branch:
            h = h + self.skipped(x)
        with torch.no_grad():
            n = self.nograd(x) * self.scale
        d = self.detached(x).detach()
        a = self.argmaxed(x).argmax(dim=1, keepdim=True).float()
        c = (self.compared(x) > 0).float()
        i = self.intcast(x).long().float()
        self.dropped(x)
        p = self.partly(x)
        main = h + n + d + a + c + i + p + self.frozen(x)
        return main, self.aux(x)


#: The reason for each unreached parameter's module (every reason of gradexport.tracing.unreached.REASONS but "unknown").
EXPECTED = {
    "skipped": "module_not_called",
    "nograd": "no_grad",
    "scale": "no_grad",
    "detached": "detached",
    "argmaxed": "non_differentiable",
    "compared": "non_differentiable",
    "intcast": "non_differentiable",
    "dropped": "output_unused",
    "aux": "other_root",
    "partly.spare": "unused_in_forward",
}


def _owner_key(name: str) -> str:
    return name if name in ("scale", "partly.spare") else name.rpartition(".")[0]


def test_every_reason_agrees_with_backward() -> None:
    model = Net()
    x = torch.randn(4, 3)
    with gradexport.capture_modules(), gradexport.tools.capture_source():
        main, _ = model(x)
        loss = main.sum()
    report = gradexport.tools.unreached(loss, module=model)
    reasons = {record.name: record.reason for record in report.unreached}
    assert {_owner_key(name): reason for name, reason in reasons.items()} == EXPECTED
    assert set(gradexport.tracing.unreached.REASONS) - set(EXPECTED.values()) == {"unknown", "behind_checkpoint"}
    assert report.frozen == ("frozen.weight", "frozen.bias")
    loss.backward()
    no_grad = {name for name, parameter in model.named_parameters() if parameter.requires_grad and parameter.grad is None}
    assert no_grad == set(reasons)
    assert report.reached == sum(1 for _, p in model.named_parameters() if p.requires_grad) - len(no_grad)


def test_cut_records_name_the_op_and_line() -> None:
    model = Net()
    with gradexport.capture_modules(), gradexport.tools.capture_source():
        main, _ = model(torch.randn(4, 3))
    records = {record.name: record for record in gradexport.tools.unreached(main.sum(), module=model).unreached}
    lines, start = inspect.getsourcelines(Net.forward)
    line_of = {text: start + index for index, line in enumerate(lines) for text in ("argmax", ".detach()", "> 0") if text in line}
    here = Path(__file__).resolve().relative_to(Path.cwd())
    assert records["argmaxed.weight"].op == "argmax" and records["argmaxed.weight"].source == f"{here}:{line_of['argmax']}"
    assert records["detached.bias"].op == "detach" and records["detached.bias"].source == f"{here}:{line_of['.detach()']}"
    assert records["compared.weight"].source == f"{here}:{line_of['> 0']}"
    text = str(gradexport.tools.unreached(main.sum(), module=model))
    assert "skipped.weight (module skipped): its module's forward never ran" in text
    assert "need no gradient (requires_grad=False): frozen.weight, frozen.bias" in text


def test_without_capture_the_reason_is_unknown_and_still_exact() -> None:
    model = Net()
    with gradexport.capture_modules():
        pass  # an empty block: nothing recorded
    main, _ = model(torch.randn(4, 3))
    report = gradexport.tools.unreached(main.sum(), module=model)
    assert {record.reason for record in report.unreached} == {"unknown"}
    main.sum().backward()
    assert {r.name for r in report.unreached} == {n for n, p in model.named_parameters() if p.requires_grad and p.grad is None}


def test_all_reached_and_params() -> None:
    model = nn.Linear(3, 1)
    extra = torch.ones(1, requires_grad=True)
    other = torch.ones(1, requires_grad=True)
    with gradexport.capture_modules(), gradexport.tools.capture_source():
        loss = (model(torch.ones(2, 3)) * extra).sum()
        with torch.no_grad():
            other * 2
    report = gradexport.tools.unreached(loss, module=model, params={"extra": extra, "other": other})
    assert [(r.name, r.module, r.reason) for r in report.unreached] == [("other", None, "no_grad")]
    assert report.reached == 3
    only_model = gradexport.tools.unreached(loss, module=model)
    assert only_model.unreached == () and str(only_model) == "all 2 trainable parameter(s) are reached by the roots"


def test_a_reentrant_checkpoint_is_a_doubt_not_a_verdict() -> None:
    import torch.utils.checkpoint as checkpoint

    model = nn.ModuleDict({"inner": nn.Linear(3, 3), "skipped": nn.Linear(3, 3)})
    x = torch.randn(2, 3, requires_grad=True)
    with gradexport.capture_modules(), gradexport.tools.capture_source():
        loss = checkpoint.checkpoint(model["inner"], x, use_reentrant=True).sum()
    records = {record.name: record.reason for record in gradexport.tools.unreached(loss, module=model).unreached}
    assert records == {
        "inner.weight": "behind_checkpoint", "inner.bias": "behind_checkpoint",
        "skipped.weight": "module_not_called", "skipped.bias": "module_not_called",
    }
    loss.backward()
    assert model["inner"].weight.grad is not None and model["skipped"].weight.grad is None  # why it is only a doubt


PROGRAM = textwrap.dedent(
    """
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(2, 2)
            self.b = torch.nn.Linear(2, 2)

        def forward(self, x):
            return self.a(x).argmax(dim=1).float() if {cut} else self.a(x) + self.b(x)

    def make():
        torch.manual_seed(0)
        model = Net()
        return model(torch.ones(1, 2)).sum().requires_grad_(), model
    """
)


@pytest.mark.parametrize("cut", [True, False])
def test_check_unused_command(tmp_path: Path, cut: bool) -> None:
    target = tmp_path / "net.py"
    target.write_text(PROGRAM.format(cut=cut))
    done = subprocess.run(
        [sys.executable, "-m", "gradexport", "check", "--unused", f"{target}:make"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    lines = done.stdout.strip().splitlines()
    if cut:
        assert done.returncode == 1, done.stderr
        assert any(line.strip().startswith("a.weight (module a): a non-differentiable op") and "[argmax]" in line for line in lines)
        assert any(line.strip().startswith("b.weight (module b): its module's forward never ran") for line in lines)
    else:
        assert done.returncode == 0, done.stderr
        assert lines == ["all 4 trainable parameter(s) are reached by the roots"]
