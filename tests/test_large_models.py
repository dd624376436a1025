"""Large models stay drawable: module boxes, folding on request, and Mermaid folded to fit its limits."""

from __future__ import annotations

import sys
import warnings

import networkx as nx
import pytest
import torch
from format_fixtures import mermaid_shown, needs_mermaid, parse_mermaid
from torch import nn

import gradexport
from gradexport.formats import MermaidSizeWarning
from gradexport.frontends.cli import main

ENCODER_CODE = """
import torch
from torch import nn

def encoder_loss():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
    model = nn.TransformerEncoder(layer, num_layers=12, enable_nested_tensor=False)
    return model(torch.randn(5, 2, 8)).pow(2).mean(), model
"""


def encoder() -> tuple[torch.Tensor, nn.Module]:
    namespace: dict[str, object] = {}
    exec(ENCODER_CODE, namespace)
    with gradexport.capture_modules():
        return namespace["encoder_loss"]()  # type: ignore[operator]


@needs_mermaid
def test_mermaid_of_a_twelve_layer_encoder_is_folded_to_fit_and_renders() -> None:
    loss, model = encoder()
    graph = gradexport.to_networkx(loss, module=model)
    assert graph.number_of_edges() > 500  # over mermaid.js's limit when flat
    with pytest.warns(MermaidSizeWarning, match=r"modules at depth \d and deeper are folded"):
        folded_text = gradexport.to_mermaid(graph)
    with pytest.warns(MermaidSizeWarning, match="mermaid.js refuses more than"):
        flat_text = gradexport.to_mermaid(graph, fit=False)
    folded, flat = parse_mermaid([folded_text, flat_text])
    assert folded["ok"] and len(folded["edges"]) <= 500
    assert not flat["ok"] and "Edge limit exceeded" in flat["error"]  # mermaid.js refuses it: the reason to fold
    titles = [mermaid_shown(sub["title"])[0] for sub in folded["subgraphs"]]
    assert "layers: ModuleList" in titles and "layers.11: TransformerEncoderLayer" in titles


def test_depth_option_folds_before_drawing_in_every_format() -> None:
    loss, model = encoder()
    graph = gradexport.to_networkx(loss, module=model)
    expected = gradexport.collapse(graph, 2)
    from_json = gradexport.from_json(gradexport.to_json(graph, depth=2))
    assert nx.utils.graphs_equal(from_json, expected)
    dot_text = gradexport.to_dot(graph, depth=2)
    assert dot_text.count('class="module"') == 12  # layers.0 ... layers.11
    assert 'subgraph "cluster_' in dot_text
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gradexport.to_mermaid(graph, depth=2)  # fits: no warning


def test_cli_boxes_modules_and_folds_with_depth(capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    user_file = tmp_path / "models.py"
    user_file.write_text(ENCODER_CODE)
    status = main([f"{user_file}:encoder_loss", "-f", "dot,mermaid", "-o", str(tmp_path / "flat"), "-q"])
    captured = capsys.readouterr()
    assert status == 0
    assert captured.err.startswith("gradexport: warning: the full Mermaid diagram") and captured.err.count("\n") == 1
    flat_dot = (tmp_path / "flat" / "encoder_loss.dot").read_text(encoding="utf-8")
    assert 'label="layers.11.self_attn: MultiheadAttention";' in flat_dot  # nodes boxed by the module that made them
    assert main([f"{user_file}:encoder_loss", "-f", "dot", "-o", str(tmp_path / "folded"), "--depth", "1", "-q"]) == 0
    folded_dot = (tmp_path / "folded" / "encoder_loss.dot").read_text(encoding="utf-8")
    assert folded_dot.count('class="module"') == 1 and 'label="layers: ModuleList\\nfolded: ' in folded_dot
    assert main([f"{user_file}:encoder_loss", "--depth", "-1"]) == 2
