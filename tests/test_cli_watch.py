"""``gradexport watch FILE.py:FUNCTION``: a function that trains, run under watch; its history and plots written."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import gradexport
from gradexport.frontends.cli import COMMANDS, main

TRAIN = """
import torch
import gradexport

GRADS = []

def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)

def train(watch=gradexport.watch):
    model, optimizer = model_and_optimizer()
    with watch(model, optimizer=optimizer):
        for _ in range(6):
            optimizer.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            GRADS.append(float(torch.linalg.vector_norm(model[0].weight.grad)))
            optimizer.step()

def train_bad(watch=gradexport.watch):
    model, optimizer = model_and_optimizer()
    with watch(model, optimizer=optimizer):
        for step in range(5):
            optimizer.zero_grad()
            batch = torch.randn(8, 4)
            if step == 3:
                batch[0, 0] = float("nan")
            model(batch).pow(2).mean().backward()
            GRADS.append(model[0].weight.grad.clone())
            optimizer.step()
            if step == 3:
                with torch.no_grad():
                    for param in model.parameters():
                        param.copy_(torch.nan_to_num(param))

def no_watch():
    return None
"""


@pytest.fixture
def target(tmp_path: Path) -> Path:
    path = tmp_path / "training.py"
    path.write_text(TRAIN)
    return path


def test_watch_writes_the_history_and_the_plots(target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "watch" in COMMANDS
    status = main(["watch", f"{target}:train", "-o", str(tmp_path / "out"), "--every", "2", "-q"])
    out = capsys.readouterr().out
    assert status == 0, out
    history = gradexport.records.load_watch(tmp_path / "out" / "train.watch.jsonl")
    assert history.steps == [0, 2, 4] and "3 steps recorded" in out
    # the values are the .grad the function itself saw
    import sys

    grads = next(module for name, module in sys.modules.items() if name.endswith("training")).GRADS
    assert history.param_table("norm").column("0.weight") == pytest.approx(grads[::2], rel=1e-6)
    png, svg = tmp_path / "out" / "train.flow.png", tmp_path / "out" / "train.flow.svg"
    assert png.read_bytes()[:4] == b"\x89PNG" and ET.parse(svg).getroot().tag.endswith("svg")


def test_details_every_and_bad_steps_reach_the_watch(target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundles = tmp_path / "bad"
    status = main(["watch", f"{target}:train_bad", "-o", str(tmp_path / "out"), "--details-every", "1", "--bad-steps", str(bundles), "--plot", "none", "-q"])
    out = capsys.readouterr().out
    assert status == 0, out
    history = gradexport.records.load_watch(tmp_path / "out" / "train_bad.watch.jsonl")
    assert history.header["details_every"] == 1
    import sys

    grads = next(module for name, module in sys.modules.items() if name.endswith("training")).GRADS[-5:]
    # every step has its details, the largest |g| torch gives (NaN at the poisoned step)
    largest = history.param_table("max_abs").column("0.weight")
    want = [float(grad.abs().max()) for grad in grads]
    assert all(got == pytest.approx(value, rel=1e-6) or (got != got and value != value) for got, value in zip(largest, want)), (largest, want)
    (bundle,) = sorted(bundles.iterdir())
    assert gradexport.load_bundle(bundle).bad.step == 3 and f"1 bad step recorded in {bundles}" in out and f"gradexport view {bundle}" in out
    assert main(["watch", f"{target}:train", "--details-every", "0"]) == 2
    assert "--details-every must be at least 1" in capsys.readouterr().err


def test_a_function_without_a_watch_keyword_is_a_usage_error(target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", f"{target}:no_watch", "-o", str(tmp_path), "-q"]) == 2
    assert "takes no watch= keyword" in capsys.readouterr().err
    assert main(["watch", f"{target}:train", "--plot", "gif"]) == 2
    assert "unknown format 'gif'" in capsys.readouterr().err


def test_watch_is_listed_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "gradexport watch" in capsys.readouterr().out
