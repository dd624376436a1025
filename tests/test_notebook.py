"""gradexport.show: the rich display protocol Jupyter uses to draw a graph inline."""

from __future__ import annotations

import html

import torch
from format_fixtures import needs_dot, svg_text_lines

import gradexport


def blog():
    torch.manual_seed(6)
    x = torch.randn(2, requires_grad=True)
    x1, x2 = x.unbind()
    return x1 + x2, {"x": x}


@needs_dot
def test_a_notebook_gets_the_svg():
    loss, params = blog()
    view = gradexport.show(loss, params=params, direction="LR")
    assert repr(view) == "GraphView(4 nodes, 4 edges)"
    bundle = view._repr_mimebundle_()
    assert set(bundle) == {"image/svg+xml", "text/html", "text/plain"}
    # The viewer, isolated in an iframe whose srcdoc is the page to_html writes.
    assert bundle["text/html"].startswith("<iframe") and html.escape(gradexport.to_html(view.graph, direction="LR")) in bundle["text/html"]
    assert bundle["image/svg+xml"] == view._repr_svg_() == gradexport.to_svg(view.graph, direction="LR")
    assert {"x", "UnbindBackward0", "0→0", "1→1"} <= set(svg_text_lines(bundle["image/svg+xml"]))


def test_without_graphviz_a_notebook_gets_mermaid(without_graphviz):
    loss, params = blog()
    graph = gradexport.to_networkx(loss, params=params)
    view = gradexport.show(graph, direction="BT")
    assert view._repr_svg_() is None
    bundle = view._repr_mimebundle_()
    assert set(bundle) == {"text/vnd.mermaid", "text/html", "text/plain"}
    assert bundle["text/vnd.mermaid"] == gradexport.to_mermaid(graph, direction="BT")


def deep_model_loss() -> tuple[torch.Tensor, torch.nn.Module]:
    """A 150-layer MLP, over mermaid.js's 500 edges when drawn whole."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(2, 2) for _ in range(150)))
    with gradexport.capture_modules():
        loss = model(torch.ones(1, 2)).sum()
    return loss, model


def test_without_graphviz_a_notebook_gets_the_mermaid_that_fits(without_graphviz):
    """show() fits the Mermaid it falls back to as to_mermaid does (fit=True is the default): not the whole graph."""
    loss, model = deep_model_loss()
    view = gradexport.show(loss, module=model)
    mermaid = view._repr_mimebundle_()["text/vnd.mermaid"]
    assert mermaid == gradexport.to_mermaid(loss, module=model)
    edges = sum(" --> " in line or "-->|" in line for line in mermaid.splitlines())
    assert edges <= 500, f"{edges} edges: over mermaid.js's maxEdges"
    whole = gradexport.show(loss, module=model, fit=False)._repr_mimebundle_()["text/vnd.mermaid"]
    assert sum("-->" in line for line in whole.splitlines()) > 500  # fit=False draws it whole, as asked
