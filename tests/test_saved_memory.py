"""saved_bytes and saved_memory against storages counted here from the tensors the test knows are saved."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from cases import CASES
from torch import nn
from torch.autograd.graph import Node
from torch.utils import checkpoint

import gradexport
from gradexport.tracing.graph import GraphStream, trace


def storage_bytes(*tensors: torch.Tensor) -> int:
    """Ground truth: the bytes of the distinct storages under ``tensors``."""
    storages = {(str(t.device), t.untyped_storage().data_ptr()): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def saved_tensors_of(node: Node) -> list[torch.Tensor]:
    """Every saved tensor of a node, read with torch's public accessors (not gradexport's)."""
    found = []
    for attr in dir(node):
        if attr.startswith("_saved_"):
            value = getattr(node, attr)
            found += [v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, torch.Tensor)]
    if isinstance(node, torch.autograd.function.BackwardCFunction):
        found += list(node.saved_tensors)
    return found


def test_known_saved_tensors() -> None:
    x = torch.randn(4, 4, requires_grad=True)
    y = torch.randn(4, 4, requires_grad=True)
    z = x * y  # saves x and y
    e = z.exp()  # saves its result e
    graph = gradexport.to_networkx((e * e).sum(), show_saved=True)  # e * e saves e twice
    assert graph.graph["saved_bytes"] == storage_bytes(x, y, e) == 3 * 64
    assert sum(data.get("saved_bytes", 0) for _, data in graph.nodes(data=True)) == graph.graph["saved_bytes"]


def test_views_of_one_storage_count_once() -> None:
    x = torch.randn(8, requires_grad=True)
    base = x.clone()  # a non-leaf that saves nothing, so the halves are views of its storage
    graph = gradexport.to_networkx((base[:4] * base[4:]).sum(), show_saved=True)
    assert graph.graph["saved_bytes"] == storage_bytes(base) == 32
    (mul,) = [data for _, data in graph.nodes(data=True) if data.get("op") == "MulBackward0" and data["saved_bytes"]]
    assert mul["saved_bytes"] == 32 and mul["saved_bytes_shared"] == 0


@pytest.mark.parametrize("name", ["mlp_tied", "multihead_attention", "lstm", "custom_function", "multi_output", "copy_slices", "double_backward"])
def test_total_and_per_node_against_torch_saved_tensors(name: str) -> None:
    case = CASES[name]()
    result = trace(case.roots, show_saved=True)
    everything: list[torch.Tensor] = []
    for node, node_id in result.ids.items():
        tensors = saved_tensors_of(node)
        everything += tensors
        data = result.graph.nodes[node_id]
        assert data["saved_bytes"] + data["saved_bytes_shared"] == (storage_bytes(*tensors) if tensors else 0)
    assert result.graph.graph["saved_bytes"] == (storage_bytes(*everything) if everything else 0)


def test_non_reentrant_checkpoint_is_not_recomputed_and_not_counted() -> None:
    layer = nn.Linear(3, 3)
    calls = []

    def region(t: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return layer(t).relu()

    inputs = torch.randn(2, 3, requires_grad=True)
    out = checkpoint.checkpoint(region, inputs, use_reentrant=False)
    graph = gradexport.to_networkx(out.sum(), show_saved=True)
    assert calls == [1]  # reading the sizes did not unpack (and so recompute) the region
    assert graph.graph["saved_bytes"] == 0
    assert all(data.get("saved_bytes", 0) == 0 for _, data in graph.nodes(data=True))


def test_freed_buffers_hold_nothing() -> None:
    x = torch.randn(3, requires_grad=True)
    loss = x.exp().sum()
    loss.backward()
    assert gradexport.to_networkx(loss, show_saved=True).graph["saved_bytes"] == 0


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = nn.Linear(8, width)
        self.down = nn.Linear(width, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.tanh(self.up(x)))


def test_saved_memory_ranks_nodes_and_modules() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(Block(16), Block(64))
    with gradexport.capture_modules():
        loss = model(torch.randn(32, 8)).pow(2).sum()
    result = trace(loss, module=model, show_saved=True)
    weights = {t.untyped_storage().data_ptr() for t in model.parameters()}

    def activations(node: Node) -> list[torch.Tensor]:
        return [t for t in saved_tensors_of(node) if t.untyped_storage().data_ptr() not in weights]

    truth_by_node = {node_id: storage_bytes(*activations(node)) if activations(node) else 0 for node, node_id in result.ids.items()}
    report = gradexport.tools.saved_memory(result.graph, top=3)
    assert report.total == storage_bytes(*[t for node in result.ids for t in saved_tensors_of(node)])
    assert report.activations == storage_bytes(*[t for node in result.ids for t in activations(node)])
    assert report.activations + report.parameters == report.total and report.buffers == 0
    ranked = sorted((size for size in truth_by_node.values() if size), reverse=True)[:3]
    assert [entry.activation_bytes for entry in report.nodes] == ranked
    # The widest layer's tanh output (32 x 64 float32) is the largest saved activation.
    assert report.nodes[0].module in {"1.up", "1.down", "1"}
    assert report.modules[0][0] in {"1", "1.up", "1.down"}
    assert sum(size for _, size in gradexport.tools.saved_memory(result.graph, top=100).modules) <= report.activations
    text = str(report)
    assert report.nodes[0].node in text and "top modules" in text


def test_saved_memory_errors() -> None:
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(ValueError, match="show_saved=True"):
        gradexport.tools.saved_memory(gradexport.to_networkx(x.exp().sum()))
    with pytest.raises(ValueError, match="top"):
        gradexport.tools.saved_memory(x.exp().sum(), top=0)


def test_saved_memory_from_roots() -> None:
    x = torch.randn(16, requires_grad=True)
    y = x.exp()
    report: Any = gradexport.tools.saved_memory(y.sum())
    assert report.total == storage_bytes(y)


def saved_by_hooks(forward: Any) -> list[torch.Tensor]:
    """Ground truth from torch itself: every tensor the forward saves, as a saved-tensor pack hook receives it."""
    seen: list[torch.Tensor] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        seen.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        forward()
    return seen


def test_activations_apart_from_parameters_and_buffers_agree_with_saved_tensor_hooks() -> None:
    """A conv net with BatchNorm (running stats are buffers; eval mode saves them) and a Linear whose weight is saved."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.Flatten(), nn.Linear(8 * 4 * 4, 10)).eval()
    images = torch.randn(2, 3, 8, 8)
    seen = saved_by_hooks(lambda: model(images).sum())
    parameters = {t.untyped_storage().data_ptr() for t in model.parameters()}
    buffers = {t.untyped_storage().data_ptr() for t in model.buffers()}

    def kind(tensor: torch.Tensor) -> str:
        pointer = tensor.untyped_storage().data_ptr()
        return "parameters" if pointer in parameters else "buffers" if pointer in buffers else "activations"

    truth = {
        name: storage_bytes(*[t for t in seen if kind(t) == name]) if any(kind(t) == name for t in seen) else 0
        for name in ("activations", "parameters", "buffers")
    }
    assert truth["parameters"] and truth["buffers"] and truth["activations"]  # the case has all three
    with gradexport.capture_modules():
        loss = model(images).sum()
    report = gradexport.tools.saved_memory(loss, module=model)
    assert (report.activations, report.parameters, report.buffers) == (truth["activations"], truth["parameters"], truth["buffers"])
    assert report.total == storage_bytes(*seen)
    text = str(report)
    assert text.splitlines()[0].startswith("activations: saved tensors keep") and "of parameters" in text


