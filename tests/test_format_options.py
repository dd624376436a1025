"""Every (format, option) pair: an option a format takes changes what it writes, else the format refuses it.

Each format declares the options it honours once, in `gradexport.api.registry`
(`gradexport.core.options.FormatOptions`); this test gives every option, with
a value other than its default, to every format, from roots and from a graph,
and compares the text with the text written without it.
"""

from __future__ import annotations

from typing import Any

import networkx as nx
import pytest
import torch

import gradexport
from gradexport.api.export import render
from gradexport.api.registry import FORMATS
from gradexport.core.errors import ArgumentTypeError, RenderTimeoutError
from gradexport.core.options import option_table
from gradexport.tracing._torch import COMPILED_GRAPH_TORCH, INPUT_METADATA_TORCH, TORCH_VERSION

#: Options that read ``Node._input_metadata`` (edge shapes, and the replay behind ``steps``).
NEEDS_INPUT_METADATA = {"edge_metadata", "edge_shapes", "steps"}


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
        self.norm = torch.nn.LayerNorm(4, elementwise_affine=False)  # leaves None slots for its absent weight and bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.inner(x)) * 2.0


def small_model() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return torch.nn.Sequential(Block(), Block()), torch.randn(3, 4)


def deep_model() -> tuple[torch.nn.Module, torch.Tensor]:
    """Over mermaid.js's 500 edges, with modules to fold: what ``fit`` acts on."""
    torch.manual_seed(0)
    layers = [torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Tanh()) for _ in range(120)]
    return torch.nn.Sequential(*layers), torch.randn(1, 2)


def compiled_model() -> tuple[torch.nn.Module, torch.Tensor]:
    """A model whose graph holds a torch.compile region: what ``open_compiled`` opens."""
    torch.manual_seed(0)
    return torch.compile(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()), backend="aot_eager"), torch.randn(3, 4)


def roots_of(build: Any) -> tuple[torch.Tensor, torch.nn.Module]:
    model, inputs = build()
    with gradexport.capture_modules():
        loss = model(inputs).sum()
    return loss, model


def recorded_graph() -> nx.MultiDiGraph:
    """A graph holding everything a diagram option can draw: modules, saved values, None slots, shapes, gradients, order."""
    loss, model = roots_of(small_model)
    traced = gradexport.to_networkx(loss, module=model, show_none=True, show_saved=True, edge_metadata=TORCH_VERSION >= INPUT_METADATA_TORCH)
    recorded = gradexport.record_gradients(loss, module=model)
    for node, order in recorded.nodes(data="exec_order"):
        if order is not None and node in traced:
            traced.nodes[node]["exec_order"] = order
    for source, target, key, grad in recorded.edges(keys=True, data="grad"):
        if grad is not None and traced.has_edge(source, target, key):
            traced.edges[source, target, key]["grad"] = grad
    return traced


#: A value other than the default for every option, and the graphs or roots it is given with.
CHANGED: dict[str, Any] = {
    "edge_metadata": True,
    "open_compiled": True,
    "depth": 1,
    "fold_modules": ("0",),
    "fit": False,
    "direction": "LR",
    "show_none": True,
    "show_saved": True,
    "edge_shapes": True,
    "grad_norms": False,
    "group_modules": False,
    "exec_order": True,
    "saved_bytes": True,
    "box_depth": 1,
    "prog": "neato",
    "steps": True,
    "dot_timeout": 1e-6,
}
#: From a graph, ``show_none`` and ``show_saved`` can only hide what the graph holds.
CHANGED_ON_GRAPH = {**CHANGED, "show_none": False, "show_saved": False}


def test_every_option_has_a_changed_value_here():
    assert {item.name for _, item, _ in option_table()} == set(CHANGED) | {"params", "module"}


def outcome(format_name: str, graph_or_roots: Any, keywords: dict[str, Any]) -> str | BaseException:
    try:
        return render(graph_or_roots, format_name, **keywords)[format_name]
    except (ArgumentTypeError, RenderTimeoutError) as error:
        return error


# SVG draws the DOT text, so given a graph the dot pairs cover its diagram options; only its own options are asked of it.
CASES = [
    (given, format_name, item.name)
    for given in ("roots", "graph")
    for format_name in FORMATS
    for _, item, _ in option_table()
    if not (given == "graph" and format_name == "svg" and item.name not in ("prog", "dot_timeout"))
]


@pytest.fixture(scope="module")
def inputs() -> dict[str, Any]:
    small_roots, small = roots_of(small_model)
    deep_roots, deep = roots_of(deep_model)
    made = {"graph": recorded_graph(), "roots": (small_roots, small), "deep": (deep_roots, deep)}
    if TORCH_VERSION >= COMPILED_GRAPH_TORCH:
        model, inputs = compiled_model()
        made["compiled"] = (model(inputs).sum(), model)
    return made


@pytest.mark.parametrize(("given", "format_name", "name"), CASES)
def test_an_option_changes_the_output_or_is_refused(inputs, given, format_name, name, recwarn):
    if name in NEEDS_INPUT_METADATA and TORCH_VERSION < INPUT_METADATA_TORCH:
        pytest.skip(f"{name} needs torch 2.5 or newer (Node._input_metadata)")
    if name == "open_compiled" and TORCH_VERSION < COMPILED_GRAPH_TORCH:
        pytest.skip("open_compiled needs torch 2.3 or newer (CompiledFunction keeps its backward graph)")
    roots_key = {"fit": "deep", "open_compiled": "compiled"}.get(name, "roots")
    if given == "graph":
        subject: Any = inputs["graph"] if name != "fit" else gradexport.to_networkx(inputs["deep"][0], module=inputs["deep"][1])
        base: dict[str, Any] = {}
        value = CHANGED_ON_GRAPH.get(name)
    else:
        subject, model = inputs[roots_key]
        base = {} if name in ("params", "module") else {"module": model}
        value = {"params": dict(model.named_parameters()), "module": model}.get(name, CHANGED.get(name))
    if given == "graph" and name in ("params", "module"):
        value = {"params": dict(inputs["roots"][1].named_parameters()), "module": inputs["roots"][1]}[name]
    plain = outcome(format_name, subject, base)
    assert isinstance(plain, str), f"{format_name} without options failed: {plain}"
    changed = outcome(format_name, subject, {**base, name: value})
    if isinstance(changed, BaseException):
        return  # refused (ArgumentTypeError), or dot_timeout's effect (RenderTimeoutError)
    assert changed != plain, f"{format_name} takes {name}={value!r} from {given} and writes the same bytes: honour it or refuse it"
