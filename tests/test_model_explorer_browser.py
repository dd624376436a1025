"""Model Explorer's real server with a backward graph, in headless Chromium: the graph loads and its top-level layers appear, offline.

The server runs as ``serve_model_explorer`` runs it for ``gradexport view
--model-explorer``, in a subprocess stopped with Ctrl+C (SIGINT) at the end.
Every browser request not for 127.0.0.1 is aborted and counted; the server's
own requests to the internet would go to a proxy on 127.0.0.1 that counts them.
A screenshot is kept in ``out/artifacts/``.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import pickle
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import torch
from browser_fixtures import block_outside, browser  # noqa: F401  (browser is a fixture)

import gradexport
from gradexport.formats.model_explorer import DIFF_VALUES
from gradexport.frontends.model_explorer_server import free_port

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        importlib.util.find_spec("model_explorer") is None,
        reason="Model Explorer is not installed (pip install gradexport[explorer]; make setup installs it)",
    ),
]

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "out" / "artifacts"
#: How long the server may take to start and the page to load the graph.
LOAD_TIMEOUT_S = 60

# A child of a shell's background job inherits SIGINT ignored: restore Ctrl+C, which stops the server.
SERVE = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
import pickle, sys
from gradexport.frontends.model_explorer_server import serve_model_explorer
with open(sys.argv[1], "rb") as file:
    graph = pickle.load(file)
serve_model_explorer(graph, port=int(sys.argv[2]), open_browser=False)
"""


SERVE_DIFF = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
import pickle, sys
from gradexport.frontends.model_explorer_server import serve_model_explorer_diff
with open(sys.argv[1], "rb") as file:
    a, b = pickle.load(file)
serve_model_explorer_diff(a, b, labels=("before", "after"), port=int(sys.argv[2]), open_browser=False)
"""


class CountingProxy:
    """A proxy on 127.0.0.1 that answers nothing and records the first line of every request."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(2)
                try:
                    self.requests.append(connection.recv(4096).split(b"\r\n", 1)[0].decode("latin-1"))
                except OSError:
                    self.requests.append("(no request line)")

    def close(self) -> None:
        self.socket.close()


def model_graph(*block: torch.nn.Module) -> Any:
    """A three-module model's graph with gradients; ``block`` replaces the block's ReLU."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        OrderedDict(
            embed=torch.nn.Linear(4, 8),
            block=torch.nn.Sequential(torch.nn.Linear(8, 8), *(block or [torch.nn.ReLU()]), torch.nn.Linear(8, 8)),
            head=torch.nn.Linear(8, 2),
        )
    )
    with gradexport.capture_modules():
        out = model(torch.randn(3, 4))
    return gradexport.record_gradients(out.pow(2).mean(), module=model)


def start_server(folder: Path, code: str, graphs: Any) -> Iterator[dict[str, Any]]:
    """Run ``code`` (a SERVE script) in a child with the pickled ``graphs``, its internet traffic sent to a counting proxy.

    Yields its URL, the proxy, the process and its output; stops it with SIGINT afterwards.
    """
    with open(folder / "graph.pickle", "wb") as file:
        pickle.dump(graphs, file)
    proxy = CountingProxy()
    proxy_url = f"http://127.0.0.1:{proxy.port}"
    env = {name: value for name, value in os.environ.items() if "proxy" not in name.lower()}
    env |= dict.fromkeys(("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"), proxy_url)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(folder / "graph.pickle"), str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
    output: list[str] = []
    url = None
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    while url is None and time.monotonic() < deadline and process.poll() is None:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        output.append(line)
        if line.startswith(f"http://127.0.0.1:{port}/?data="):
            url = line.strip()
    if url is None:
        process.kill()
        pytest.fail("Model Explorer's server did not print its address:\n" + "".join(output))
    yield {"url": url, "proxy": proxy, "process": process, "output": output}
    if process.poll() is None:
        process.send_signal(signal.SIGINT)  # Ctrl+C: Model Explorer stops, gradexport removes the temporary files
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    proxy.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The server subprocess with the graph: its URL, the graph, the proxy; stopped with SIGINT afterwards."""
    graph = model_graph()
    for state in start_server(tmp_path_factory.mktemp("model-explorer"), SERVE, graph):
        yield state | {"graph": graph}


