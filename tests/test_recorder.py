"""The flight recorder of ``watch(bad_steps=...)``: bundles of bad steps, checked against torch's own gradients.

Every gradient a bundle records is compared with what torch itself gave in the
training step (``.grad`` after ``backward()``, tensor hooks on the modules'
outputs), never with an earlier output of gradexport.
"""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
import torch
from nx_compat import node_link_graph
from torch import nn

import gradexport
from gradexport.errors import GraphFormatError, MissingFileError, UnreproducedStepWarning
from gradexport.records import Bundle
from gradexport.tools import BadSteps
from gradexport.tracing._torch import TORCH_VERSION

BAD_STEP = 17


class NormalisedNet(nn.Module):
    """A layer, its output divided by its row norm, a head: a row of zeros gives 0 · inf = NaN in the backward only."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, 4, bias=False)
        self.fc2 = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        scale = torch.sqrt((h * h).sum(dim=1, keepdim=True))
        return self.fc2(h / (scale + 1e-3))


def batches(count: int, bad_step: int | None = BAD_STEP) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    out = []
    for step in range(count):
        x = torch.randn(4, 3, generator=generator)
        if step == bad_step:
            x[2] = 0.0  # that row's norm is 0: the forward stays finite, the backward of sqrt meets 0 · inf
        out.append((x, torch.randn(4, 1, generator=generator)))
    return out


def train(model: nn.Module, data: list[tuple[torch.Tensor, torch.Tensor]], folder: Path | None, *, kept: dict[str, Any] | None = None, **settings: Any) -> Any:
    """The plain loop, with the watch line only when ``folder`` is given; ``kept`` collects torch's own gradients of the bad step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    watch = gradexport.watch(model, optimizer=optimizer, bad_steps=BadSteps(folder, **settings)) if folder is not None else None
    if watch is not None:
        watch.start()
    try:
        for step, (x, y) in enumerate(data):
            outputs: dict[str, torch.Tensor] = {}
            handles = []
            if kept is not None and step == BAD_STEP:
                for name in ("fc1", "fc2"):
                    handles.append(getattr(model, name).register_forward_hook(_keep_output_grad(outputs, name)))
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            if kept is not None and step == BAD_STEP:
                kept.update({name: param.grad.clone() for name, param in model.named_parameters()}, outputs=outputs)
            if kept is not None:
                kept.setdefault("by_step", {})[step] = {name: param.grad.clone() for name, param in model.named_parameters()}
            for handle in handles:
                handle.remove()
            optimizer.step()
    finally:
        if watch is not None:
            watch.close()
    return watch


def _keep_output_grad(outputs: dict[str, torch.Tensor], name: str) -> Any:
    def forward_hook(_: nn.Module, __: Any, out: torch.Tensor) -> None:
        out.register_hook(lambda grad: outputs.__setitem__(name, grad.clone()))

    return forward_hook


def edge_grad_into(graph: nx.MultiDiGraph, node: str) -> torch.Tensor:
    """The gradient recorded on the one edge into ``node``, as a tensor (NaN and Inf as read back from JSON)."""
    (summary,) = edge_grads_into(graph, node)
    return summary


def edge_grads_into(graph: nx.MultiDiGraph, node: str) -> list[torch.Tensor]:
    """The gradients recorded on every edge into ``node``."""
    return [torch.tensor(data["grad"]["values"], dtype=torch.float32) for _, _, data in graph.in_edges(node, data=True) if "grad" in data]


def leaf(graph: nx.MultiDiGraph, name: str) -> str:
    return next(node for node, data in graph.nodes(data=True) if data.get("kind") == "leaf" and name in (data.get("names") or []))


