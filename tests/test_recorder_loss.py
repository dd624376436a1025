"""The loss part of a bad step: the nodes between the loss and the model's outputs, in the bundle.

Every expectation comes from torch itself in the same training step: node
hooks the test registers on the real loss graph before ``loss.backward()``, a
tensor hook on the model's output, and a torch function mode that sees which
op of the loss function first returned a non-finite tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import networkx as nx
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import gradexport
from gradexport.records import Bundle

BAD = 2


class FirstNonfinite(TorchFunctionMode):
    """Notes the backward node type of the first op's result that holds NaN or Inf while its tensor inputs were finite."""

    def __init__(self) -> None:
        super().__init__()
        self.first: str | None = None

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        inputs = [value for value in args if isinstance(value, torch.Tensor) and value.is_floating_point()]
        if (
            self.first is None
            and isinstance(result, torch.Tensor)
            and result.grad_fn is not None
            and not torch.isfinite(result.detach()).all()
            and all(torch.isfinite(value.detach()).all() for value in inputs)
        ):
            self.first = type(result.grad_fn).__name__
        return result


def hook_loss_graph(loss: torch.Tensor, stop: set[Any]) -> dict[str, list[torch.Tensor | None]]:
    """Post-hooks on every node from the loss down to (not into) ``stop``: what each node sent, by node type."""
    sent: dict[str, list[torch.Tensor | None]] = {}
    stack, seen = [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen or node in stop:
            continue
        seen.add(node)
        node.register_hook(lambda grads_in, _, name=type(node).__name__: sent.__setitem__(name, [None if g is None else g.clone() for g in grads_in]))
        stack += [child for child, _ in node.next_functions]
    return sent


def train(
    tmp_path: Path, loss_of: Callable[[torch.Tensor, int], torch.Tensor], batch_of: Callable[[int], torch.Tensor] = lambda step: torch.ones(4, 2)
) -> tuple[Bundle, dict[str, Any]]:
    """Three steps of the plain loop under the recorder; torch's own view of step ``BAD`` is returned beside its bundle."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    seen: dict[str, Any] = {}
    with gradexport.watch(model, optimizer=optimizer, bad_steps=tmp_path):
        for step in range(BAD + 1):
            optimizer.zero_grad()
            mode = FirstNonfinite()
            out = model(batch_of(step))
            with mode:
                loss = loss_of(out, step)
            if step == BAD:
                seen["first"] = mode.first
                seen["sent"] = hook_loss_graph(loss, {out.grad_fn})
                seen["output_node"] = type(out.grad_fn).__name__
                out.register_hook(lambda grad: seen.__setitem__("output_grad", grad.clone()))
                seen["loss"] = loss.item()
            loss.backward()
            if step == BAD:
                seen["grads"] = {name: param.grad.clone() for name, param in model.named_parameters()}
            optimizer.step()
    return gradexport.load_bundle(tmp_path / f"bad-step-{BAD:06d}.json"), seen


def loss_nodes(graph: nx.MultiDiGraph) -> list[str]:
    """The nodes above the model's (which the re-run names by the line that called the model): the loss part, root first."""
    (root,) = graph.graph["roots"]
    order = nx.topological_sort(graph.subgraph(nx.descendants(graph, root["node"]) | {root["node"]}))
    return [node for node in order if graph.nodes[node].get("kind") == "backward" and not graph.nodes[node].get("source")]


def test_a_nan_made_in_the_loss_function_is_in_the_bundle_with_torchs_gradients(tmp_path: Path) -> None:
    """The issue's first example, ``torch.log(-out).sum()``: the loss is NaN, every gradient finite."""
    bundle, seen = train(tmp_path, lambda out, step: torch.log(-out.abs() + (-1.0 if step == BAD else 10.0)).sum())
    graph = bundle.bad.graph
    assert math.isnan(seen["loss"]) and seen["first"] == "LogBackward0"
    assert all(torch.isfinite(grad).all() for grad in seen["grads"].values())
    # The graph starts at the loss: one root, then the loss function's nodes as torch's own graph has them.
    ((_, root_node),) = [(entry["name"], entry["node"]) for entry in graph.graph["roots"]]
    part = loss_nodes(graph)
    assert sorted(graph.nodes[node]["op"] for node in part) == sorted(seen["sent"])
    assert [graph.nodes[node]["exec_order"] for node in part] == list(range(1, len(part) + 1))
    # Each loss node's edges carry what torch's own post-hook saw it send, bit for bit.
    for node in part:
        sent = seen["sent"][graph.nodes[node]["op"]]
        for _, _, data in graph.out_edges(node, data=True):
            expected = sent[data["next_index"]]
            assert expected is not None
            assert torch.equal(torch.tensor(data["grad"]["values"], dtype=expected.dtype).reshape(expected.shape), expected)
    # The loss part's last node feeds the re-run's node of the model's output, with the gradient torch's tensor hook saw.
    (into_model,) = [(u, v, d) for u, v, d in graph.edges(data=True) if u in part and v not in part]
    assert graph.nodes[into_model[1]]["op"] == seen["output_node"] and graph.nodes[into_model[1]]["source"]
    assert torch.equal(torch.tensor(into_model[2]["grad"]["values"]).reshape(seen["output_grad"].shape), seen["output_grad"])
    # The origin: the loss's node holds the NaN; the graph kept no value between it and the log, which torch names first.
    origin = bundle.bad.forward_origin
    assert origin is not None and origin["cause"] == "unsure" and seen["first"] in origin["candidates"]
    assert origin["node"] in part and graph.nodes[origin["node"]]["op"] == origin["op"]
    assert bundle.divergence == origin["node"]  # no gradient departs: the bundle opens on the origin
    assert bundle.bad.reproduced and bundle.healthy is not None and bundle.healthy.step == 0


def test_an_op_of_the_loss_function_the_graph_decides_is_named(tmp_path: Path) -> None:
    """``pow(out - 5, 0.5) * out``: the product saved the power's result, and the power saved its input: the power made it."""
    bundle, seen = train(tmp_path, lambda out, step: (torch.pow(out - (5.0 if step == BAD else -5.0), 0.5) * out).mean())
    origin = bundle.bad.forward_origin
    assert origin is not None and origin["cause"] == "made" and origin["op"] == seen["first"] == "PowBackward0"
    assert bundle.bad.graph.nodes[origin["node"]]["op"] == "PowBackward0" and "NaN" in origin["output"]


def test_a_nan_batch_keeps_its_origin_in_the_model_and_gains_the_loss_part(tmp_path: Path) -> None:
    def batch(step: int) -> torch.Tensor:
        x = torch.ones(4, 2)
        if step == BAD:
            x[1, 0] = math.nan
        return x

    bundle, seen = train(tmp_path, lambda out, step: out.pow(2).mean(), batch)
    graph = bundle.bad.graph
    assert sorted(graph.nodes[node]["op"] for node in loss_nodes(graph)) == sorted(seen["sent"]) == ["MeanBackward0", "PowBackward0"]
    origin = bundle.bad.forward_origin
    assert origin is not None and origin["module"] == "0" and origin["cause"] == "input" and origin["source_code"] == "out = model(batch_of(step))"
    assert bundle.bad.reproduced


def test_a_step_bad_in_the_backward_only_holds_the_loss_parts_structure(tmp_path: Path) -> None:
    """Bad in the backward only (sqrt at 0): the loss part's nodes are in the bundle, beside the model's root, with no gradients."""
    bundle, seen = train(tmp_path, lambda out, step: torch.sqrt(out.pow(2).sum() * (0.0 if step == BAD else 1.0)))
    graph = bundle.bad.graph
    assert bundle.bad.reasons[0].startswith("a gradient holds NaN or Inf") and math.isfinite(seen["loss"])
    assert [entry["name"] for entry in graph.graph["roots"]] == ["output", "0"]
    loss_root = graph.graph["roots"][0]["node"]
    part = [node for node in nx.descendants(graph, loss_root) | {loss_root} if graph.nodes[node]["kind"] == "backward" and not graph.nodes[node].get("source")]
    assert sorted(graph.nodes[node]["op"] for node in part) == sorted(seen["sent"])
    assert all("exec_order" not in graph.nodes[node] for node in part)
    (into_model,) = [v for u, v in graph.edges() if u in part and v not in part]
    assert graph.nodes[into_model]["op"] == seen["output_node"] and graph.nodes[into_model]["exec_order"] == 1
    # The NaN was made in the loss part's backward (which ran unrecorded): it reached the model's output, as torch's tensor hook saw.
    assert seen["output_grad"].isnan().any()
    assert bundle.bad.reproduced and bundle.divergence == into_model


def lbfgs_run(folder: Path | None, bad_step: int | None, seen: dict[str, Any], **settings: Any) -> list[torch.Tensor]:
    """Four ``optimizer.step(closure)`` steps of torch.optim.LBFGS, under the recorder when ``folder`` is given; the weights after."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 2))
    optimizer = torch.optim.LBFGS(model.parameters(), max_iter=3)
    x = torch.linspace(-1, 1, 8).reshape(4, 2)
    watch = gradexport.watch(model, optimizer=optimizer, bad_steps=gradexport.tools.BadSteps(folder, **settings)) if folder is not None else None
    if watch is not None:
        watch.start()
    try:
        for step in range(4):

            def closure() -> torch.Tensor:
                optimizer.zero_grad()
                out = model(x)
                first = step == bad_step and "grads" not in seen  # torch's own view of the step's first evaluation (not of the re-run)
                mode = FirstNonfinite()
                with mode if first else nullcontext():
                    loss = torch.log(-out.abs() + (-1.0 if step == bad_step else 10.0)).sum()
                loss.backward()
                if first:
                    seen.update(first=mode.first, grads={name: param.grad.clone() for name, param in model.named_parameters()})
                return loss

            optimizer.step(closure)
    finally:
        if watch is not None:
            watch.close()
    return [param.detach().clone() for param in model.parameters()]


def test_an_lbfgs_loop_is_recorded_through_its_closure_with_the_loss_functions_line(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    lbfgs_run(tmp_path, BAD, seen)
    assert [path.name for path in tmp_path.iterdir()] == [f"bad-step-{BAD:06d}.json"]  # one bundle, though every later evaluation is bad too
    bundle = gradexport.load_bundle(tmp_path / f"bad-step-{BAD:06d}.json")
    graph = bundle.bad.graph
    origin = bundle.bad.forward_origin
    # The closure ran the loss function again under a capture: the op torch saw make the NaN, with its line.
    assert origin is not None and origin["cause"] == "made" and graph.nodes[origin["node"]]["op"] == seen["first"] == "LogBackward0"
    assert origin["op"] == "log" and origin["source_code"] == "loss = torch.log(-out.abs() + (-1.0 if step == bad_step else 10.0)).sum()"
    assert bundle.divergence == origin["node"] and bundle.bad.reproduced
    # The model's nodes have the ids the healthy step's re-run (from the model's outputs) gives them; the loss's come after.
    healthy = bundle.healthy.graph if bundle.healthy is not None else None
    assert healthy is not None and origin["node"] not in healthy
    model_nodes = [node for node, data in graph.nodes(data=True) if data.get("source_code") == "out = model(x)"]
    assert model_nodes and all(healthy.nodes[node]["op"] == graph.nodes[node]["op"] for node in model_nodes)
    for name, grad in seen["grads"].items():
        (node,) = [node for node, names in graph.nodes(data="names") if names and name in names]
        ((_, _, data),) = graph.in_edges(node, data=True)
        assert torch.equal(torch.tensor(data["grad"]["values"]).reshape(grad.shape), grad), name


def test_training_with_lbfgs_under_the_recorder_is_bit_identical_to_training_without(tmp_path: Path) -> None:
    """A jump so low that most evaluations are bad: every re-run through the closure leaves training alone."""
    plain = lbfgs_run(None, None, {})
    watched = lbfgs_run(tmp_path, None, {}, jump=1.01, healthy_every=1, max_bundles=100)
    assert all(torch.equal(a, b) for a, b in zip(plain, watched, strict=True))
    bundles = [gradexport.load_bundle(path) for path in sorted(tmp_path.iterdir())]
    assert bundles and all(bundle.bad.reproduced for bundle in bundles)
