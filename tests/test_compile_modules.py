"""capture_modules under torch.compile: the same compiled graphs, and the compiled region attributed to its caller.

torch.compile on CPU with the aot_eager backend takes seconds per model, hence ``slow``.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

import gradexport
from gradexport.tracing._torch import TORCH_VERSION

pytestmark = [
    pytest.mark.slow,
    # Dynamo before torch 2.3 traces into the capture's hooks (torch._utils.is_compiling is not constant-folded there)
    # and breaks the compiled graph at them; the results stay right, the graphs differ.
    pytest.mark.skipif(TORCH_VERSION < (2, 3), reason="Dynamo before torch 2.3 breaks its graph at the module-capture hooks"),
]


class WithBreak(nn.Module):
    """An MLP whose forward has one deliberate graph break, so Dynamo makes two graphs."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 8)
        self.second = nn.Sequential(nn.ReLU(), nn.Linear(8, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.first(x)
        torch._dynamo.graph_break()
        return self.second(hidden)


class Outer(nn.Module):
    """An eager model calling a compiled submodule."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.block = torch.compile(nn.Sequential(nn.Linear(4, 4), nn.Tanh()), backend="aot_eager")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(self.stem(x)).sum()


def compiled_run(model: nn.Module, capture: bool) -> tuple[torch.Tensor, dict[str, int], int]:
    """Compile afresh and run once: (output, graph breaks by reason, graphs compiled)."""
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="aot_eager")
    inputs = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note that global hooks fire for the compiled wrapper too
        if capture:
            with gradexport.capture_modules():
                output = compiled(inputs)
        else:
            output = compiled(inputs)
    return output, dict(counters["graph_break"]), counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("builder", [lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), WithBreak])
def test_a_compiled_model_compiles_the_same_graphs_under_capture(builder) -> None:
    torch.manual_seed(0)
    model = builder()
    plain_output, plain_breaks, plain_graphs = compiled_run(model, capture=False)
    captured_output, captured_breaks, captured_graphs = compiled_run(model, capture=True)
    assert (captured_breaks, captured_graphs) == (plain_breaks, plain_graphs)
    assert torch.equal(captured_output, plain_output)
    graph = gradexport.to_networkx(captured_output.sum(), module=model)
    compiled_nodes = [data for _, data in graph.nodes(data=True) if data.get("op") == "CompiledFunctionBackward"]
    assert len(compiled_nodes) == plain_graphs  # one opaque node per compiled graph, as torch made them
    assert {data.get("module") for data in compiled_nodes} == {""}  # called by the model itself


def test_a_compiled_submodule_is_attributed_to_its_own_path() -> None:
    torch.manual_seed(0)
    model = Outer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with gradexport.capture_modules():
            loss = model(torch.randn(2, 4))
    graph = gradexport.to_networkx(loss, module=model)
    modules = {data["op"]: data.get("module") for _, data in graph.nodes(data=True) if data["kind"] == "backward"}
    assert modules["CompiledFunctionBackward"] == "block"
    assert modules["AddmmBackward0"] == "stem"
    assert modules["SumBackward0"] == ""


@pytest.mark.skipif(
    gradexport.tracing._torch.TORCH_VERSION < (2, 8), reason="torch.compile(module) warns about global hooks from torch 2.8 (pytorch PR 152740)"
)
def test_the_capture_raises_no_torch_warning_on_a_compiled_module() -> None:
    torch._dynamo.reset()
    compiled = torch.compile(nn.Sequential(nn.Linear(4, 4), nn.Tanh()), backend="aot_eager")
    inputs = torch.randn(2, 4)
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, output: None)
    try:
        with pytest.warns(UserWarning, match=gradexport.tracing._torch.COMPILED_GLOBAL_HOOKS_WARNING):
            compiled(inputs)  # torch's warning, for a global hook of the user's: still shown under a capture
        with pytest.warns(UserWarning, match="global hooks"), gradexport.capture_modules():
            compiled(inputs)
    finally:
        handle.remove()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with gradexport.capture_modules():
            loss = compiled(inputs).sum()
        compiled(inputs)  # outside the block, nothing is silenced and nothing warns
    graph = gradexport.to_networkx(loss, module=compiled)
    assert {data.get("module") for _, data in graph.nodes(data=True) if data.get("op") == "CompiledFunctionBackward"} == {""}


def test_an_inductor_region_points_to_the_users_line_not_the_generated_file(tmp_path, monkeypatch) -> None:
    """Inductor runs a region from a module it wrote into its cache folder; the region's source is the line that called it."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    compiled = torch.compile(model)  # the default backend: inductor, C++ on CPU
    with gradexport.capture_modules(), gradexport.tools.capture_source():
        loss = compiled(torch.randn(2, 4)).sum()  # @user_line
    graph = gradexport.to_networkx(loss, module=model)
    (region,) = [data for _, data in graph.nodes(data=True) if data.get("op") == "CompiledFunctionBackward"]
    with open(__file__) as source:
        line = next(number for number, text in enumerate(source, 1) if text.rstrip().endswith("# @user_line"))
    assert region["source"].endswith(f"test_compile_modules.py:{line}"), region["source"]
    assert region["module"] == ""
    generated = [path for path in tmp_path.rglob("*.py") if "def call(" in path.read_text()]
    assert generated, "inductor wrote the region's runtime into the cache folder: the frame the walk must skip"