@pytest.fixture(scope="module")
def step_17(tmp_path_factory: pytest.TempPathFactory) -> tuple[Bundle, dict[str, Any], Any]:
    torch.manual_seed(0)
    model = NormalisedNet()
    kept: dict[str, Any] = {}
    folder = tmp_path_factory.mktemp("bad")
    watch = train(model, batches(BAD_STEP + 1), folder, kept=kept, healthy_every=5)  # step 17 makes the weights NaN: later steps are all bad
    (path,) = sorted(folder.iterdir())
    return gradexport.load_bundle(path), kept, watch


def test_step_17_leaves_one_bundle_with_the_healthy_step_it_kept(step_17: tuple[Bundle, dict[str, Any], Any]) -> None:
    bundle, kept, watch = step_17
    assert Path(bundle.path).name == "bad-step-000017.json"
    assert watch.recorder.bad_steps == [BAD_STEP]
    assert bundle.bad.step == BAD_STEP and bundle.healthy is not None and bundle.healthy.step == 15
    assert bundle.healthy.reasons == () and bundle.healthy_every == 5
    assert any("gradient holds NaN or Inf" in reason for reason in bundle.bad.reasons), bundle.bad.reasons
    assert bundle.bad.loss is not None and math.isfinite(bundle.bad.loss)  # the forward was finite: only the backward went bad
    assert bundle.bad.forward_origin is None
    assert bundle.bad.reproduced and bundle.healthy.reproduced


def test_the_bundle_holds_torchs_own_gradients_of_the_bad_step(step_17: tuple[Bundle, dict[str, Any], Any]) -> None:
    bundle, kept, _ = step_17
    graph = bundle.bad.graph
    for name in ("fc1.weight", "fc2.weight", "fc2.bias"):
        recorded = edge_grad_into(graph, leaf(graph, name)).reshape(kept[name].shape)
        assert torch.equal(recorded.isnan(), kept[name].isnan()), name
        assert torch.allclose(recorded.nan_to_num(), kept[name].nan_to_num(), rtol=0, atol=0), name
    assert kept["fc1.weight"].isnan().any()  # the planted failure did reach the weights
    # The gradient at each module's output, from the test's own tensor hooks: on the edges into the module's first node
    # (fc1's output is used three times: the engine sums the three edges' gradients, in an order of its own).
    for module, grad in kept["outputs"].items():
        (entry,) = [
            node
            for node, data in graph.nodes(data=True)
            if data.get("module") == module and all(graph.nodes[source].get("module") != module for source, _ in graph.in_edges(node))
        ]
        recorded = torch.stack(edge_grads_into(graph, entry)).sum(0).reshape(grad.shape)
        assert torch.allclose(recorded, grad, rtol=1e-6, atol=0, equal_nan=True), module
    assert kept["outputs"]["fc1"].isnan().any() and not kept["outputs"]["fc2"].isnan().any()


def test_the_healthy_step_kept_holds_torchs_own_gradients_of_that_step(step_17: tuple[Bundle, dict[str, Any], Any]) -> None:
    bundle, kept, _ = step_17
    assert bundle.healthy is not None
    graph, trained = bundle.healthy.graph, kept["by_step"][bundle.healthy.step]
    for name, grad in trained.items():
        assert torch.equal(edge_grad_into(graph, leaf(graph, name)).reshape(grad.shape), grad), name
    assert all(torch.isfinite(grad).all() for grad in trained.values())


