"""``python -m benchmarks.model_explorer``: a 10^5-node backward graph with modules, written for and opened in Model Explorer.

The model is ``nn.Sequential`` three levels deep (stages of groups of blocks),
each block ``Linear(4, 4)`` then ``ReLU``: five backward nodes per block
(``AddmmBackward0``, ``TBackward0``, ``ReluBackward0`` and the weight and bias
leaves), every one of them in a module, so Model Explorer shows
``stages/groups/blocks`` as nested layers. Measured:

- building the graph (``to_networkx(module=...)``), for reference;
- ``to_model_explorer`` (Model Explorer's ``GraphCollection``) and
  ``write_model_explorer`` from the graph, and from a ``GraphStream`` of the
  roots (no NetworkX graph), with the file's size; gradexport's own JSON
  for comparison;
- ``record_gradients`` and ``gradient_node_data`` on the same model, and
  ``node_data_for`` (every node data it gives: four metrics);
- a diff for two panes: the model against itself with the middle block's
  ReLU swapped for a GELU; ``gradexport.diff`` for reference, then
  ``diff_panes`` and the ``diff`` node data of the right pane;
- opening it: ``serve_model_explorer`` in a subprocess, headless Chromium
  (Debian's) loading the page until Model Explorer reports the graph's op
  node count, and until the top-level layer is drawn; every request off
  127.0.0.1 is aborted. ``--no-browser`` skips this.

Writes ``benchmarks/results/model_explorer.md`` (and ``.png``, the page as
opened) unless ``--no-save``.

Examples::

    python -m benchmarks.model_explorer                   # 10^5 nodes (about a minute)
    python -m benchmarks.model_explorer --blocks 2000 --no-save
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import queue
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import gradexport
from gradexport.core.collector import gc_paused
from gradexport.formats.json import write_json
from gradexport.formats.model_explorer import (
    diff_panes,
    gradient_node_data,
    mark_node_data,
    node_data_for,
    to_model_explorer,
    write_model_explorer,
)
from gradexport.frontends.model_explorer_server import free_port
from gradexport.tracing.graph import GraphStream
from tests.browser_fixtures import CHROMIUM, CHROMIUM_ARGS, block_outside

RESULTS = Path(__file__).parent / "results"
NODES_PER_BLOCK = 5
# A child of a shell's background job inherits SIGINT ignored: restore Ctrl+C, which stops the server.
SERVE = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
import sys
from gradexport.frontends.model_explorer_server import serve_model_explorer
serve_model_explorer(sys.argv[1], port=int(sys.argv[2]), open_browser=False)
"""


def stacked_model(blocks: int) -> nn.Sequential:
    """``blocks`` blocks of Linear + ReLU in stages of groups: module paths ``s.g.b.0`` (three levels of layers)."""
    per_group = 50
    groups_per_stage = 20
    stages = []
    made = 0
    while made < blocks:
        groups = []
        while made < blocks and len(groups) < groups_per_stage:
            count = min(per_group, blocks - made)
            groups.append(nn.Sequential(*(nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(count))))
            made += count
        stages.append(nn.Sequential(*groups))
    return nn.Sequential(*stages)


