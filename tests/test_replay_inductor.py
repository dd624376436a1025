"""replay on a model compiled with torch.compile's default backend (inductor), whatever its caches hold.

Inductor compiles a region's backward lazily at its first backward; one compiled
while the graph is freed (``backward()`` without ``retain_graph``) donates saved
buffers, and so does one that AOTAutograd's cache hands back ready-made. Such a
backward refuses to run outside the engine unless the graph is freed. Each
scenario runs in its own process against a fresh ``TORCHINDUCTOR_CACHE_DIR``,
twice: the first run compiles from nothing, the second finds every cache warm.
A real inductor compile (C++ on CPU) takes tens of seconds, hence ``slow``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from torch_versions import needs_input_metadata

pytestmark = [pytest.mark.slow, needs_input_metadata]

SCRIPT = r"""
import json, sys, warnings
import torch
from torch import nn
import gradexport

warnings.simplefilter("ignore")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))
compiled = torch.compile(model)  # the default backend: inductor
inputs = torch.randn(5, 8)


def grads():
    found = {name: parameter.grad.clone() for name, parameter in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return found


def replayed():
    loss = compiled(inputs).pow(2).sum()
    record = gradexport.replay(loss, module=model)
    return grads(), [step.op for step in record.steps]


order = sys.argv[1]
results = {}
if order == "replay-first":
    results["replay"], ops = replayed()
compiled(inputs).pow(2).sum().backward()
results["backward"] = grads()
if order == "backward-first":
    results["replay"], ops = replayed()
same = {name: torch.equal(results["replay"][name], want) for name, want in results["backward"].items()}
print(json.dumps({"same": same, "ops": ops}))
"""


def run_scenario(order: str, cache: Path) -> dict[str, object]:
    environment = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    environment.pop("TORCHINDUCTOR_AUTOGRAD_CACHE", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT, order], env=environment, capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("order", ["backward-first", "replay-first"])
def test_replay_of_an_inductor_model_equals_backward_with_cold_and_warm_caches(order: str, tmp_path: Path) -> None:
    for run in ("cold", "warm"):
        result = run_scenario(order, tmp_path / "inductor-cache")
        assert "CompiledFunctionBackward" in result["ops"], (run, result)  # type: ignore[operator]
        assert result["same"] and all(result["same"].values()), (run, result)  # type: ignore[union-attr]


def test_a_region_whose_backward_is_not_compiled_yet_can_be_replayed_twice() -> None:
    """aot_eager compiles the backward at its first call, without donation when the graph is kept: replay twice adds twice."""
    import torch
    from torch import nn

    import gradexport

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4))
    compiled = torch.compile(model, backend="aot_eager")
    inputs = torch.randn(5, 8)
    compiled(inputs).pow(2).sum().backward(retain_graph=True)
    once = [parameter.grad.clone() for parameter in model.parameters()]  # type: ignore[union-attr]
    model.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager")
    loss = compiled(inputs).pow(2).sum()
    gradexport.replay(loss)
    gradexport.replay(loss)
    for parameter, expected in zip(model.parameters(), once, strict=True):
        torch.testing.assert_close(parameter.grad, 2 * expected)
