"""``python -m benchmarks.viewer``: the interactive viewer in headless Debian Chromium, and layouts side by side.

Measures, in one run on one machine (so ratios compare):

- a 12-layer ``nn.TransformerEncoder`` (d_model 64) with modules: time to write
  the page, first render (from navigation to ``gradexportViewer.ready``),
  expanding a module;
- 10^5 nodes with modules (nested ``Linear``/``ReLU`` stages): first render;
- a 10^6-node chain without modules (``--million``; minutes): opens;
- bytes per node of each page;
- time from the loss tensor to a picture: torchviz ``make_dot`` + ``dot -Tsvg``,
  ``gradexport.to_svg`` and the viewer;
- the layout libraries on the viewer's own layout requests: dagre (the one
  bundled) and ELK's layered algorithm (elkjs), through
  ``benchmarks/viewer_layouts.mjs`` under Node.js.

Writes ``benchmarks/results/viewer.md`` (and ``viewer.json``).

Examples::

    python -m benchmarks.viewer              # about 2 minutes
    python -m benchmarks.viewer --million    # adds the 10^6-node chain
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import gradexport
from gradexport.core.collector import gc_paused
from gradexport.formats.html import to_html, viewer_bundle, write_html

from .generators import deep_chain

ROOT = Path(__file__).resolve().parent.parent
DOCS_PLOT = ROOT / "docs" / "performance-viewer.png"
RESULTS = Path(__file__).parent / "results"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def encoder_loss(layers: int = 12, d_model: int = 64) -> tuple[torch.Tensor, nn.Module]:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=d_model, nhead=4, dim_feedforward=4 * d_model, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
    with gradexport.capture_modules():
        out = model(torch.randn(2, 8, d_model))
    return out.pow(2).mean(), model


def nested_mlp_loss(stages: int = 10, blocks: int = 10, pairs: int = 200) -> tuple[torch.Tensor, nn.Module]:
    # 5 nodes per Linear + ReLU pair (addmm, t, weight, bias, relu): 10 x 10 x 200 pairs are 10^5 nodes.
    torch.manual_seed(0)
    model = nn.Sequential(
        *[nn.Sequential(*[nn.Sequential(*[m for _ in range(pairs) for m in (nn.Linear(2, 2), nn.ReLU())]) for _ in range(blocks)]) for _ in range(stages)]
    )
    with gradexport.capture_modules():
        out = model(torch.randn(1, 2))
    return out.sum(), model


def timed(function: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


class Browser:
    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        self._manager = sync_playwright()
        playwright = self._manager.__enter__()
        self.context = playwright.chromium.launch_persistent_context(
            user_data_dir=tempfile.mkdtemp(prefix="viewer-bench-"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900},
        )

    def open(self, path: Path) -> tuple[Any, float]:
        """The page, and seconds from navigation to the first render (``gradexportViewer.ready``)."""
        page = self.context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        start = time.perf_counter()
        page.goto(path.as_uri(), wait_until="commit", timeout=600_000)
        page.wait_for_function("window.gradexportViewer !== undefined", timeout=600_000)
        page.evaluate("window.gradexportViewer.ready")
        seconds = time.perf_counter() - start
        if errors:
            raise RuntimeError(f"{path.name}: {errors}")
        return page, seconds

    def close(self) -> None:
        self.context.close()
        self._manager.__exit__(None, None, None)


EXPAND_JS = """async (id) => { const t = performance.now(); await window.gradexportViewer.expand(id); return performance.now() - t; }"""


def page_case(browser: Browser, folder: Path, name: str, graph: Any, expand: bool = False) -> dict[str, Any]:
    print(f"page: {name}", file=sys.stderr, flush=True)
    stem = re.sub("[^A-Za-z0-9]+", "-", name).strip("-")
    path = folder / f"{stem}.html"
    with gc_paused():  # as gradexport's export functions run every writer
        write_s, _ = timed(lambda: write_html(graph, path))
    page, render_s = browser.open(path)
    row: dict[str, Any] = {
        "case": name,
        "nodes": graph.number_of_nodes(),
        "edges": graph.number_of_edges(),
        "write_s": write_s,
        "first_render_s": render_s,
        "visible_at_open": len(page.evaluate("window.gradexportViewer.visible()")),
        "bytes": path.stat().st_size,
    }
    row["bytes_per_node"] = (row["bytes"] - len(viewer_bundle().encode())) / row["nodes"]
    request = folder / f"{stem}-open.json"
    request.write_text(json.dumps(page.evaluate("window.gradexportViewer.layoutRequest()")))
    row["request"] = str(request)
    if expand:
        modules = [item for item in page.evaluate("window.gradexportViewer.visible()") if item.startswith("module:")]
        times = []
        for module in modules[:12]:
            times.append(page.evaluate(EXPAND_JS, module) / 1000)
            page.evaluate("id => window.gradexportViewer.collapse(id)", module)
        row["expand_median_s"] = statistics.median(times)
        row["expand_max_s"] = max(times)
        row["modules_expanded"] = len(times)
    page.close()
    return row


def expanded_request(browser: Browser, folder: Path, name: str, graph: Any) -> Path:
    """The layout request of the page with every fold open: the whole graph, as the layout libraries see it."""
    print(f"every fold open: {name}", file=sys.stderr, flush=True)
    path = folder / f"{name}-all.html"
    write_html(graph, path)
    page, _ = browser.open(path)
    page.evaluate("window.gradexportViewer.expandAll()")
    request = folder / f"{name}-all.json"
    request.write_text(json.dumps(page.evaluate("window.gradexportViewer.layoutRequest()")))
    page.close()
    return request


def side_by_side(browser: Browser, folder: Path) -> list[dict[str, Any]]:
    """Seconds from a fresh loss tensor to a picture, for each tool (the forward pass is not counted)."""
    from torchviz import make_dot

    rows = []
    for name, build in [("TransformerEncoder 12 × d64", encoder_loss), ("TransformerEncoder 2 × d64", lambda: encoder_loss(2))]:
        loss, model = build()
        params = dict(model.named_parameters())
        nodes = gradexport.to_networkx(loss, module=model).number_of_nodes()
        torchviz_s, _ = timed(lambda: make_dot(loss, params=params).pipe(format="svg"))
        loss, model = build()
        svg_s, _ = timed(lambda: gradexport.to_svg(loss, module=model))
        loss, model = build()
        path = folder / "side.html"
        write_s, _ = timed(lambda: path.write_text(to_html(gradexport.to_networkx(loss, module=model)), encoding="utf-8"))
        page, render_s = browser.open(path)
        page.close()
        rows.append({"graph": name, "nodes": nodes, "torchviz_s": torchviz_s, "to_svg_s": svg_s, "viewer_s": write_s + render_s})
    return rows


def layouts(requests: list[Path]) -> list[dict[str, Any]]:
    result = subprocess.run(
        ["node", str(ROOT / "benchmarks" / "viewer_layouts.mjs"), *map(str, requests)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def million_chain(browser: Browser, folder: Path) -> dict[str, Any]:
    root = deep_chain(10**6 - 2)
    graph = gradexport.to_networkx(root)
    del root
    row = page_case(browser, folder, "chain 10^6 (no modules)", graph)
    del graph
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--million", action="store_true", help="also open a 10^6-node chain (minutes, several GB)")
    parser.add_argument("--report-only", action="store_true", help="redraw viewer.md, the plot and its docs copy from viewer.json")
    args = parser.parse_args(argv)
    if args.report_only:
        results = json.loads((RESULTS / "viewer.json").read_text())
        (RESULTS / "viewer.md").write_text(report(results))
        plot(results)
        return
    # Freeing a graph of 10^5 nodes in a row recurses deep in torch: let the main stack grow (see the field notes).
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    resource.setrlimit(resource.RLIMIT_STACK, (hard, hard))
    folder = Path(tempfile.mkdtemp(prefix="viewer-bench-"))
    browser = Browser()
    try:
        loss, model = encoder_loss()
        encoder = gradexport.to_networkx(loss, module=model)
        rows = [page_case(browser, folder, "TransformerEncoder 12 × d64", encoder, expand=True)]
        chain_root = deep_chain(998)
        chain = gradexport.to_networkx(chain_root)
        requests = [Path(rows[0]["request"]), expanded_request(browser, folder, "encoder", encoder), expanded_request(browser, folder, "chain1000", chain)]
        loss, model = nested_mlp_loss()
        mlp = gradexport.to_networkx(loss, module=model)
        del loss, model
        rows.append(page_case(browser, folder, "nested Linear/ReLU, 10^5 nodes", mlp, expand=True))
        requests.append(Path(rows[-1]["request"]))
        if args.million:
            rows.append(million_chain(browser, folder))
        tools = side_by_side(browser, folder)
    finally:
        browser.close()
    layout_rows = layouts(requests)
    for row in rows:
        row.pop("request", None)  # a temporary file
    for row in layout_rows:
        row["file"] = Path(row["file"]).stem
    results = {
        "machine": f"{platform.machine()}, {platform.system()}, Python {platform.python_version()}, torch {torch.__version__}",
        "chromium": subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout.strip(),
        "bundle_bytes": len(viewer_bundle().encode()),
        "elk_bundle_bytes": (ROOT / "node_modules" / "elkjs" / "lib" / "elk.bundled.js").stat().st_size,
        "pages": rows,
        "tools": tools,
        "layouts": layout_rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "viewer.json").write_text(json.dumps(results, indent=1) + "\n")
    (RESULTS / "viewer.md").write_text(report(results))
    plot(results)
    print(report(results))


def plot(results: dict[str, Any]) -> None:
    """``viewer.png`` in the results and its copy for the docs' performance page: loss to picture, and first render."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (tools, pages) = pyplot.subplots(1, 2, figsize=(11, 4.2), dpi=110, constrained_layout=True)
    labels = [f"{row['graph']}\n{row['nodes']:,} nodes" for row in results["tools"]]
    width = 0.27
    for offset, (key, name) in enumerate((("torchviz_s", "torchviz + dot -Tsvg"), ("to_svg_s", "gradexport.to_svg"), ("viewer_s", "viewer"))):
        positions = [index + (offset - 1) * width for index in range(len(labels))]
        tools.bar(positions, [row[key] for row in results["tools"]], width, label=name)
    tools.set_xticks(range(len(labels)), labels, fontsize=11)
    tools.set_ylabel("seconds, loss to picture", fontsize=11)
    tools.legend(fontsize=11)
    tools.set_title("From the loss tensor to a picture", fontsize=12)
    nodes = [row["nodes"] for row in results["pages"]]
    pages.loglog(nodes, [row["first_render_s"] for row in results["pages"]], "o-", label="first render")
    pages.loglog(nodes, [row["write_s"] for row in results["pages"]], "s--", label="write the page")
    for row in results["pages"]:
        pages.annotate(f"{row['visible_at_open']} shown", (row["nodes"], row["first_render_s"]), fontsize=10, xytext=(4, 6), textcoords="offset points")
    pages.set_xlabel("nodes in the graph", fontsize=11)
    pages.set_ylabel("seconds", fontsize=11)
    pages.legend(fontsize=11)
    pages.set_title("Viewer pages by graph size", fontsize=12)
    for axes in (tools, pages):
        axes.tick_params(labelsize=10)
    figure.savefig(RESULTS / "viewer.png")
    figure.savefig(DOCS_PLOT)
    pyplot.close(figure)


