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


class Gated(nn.Module):
    """A checkpointed block that truly leaves ``unused`` out (a detach inside the region) and nests a second checkpoint."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(3, 3)
        self.nested = nn.Linear(3, 3)
        self.cut = nn.Linear(3, 3)
        self.unused = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        hidden = nn.functional.dropout(self.inner(x), 0.5, training=True)
        hidden = checkpoint(self.nested, hidden, use_reentrant=True)
        return hidden + self.cut(x).detach()


def _checkpointed(seed: int) -> tuple[nn.ModuleDict, torch.Tensor]:
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(seed)
    model = nn.ModuleDict({"gated": Gated(), "skipped": nn.Linear(3, 3)})
    with gradexport.capture_modules(), gradexport.tools.capture_source():
        loss = checkpoint(model["gated"], torch.randn(2, 3, requires_grad=True), use_reentrant=True).sum()
    return model, loss


# The nested checkpoint runs under the outer one's no_grad in the forward, and torch says so.
@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")
def test_a_reentrant_checkpoint_region_is_retraced_and_agrees_with_backward() -> None:
    model, loss = _checkpointed(0)
    state = torch.get_rng_state()
    report = gradexport.tools.unreached(loss, module=model)
    assert torch.equal(torch.get_rng_state(), state), "re-tracing leaves the caller's random state as it was"
    loss.backward()
    with_grad = {name for name, parameter in model.named_parameters() if parameter.grad is not None}
    assert set(report.through_checkpoint) == with_grad == {"gated.inner.weight", "gated.inner.bias", "gated.nested.weight", "gated.nested.bias"}
    assert report.reached == len(with_grad)
    assert {record.name: record.reason for record in report.unreached} == {
        # The forward captured ran the region under the checkpoint's no_grad, so that is what it saw.
        "gated.cut.weight": "no_grad",
        "gated.cut.bias": "no_grad",
        "gated.unused.weight": "module_not_called",
        "gated.unused.bias": "module_not_called",
        "skipped.weight": "module_not_called",
        "skipped.bias": "module_not_called",
    }
    assert {record.name for record in report.unreached} == {name for name, parameter in model.named_parameters() if parameter.grad is None}
    assert str(report).splitlines()[0] == "6 trainable parameter(s) get no gradient from the roots:"


@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")
def test_after_backward_a_reentrant_checkpoint_is_a_doubt_not_a_verdict() -> None:
    model, loss = _checkpointed(0)
    loss.backward()  # frees the region's saved inputs: it can no longer be re-traced
    records = {record.name: record.reason for record in gradexport.tools.unreached(loss, module=model).unreached}
    assert records["gated.inner.weight"] == "behind_checkpoint" and records["skipped.weight"] == "module_not_called"
    assert model["gated"].inner.weight.grad is not None and model["skipped"].weight.grad is None  # why it is only a doubt


def test_retrace_checkpoint_remakes_the_region_backward_runs() -> None:
    """The re-traced region computes what the checkpoint's forward did (dropout mask included) and reaches the parameters backward gives a gradient."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(1)
    block = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5), nn.Tanh())
    out = checkpoint(block, torch.randn(4, 3, requires_grad=True), use_reentrant=True)
    region = gradexport.tools.retrace_checkpoint(out)
    assert region.node is out.grad_fn and len(region.outputs) == 1
    assert torch.equal(region.outputs[0], out)
    graph = gradexport.to_networkx(region.outputs, params=dict(block.named_parameters()))
    leaves = {name for _, data in graph.nodes(data=True) for name in data.get("names", ())}
    out.sum().backward()
    assert leaves == {name for name, parameter in block.named_parameters() if parameter.grad is not None} == {"0.weight", "0.bias"}
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        gradexport.tools.retrace_checkpoint(out)
    with pytest.raises(gradexport.errors.ArgumentValueError, match="retrace_checkpoint: target is not a reentrant checkpoint"):
        gradexport.tools.retrace_checkpoint(block[0](torch.ones(1, 3)))


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
    done = _check_unused(target)
    lines = done.stdout.strip().splitlines()
    if cut:
        assert done.returncode == 1, done.stderr
        assert any(line.strip().startswith("a.weight (module a): a non-differentiable op") and "[argmax]" in line for line in lines)
        assert any(line.strip().startswith("b.weight (module b): its module's forward never ran") for line in lines)
    else:
        assert done.returncode == 0, done.stderr
        assert lines == ["all 4 trainable parameter(s) are reached by the roots"]


def _check_unused(target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradexport", "check", "--unused", f"{target}:make"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )


CHECKPOINTED = textwrap.dedent(
    """
    import torch
    from torch.utils.checkpoint import checkpoint


    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Linear(4, 4)
            self.outer = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.outer(self.inner(x).relu())


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Linear(3, 4)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(4))

        def forward(self, x):
            hidden = self.embed(x)
            for block in self.blocks:
                hidden = checkpoint(block, hidden, use_reentrant=True)
            return hidden.sum()


    def make():
        torch.manual_seed(0)
        model = Net()
        return model(torch.randn(2, 3)), model
    """
)


def test_check_unused_passes_a_correct_reentrant_checkpointed_model(tmp_path: Path) -> None:
    """The issue's report: 16 of 18 parameters named unreached, exit 1; backward gives all 18 a gradient."""
    target = tmp_path / "checkpointed.py"
    target.write_text(CHECKPOINTED)
    namespace: dict[str, object] = {}
    exec(compile(CHECKPOINTED, str(target), "exec"), namespace)
    loss, model = namespace["make"]()  # type: ignore[operator]
    loss.backward()
    with_grad = [name for name, parameter in model.named_parameters() if parameter.grad is not None]
    assert len(with_grad) == 18 == len(list(model.parameters()))
    done = _check_unused(target)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[0].startswith("all 18 trainable parameter(s) are reached by the roots")
