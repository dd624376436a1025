"""``python -m benchmarks.graphviz_sizes``: the static SVG of real models, and how long ``dot`` takes as graphs grow.

Two tables, measured in one run with the system ``dot`` (Graphviz's own layout, ``-Tjson``):

1. The page size of the default picture (module boxes on) of resnet18, GPT-2
   and a 12-layer encoder (tests/model_zoo.py), with a parameter's leaf on its
   op's rank (the writer's default since issue 24) and without (the same DOT
   with those rank lines taken out: what the writer wrote before).
2. ``dot -Tsvg`` seconds on GPT-2-like graphs of growing depth, with and
   without module boxes: where `gradexport.core.limits.GRAPHVIZ_SLOW_NODES`
   comes from. A layout past ``--limit`` seconds is stopped and shown as ``>``.

Examples::

    python -m benchmarks.graphviz_sizes                   # about a minute on 2 shared cores
    python -m benchmarks.graphviz_sizes --blocks 12,24,48 --limit 240
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import torch  # noqa: E402
from model_zoo import REAL_MODELS, GPTLike  # noqa: E402

import gradexport  # noqa: E402


def traced(model: torch.nn.Module, inputs: torch.Tensor):  # type: ignore[no-untyped-def]
    with gradexport.capture_modules():
        output = model(inputs)
    return gradexport.to_networkx(output.sum(), module=model)


def without_leaf_ranks(dot_text: str) -> str:
    """The DOT as the writer wrote it before leaves shared their op's rank."""
    return "\n".join(line for line in dot_text.splitlines() if not line.startswith(('  {rank="same";', '  graph [newrank="true"]')))


def page_size(dot_text: str) -> tuple[float, float]:
    result = subprocess.run(["dot", "-Tjson"], input=dot_text.encode(), capture_output=True, check=True)
    x0, y0, x1, y1 = map(float, json.loads(result.stdout)["bb"].split(","))
    return x1 - x0, y1 - y0


def seconds(dot_text: str, limit: float) -> float | None:
    started = time.perf_counter()
    try:
        subprocess.run(["dot", "-Tsvg", "-o", "/dev/null"], input=dot_text.encode(), capture_output=True, check=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", default="12,24", help="GPT-2-like depths to time, comma-separated")
    parser.add_argument("--limit", type=float, default=60.0, help="stop a layout after this many seconds")
    args = parser.parse_args(argv)

    print("| model | nodes | before: leaves below their op (pt) | now: leaves on their op's rank (pt) |")
    print("|---|---:|---:|---:|")
    for name, make in REAL_MODELS.items():
        graph = traced(*make())
        text = gradexport.to_dot(graph)
        before, after = page_size(without_leaf_ranks(text)), page_size(text)
        print(f"| {name} | {graph.number_of_nodes():,} | {before[0]:,.0f} × {before[1]:,.0f} | {after[0]:,.0f} × {after[1]:,.0f} |")
    print()
    print("| GPT-2-like blocks | nodes | edges | dot -Tsvg, module boxes (s) | dot -Tsvg, no boxes (s) |")
    print("|---:|---:|---:|---:|---:|")
    for blocks in (int(b) for b in args.blocks.split(",")):
        torch.manual_seed(0)
        graph = traced(GPTLike(blocks=blocks), torch.randint(0, 11, (2, 5)))
        times = [seconds(gradexport.to_dot(graph, group_modules=boxes), args.limit) for boxes in (True, False)]
        shown = [f"{t:.1f}" if t is not None else f"> {args.limit:g}" for t in times]
        print(f"| {blocks} | {graph.number_of_nodes():,} | {graph.number_of_edges():,} | {shown[0]} | {shown[1]} |")


if __name__ == "__main__":
    main()