def open_page(browser: Any, url: str, width: int) -> tuple[Any, list[str], list[str]]:  # noqa: F811
    """A page at ``url`` with every request off 127.0.0.1 aborted: the page, those requests, the page's errors."""
    outside = block_outside(browser)
    page = browser.new_page()
    page.set_viewport_size({"width": width, "height": 900})
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url, wait_until="load")
    return page, outside, errors


def stayed_local(outside: list[str], errors: list[str], proxy: CountingProxy) -> None:
    """Nothing left the machine: the page asked for nothing off 127.0.0.1 (not even its web fonts),
    and the server asked nothing of the internet (the proxy would have seen it)."""
    assert outside == []
    assert errors == []
    assert proxy.requests == []


def test_the_graph_loads_offline_with_its_top_level_layers(served: dict[str, Any], browser: Any) -> None:  # noqa: F811
    graph = served["graph"]
    page, outside, errors = open_page(browser, served["url"], width=1400)

    # The graph info panel: Model Explorer's own counts of what it loaded, and our graph attributes.
    info = page.locator("text=op node count").first
    info.wait_for(timeout=LOAD_TIMEOUT_S * 1000)
    modules = {data["module"] for _, data in graph.nodes(data=True) if data.get("module")}
    layers = {".".join(module.split(".")[: depth + 1]) for module in modules for depth in range(module.count(".") + 1)}
    members = Counter(data.get("module") for _, data in graph.nodes(data=True))
    # Model Explorer folds a layer whose only child is one op node (block.1, the ReLU) into its parent.
    single = {layer for layer in layers if members[layer] == 1 and not any(other.startswith(layer + ".") for other in layers)}
    text = page.evaluate("document.body.innerText")
    for name, value in [("op node count", graph.number_of_nodes()), ("layer count", len(layers - single)), ("num_edges", graph.number_of_edges())]:
        assert re.search(rf"\n{name}\s+{value}\n", text), f"{name} {value} not in the graph info panel"

    # The top-level nodes and layers, as Model Explorer lists them beside the gradient node data.
    top_nodes = {data.get("root") or data.get("op") for _, data in graph.nodes(data=True) if not data.get("module") and data["kind"] != "leaf"}
    top_layers = {module.split(".")[0] for module in modules}
    assert top_layers == {"embed", "block", "head"}
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    rows: set[str] = set()
    while time.monotonic() < deadline:
        rows = root_level_rows(page.evaluate("document.body.innerText"))
        if rows >= top_nodes | top_layers:
            break
        page.wait_for_timeout(250)
    assert rows == top_nodes | top_layers

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "model-explorer.png"))
    # The WebGL canvas drew the graph: alone on the page (every other element hidden), it is not one colour.
    canvas = page.locator("canvas").first
    assert canvas.bounding_box()["width"] * canvas.bounding_box()["height"] > 100_000
    page.add_style_tag(content="* { visibility: hidden !important } canvas { visibility: visible !important }")
    png = base64.b64encode(canvas.screenshot()).decode("ascii")
    drawn = page.evaluate(DRAWN_PIXELS, f"data:image/png;base64,{png}")
    assert drawn > 0.01, f"only {drawn:.2%} of the canvas differs from its background"
    page.close()

    stayed_local(outside, errors, served["proxy"])


