"""`gradexport.records.plot_flow`: the bars and the heat map hold what torch gave in the training loop, and the files are real PNG/SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from torch import nn

import gradexport
from gradexport.analysis.watch_plot import save_flow

matplotlib = pytest.importorskip("matplotlib")


def test_the_flow_plot_and_heat_map_show_torchs_gradients(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    outputs: dict[str, float] = {}
    for name, module in model.named_modules():

        def hook(module: nn.Module, args: object, out: torch.Tensor, name: str = name) -> None:
            out.register_hook(lambda grad: outputs.__setitem__(name, float(torch.linalg.vector_norm(grad))))

        module.register_forward_hook(hook)
    norms_by_step = []
    with gradexport.watch(model, optimizer=optimizer, details_every=5) as watched:  # details at steps 0 and 5
        for _ in range(6):
            optimizer.zero_grad()
            model(torch.randn(16, 5)).pow(2).mean().backward()
            last = {name: (float(p.grad.abs().max()), float(p.grad.abs().mean())) for name, p in model.named_parameters()}
            optimizer.step()
            norms_by_step.append(dict(outputs))
    with pytest.raises(gradexport.errors.ArgumentKeyError, match=r"details_every.*\[0, 5\]"):
        gradexport.records.plot_flow(watched.history, step=3)
    figure = gradexport.records.plot_flow(watched.history)  # the last step with details: the last one, 5
    flow, heat = figure.axes[:2]
    labels = [tick.get_text() for tick in flow.get_xticklabels()]
    assert labels == [name for name, _ in model.named_parameters()]  # a Sequential's forward order
    bars = flow.patches
    largest, means = bars[: len(labels)], bars[len(labels) :]
    for name, bar_max, bar_mean in zip(labels, largest, means):
        assert bar_max.get_height() == pytest.approx(last[name][0], rel=1e-6)
        assert bar_mean.get_height() == pytest.approx(last[name][1], rel=1e-6)
    assert flow.get_yscale() == "log"
    rows = [tick.get_text() for tick in heat.get_yticklabels()]
    assert rows == ["0", "1", "2", "3", "4", "(model)"]
    matrix = heat.images[0].get_array()
    for column, step in enumerate(norms_by_step):
        for row, name in enumerate(["0", "1", "2", "3", "4", ""]):
            assert float(matrix[row, column]) == pytest.approx(step[name], rel=1e-6)
    png, svg = save_flow(watched.history, tmp_path / "flow.png"), save_flow(watched.history, tmp_path / "flow.svg")
    image = matplotlib.image.imread(png)
    assert image.shape[0] > 100 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert ET.parse(svg).getroot().tag.endswith("svg")


def test_a_vanishing_layer_is_marked_in_the_heat_map() -> None:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(16):
        layers += [nn.Linear(16, 16), nn.Sigmoid()]
    model = nn.Sequential(*layers, nn.Linear(16, 1))
    with gradexport.watch(model) as watched:
        model(torch.randn(8, 16)).sum().backward()
        watched.step()
    rows = [tick.get_text() for tick in gradexport.records.plot_flow(watched.history).axes[1].get_yticklabels()]
    assert "0 ⚠" in rows and "32" in rows
