"""Module attribution, collapse and filters, checked against the models' own structure."""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx
import pytest
import torch
from torch import nn

import gradexport
from gradexport.analysis.simplify import VIEW_OPS


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(4 * 3 * 3, 2)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.features(images)
        return self.head(torch.flatten(features, 1))  # a functional call inside forward


class LSTMTagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(3, 5, num_layers=2)
        self.out = nn.Linear(5, 2)

    def forward(self, sequence: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(sequence)
        return self.out(hidden)


class Reused(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Linear(3, 3)

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        return self.block(torch.tanh(self.block(value)))


def mlp() -> tuple[nn.Module, torch.Tensor]:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1)), torch.randn(3, 4)


def cnn() -> tuple[nn.Module, torch.Tensor]:
    return SmallCNN(), torch.randn(2, 1, 8, 8)


def transformer() -> tuple[nn.Module, torch.Tensor]:
    layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
    return nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False), torch.randn(5, 2, 8)


def lstm() -> tuple[nn.Module, torch.Tensor]:
    return LSTMTagger(), torch.randn(4, 2, 3)


def reused() -> tuple[nn.Module, torch.Tensor]:
    return Reused(), torch.randn(2, 3)


MODELS: dict[str, Callable[[], tuple[nn.Module, torch.Tensor]]] = {builder.__name__: builder for builder in (mlp, cnn, transformer, lstm, reused)}


def sequence_ranges(model: nn.Module, inputs: torch.Tensor) -> tuple[torch.Tensor, dict[str, list[range]]]:
    """Run the forward pass once, recording the autograd sequence numbers each module's calls used.

    The reference: independent of gradexport, from plain per-module hooks.
    """
    ranges: dict[str, list[range]] = {}
    starts: dict[str, list[int]] = {}
    handles = []
    for name, module in model.named_modules():

        def before(module: nn.Module, args: object, name: str = name) -> None:
            starts.setdefault(name, []).append(torch._C._autograd._get_sequence_nr())

        def after(module: nn.Module, args: object, output: object, name: str = name) -> None:
            ranges.setdefault(name, []).append(range(starts[name].pop(), torch._C._autograd._get_sequence_nr()))

        handles += [module.register_forward_pre_hook(before), module.register_forward_hook(after)]
    with gradexport.capture_modules():
        output = model(inputs)
    for handle in handles:
        handle.remove()
    return output, ranges


def innermost(sequence_nr: int, ranges: dict[str, list[range]]) -> str | None:
    owners = [name for name, spans in ranges.items() if any(sequence_nr in span for span in spans)]
    return max(owners, key=lambda name: (0 if name == "" else name.count(".") + 1, -len(name)), default=None)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_node_names_the_innermost_module_that_created_it(name: str) -> None:
    torch.manual_seed(0)
    model, inputs = MODELS[name]()
    output, ranges = sequence_ranges(model, inputs)
    graph = gradexport.to_networkx(output.pow(2).mean(), module=model)
    checked = 0
    for node, data in graph.nodes(data=True):
        if data["kind"] == "backward":
            assert data.get("module") == innermost(data["sequence_nr"], ranges), (node, data)
            checked += "module" in data
        elif data["kind"] == "leaf" and data["names"]:
            assert data["module"] == data["names"][0].rpartition(".")[0]
    assert checked >= 3
    outside = [data["op"] for _, data in graph.nodes(data=True) if data["kind"] == "backward" and "module" not in data]
    assert outside == ["MeanBackward0", "PowBackward0"]  # the loss is computed outside the model


def test_transformer_layer_three_is_named_and_has_its_parameters() -> None:
    torch.manual_seed(0)
    model, inputs = transformer()
    with gradexport.capture_modules():
        output = model(inputs)
    graph = gradexport.to_networkx(output.sum(), module=model)
    in_layer = [data for _, data in graph.nodes(data=True) if data.get("module", "").startswith("layers.3")]
    modules = {data["module"] for data in in_layer}
    assert {"layers.3.self_attn", "layers.3.linear1", "layers.3.norm2"} <= modules
    names = {name for data in in_layer for name in data.get("names", ())}
    assert {"layers.3.linear1.weight", "layers.3.self_attn.in_proj_weight"} <= names


def test_without_capture_or_module_nodes_have_no_module() -> None:
    model, inputs = mlp()
    output = model(inputs)
    assert all("module" not in data or data["kind"] == "leaf" for _, data in gradexport.to_networkx(output, module=model).nodes(data=True))
    with gradexport.capture_modules():
        output = model(inputs)
    assert all("module" not in data for _, data in gradexport.to_networkx(output).nodes(data=True))