def test_the_divergent_node_is_where_torch_first_sent_a_nan_with_its_forward_line(step_17: tuple[Bundle, dict[str, Any], Any]) -> None:
    bundle, _, _ = step_17
    node = bundle.divergence
    assert node is not None
    # torch's own answer: the backward of the square root is the first node the engine ran that returned a NaN.
    torch.manual_seed(0)
    model = NormalisedNet()
    data = batches(BAD_STEP + 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in data[:BAD_STEP]:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    x, y = data[BAD_STEP]
    loss = nn.functional.mse_loss(model(x), y)
    first: list[str] = []
    seen: set[Any] = set()
    stack = [loss.grad_fn]
    while stack:
        current = stack.pop()
        if current is None or current in seen:
            continue
        seen.add(current)
        current.register_hook(
            lambda grads_in, _, current=current: (
                first.append(type(current).__name__) if any(g is not None and not torch.isfinite(g).all() for g in grads_in) else None
            )
        )
        stack += [child for child, _ in current.next_functions]
    loss.backward()
    assert bundle.bad.graph.nodes[node]["op"] == first[0] == "SqrtBackward0"
    assert bundle.divergence_source is not None and bundle.divergence_source.endswith("scale = torch.sqrt((h * h).sum(dim=1, keepdim=True))")
    assert bundle.healthy is not None and bundle.healthy.graph.nodes[node]["op"] == "SqrtBackward0"


def test_training_under_the_recorder_is_bit_identical_to_training_without(tmp_path: Path) -> None:
    """With Dropout and BatchNorm, and a jump so low that most steps are bad: every re-run (bad and kept) leaves training alone."""

    def run(folder: Path | None) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.Dropout(0.3), nn.ReLU(), nn.Linear(8, 1))
        train(model, batches(12, bad_step=None), folder, jump=1.01, max_bundles=100)
        return [param.detach().clone() for param in model.parameters()] + [buffer.clone() for buffer in model.buffers()]

    plain, watched = run(None), run(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(plain, watched, strict=True))
    bundles = [gradexport.load_bundle(path) for path in sorted(tmp_path.iterdir())]
    assert len(bundles) >= 2 and all(b.bad.reproduced and b.healthy is not None and b.healthy.reproduced for b in bundles)


def test_a_nan_loss_with_finite_gradients_is_a_bad_step(tmp_path: Path) -> None:
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradexport.watch(model, optimizer=optimizer, bad_steps=tmp_path):
        for step in range(3):
            optimizer.zero_grad()
            out = model(torch.ones(3, 2))
            loss = torch.log(-out.abs() - (1.0 if step == 2 else -10.0)).sum()  # the log of a negative number at step 2
            loss.backward()
            optimizer.step()
    bundle = gradexport.load_bundle(tmp_path / "bad-step-000002.json")
    assert math.isnan(bundle.bad.loss) and bundle.bad.reasons[0] == "the loss is nan"
    assert all(math.isfinite(p.grad.norm()) for p in model.parameters())
    assert bundle.healthy is not None and bundle.healthy.step == 0  # healthy_every=10: step 0 is the one kept


