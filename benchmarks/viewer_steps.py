"""``python -m benchmarks.viewer_steps``: the stepping viewer of a replay in headless Debian Chromium.

Measures, in one run on one machine (see issue 21 for the budgets):

- a 12-layer ``nn.TransformerEncoder`` (d_model 64, modules captured): the
  replay, writing the page with every step (``gradexport.write(record, ...,
  "html")``), the first render, one step forward (median and maximum over
  consecutive steps, timed in the page around ``gradexportViewer.step(k)``,
  which paints synchronously) and the jump from the first step to the last;
- 10^5 nodes (nested ``Linear``/``ReLU`` stages, as in ``benchmarks.viewer``):
  bytes per step (the page's ``steps`` block over the number of steps, and the
  whole page less the viewer's script over the number of steps) and the first render.

Writes ``benchmarks/results/viewer_steps.md`` (and ``viewer_steps.json``).

Examples::

    python -m benchmarks.viewer_steps        # about a minute
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import resource
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

import gradexport
from gradexport.formats.html import viewer_bundle

from .viewer import RESULTS, Browser, encoder_loss, nested_mlp_loss, timed

STEP_JS = """(k) => { const t = performance.now(); window.gradexportViewer.step(k); return performance.now() - t; }"""


def steps_case(browser: Browser, folder: Path, name: str, loss: torch.Tensor, model: torch.nn.Module, moves: int) -> dict[str, Any]:
    print(f"steps: {name}", file=sys.stderr, flush=True)
    stem = re.sub("[^A-Za-z0-9]+", "-", name).strip("-")
    replay_s, record = timed(lambda: gradexport.replay(loss, module=model))
    write_s, paths = timed(lambda: gradexport.write(record, folder, "html", stem=stem))
    path = paths["html"]
    text = path.read_text(encoding="utf-8")
    start = text.index(',"steps":')
    steps_bytes = len(text[start : text.index("</script>", start)].encode())
    page, render_s = browser.open(path)
    count = page.evaluate("window.gradexportViewer.steps()")
    times = [page.evaluate(STEP_JS, k) / 1000 for k in range(1, min(count, moves + 1))]
    page.evaluate("window.gradexportViewer.step(0)")
    jump_s = page.evaluate(STEP_JS, count - 1) / 1000
    page.close()
    return {
        "case": name,
        "nodes": record.graph.number_of_nodes(),
        "steps": count,
        "replay_s": replay_s,
        "write_s": write_s,
        "first_render_s": render_s,
        "step_median_s": statistics.median(times),
        "step_max_s": max(times),
        "first_to_last_s": jump_s,
        "bytes": path.stat().st_size,
        "steps_bytes_per_step": steps_bytes / count,
        "page_bytes_per_step": (path.stat().st_size - len(viewer_bundle().encode())) / count,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=200, help="how many single steps to time on each page")
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    resource.setrlimit(resource.RLIMIT_STACK, (hard, hard))  # freeing 10^5 nodes in a row recurses deep in torch
    folder = Path(tempfile.mkdtemp(prefix="viewer-steps-bench-"))
    browser = Browser()
    try:
        rows = [steps_case(browser, folder, "TransformerEncoder 12 × d64", *encoder_loss(), args.moves)]
        rows.append(steps_case(browser, folder, "nested Linear/ReLU, 10^5 nodes", *nested_mlp_loss(), args.moves))
    finally:
        browser.close()
    results = {
        "machine": f"{platform.machine()}, {platform.system()}, Python {platform.python_version()}, torch {torch.__version__}",
        "pages": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "viewer_steps.json").write_text(json.dumps(results, indent=1) + "\n")
    (RESULTS / "viewer_steps.md").write_text(report(results))
    print(report(results))


def report(results: dict[str, Any]) -> str:
    lines = [
        "# The stepping viewer (python -m benchmarks.viewer_steps)",
        "",
        results["machine"],
        "",
        "| page | nodes | steps | replay | write page | first render | one step (median / max) | first → last | steps block B/step | page B/step |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["pages"]:
        lines.append(
            f"| {row['case']} | {row['nodes']:,} | {row['steps']:,} | {row['replay_s']:.2f} s | {row['write_s']:.2f} s | "
            f"{row['first_render_s']:.2f} s | {1000 * row['step_median_s']:.1f} / {1000 * row['step_max_s']:.1f} ms | "
            f"{1000 * row['first_to_last_s']:.1f} ms | {row['steps_bytes_per_step']:.0f} | {row['page_bytes_per_step']:.0f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