def timed(function: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    """``function()`` and its wall and CPU time, with the cyclic GC paused as gradexport's export functions run writers."""
    gc.collect()
    with gc_paused():
        wall, cpu = time.perf_counter(), time.process_time()
        value = function()
        return value, {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}


def measure_writing(blocks: int, folder: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = stacked_model(blocks)
    inputs = torch.randn(2, 4)
    row: dict[str, Any] = {}

    def forward() -> torch.Tensor:
        with gradexport.capture_modules():
            return model(inputs).sum()

    loss = forward()
    graph, row["to_networkx"] = timed(lambda: gradexport.to_networkx(loss, module=model))
    row["nodes"], row["edges"] = graph.number_of_nodes(), graph.number_of_edges()
    row["layers"] = len({data["module"] for _, data in graph.nodes(data=True) if data.get("module")})
    _, row["to_model_explorer"] = timed(lambda: to_model_explorer(graph))
    path = folder / "graph.me.json"
    _, row["write_model_explorer"] = timed(lambda: write_model_explorer(graph, path))
    row["bytes"] = path.stat().st_size
    _, row["write_json"] = timed(lambda: write_json(graph, folder / "graph.json"))
    streamed = folder / "stream.me.json"
    _, row["root_to_model_explorer"] = timed(lambda: write_model_explorer(GraphStream(loss, module=model), streamed))
    row["stream_same_bytes"] = streamed.read_bytes() == path.read_bytes()
    loss = forward()  # the first backward graph is freed here
    recorded, row["record_gradients"] = timed(lambda: gradexport.record_gradients(loss, module=model))
    _, row["gradient_node_data"] = timed(lambda: gradient_node_data(recorded, "log10_norm").to_json_string())
    _, row["node_data_for"] = timed(lambda: [data.to_json_string() for data in node_data_for(recorded).values()])
    middle = [module for module in model.modules() if isinstance(module, nn.ReLU)][blocks // 2]
    middle.forward = nn.GELU().forward  # the same module path, another op: one node changed
    changed = gradexport.to_networkx(forward(), module=model)
    merged, row["diff"] = timed(lambda: gradexport.diff(graph, changed))
    panes, row["diff_panes"] = timed(lambda: diff_panes(merged, graph, changed))
    _, row["diff_node_data"] = timed(lambda: mark_node_data(panes[1], "diff").to_json_string())
    row["diff_counts"] = merged.graph["diff"]["nodes"]
    return row


def measure_opening(path: Path, nodes: int, screenshot: Path | None) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    port = free_port()
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", SERVE, str(path), str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
    url = None
    while url is None and time.perf_counter() - started < 120:
        line = lines.get(timeout=120)
        if line.startswith(f"http://127.0.0.1:{port}/?data="):
            url = line.strip()
    row: dict[str, Any] = {"server_start": time.perf_counter() - started}
    try:
        with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
            context = playwright.chromium.launch_persistent_context(user_data_dir=profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            outside = block_outside(context)
            page = context.new_page()
            page.set_viewport_size({"width": 1400, "height": 900})
            start = time.perf_counter()
            page.goto(url, wait_until="load")
            row["page_load"] = time.perf_counter() - start
            pattern = re.compile(rf"\nop node count\s+{nodes}\n")
            while not pattern.search(page.evaluate("document.body.innerText")):
                if time.perf_counter() - start > 600:
                    raise TimeoutError("Model Explorer did not report the graph within 10 minutes")
                page.wait_for_timeout(100)
            row["graph_loaded"] = time.perf_counter() - start
            layers = re.search(r"\nlayer count\s+(\d+)\n", page.evaluate("document.body.innerText"))
            row["layers"] = int(layers.group(1)) if layers else 0
            page.wait_for_timeout(2000)  # let the first layout settle for the picture
            if screenshot is not None:
                page.screenshot(path=str(screenshot))
            context.close()
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl+C, as a user stops it
        stopping = time.perf_counter()
        try:
            process.wait(timeout=300)
            row["stop_after_ctrl_c"] = time.perf_counter() - stopping
        except subprocess.TimeoutExpired:
            process.kill()
            row["stop_after_ctrl_c"] = None
    row["requests_off_machine_aborted"] = len(outside)
    return row


def markdown(result: dict[str, Any]) -> str:
    w, o = result["writing"], result.get("opening")

    def per_node(seconds: float) -> str:
        return f"{seconds / w['nodes'] * 1e6:.1f} µs/node"

    lines = [
        "# Model Explorer: a 10^5-node backward graph with modules",
        "",
        (
            f"Measured {result['when']} on {result['machine']}, Python {result['python']}, torch {result['torch']}, "
            f"Model Explorer {result['model_explorer']}; command `{result['command']}`."
        ),
        "",
        (
            f"The graph: {w['nodes']:,} nodes, {w['edges']:,} edges, {w['layers']:,} modules with nodes "
            f"(`benchmarks/model_explorer.py`: `Linear` + `ReLU` blocks in stages of groups, three levels of layers). "
            "Each step runs with Python's cyclic GC paused, as `gradexport.write` and the `to_*` functions run the "
            f"writers. The machine was shared with other jobs (load average {result['load']:.1f} on "
            f"{os.cpu_count()} cores at the start): wall times are inflated, CPU times less so."
        ),
        "",
        "| step | wall s | CPU s | CPU per node |",
        "|---|--:|--:|--:|",
    ]
    for name, label in [
        ("to_networkx", "`to_networkx(loss, module=model)` (for reference)"),
        ("to_model_explorer", "`to_model_explorer(graph)`: Model Explorer's `GraphCollection`"),
        ("write_model_explorer", "`write_model_explorer(graph, path)`: the `.me.json` file"),
        ("root_to_model_explorer", "`write_model_explorer(GraphStream(loss, module=model), path)`: root to file"),
        ("write_json", "`write_json(graph, path)`: gradexport's own JSON, for comparison"),
        ("record_gradients", "`record_gradients(loss, module=model)` (for reference)"),
        ("gradient_node_data", "`gradient_node_data(graph).to_json_string()`"),
        ("node_data_for", "`node_data_for(graph)`, each `.to_json_string()`: exec_order and three gradient metrics"),
        ("diff", "`gradexport.diff(graph, changed)` (for reference)"),
        ("diff_panes", "`diff_panes(merged, graph, changed)`: the two panes of `serve_model_explorer_diff`"),
        ("diff_node_data", '`mark_node_data(pane_b, "diff").to_json_string()`'),
    ]:
        lines.append(f"| {label} | {w[name]['wall']:.2f} | {w[name]['cpu']:.2f} | {per_node(w[name]['cpu'])} |")
    lines += [
        "",
        (
            f"The file is {w['bytes'] / 1e6:.1f} MB; written from the stream it is "
            f"{'byte for byte the same' if w['stream_same_bytes'] else 'DIFFERENT'}. The diff (one ReLU swapped "
            f"for a GELU): {', '.join(f'{count:,} {state}' for state, count in w['diff_counts'].items())} nodes."
        ),
        "",
    ]
    if o:
        lines += [
            ("Opening it (`serve_model_explorer(path, open_browser=False)` in a subprocess, Debian's headless Chromium, software WebGL):"),
            "",
            "| step | seconds |",
            "|---|--:|",
            f"| server up and printing its address | {o['server_start']:.1f} |",
            f"| page loaded (`load` event) | {o['page_load']:.1f} |",
            (
                f"| Model Explorer reports {w['nodes']:,} op nodes and {o['layers']:,} layers (file read, parsed, "
                f"graph processed, top level laid out) | {o['graph_loaded']:.1f} |"
            ),
            f"| server stopped after Ctrl+C (SIGINT) | {'did not stop' if o['stop_after_ctrl_c'] is None else format(o['stop_after_ctrl_c'], '.1f')} |",
            "",
            (f"Requests off 127.0.0.1, aborted: {o['requests_off_machine_aborted']} (web fonts the page names; local fonts stand in)."),
            "",
            "![The graph as Model Explorer opens it](model_explorer.png)",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--blocks", type=int, default=20_000, help="Linear+ReLU blocks (5 nodes each); default 20,000")
    parser.add_argument("--no-browser", action="store_true", help="only write, do not open in Model Explorer")
    parser.add_argument("--no-save", action="store_true", help="print the table, write nothing to results/")
    args = parser.parse_args(argv)
    # torch frees a graph this deep recursively: let the main thread's stack grow (see docs/guides/deep-graphs.md).
    _, hard = resource.getrlimit(resource.RLIMIT_STACK)
    resource.setrlimit(resource.RLIMIT_STACK, (hard, hard))
    import model_explorer

    result: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{os.cpu_count()} × {platform.processor() or platform.machine()}",
        "load": os.getloadavg()[0],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "model_explorer": model_explorer.__version__,
        "command": "python -m benchmarks.model_explorer" + ("" if argv is None else " " + " ".join(argv)),
    }
    with tempfile.TemporaryDirectory() as folder:
        result["writing"] = measure_writing(args.blocks, Path(folder))
        print(json.dumps(result["writing"], indent=1))
        if not args.no_browser:
            screenshot = None if args.no_save else RESULTS / "model_explorer.png"
            result["opening"] = measure_opening(Path(folder) / "graph.me.json", result["writing"]["nodes"], screenshot)
            print(json.dumps(result["opening"], indent=1))
    text = markdown(result)
    print(text)
    if not args.no_save:
        (RESULTS / "model_explorer.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:] if len(sys.argv) > 1 else None)
