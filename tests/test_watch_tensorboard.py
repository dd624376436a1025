"""TensorBoard: what `watch(tensorboard=...)` and `WatchHistory.to_tensorboard` write reads back with TensorBoard's own EventAccumulator."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import gradexport

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    accumulator = event_accumulator.EventAccumulator(str(logdir), size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    return {tag: [(event.step, event.value) for event in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def test_scalars_per_module_and_parameter_read_back_with_tensorboards_reader(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    grad_norms: dict[str, list[float]] = {name: [] for name, _ in model.named_parameters()}
    with gradexport.watch(model, optimizer=optimizer, every=2, tensorboard=tmp_path / "live") as watched:
        for step in range(6):
            optimizer.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            if step % 2 == 0:
                for name, param in model.named_parameters():
                    grad_norms[name].append(float(torch.linalg.vector_norm(param.grad)))
            optimizer.step()
    written = watched.history.to_tensorboard(tmp_path / "after")
    for logdir in (tmp_path / "live", written):
        read = scalars(logdir)
        for name, norms in grad_norms.items():
            assert [step for step, _ in read[f"grad/norm/{name}"]] == [0, 2, 4]
            assert [value for _, value in read[f"grad/norm/{name}"]] == pytest.approx(norms, rel=1e-6)
        assert {"grad_norm/module/0", "grad_norm/module/2", "grad_norm/module/model", "grad/update_ratio/0.weight"} <= set(read)
