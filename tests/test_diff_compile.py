"""gradexport.diff between an eager model and its torch.compile version: one opaque node for the region."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import gradexport


@pytest.mark.slow
def test_compiled_region_is_one_replacement() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
    inputs = torch.randn(5, 6)
    with gradexport.capture_modules():
        eager = gradexport.to_networkx(model(inputs).pow(2).sum(), module=model)
    compiled_model = torch.compile(model, backend="aot_eager", fullgraph=True)
    compiled = gradexport.to_networkx(compiled_model(inputs).pow(2).sum(), module=model)
    merged = gradexport.diff(eager, compiled)

    (replacement,) = merged.graph["diff"]["replacements"]
    assert replacement["op"] == "CompiledFunctionBackward"
    # The region: every node the model's forward created in eager mode (its parameters stay: they are named).
    region = {node for node, data in eager.nodes(data=True) if data["kind"] == "backward" and "module" in data}
    assert len(region) == 8  # three Addmm, three T, ReLU, Tanh
    assert {merged.nodes[node]["a_id"] for node in replacement["region"]} == region
    states = merged.graph["diff"]["nodes"]
    assert (states["added"], states["removed"], states["changed"]) == (1, len(region), 0)
    parameters = {name for name, _ in model.named_parameters()}
    same_leaves = {merged.nodes[node]["names"][0] for node, data in merged.nodes(data=True) if data["kind"] == "leaf" and data["diff"] == "same"}
    assert same_leaves == parameters
    text = gradexport.records.describe_diff(merged)
    assert "CompiledFunctionBackward (added) stands for 8 nodes" in text
    assert "removed:" not in text  # the region is reported once, as the replacement
