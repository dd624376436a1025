"""Features behind an extra name the extra to install when its package is missing, not a bare "No module named".

The package is made unimportable the way Python itself blocks an import: ``None`` in ``sys.modules``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import gradexport


def watched_history() -> gradexport.records.WatchHistory:
    model = torch.nn.Linear(2, 1)
    with gradexport.watch(model) as watched:
        model(torch.ones(1, 2)).sum().backward()
        watched.step()
    return watched.history


def test_plot_flow_without_matplotlib_names_the_plot_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    history = watched_history()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError):
        __import__("matplotlib")  # the package is really out of reach
    with pytest.raises(gradexport.errors.ExtraNotInstalledError, match=r"plot_flow: needs matplotlib .*pip install 'gradexport\[plot\]'"):
        gradexport.records.plot_flow(history)


def test_tensorboard_without_tensorboard_names_the_tensorboard_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    history = watched_history()
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(ImportError):
        __import__("tensorboard")
    with pytest.raises(gradexport.errors.ExtraNotInstalledError, match=r"to_tensorboard: needs tensorboard .*'gradexport\[tensorboard\]'"):
        history.to_tensorboard(tmp_path / "board")
    model = torch.nn.Linear(2, 1)
    with pytest.raises(ImportError, match=r"watch\(tensorboard=\.\.\.\): needs tensorboard .*'gradexport\[tensorboard\]'"):
        gradexport.watch(model, tensorboard=tmp_path / "live").start()