def test_capture_removes_its_hooks_even_on_error() -> None:
    model = nn.Linear(2, 2)
    with pytest.raises(RuntimeError), gradexport.capture_modules():
        model(torch.randn(3, 5))
    output = model(torch.randn(1, 2))
    assert gradexport.tracing.modules.METADATA_KEY not in output.grad_fn.metadata


def kept_reachability(original: nx.MultiDiGraph, reduced: nx.MultiDiGraph) -> None:
    kept = [node for node in reduced if node in original]
    for source in kept:
        original_reach = nx.descendants(original, source) & set(kept)
        assert original_reach <= nx.descendants(reduced, source), source


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("depth", [0, 1, 2])
def test_collapse_keeps_connectivity_and_counts(name: str, depth: int) -> None:
    torch.manual_seed(0)
    model, inputs = MODELS[name]()
    with gradexport.capture_modules():
        output = model(inputs)
    graph = gradexport.to_networkx({"loss": output.sum(), "out": output}, module=model)
    folded = gradexport.collapse(graph, depth)
    kept_reachability(graph, folded)
    groups = {node: data for node, data in folded.nodes(data=True) if data["kind"] == "module"}
    paths = {path for _, path in graph.nodes(data="module") if path is not None}
    assert bool(groups) == bool(paths)  # every module is folded at its own level or an ancestor's
    folded_nodes = sum(data["num_nodes"] for data in groups.values())
    assert folded_nodes + sum(1 for node in folded if node not in groups) == graph.number_of_nodes()
    internal = sum(data["num_edges"] for data in groups.values())
    assert internal + sum(count for _, _, count in folded.edges(data="count")) == graph.number_of_edges()
    for data in groups.values():
        level = 0 if data["module"] == "" else data["module"].count(".") + 1
        inner = [path for path in paths if path.startswith(data["module"] + ".") or (data["module"] == "" and path)]
        # Folded at the depth, or above it when there is nothing inside to open (torchview's depth).
        assert level == depth or (level < depth and not inner), (data["module"], inner)
    assert [root["name"] for root in folded.graph["roots"]] == ["loss", "out"]


class ScaledByInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Linear(3, 3)

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        return self.block(value) * value


def edge_multiset(graph: nx.MultiDiGraph) -> list[tuple[object, ...]]:
    return sorted((u, v, d["next_index"], d["input_nr"], d["count"]) for u, v, d in graph.edges(data=True))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_collapses_compose(name: str) -> None:
    torch.manual_seed(0)
    model, inputs = MODELS[name]()
    with gradexport.capture_modules():
        output = model(inputs)
    graph = gradexport.to_networkx(output.sum(), module=model)
    for deep, shallow in ((3, 2), (2, 1), (2, 0)):
        direct, composed = gradexport.collapse(graph, shallow), gradexport.collapse(gradexport.collapse(graph, deep), shallow)
        assert dict(direct.nodes(data=True)) == dict(composed.nodes(data=True))
        assert edge_multiset(direct) == edge_multiset(composed)


def test_collapsed_edges_keep_indices_and_multiplicity() -> None:
    model = ScaledByInput()
    x = torch.randn(2, 3, requires_grad=True)
    with gradexport.capture_modules():
        output = model(x)
    graph = gradexport.to_networkx(output + output, module=model, params={"x": x})
    folded = gradexport.collapse(graph, 0)
    into_model = sorted((key, d["next_index"], d["input_nr"], d["count"]) for _, v, key, d in folded.edges(keys=True, data=True) if v == "module:")
    assert into_model == [(0, 0, 0, 1), (1, 1, 0, 1)]  # a + a: both edges kept, keyed by position
    (x_leaf,) = [node for node, names in folded.nodes(data="names") if names == ["x"]]
    # Addmm's input and Mul's second factor both deliver to x: one edge standing for two.
    assert [(d["next_index"], d["input_nr"], d["count"]) for _, _, d in folded.in_edges(x_leaf, data=True)] == [(1, 0, 2)]
    assert folded.nodes["module:"]["ops"]["AccumulateGrad"] == 2  # block.weight and block.bias


