"""Model Explorer's server as gradexport runs it, attacked: other files, a foreign Host (DNS rebinding), huge names.

The server runs in a subprocess, as in tests/test_model_explorer_browser.py;
requests go to it over real HTTP, and the page opens in headless Chromium.
"""

from __future__ import annotations

import base64
import http.client
import importlib.util
import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest
import torch
from test_model_explorer_browser import (
    DRAWN_PIXELS,
    LOAD_TIMEOUT_S,
    SERVE,
    browser,  # noqa: F401  (a fixture)
    model_graph,
    open_page,
    start_server,
    stayed_local,
)

import gradexport

pytestmark = pytest.mark.skipif(importlib.util.find_spec("model_explorer") is None, reason="Model Explorer is not installed (pip install gradexport[explorer])")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    yield from start_server(tmp_path_factory.mktemp("model-explorer-hostile"), SERVE, model_graph())


def get(url: str, path: str, host: str | None = None) -> tuple[int, dict[str, str], str]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("GET", path, headers={"Host": host} if host else {})
    response = connection.getresponse()
    body = response.read().decode("utf-8", "replace")
    connection.close()
    return response.status, dict(response.getheaders()), body


def graph_path(url: str) -> str:
    (data,) = parse_qs(urlsplit(url).query)["data"]
    return json.loads(data)["models"][0]["url"]


def test_only_the_graph_can_be_read(served):
    status, _, body = get(served["url"], "/api/v1/read_text_file?path=" + quote("/etc/passwd"))
    assert status == 403 and "root:" not in body
    status, _, body = get(served["url"], "/api/v1/read_text_file?path=" + quote(graph_path(served["url"])))
    assert status == 200 and json.loads(json.loads(body)["content"])["graphs"][0]["nodes"]
    for route in ("/api/v1/send_command?json=" + quote(json.dumps({"extensionId": "x", "cmdId": "convert", "modelPath": "/etc/passwd"})),):
        assert get(served["url"], route)[0] == 403


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:{port}", "127.0.0.1.attacker.example:{port}"])
def test_a_foreign_host_is_refused(served, host):
    port = urlsplit(served["url"]).port
    status, _, body = get(served["url"], "/api/v1/read_text_file?path=" + quote(graph_path(served["url"])), host=host.format(port=port))
    assert status == 403 and "nodes" not in body
    assert get(served["url"], "/", host=host.format(port=port))[0] == 403
    assert get(served["url"], "/", host=f"localhost:{port}")[0] == 200


def test_the_page_names_no_web_font_and_may_load_only_from_its_server(served):
    status, headers, page = get(served["url"], "/")
    assert status == 200 and "<app-root" in page
    assert "http://" not in page.replace("http://www.apache.org/licenses/LICENSE-2.0", "") and "https://" not in page
    assert "connect-src 'self'" in headers["Content-Security-Policy"]


def long_names_graph() -> Any:
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    for length in (2_000, 20_000, 100_000):
        model.add_module("m" * length, torch.nn.Linear(3, 3))
    with gradexport.capture_modules():
        out = model(torch.randn(2, 3))
    x = torch.ones(3, requires_grad=True)
    return gradexport.to_networkx({"r" * 100_000: out.sum() + (x * 2).sum()}, module=model, params={"p" * 20_000: x})


def test_long_names_are_shortened_in_labels_and_layers(tmp_path):
    from gradexport.formats.labels import MAX_LINE_CHARS
    from gradexport.formats.model_explorer import write_model_explorer

    write_model_explorer(long_names_graph(), tmp_path / "graph.me.json")
    (graph,) = json.loads((tmp_path / "graph.me.json").read_text())["graphs"]
    assert max(len(node["label"]) for node in graph["nodes"]) <= MAX_LINE_CHARS
    layers = {part for node in graph["nodes"] for part in node["namespace"].split("/")}
    assert max(map(len, layers)) <= MAX_LINE_CHARS and len(layers - {""}) == 3  # still three layers
    names = {value["value"] for node in graph["nodes"] for value in node["attrs"] if value["key"] == "root"}
    assert names == {"r" * 100_000}  # the whole name stays in the attributes


@pytest.mark.browser
def test_long_names_draw_without_hanging(tmp_path, browser):  # noqa: F811
    for state in start_server(tmp_path, SERVE, long_names_graph()):
        page, outside, errors = open_page(browser, state["url"], width=1400)
        started = time.monotonic()
        page.locator("text=op node count").first.wait_for(timeout=LOAD_TIMEOUT_S * 1000)
        page.locator("canvas").first.wait_for(timeout=LOAD_TIMEOUT_S * 1000)
        assert "layer count\n\t\n3\n" in page.evaluate("document.body.innerText")
        page.wait_for_timeout(2_000)  # the first layout
        canvas = page.locator("canvas").first
        page.add_style_tag(content="* { visibility: hidden !important } canvas { visibility: visible !important }")
        png = base64.b64encode(canvas.screenshot()).decode("ascii")
        assert page.evaluate(DRAWN_PIXELS, f"data:image/png;base64,{png}") > 0.01  # the graph is drawn
        assert time.monotonic() - started < LOAD_TIMEOUT_S
        page.close()
        stayed_local(outside, errors, state["proxy"])
