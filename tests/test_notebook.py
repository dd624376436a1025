"""gradexport.show: the rich display protocol Jupyter uses to draw a graph inline."""

from __future__ import annotations

import html

import pytest
import torch
from format_fixtures import needs_dot, svg_text_lines

import gradexport


def blog():
    torch.manual_seed(6)
    x = torch.randn(2, requires_grad=True)
    x1, x2 = x.unbind()
    return x1 + x2, {"x": x}


@needs_dot
def test_a_notebook_gets_the_svg_with_a_caption_and_no_script():
    loss, params = blog()
    view = gradexport.show(loss, params=params, direction="LR")
    assert repr(view) == "GraphView(4 nodes, 4 edges)"
    bundle = view._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"}
    figure = bundle["text/html"]
    assert figure.startswith('<figure class="gradexport"') and "<script" not in figure and "<?xml" not in figure
    assert view._repr_svg_() == gradexport.to_svg(view.graph, direction="LR")
    assert view._repr_svg_()[view._repr_svg_().index("<svg") :] in figure  # Graphviz's drawing, inline
    assert {"x", "UnbindBackward0", "0→0", "1→1"} <= set(svg_text_lines(view._repr_svg_()))
    assert "4 nodes, 4 edges. view.interactive() opens the interactive viewer" in html.unescape(figure)


def test_the_interactive_viewer_comes_on_demand_isolated_in_an_iframe():
    loss, params = blog()
    view = gradexport.show(loss, params=params, direction="LR")
    page = view.interactive()._repr_html_()
    # The viewer, isolated in an iframe whose srcdoc is the page to_html writes.
    assert page.startswith("<iframe") and html.escape(gradexport.to_html(view.graph, direction="LR")) in page


def test_show_model_and_inputs_runs_the_forward_pass_under_module_capture():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh())
    inputs = torch.ones(4, 3)
    view = gradexport.show(model, inputs, direction="LR")
    with gradexport.capture_modules():
        output = model(inputs)
    expected = gradexport.to_networkx(output, module=model)
    assert dict(view.graph.nodes(data="module")) == dict(expected.nodes(data="module")) and "0" in dict(expected.nodes(data="module")).values()
    keywords = gradexport.show(torch.nn.Bilinear(2, 2, 1), {"input1": torch.ones(1, 2), "input2": torch.ones(1, 2)})
    positional = gradexport.show(torch.nn.Bilinear(2, 2, 1), (torch.ones(1, 2), torch.ones(1, 2)))
    assert keywords.graph.number_of_nodes() == positional.graph.number_of_nodes() > 2


def test_show_refuses_inputs_without_a_model_and_a_model_without_inputs():
    loss, params = blog()
    with pytest.raises(gradexport.errors.ArgumentTypeError, match=r"show: inputs are for a model"):
        gradexport.show(loss, torch.ones(2))
    with pytest.raises(gradexport.errors.ArgumentTypeError, match=r"show: a model needs its inputs"):
        gradexport.show(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("format_name", ["dot", "mermaid", "json", "html"])
def test_a_view_saves_to_the_format_its_extension_names_with_its_options(tmp_path, format_name):
    loss, params = blog()
    view = gradexport.show(loss, params=params, direction="LR")
    extension = gradexport.api.registry.FORMATS[format_name].extension
    path = view.save(tmp_path / f"picture{extension}")
    keywords = {} if format_name == "json" else {"direction": "LR"}
    assert path == tmp_path / f"picture{extension}"
    assert path.read_text() == gradexport.api.export.render(view.graph, format_name, **keywords)[format_name]
    with pytest.raises(gradexport.errors.ArgumentValueError, match=r"GraphView.save: picture.png has no extension of a format"):
        view.save(tmp_path / "picture.png")


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
