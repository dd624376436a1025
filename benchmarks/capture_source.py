"""``python -m benchmarks.capture_source``: what `gradexport.tools.capture_source` costs a forward pass.

Times the forward of a 12-layer ``nn.TransformerEncoder`` (d_model 64) and of
an MLP, plain, inside a torch function mode that only calls each op (the
floor of any capture that sees every op this way), inside
``capture_source(values=False)`` (lines only),
inside ``capture_source()`` (lines and the check of every result for NaN
and Inf that finds the forward origin), inside ``capture_source()`` with
``capture_modules()``, and under anomaly mode
(``torch.autograd.detect_anomaly()``, which keeps a traceback per node), all
in one run, interleaved so that a busy machine slows every variant alike.
Each figure is the minimum over repeats; the ratios are to the plain forward.
``--clock process`` times the process's CPU time instead of the wall clock:
on a shared, loaded machine it leaves out the time other processes took.

Example::

    python -m benchmarks.capture_source --repeats 7
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import gradexport


def encoder() -> tuple[nn.Module, torch.Tensor]:
    """The 12-layer encoder, d_model 64, on a batch of 8 sequences of 32."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=256, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=12, enable_nested_tensor=False), torch.randn(8, 32, 64)


def mlp() -> tuple[nn.Module, torch.Tensor]:
    """Eight Linear(256, 256) + ReLU blocks on a batch of 64."""
    torch.manual_seed(0)
    return nn.Sequential(*(block for _ in range(8) for block in (nn.Linear(256, 256), nn.ReLU()))), torch.randn(64, 256)


MODELS: dict[str, Callable[[], tuple[nn.Module, torch.Tensor]]] = {"encoder (12 layers, d_model 64)": encoder, "mlp (8 x 256)": mlp}


def _both() -> AbstractContextManager[Any]:
    stack = ExitStack()
    stack.enter_context(gradexport.capture_modules())
    stack.enter_context(gradexport.tools.capture_source())
    return stack


class EmptyMode(TorchFunctionMode):
    """A torch function mode that calls the op and nothing else."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


VARIANTS: dict[str, Callable[[], AbstractContextManager[Any]]] = {
    "plain": nullcontext,
    "empty TorchFunctionMode": EmptyMode,
    "capture_source(values=False)": lambda: gradexport.tools.capture_source(values=False),
    "capture_source": gradexport.tools.capture_source,
    "capture_source + capture_modules": _both,
    "anomaly mode": torch.autograd.detect_anomaly,
}


def measure(repeats: int, calls: int, clock: Callable[[], float] = time.perf_counter) -> dict[str, dict[str, float]]:
    """Seconds per forward (minimum over repeats) of each model under each variant, by ``clock``."""
    results: dict[str, dict[str, float]] = {}
    for model_name, build in MODELS.items():
        model, x = build()
        best = dict.fromkeys(VARIANTS, float("inf"))
        for _ in range(2):  # warm up every path
            for variant in VARIANTS.values():
                with variant():
                    model(x).sum()
        for _ in range(repeats):
            for name, variant in VARIANTS.items():
                start = clock()
                for _ in range(calls):
                    with variant():
                        model(x).sum()
                best[name] = min(best[name], (clock() - start) / calls)
        results[model_name] = best
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--clock", choices=("wall", "process"), default="wall", help="wall clock, or the process's CPU time")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "process" else time.perf_counter
    warnings.filterwarnings("ignore", message="Anomaly Detection has been enabled")
    torch.set_num_threads(1)
    for model_name, best in measure(args.repeats, args.calls, clock).items():
        print(model_name)
        for name, seconds in best.items():
            print(f"  {name:34} {seconds * 1e3:8.2f} ms  {seconds / best['plain']:5.2f}x plain")


if __name__ == "__main__":
    main()