def test_a_gradient_norm_jump_is_a_bad_step_and_the_divergence_is_where_it_jumped(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with gradexport.watch(model, optimizer=optimizer, bad_steps=BadSteps(tmp_path, jump=20.0, healthy_every=1)):
        for step in range(6):
            optimizer.zero_grad()
            target = torch.full((4, 1), 1000.0 if step == 5 else 0.1)
            nn.functional.mse_loss(model(torch.ones(4, 3)), target).backward()
            optimizer.step()
    (path,) = tmp_path.iterdir()
    bundle = gradexport.load_bundle(path)
    assert bundle.bad.step == 5 and "times the mean" in bundle.bad.reasons[0] and bundle.healthy.step == 4
    assert bundle.divergence is not None and bundle.bad.graph.nodes[bundle.divergence]["exec_order"] == 1


def test_without_an_optimizer_the_step_ends_at_watch_step_and_max_bundles_holds(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    with gradexport.watch(model, bad_steps=BadSteps(tmp_path, max_bundles=2)) as watch:
        for _ in range(4):
            model.zero_grad()
            model(torch.tensor([[float("inf"), 1.0]])).sum().backward()
            watch.step()
    assert watch.recorder.bad_steps == [0, 1, 2, 3]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bad-step-000000.json", "bad-step-000001.json"]
    assert gradexport.load_bundle(tmp_path / "bad-step-000000.json").healthy is None


def test_a_bad_step_without_a_model_call_warns_and_writes_nothing(tmp_path: Path) -> None:
    model = nn.Linear(2, 1)
    with gradexport.watch(model, bad_steps=tmp_path) as watch:
        model.weight.grad = torch.full_like(model.weight, math.nan)
        with pytest.warns(UnreproducedStepWarning, match="step 0 went bad"):
            watch.step()
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def written(tmp_path: Path) -> Path:
    model = nn.Linear(2, 1)
    with gradexport.watch(model, bad_steps=tmp_path) as watch:
        model(torch.tensor([[math.nan, 1.0]])).sum().backward()
        watch.step()
    return tmp_path / "bad-step-000000.json"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda text: text[: len(text) // 2], "not JSON"),
        (lambda text: "[]", "a JSON array, not an object"),
        (lambda text: text.replace('"gradexport-bundle"', '"other"'), "format: expected 'gradexport-bundle'"),
        (lambda text: text.replace('"version":1', '"version":9'), "version: this gradexport reads version 1"),
        (lambda text: text.replace('"reproduced":true', '"reproduced":"yes"'), "bad.reproduced: expected true or false"),
        (lambda text: text.replace('"step":0', '"step":"zero"'), "bad.step: expected an integer"),
        (lambda text: text.replace('"nodes":', '"knots":', 1), "bad.graph: expected node-link data"),
    ],
)
def test_a_damaged_bundle_is_one_error_naming_the_file_and_the_field(written: Path, damage: Any, message: str) -> None:
    written.write_text(damage(written.read_text(encoding="utf-8")), encoding="utf-8")
    with pytest.raises(GraphFormatError, match="load_bundle: .*bad-step-000000.json.*") as raised:
        gradexport.load_bundle(written)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_missing_bundle_and_bad_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(MissingFileError, match="load_bundle: .* does not exist"):
        gradexport.load_bundle(tmp_path / "none.json")
    with pytest.raises(gradexport.errors.ArgumentValueError, match="jump must be a number above 1"):
        BadSteps(tmp_path, jump=0.5)
    with pytest.raises(gradexport.errors.ArgumentTypeError, match="bad_steps takes a folder"):
        gradexport.watch(nn.Linear(1, 1), bad_steps=3)  # type: ignore[arg-type]


def test_the_bundle_is_json_any_machine_reads(written: Path) -> None:
    document = json.loads(written.read_text(encoding="utf-8"))
    assert document["format"] == "gradexport-bundle" and document["bad"]["step"] == 0
    assert node_link_graph(document["bad"]["graph"]).number_of_nodes() > 0


def test_view_writes_the_bundle_page_and_refuses_a_damaged_bundle(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gradexport.frontends.cli import main

    page = written.with_suffix(".html")
    assert main(["view", str(written), "--no-open"]) == 0
    text = page.read_text(encoding="utf-8")
    assert 'id="gradexport-bundle"' in text and "<title>bad step 0</title>" in text
    written.write_text("{", encoding="utf-8")
    assert main(["view", str(written), "--no-open"]) == 1
    error = capsys.readouterr().err
    assert "load_bundle:" in error and "bad-step-000000.json" in error and "not JSON" in error


class LogLayer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


def test_the_bundle_names_the_forward_origin_torch_saw_first_with_its_line(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 3), nn.Softplus(), LogLayer(), nn.Linear(3, 1))
    # torch's own answer, from forward hooks: the first module whose output holds NaN though its input did not.
    first_bad: list[str] = []

    def note(name: str) -> Any:
        def hook(_: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            if not first_bad and torch.isfinite(inputs[0]).all() and not torch.isfinite(output).all():
                first_bad.append(name)

        return hook

    handles = [module.register_forward_hook(note(name)) for name, module in model.named_children()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradexport.watch(model, optimizer=optimizer, bad_steps=tmp_path):
        for step in range(4):
            optimizer.zero_grad()
            x = torch.ones(2, 2)
            if step == 3:
                with torch.no_grad():
                    model[0].bias.fill_(-1e30)  # softplus(-1e30) = 0: the log of 0 is -inf, then NaN downstream
            model(x).sum().backward()
            optimizer.step()
    for handle in handles:
        handle.remove()
    origin = gradexport.load_bundle(tmp_path / "bad-step-000003.json").bad.forward_origin
    assert first_bad == ["2"]
    assert origin is not None and origin["op"] == "log" and origin["module"] == first_bad[0] and origin["cause"] == "made"
    assert origin["source_code"] == "return torch.log(x)" and origin["source"].endswith(f"test_recorder.py:{LogLayer.forward.__code__.co_firstlineno + 1}")


def test_an_origin_inside_torchs_modules_names_the_line_that_called_the_model(tmp_path: Path) -> None:
    """The bad step is run again inside ``optimizer.step()``: its lines are still those of the training step's forward."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))  # torch's own modules: no user frame inside
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    # torch's own answer: the user frame that called the model when its first module's output went NaN.
    calling: list[tuple[str, int]] = []

    def note(_: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        if not calling and not torch.isfinite(output).all():
            frame = inspect.currentframe()
            frame = frame.f_back if frame is not None else None  # the hook itself is in this file too
            while frame is not None and frame.f_code.co_filename != __file__:
                frame = frame.f_back
            assert frame is not None
            calling.append((frame.f_code.co_filename, frame.f_lineno))

    handle = model[0].register_forward_hook(note)
    with gradexport.watch(model, optimizer=optimizer, bad_steps=tmp_path):
        for step in range(3):
            x = torch.ones(4, 2)
            if step == 2:
                x[1, 0] = float("nan")
            optimizer.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            optimizer.step()
    handle.remove()
    origin = gradexport.load_bundle(tmp_path / "bad-step-000002.json").bad.forward_origin
    ((filename, line),) = calling
    assert origin is not None and origin["module"] == "0" and origin["cause"] == "input"
    assert origin["source"].endswith(f"{Path(filename).name}:{line}") and origin["source_code"] == "loss = model(x).pow(2).mean()"


@pytest.mark.slow
@pytest.mark.skipif(
    TORCH_VERSION < (2, 2),
    reason="torch 2.1's Dynamo fails on watch's module hooks (InternalTorchDynamoError, without bad_steps too); measured on 2.1, passes on 2.13 and 2.15",
)
def test_a_compiled_model_is_recorded_with_torchs_own_gradients(tmp_path: Path) -> None:
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    model = torch.compile(inner, backend="aot_eager")
    optimizer = torch.optim.SGD(inner.parameters(), lr=0.1)
    trained: dict[str, torch.Tensor] = {}
    with gradexport.watch(model, optimizer=optimizer, bad_steps=tmp_path):
        for step in range(4):
            optimizer.zero_grad()
            model(torch.ones(2, 3) * (math.nan if step == 3 else 1.0)).sum().backward()
            trained = {name: param.grad.clone() for name, param in inner.named_parameters()}
            optimizer.step()
    bundle = gradexport.load_bundle(tmp_path / "bad-step-000003.json")
    graph = bundle.bad.graph
    regions = [node for node, op in graph.nodes(data="op") if op == "CompiledFunctionBackward"]
    # A region is named by the line that called the model, as in the training step, though the re-run is in optimizer.step().
    assert regions and {graph.nodes[region].get("source_code") for region in regions} == {
        "model(torch.ones(2, 3) * (math.nan if step == 3 else 1.0)).sum().backward()"
    }, [graph.nodes[region] for region in regions]
    assert bundle.bad.reproduced and bundle.healthy is not None and bundle.healthy.reproduced
    for name, grad in trained.items():
        (node,) = [node for node, names in graph.nodes(data="names") if names and any(name.endswith(n) or n.endswith(name) for n in names)]
        recorded = edge_grad_into(graph, node).reshape(grad.shape)
        assert torch.equal(recorded.isnan(), grad.isnan()) and torch.equal(recorded.nan_to_num(), grad.nan_to_num()), name