@pytest.fixture(scope="module")
def served_diff(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The server subprocess with two graphs to compare: the block's ReLU became a GELU and a Tanh."""
    graphs = model_graph(), model_graph(torch.nn.GELU(), torch.nn.Tanh())
    for state in start_server(tmp_path_factory.mktemp("model-explorer-diff"), SERVE_DIFF, graphs):
        yield state | {"graphs": graphs}


def test_a_diff_opens_side_by_side_with_its_node_data(served_diff: dict[str, Any], browser: Any) -> None:  # noqa: F811
    a, b = served_diff["graphs"]
    page, outside, errors = open_page(browser, served_diff["url"], width=1600)

    # Two panes, each with its graph info: Model Explorer's own count of the nodes it loaded, a's left, b's right.
    page.locator("text=op node count").nth(1).wait_for(timeout=LOAD_TIMEOUT_S * 1000)
    text = page.evaluate("document.body.innerText")
    assert re.findall(r"\nop node count\s+(\d+)\n", text) == [str(a.number_of_nodes()), str(b.number_of_nodes())]
    assert re.findall(r"^(before|after) \| ([ab])$", text, flags=re.MULTILINE) == [("before", "a"), ("after", "b")]

    # The ops that only one side's graph has (torch's own ops) are marked on that side.
    merged = gradexport.diff(a, b)
    ops = [{data.get("op") for _, data in graph.nodes(data=True)} for graph in (a, b)]
    assert ops[0] - ops[1] == {"ReluBackward0"} and ops[1] - ops[0] == {"GeluBackward0", "TanhBackward0"}
    for side, state in [(0, "removed"), (1, "added")]:
        for _, data in merged.nodes(data=True):
            op = data["changes"]["op"][side] if "op" in data.get("changes", {}) else data.get("op")
            if op in ops[side] - ops[1 - side]:
                assert data["diff"] in ("changed", state)
    # Each pane reads its own node data, the diff states showing (its eye open): the sum Model Explorer
    # shows per pane (the last column of its aggregated stats) is that of the nodes it has.
    expected = [sum(DIFF_VALUES[data["diff"]] for _, data in merged.nodes(data=True) if data["diff"] != other) for other in ("added", "removed")]
    assert max(expected) > 0
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    sums: list[str] = []
    while time.monotonic() < deadline:
        text = page.evaluate("document.body.innerText")
        sums = [line.split("\t")[-1] for line in text.splitlines() if line.startswith("Sum\t")]
        if len(sums) == 2 and len(re.findall(r"\ndiff\nvisibility\ndelete\n", text)) == 2:
            break
        page.wait_for_timeout(250)
    assert sums == [str(value) for value in expected]

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "model-explorer-diff.png"))
    page.close()
    stayed_local(outside, errors, served_diff["proxy"])


def root_level_rows(text: str) -> set[str]:
    """The node names in the side panel's "Root-level nodes stats" table (rows ``index<TAB>name<TAB>values``)."""
    if "Root-level nodes stats" not in text:
        return set()
    section = text.split("Root-level nodes stats", 1)[1].split("\nNode data", 1)[0]
    return set(re.findall(r"^\d+\t([^\t\n]+)\t", section, flags=re.MULTILINE))


#: The share of an image's pixels that differ from its most common colour (the background).
DRAWN_PIXELS = """
async (source) => {
  const image = new Image();
  image.src = source;
  await image.decode();
  const scratch = document.createElement('canvas');
  scratch.width = image.width;
  scratch.height = image.height;
  const context = scratch.getContext('2d');
  context.drawImage(image, 0, 0);
  const pixels = new Uint32Array(context.getImageData(0, 0, image.width, image.height).data.buffer);
  const counts = new Map();
  for (const pixel of pixels) counts.set(pixel, (counts.get(pixel) || 0) + 1);
  return 1 - Math.max(...counts.values()) / pixels.length;
}
"""


def test_ctrl_c_stops_the_server_and_removes_its_file(served: dict[str, Any]) -> None:
    process = served["process"]
    (models,) = parse_qs(urlsplit(served["url"]).query)["data"]
    graph_file = Path(json.loads(models)["models"][0]["url"])
    assert graph_file.is_file() and graph_file.name.endswith(".me.json")
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=20) == 0
    assert not graph_file.exists() and not graph_file.parent.exists()
