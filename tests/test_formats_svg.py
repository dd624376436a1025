"""SVG: which Graphviz program renders it, what happens without one, and what the SVG may contain."""

from __future__ import annotations

import shutil
import sysconfig
import warnings
from pathlib import Path

import networkx as nx
import pytest
import torch
from format_fixtures import NASTY_NAMES, needs_dot, svg_text_lines

import gradexport
from gradexport.formats import GraphvizNotFoundError, RenderError, svg

DOT = shutil.which("dot")


def fake_program(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def blog_loss():
    torch.manual_seed(6)
    x = torch.randn(4, 4, requires_grad=True)
    y = torch.randn(4, 4, requires_grad=True)
    return (x * y).sum(), {"x": x, "y": y}


@needs_dot
def test_blog_svg_shows_names_shapes_and_indices_and_is_stable():
    loss, params = blog_loss()
    first = gradexport.to_svg(loss, params=params)
    shown = svg_text_lines(first)
    assert {"x", "y", "(4, 4)", "SumBackward0", "MulBackward0", "0→0", "1→0"} <= set(shown)
    assert gradexport.to_svg(loss, params=params) == first


@needs_dot
def test_names_never_become_markup():
    w = torch.ones(2, requires_grad=True)
    params = dict.fromkeys(NASTY_NAMES, w)  # a tied tensor: one leaf under every name
    text = gradexport.to_svg({'<b>root</b> & "end"': (w * 2).sum()}, params=params)
    shown = svg_text_lines(text)  # parses as XML with Graphviz's elements only
    assert "<script>" not in text and "<b>" not in text
    assert '<b>root</b> & "end"' in shown
    assert any("<script>alert(1)</script>" in line and "&amp; &lt; &" in line for line in shown)


@needs_dot
def test_program_order_prog_then_environment_then_dot_then_graphviz_pure(tmp_path, monkeypatch):
    wrapper = f'exec "{DOT}" "$@"'
    env_program = fake_program(tmp_path / "env", "from-env", wrapper)
    prog_program = fake_program(tmp_path / "prog", "from-prog", wrapper)
    pure = fake_program(tmp_path / "path", "graphviz-pure", wrapper)

    monkeypatch.setenv("GRADEXPORT_DOT", str(env_program))
    assert svg.find_graphviz() == str(env_program)
    assert svg.find_graphviz(prog_program) == str(prog_program)
    monkeypatch.delenv("GRADEXPORT_DOT")
    assert svg.find_graphviz() == DOT
    monkeypatch.setenv("PATH", str(pure.parent))
    assert svg.find_graphviz() == str(pure)
    w = torch.ones(1, requires_grad=True)
    assert {"w", "(1,)"} <= set(svg_text_lines(gradexport.to_svg(w * 2, params={"w": w})))


def test_without_graphviz_the_error_says_how_to_install(without_graphviz, monkeypatch):
    w = torch.ones(1, requires_grad=True)
    with pytest.raises(GraphvizNotFoundError, match=r"apt-get install graphviz.*pip install gradexport\[svg\]"):
        gradexport.to_svg(w * 2)
    with pytest.raises(GraphvizNotFoundError, match="'no-such-dot' .from prog"):
        gradexport.to_svg(w * 2, prog="no-such-dot")
    monkeypatch.setenv("GRADEXPORT_DOT", "also-missing")
    with pytest.raises(GraphvizNotFoundError, match="'also-missing' .from GRADEXPORT_DOT"):
        gradexport.to_svg(w * 2)
    assert gradexport.to_dot(w * 2) and gradexport.to_mermaid(w * 2) and gradexport.to_json(w * 2)


def test_a_failing_program_raises_with_its_message_and_warnings_are_passed_on(tmp_path):
    failing = fake_program(tmp_path, "broken-dot", 'echo "Error: syntax error in line 1" >&2; exit 3')
    with pytest.raises(RenderError, match="exit code 3: Error: syntax error in line 1"):
        svg.render_svg("digraph {}", prog=failing)
    chatty = fake_program(tmp_path, "chatty-dot", 'cat >/dev/null; echo "Warning: font"  >&2; echo "<svg/>"')
    with pytest.warns(RuntimeWarning, match="Warning: font"):
        assert svg.render_svg("digraph {}", prog=chatty) == "<svg/>\n"


def test_a_crashing_program_is_named_with_the_signal_the_size_and_what_works(tmp_path):
    crashing = fake_program(tmp_path, "crashing-dot", "cat >/dev/null; kill -SEGV $$")
    graph = nx.MultiDiGraph()
    for index in range(5):
        graph.add_node(f"n{index}", kind="backward", op="Op")
        if index:
            graph.add_edge(f"n{index - 1}", f"n{index}", key=0, next_index=0, input_nr=0)
    with pytest.raises(RenderError) as raised:
        svg.to_svg(graph, prog=crashing)
    message = str(raised.value)
    assert message.startswith(f"Graphviz crashed (SIGSEGV) laying out 5 nodes with {crashing}.")
    assert "collapse" in message and "format html" in message and "\n" not in message


def has_graphviz_pure() -> bool:
    try:
        svg.find_graphviz("graphviz-pure")
    except svg.GraphvizNotFoundError:
        return False
    return True


@pytest.mark.skipif(not has_graphviz_pure(), reason="graphviz-pure (pip install gradexport[svg]) not installed")
def test_graphviz_pure_is_found_beside_the_interpreter_without_an_activated_venv(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("GRADEXPORT_DOT", raising=False)
    found = svg.find_graphviz()
    assert Path(found).name == "graphviz-pure" and Path(found).parent == Path(sysconfig.get_path("scripts"))


@pytest.mark.skipif(not has_graphviz_pure(), reason="graphviz-pure (pip install gradexport[svg]) not installed")
def test_graphviz_pure_renders_with_known_font_metrics():
    loss, params = blog_loss()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = gradexport.to_svg(loss, params=params, prog="graphviz-pure")
    assert {"x", "y", "0→0", "1→0"} <= set(svg_text_lines(text))
    # It sizes non-ASCII characters (the arrow) as spaces and says so; a font it lacks metrics for would warn too.
    assert not [warning for warning in caught if "metrics" in str(warning.message)]