def test_only_reaching_keeps_exactly_the_paths_to_a_parameter() -> None:
    torch.manual_seed(0)
    model, inputs = mlp()
    graph = gradexport.to_networkx(model(inputs).sum(), module=model)
    reduced = gradexport.tools.only_reaching(graph, ["2.weight"])
    (leaf,) = [node for node, names in reduced.nodes(data="names") if names]
    assert reduced.nodes[leaf]["names"] == ["2.weight"]
    assert set(reduced) == nx.ancestors(graph, leaf) | {leaf}
    with pytest.raises(KeyError, match="no node or parameter named \\['nope'\\]"):
        gradexport.tools.only_reaching(graph, ["nope"])


def test_hide_contracts_views_preserving_indices() -> None:
    a = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(4, 3, requires_grad=True)
    product = a @ b.t().t()
    graph = gradexport.to_networkx(product.sum())
    reduced = gradexport.tools.hide(graph, ops=VIEW_OPS)
    assert not any(data.get("op") in VIEW_OPS for _, data in reduced.nodes(data=True))
    kept_reachability(graph, reduced)
    mm = next(node for node, op in reduced.nodes(data="op") if op == "MmBackward0")
    edges = sorted((key, data["next_index"], data["input_nr"], data.get("via", [])) for _, _, key, data in reduced.out_edges(mm, keys=True, data=True))
    assert edges == [(0, 0, 0, []), (1, 1, 0, ["TBackward0", "TBackward0"])]
    without_leaves = gradexport.tools.hide(graph, leaves=True)
    assert all(kind != "leaf" for _, kind in without_leaves.nodes(data="kind"))
    assert without_leaves.nodes[mm]["hidden_leaves"] == 1


def test_fit_collapses_until_within_budget_or_explains() -> None:
    torch.manual_seed(0)
    model, inputs = transformer()
    with gradexport.capture_modules():
        output = model(inputs)
    graph = gradexport.to_networkx(output.sum(), module=model)
    assert graph.number_of_edges() > 200
    fitted = gradexport.tools.fit(graph, max_edges=200)
    assert fitted.number_of_edges() <= 200 and fitted.graph["collapsed_depth"] >= 1
    assert gradexport.tools.fit(graph, max_edges=10_000) is graph
    with pytest.raises(gradexport.errors.GraphTooLargeError, match="over the budget \\(nodes 1, edges 500\\); even the model folded"):
        gradexport.tools.fit(graph, max_nodes=1)
    plain = gradexport.to_networkx(model(inputs).sum())
    with pytest.raises(gradexport.errors.GraphTooLargeError, match="capture_modules"):
        gradexport.tools.fit(plain, max_edges=10)


def test_a_forward_on_another_thread_during_a_capture_is_attributed_as_on_this_one():
    # modules.py documents it: the hooks are global, each thread has its own call stack.
    import threading

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(4, 2)))
    outputs = {}

    def forward(name):
        outputs[name] = model(torch.randn(2, 3)).sum()

    with gradexport.capture_modules():
        forward("here")
        workers = [threading.Thread(target=forward, args=(f"thread{i}",)) for i in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    forward("after")  # after the capture: not attributed

    def attribution(name):
        graph = gradexport.to_networkx(outputs[name], module=model)
        return sorted((data["op"], data.get("module")) for _, data in graph.nodes(data=True) if data["kind"] == "backward")

    here = attribution("here")
    assert {module for _, module in here} == {"0", "1", "2.0", None}
    for i in range(4):
        assert attribution(f"thread{i}") == here
    assert {module for _, module in attribution("after")} == {None}


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((3,), 2.0))


def test_an_op_made_by_a_forward_hook_belongs_to_the_hooked_module() -> None:
    """The reference: the sequence numbers between the hooked module's call starting and its last forward hook returning."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))
    gate = Gate()
    model[0].register_forward_pre_hook(lambda module, args: (args[0].exp(),))
    model[0].register_forward_hook(lambda module, args, output: output * gate.scale)
    span: list[int] = []
    model[0].register_forward_pre_hook(lambda module, args: span.append(torch._C._autograd._get_sequence_nr()), prepend=True)
    model[0].register_forward_hook(lambda module, args, output: span.append(torch._C._autograd._get_sequence_nr()))
    inputs = torch.randn(2, 3, requires_grad=True)
    with gradexport.capture_modules():
        output = model(inputs)
    graph = gradexport.to_networkx(output.sum(), module=model)
    made_in_call = {
        data["op"]: data.get("module") for _, data in graph.nodes(data=True) if data["kind"] == "backward" and span[0] <= data["sequence_nr"] < span[1]
    }
    assert set(made_in_call) == {"ExpBackward0", "AddmmBackward0", "TBackward0", "MulBackward0"}, "the pre-hook's exp, the layer, the hook's mul"
    assert set(made_in_call.values()) == {"0"}
