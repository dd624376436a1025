"""The viewer page of a watch history (`gradexport.to_html(history)`, ``gradexport view --watch``), checked in Chromium."""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any

import pytest
import torch
from browser_fixtures import browser  # noqa: F401
from torch import nn

import gradexport
from gradexport.formats.styles import WATCH_GRAD_BOUNDS, WATCH_GRAD_COLORS, grad_legend
from gradexport.frontends.cli import main


def watched_history(
    tmp_path: Path,
    per_step: list[dict[str, float]] | None = None,
    depth: int = 2,
    activation: type[nn.Module] = nn.Tanh,
    grad_norms: list[dict[str, float]] | None = None,
) -> tuple[Path, dict[str, float]]:
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(4, 8), activation()]
    for _ in range(depth - 1):
        layers += [nn.Linear(8, 8), activation()]
    model = nn.Sequential(*layers, nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    outputs: dict[str, float] = {}
    for name, module in model.named_modules():

        def hook(module: nn.Module, args: Any, out: torch.Tensor, name: str = name) -> None:
            out.register_hook(lambda grad: outputs.__setitem__(name, float(torch.linalg.vector_norm(grad))))

        module.register_forward_hook(hook)
    path = tmp_path / "run.jsonl"
    with gradexport.watch(model, optimizer=optimizer, path=path):
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            if grad_norms is not None:
                grad_norms.append({name: float(torch.linalg.vector_norm(p.grad)) for name, p in model.named_parameters() if p.grad is not None})
            optimizer.step()
            if per_step is not None:
                per_step.append(dict(outputs))
    return path, outputs


def test_the_history_graph_carries_the_last_steps_norms_on_the_edges_into_each_module(tmp_path: Path) -> None:
    path, outputs = watched_history(tmp_path)
    graph = gradexport.records.load_watch(path).graph()
    entering = {graph.nodes[v]["module"]: d["grad"]["norm"] for u, v, d in graph.edges(data=True) if "grad" in d}
    for module in ("0", "2", "4"):
        assert entering[module] == pytest.approx(outputs[module], rel=1e-6)


def test_view_watch_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = watched_history(tmp_path)
    assert main(["view", "--watch", str(path), "--no-open"]) == 0
    page = path.with_suffix(".html")
    assert capsys.readouterr().out.strip() == str(page)
    assert "gradexportViewer" in page.read_text()
    assert main(["view", "--watch", str(tmp_path / "missing.jsonl"), "--no-open"]) == 1


def open_page(browser: Any, page_path: Path) -> tuple[Any, list[str]]:  # noqa: F811
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.route("**/*", lambda route: route.continue_() if route.request.url == page_path.as_uri() else route.abort())
    page.goto(page_path.as_uri(), wait_until="load")
    page.wait_for_function("window.gradexportViewer !== undefined")
    page.evaluate("window.gradexportViewer.ready")
    page.evaluate("window.gradexportViewer.expandAll()")
    return page, errors


EDGE_COLOURS = "[...document.querySelectorAll('.gx-edge-line')].map(p => p.style.stroke).filter(Boolean)"
EDGE_LABELS = "[...document.querySelectorAll('.gx-edge-label')].map(label => label.textContent)"
RANGE = "[...document.querySelectorAll('.gx-legend-row')].map(row => row.textContent).join('|')"


@pytest.mark.browser
def test_the_step_scrubber_recolours_edges_on_a_fixed_scale(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    per_step: list[dict[str, float]] = []
    path, _ = watched_history(tmp_path, per_step)
    history = gradexport.records.load_watch(path)
    page_path = tmp_path / "watch.html"
    page_path.write_text(gradexport.to_html(history), encoding="utf-8")
    page, errors = open_page(browser, page_path)
    api = "window.gradexportViewer"
    assert page.evaluate(f"{api}.iterations()") == [0, 1, 2]
    assert page.evaluate("document.querySelectorAll('[data-legend^=\"grad-\"]').length") == len(WATCH_GRAD_COLORS)
    legend_last, colours_last, labels_last = page.evaluate(RANGE), page.evaluate(EDGE_COLOURS), page.evaluate(EDGE_LABELS)
    assert len(colours_last) >= 3
    for k in (0, 1, 2):
        values = page.evaluate(f"{api}.iteration({k})")
        graph = history.graph(k)
        for node, value in values.items():
            if graph.nodes[node].get("kind") == "leaf":
                continue  # a parameter's own norm (test_each_parameters_leaf_carries_its_own_norm_at_every_step)
            assert value == pytest.approx(per_step[k][graph.nodes[node]["module"]], rel=1e-6)
        assert {graph.nodes[node]["module"] for node in values} >= {"0", "2", "4"}
        assert page.evaluate(RANGE) == legend_last  # one scale for every step
    page.evaluate(f"{api}.iteration(0)")
    # Another step's norms on the edges (their colours are checked against the scale in test_a_log_scale_...).
    assert page.evaluate(EDGE_LABELS) != labels_last and len(page.evaluate(EDGE_COLOURS)) == len(colours_last)
    assert page.evaluate("document.querySelector('.gx-watch-step').textContent") == "step 0"
    with pytest.raises(Exception, match="no recorded step"):
        page.evaluate(f"{api}.iteration(7)")
    errors[:] = [error for error in errors if "no recorded step" not in error]
    node = next(node for node, data in graph.nodes(data=True) if data.get("module") == "2")
    page.evaluate(f"id => {api}.select(id)", node)
    assert page.evaluate("document.querySelectorAll('.gx-watch-chart polyline').length") == 1
    assert errors == []
    page.close()


@pytest.mark.browser
def test_vanishing_modules_are_flagged_and_searchable(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    path, _ = watched_history(tmp_path, depth=12, activation=nn.Sigmoid)
    history = gradexport.records.load_watch(path)
    flagged = set(history.flags())
    assert "0" in flagged
    page_path = tmp_path / "sigmoid.html"
    page_path.write_text(gradexport.to_html(history), encoding="utf-8")
    page, errors = open_page(browser, page_path)
    found = page.evaluate("window.gradexportViewer.search('vanishing')")
    # One match per flagged layer: its module's group, not each of the layer's nodes.
    assert sorted(found) == sorted(f"module:{module}" for module in flagged)
    assert page.evaluate("document.querySelector('.gx-results').children.length") == len(flagged)
    assert errors == []
    page.close()


def vanishing_page(tmp_path: Path, browser: Any, grad_norms: list[dict[str, float]] | None = None) -> tuple[Any, list[str], Any]:  # noqa: F811
    path, _ = watched_history(tmp_path, depth=12, activation=nn.Sigmoid, grad_norms=grad_norms)
    history = gradexport.records.load_watch(path)
    page_path = tmp_path / "sigmoid.html"
    page_path.write_text(gradexport.to_html(history), encoding="utf-8")
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.route("**/*", lambda route: route.continue_() if route.request.url == page_path.as_uri() else route.abort())
    page.goto(page_path.as_uri(), wait_until="load")
    page.wait_for_function("window.gradexportViewer !== undefined")
    page.evaluate("window.gradexportViewer.ready")
    return page, errors, history


@pytest.mark.browser
def test_the_page_opens_on_the_vanishing_layer_with_the_smallest_gradient(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    page, errors, history = vanishing_page(tmp_path, browser)
    norms = history.module_norms(history.steps[-1])
    vanishing = [module for module, reasons in history.flags().items() if any(reason.startswith("vanishing") for reason in reasons)]
    deepest = min(vanishing, key=lambda module: norms[module])
    assert norms[deepest] < max(value for value in norms.values() if value is not None) * 1e-3  # the case is real
    heading = page.evaluate("document.querySelector('.gx-panel h2').textContent")
    assert heading.split(":")[0] == deepest
    assert page.evaluate("document.querySelector('.gx-crumbs .gx-here').textContent").split(":")[0] == deepest
    assert errors == []
    page.close()


@pytest.mark.browser
def test_each_parameters_leaf_carries_its_own_norm_at_every_step(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    grad_norms: list[dict[str, float]] = []
    page, errors, history = vanishing_page(tmp_path, browser, grad_norms)
    graph = history.graph()
    leaves = {node: data["names"][0] for node, data in graph.nodes(data=True) if data.get("kind") == "leaf" and data.get("names")}
    assert len(leaves) == len(grad_norms[0])
    for k in range(len(history.steps)):
        values = page.evaluate(f"window.gradexportViewer.iteration({k})")
        for node, name in leaves.items():
            assert values[node] == pytest.approx(grad_norms[k][name], rel=1e-6), (k, name)
    node, name = next(iter(leaves.items()))
    page.evaluate("id => window.gradexportViewer.select(id)", node)
    assert page.evaluate("document.querySelector('.gx-watch h3').textContent").startswith(f"‖{name}.grad‖")
    assert errors == []
    page.close()


@pytest.mark.browser
def test_the_graph_panel_sums_the_history_up_instead_of_listing_every_float(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    page, errors, history = vanishing_page(tmp_path, browser)
    page.evaluate("document.querySelector('.gx-crumbs button').click()")  # "graph": the graph's own panel
    text = page.evaluate("document.querySelector('.gx-watch-summary').parentElement.textContent")
    assert f"{len(history.flags())} flagged layers" in text
    assert "watch_modules" not in text and "watch_params" not in text
    numbers = [token for token in text.replace(",", " ").split() if any(ch.isdigit() for ch in token)]
    assert len(numbers) < 10 * len(history.flags()) + 20  # a few figures per flagged layer, not every step's norm of every module
    assert errors == []
    page.close()


def test_model_explorer_node_data_per_step_holds_the_module_output_norms(tmp_path: Path) -> None:
    pytest.importorskip("model_explorer")
    path, outputs = watched_history(tmp_path)
    history = gradexport.records.load_watch(path)
    data = gradexport.records.watch_node_data(history)
    assert sorted(data) == history.steps == [0, 1, 2]
    graph = history.graph(2)
    results = data[2].graphsData["backward"].results
    for u, v, d in graph.edges(data=True):
        if "grad" in d:
            assert results[v].value == pytest.approx(outputs[graph.nodes[v]["module"]], rel=1e-6)
    assert data[0].graphsData["backward"].results != results  # another step, other values


@pytest.mark.browser
def test_a_log_scale_of_three_decades_a_step_tells_vanishing_layers_apart(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    page, errors, history = vanishing_page(tmp_path, browser)
    page.evaluate("window.gradexportViewer.expandAll()")
    legend = page.evaluate("[...document.querySelectorAll('[data-legend^=grad-]')].map(row => row.textContent)")
    assert legend == [text for text, _, _ in grad_legend(WATCH_GRAD_BOUNDS, WATCH_GRAD_COLORS)]
    strokes = page.evaluate(
        "[...document.querySelectorAll('.gx-edge')].map(g => [g.querySelector('.gx-edge-line').style.stroke, g.querySelector('.gx-edge-label').textContent])"
    )
    small_steps = set()
    checked = 0
    for stroke, label in strokes:
        if not stroke or "‖g‖" not in label or "×" in label:
            continue
        norm = float(label.split("‖g‖ ")[1].split()[0])
        if any(abs(norm - bound) <= 0.01 * bound for bound in WATCH_GRAD_BOUNDS):
            continue  # printed with 3 digits: a norm at a bound may fall either side
        step = bisect.bisect_right(WATCH_GRAD_BOUNDS, norm)
        assert stroke == f"var(--gx-grad-{step})", label
        checked += 1
        if norm < 1e-3:
            small_steps.add(step)
    norms = [value for value in history.module_norms(history.steps[-1]).values() if value is not None]
    assert min(norms) < 1e-6 < 1e-3 < max(norms)  # the case spans the decades the old scale painted alike
    assert checked >= 10 and len(small_steps) >= 2
    assert errors == []
    page.close()
