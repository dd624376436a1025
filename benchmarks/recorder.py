"""``python -m benchmarks.recorder``: a healthy training step with and without the flight recorder, in one run.

The models of `benchmarks.watch` (an MLP, a 12-layer ``nn.TransformerEncoder``,
a ResNet-style CNN). Each round times ``--steps`` plain steps, then ``--steps``
steps under ``watch(bad_steps=FOLDER, every=10**9, trace=False)``: the watch
itself records nothing, so the difference is the recorder's (its hooks, its
one transfer per step, and the copy of the weights of every healthy step it
keeps, at the default ``healthy_every=1``). Rounds alternate plain and
recorded so that the machine's load falls on both alike; the figure is the
minimum over rounds of the per-step time, and the ratio is recorded over
plain. ``bad step`` is the time of a step made bad by a NaN in its batch,
with its bundle written (the re-runs of the bad step and of the healthy step
before it), and ``bundle`` that bundle's size.

Example::

    python -m benchmarks.recorder --rounds 5 --steps 20
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import gradexport
from gradexport.tools import BadSteps

from .watch import on_one_thread, table_main, trainers

#: The watch's own statistics run at step 0 only: a step index this large is never recorded again.
NEVER = 10**9


def measure(rounds: int, steps: int, scale: int = 1, clock: Callable[[], float] = time.perf_counter) -> list[dict[str, Any]]:
    """Per model: the best step time plain and with the recorder on, their ratio, a bad step's time and its bundle's bytes."""
    return on_one_thread(_measure, rounds, steps, scale, clock)


def _measure(rounds: int, steps: int, scale: int, clock: Callable[[], float]) -> list[dict[str, Any]]:
    rows = []
    for name, train in trainers(scale, steps, clock).items():
        model, optimizer = train.model, train.optimizer
        times: dict[str, list[float]] = {"plain": [], "recorder": []}
        with tempfile.TemporaryDirectory() as folder:
            train(steps)  # warm up
            for _ in range(rounds):
                times["plain"].append(train(steps))
                with gradexport.watch(model, optimizer=optimizer, every=NEVER, trace=False, bad_steps=folder):
                    train(1)  # the watch's step 0, its one recorded step
                    times["recorder"].append(train(steps))
            bad_seconds, bundle_bytes = _bad_step(model, train.inputs[0], train.loss_of, Path(folder), clock)
        best = {key: min(values) for key, values in times.items()}
        rows.append(
            {
                "model": name,
                "parameters": sum(p.numel() for p in model.parameters()),
                "plain_ms": best["plain"] * 1e3,
                "recorder_ms": best["recorder"] * 1e3,
                "ratio": best["recorder"] / best["plain"],
                "bad_step_ms": bad_seconds * 1e3,
                "bundle_bytes": bundle_bytes,
            }
        )
    return rows


def _bad_step(
    model: torch.nn.Module, x: torch.Tensor, loss_of: Callable[[torch.Tensor], torch.Tensor], folder: Path, clock: Callable[[], float]
) -> tuple[float, int]:
    """The time of a step made bad by a NaN in its batch, after a healthy one (no update: the weights stay), and its bundle's size."""
    bad = x.clone()
    bad.view(-1)[0] = float("nan")
    with gradexport.watch(model, every=NEVER, trace=False, bad_steps=BadSteps(folder / "bundle")) as watch:
        for batch in (x, bad):
            model.zero_grad()
            start = clock()
            loss_of(model(batch)).backward()
            watch.step()
        seconds = clock() - start
    model.zero_grad()
    (path,) = (folder / "bundle").iterdir()
    return seconds, path.stat().st_size


def main() -> None:
    table_main(
        __doc__.splitlines()[0],
        measure,
        5,
        "| model | parameters | plain step | with the recorder | ratio | a bad step, its bundle written | bundle |",
        lambda row: (
            f"| {row['model']} | {row['parameters']:,} | {row['plain_ms']:.2f} ms | {row['recorder_ms']:.2f} ms | {row['ratio']:.3f}x | "
            f"{row['bad_step_ms']:.0f} ms | {row['bundle_bytes']:,} bytes |"
        ),
    )


if __name__ == "__main__":
    main()
