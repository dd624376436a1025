"""``python -m benchmarks.watch``: a training step with and without `gradexport.watch`, in one run.

Three models: an MLP, a 12-layer ``nn.TransformerEncoder`` and a ResNet-style
CNN. Each round times ``--steps`` plain steps, then ``--steps`` steps under
``watch(every=1)``, under ``watch(every=10)`` (with the optimizer, so the
update-to-weight ratio is computed too, at the default ``details_every``) and
under ``watch(every=1, bad_steps=FOLDER)`` (the flight recorder on too),
alternating so that the machine's load falls on all alike. A ratio is watched over plain within one round, and the
figure is the median of the rounds' ratios (a round that other work on shared
cores slowed down slows both sides of its ratio); the step times shown are
medians too. ``--clock process`` counts the process's CPU time instead of the
wall clock. The first (traced) step is timed apart.
Memory per recorded step is the bytes of its line in the file (what stays on
disk and in ``Watch.records``); the parameter copy taken for the update ratio
is kept between steps (one copy of the parameters) and said separately.

Example::

    python -m benchmarks.watch --rounds 7 --steps 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

import gradexport


class Block(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


def models(scale: int = 1) -> dict[str, tuple[nn.Module, Callable[[], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]]:
    """name -> (model, a batch maker, the loss of an output)."""
    torch.manual_seed(0)
    width = 256 // scale
    mlp = nn.Sequential(*[layer for _ in range(8) for layer in (nn.Linear(width, width), nn.ReLU())], nn.Linear(width, 10))
    d_model = 128 // scale
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(d_model, 4, 4 * d_model, dropout=0.0, batch_first=True), 12, enable_nested_tensor=False)
    channels = 32 // scale
    cnn = nn.Sequential(
        nn.Conv2d(3, channels, 3, padding=1), *[Block(channels) for _ in range(6)], nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10)
    )
    return {
        "MLP (8 x Linear 256)": (mlp, lambda: torch.randn(64, width), lambda out: out.pow(2).mean()),
        "TransformerEncoder (12 layers, d=128)": (encoder, lambda: torch.randn(16, 32, d_model), lambda out: out.pow(2).mean()),
        "ResNet-style CNN (6 blocks, 32 ch)": (cnn, lambda: torch.randn(16, 3, 16, 16), lambda out: out.pow(2).mean()),
    }


def measure(rounds: int, steps: int, scale: int = 1, clock: Callable[[], float] = time.perf_counter) -> list[dict[str, Any]]:
    """Per model: the median step time plain and watched (every=1, every=10), the median ratios, and bytes per recorded step."""
    return on_one_thread(_measure, rounds, steps, scale, clock)


def on_one_thread(run: Callable[..., list[dict[str, Any]]], *args: Any) -> list[dict[str, Any]]:
    """``run(*args)`` with torch on one thread (what the ratios compare), the thread count restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run(*args)
    finally:
        torch.set_num_threads(threads)


@dataclass
class Trainer:
    """One benchmark model with its SGD optimizer and ``steps`` batches; called with ``count``, it runs the plain loop
    over the first ``count`` batches and returns the time per step."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    inputs: list[torch.Tensor]
    loss_of: Callable[[torch.Tensor], torch.Tensor]
    clock: Callable[[], float]

    def __call__(self, count: int) -> float:
        start = self.clock()
        for x in self.inputs[:count]:
            self.optimizer.zero_grad()
            self.loss_of(self.model(x)).backward()
            self.optimizer.step()
        return (self.clock() - start) / count


def trainers(scale: int, steps: int, clock: Callable[[], float]) -> dict[str, Trainer]:
    """name -> a `Trainer` of each of `models`, with ``steps`` batches made now."""
    return {
        name: Trainer(model, torch.optim.SGD(model.parameters(), lr=1e-3), [batch() for _ in range(steps)], loss_of, clock)
        for name, (model, batch, loss_of) in models(scale).items()
    }


def _measure(rounds: int, steps: int, scale: int, clock: Callable[[], float]) -> list[dict[str, Any]]:
    rows = []
    for name, train in trainers(scale, steps, clock).items():
        model, optimizer = train.model, train.optimizer
        times: dict[str, list[float]] = {"plain": [], "every=1": [], "every=10": [], "every=1, recorder": []}
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "watch.jsonl"
            first_start = time.perf_counter()
            with gradexport.watch(model, optimizer=optimizer, path=path) as traced:
                train(1)
            first = time.perf_counter() - first_start
            graph_bytes = len(json.dumps(traced.records[0]))
            train(steps)  # warm up
            for _ in range(rounds):
                times["plain"].append(train(steps))
                for every in (1, 10):
                    with gradexport.watch(model, optimizer=optimizer, path=path, every=every, trace=False) as watched:
                        times[f"every={every}"].append(train(steps))
                    if every == 1:  # the mean line, steps with details and without as they come
                        line_bytes = statistics.mean(len(line) + 1 for line in path.read_bytes().splitlines()[1:])
                with gradexport.watch(model, optimizer=optimizer, path=path, trace=False, bad_steps=Path(folder) / "bad"):
                    times["every=1, recorder"].append(train(steps))
            del watched
        median = {name: statistics.median(values) for name, values in times.items()}
        ratio = {name: statistics.median(watched / plain for watched, plain in zip(values, times["plain"])) for name, values in times.items()}
        plain = median["plain"]
        rows.append(
            {
                "model": name,
                "parameters": sum(p.numel() for p in model.parameters()),
                "modules": len(list(model.modules())),
                "plain_ms": plain * 1e3,
                "every1_ms": median["every=1"] * 1e3,
                "every10_ms": median["every=10"] * 1e3,
                "ratio_every1": ratio["every=1"],
                "ratio_every10": ratio["every=10"],
                "ratio_every1_recorder": ratio["every=1, recorder"],
                "first_step_ms": first * 1e3,
                "bytes_per_step": line_bytes,
                "graph_bytes": graph_bytes,
                "param_copy_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            }
        )
    return rows


def table_main(description: str, measure: Callable[..., list[dict[str, Any]]], rounds: int, header: str, line: Callable[[dict[str, Any]], str]) -> None:
    """The command line the step benchmarks share: run ``measure`` as asked, print a Markdown table (``header``, a ``line`` per row).

    ``--rounds`` (default ``rounds``), ``--steps``, ``--clock`` and ``--json FILE`` (the rows as JSON).
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    parser.add_argument("--clock", choices=("wall", "process"), default="wall", help="wall clock, or the process's CPU time (on a loaded machine)")
    args = parser.parse_args()
    rows = measure(args.rounds, args.steps, clock=time.process_time if args.clock == "process" else time.perf_counter)
    print(header)
    print("|---|" + "---:|" * (header.count("|") - 2))
    for row in rows:
        print(line(row))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


def main() -> None:
    table_main(
        __doc__.splitlines()[0],
        measure,
        7,
        "| model | parameters | modules | plain step | every=1 | every=10 | every=1, recorder on | first (traced) step | file bytes / recorded step"
        " | graph line | parameter copy kept |",
        lambda row: (
            f"| {row['model']} | {row['parameters']:,} | {row['modules']} | {row['plain_ms']:.2f} ms | {row['ratio_every1']:.3f}x | "
            f"{row['ratio_every10']:.3f}x | {row['ratio_every1_recorder']:.3f}x | {row['first_step_ms']:.0f} ms | {row['bytes_per_step']:,.0f} | "
            f"{row['graph_bytes']:,} | {row['param_copy_bytes']:,} |"
        ),
    )


if __name__ == "__main__":
    main()