def report(results: dict[str, Any]) -> str:
    lines = [
        "# Viewer benchmark",
        "",
        f"`python -m benchmarks.viewer`, headless {results['chromium']}, {results['machine']}; one run, so the ratios compare.",
        "",
        f"Viewer script (inlined in every page): {results['bundle_bytes'] / 1024:.0f} KiB, dagre included. "
        f"ELK's bundled build alone is {results['elk_bundle_bytes'] / 1024:.0f} KiB.",
        "",
        "## Pages",
        "",
        "| graph | nodes | write page (s) | first render (s) | visible at open | expand a module (s, median / max) | page bytes per node |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["pages"]:
        expand = f"{row['expand_median_s']:.2f} / {row['expand_max_s']:.2f}" if "expand_median_s" in row else "—"
        lines.append(
            f"| {row['case']} | {row['nodes']:,} | {row['write_s']:.2f} | {row['first_render_s']:.2f} | {row['visible_at_open']} "
            f"| {expand} | {row['bytes_per_node']:.0f} |"
        )
    lines += [
        "",
        "First render: from navigation to `gradexportViewer.ready` (parse, fold, layout in the worker, draw). "
        "Bytes per node leave out the script, which every page carries once.",
        "",
        "## From the loss to a picture",
        "",
        "| graph | nodes | torchviz `make_dot` + `dot -Tsvg` (s) | `gradexport.to_svg` (s) | viewer: page + first render (s) |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in results["tools"]:
        lines.append(f"| {row['graph']} | {row['nodes']:,} | {row['torchviz_s']:.2f} | {row['to_svg_s']:.2f} | {row['viewer_s']:.2f} |")
    lines += [
        "",
        "## Layout libraries on the viewer's layout requests",
        "",
        "| request | items | boxes | edges | dagre (ms) | ELK layered (ms) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in results["layouts"]:
        elk = f"{row['elk_ms']:.0f}" if row["elk_ms"] is not None else f"failed: {row['elk_error']}"
        lines.append(f"| {Path(row['file']).stem} | {row['nodes']} | {row['boxes']} | {row['edges']} | {row['dagre_ms']:.0f} | {elk} |")
    lines += [
        "",
        "Median of 3 runs under Node.js; `-open` is what the page lays out when it opens, `-all` every fold opened.",
        "",
        "The viewer bundles dagre: its script is a twentieth of ELK's size, and laid out as the viewer runs it (one flat",
        "layout per opened box, innermost first) it is faster than ELK's own nested layout on every request above.",
        "See docs/guides/viewer.md.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