def _module_case() -> tuple[torch.Tensor, nn.Module]:
    """A captured model with parameters, a buffer that is saved (eval BatchNorm) and activations."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), Block(8), nn.Linear(8, 1)).eval()
    with gradexport.capture_modules():
        loss = model(torch.randn(3, 4)).sum()
    return loss, model


def _report_cases() -> list[tuple[str, Any, dict[str, Any]]]:
    found = []
    for name, build in CASES.items():
        case = build()
        found.append((name, case.roots, {"params": case.params} if case.params else {}))
        if case.module is not None:
            found.append((f"{name}/module", case.roots, {"module": case.module}))  # not captured: a warning
    loss, model = _module_case()
    found.append(("captured", loss, {"module": model}))
    found.append(("captured/params", loss, {"params": dict(model.named_parameters())}))
    return found


@pytest.mark.filterwarnings("ignore:.*named no backward node")
def test_report_from_roots_is_the_report_from_their_graph() -> None:
    """saved_memory(roots) walks without building the graph: it must say what the graph built with show_saved=True says."""
    for name, roots, options in _report_cases():
        graph = gradexport.to_networkx(roots, show_saved=True, **options)
        for top in (1, 2, 10, 10**6):
            assert gradexport.tools.saved_memory(roots, top, **options) == gradexport.tools.saved_memory(graph, top), (name, top)


@pytest.mark.parametrize("name", [name for name in CASES if name != "checkpoint_non_reentrant"])  # reading that one would recompute
def test_saved_nodes_against_torch_saved_tensors(name: str) -> None:
    """Every node's own and shared bytes from the lean walk, under the graph's ids, against torch's saved tensors."""
    case = CASES[name]()
    ids = trace(case.roots).ids
    stream = GraphStream(case.roots, show_saved=True)
    held = {node_id: own + shared for node_id, _, _, own, shared in stream.saved_nodes()}
    everything: list[torch.Tensor] = []
    for node, node_id in ids.items():
        tensors = [t for t in saved_tensors_of(node) if t.untyped_storage().nbytes()] if name != "freed_buffers" else []
        everything += tensors
        assert held.get(node_id, 0) == (storage_bytes(*tensors) if tensors else 0), (node_id, type(node).__name__)
    assert set(held) <= set(ids.values())
    assert stream.graph_attributes["saved_bytes"] == (storage_bytes(*everything) if everything else 0)


def test_saved_memory_from_roots_does_not_unpack_hooked_tensors_and_warns_like_the_graph() -> None:
    layer = nn.Linear(3, 3)
    calls = []

    def region(t: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return layer(t).relu()

    out = checkpoint.checkpoint(region, torch.randn(2, 3, requires_grad=True), use_reentrant=False)
    with pytest.warns(UserWarning, match="to_networkx: module= named no backward node"):
        report = gradexport.tools.saved_memory(out.sum(), module=layer)
    assert calls == [1] and report.total == 0
