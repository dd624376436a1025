"""Large graphs and Graphviz (issue 24, item 3): a warning before a long layout, a time limit, a notebook that does not stall.

The layouts are Graphviz's own (the system ``dot``); the sizes are those
measured in benchmarks/graphviz_sizes.py: a GPT-2-like graph of 24 blocks
(1,191 nodes) takes ``dot`` 7.5 s without module boxes on this machine.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import networkx as nx
import pytest
import torch
from format_fixtures import needs_dot
from model_zoo import GPTLike

import gradexport
from gradexport.api.registry import honoured_options
from gradexport.core.limits import GRAPHVIZ_SLOW_NODES
from gradexport.formats import html
from gradexport.frontends.notebook import NOTEBOOK_NODES


def gpt(blocks: int) -> nx.MultiDiGraph:
    torch.manual_seed(0)
    model = GPTLike(blocks=blocks)
    with gradexport.capture_modules():
        output = model(torch.randint(0, 11, (2, 5)))
    return gradexport.to_networkx(output.sum(), module=model)


@pytest.fixture(scope="module")
def large() -> nx.MultiDiGraph:
    graph = gpt(24)
    assert graph.number_of_nodes() > GRAPHVIZ_SLOW_NODES
    return graph


def pid_recording_dot(tmp_path: Path) -> tuple[Path, Path]:
    """A Graphviz program that writes its process id to a file, then runs for a minute.

    Real ``dot`` lays the 1,191-node graph out in 0.7 to 7.5 s here (measured), too close to a
    0.5 s limit to tell a timeout every time.
    """
    pid_file = tmp_path / "dot.pid"
    program = tmp_path / "dot-recording"
    program.write_text(f'#!/bin/sh\necho $$ > "{pid_file}"\nexec sleep 60\n')
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program, pid_file


@needs_dot
def test_a_large_svg_warns_before_graphviz_starts_and_dot_timeout_stops_it(large: nx.MultiDiGraph, tmp_path: Path) -> None:
    program, pid_file = pid_recording_dot(tmp_path)
    target = tmp_path / "large.svg"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(gradexport.errors.RenderTimeoutError, match=r"within dot_timeout=0\.5 s and was stopped; fold modules .* depth=") as raised:
            gradexport.write(large, tmp_path / "large", formats="svg", group_modules=False, prog=program, dot_timeout=0.5)
    # The warning came although dot never finished: it was given before dot ran.
    (warning,) = [item.message for item in caught if isinstance(item.message, gradexport.errors.GraphvizSizeWarning)]
    assert f"{large.number_of_nodes():,} nodes" in str(warning)
    assert "depth=" in str(warning) and "interactive viewer" in str(warning)
    assert isinstance(raised.value, gradexport.errors.RenderError) and isinstance(raised.value, gradexport.GradexportError)
    with pytest.raises(ProcessLookupError):  # dot itself was killed (and reaped), not left running
        os.kill(int(pid_file.read_text()), 0)
    assert not target.exists()  # nothing half-written


@needs_dot
def test_a_graph_within_the_size_renders_without_warning_and_within_its_time_limit() -> None:
    graph = gpt(3)
    assert graph.number_of_nodes() <= GRAPHVIZ_SLOW_NODES
    with warnings.catch_warnings():
        warnings.simplefilter("error", gradexport.errors.GraphvizSizeWarning)
        svg = gradexport.to_svg(graph, dot_timeout=60)
    assert svg.lstrip().startswith("<?xml") or "<svg" in svg


def test_dot_timeout_is_an_option_of_svg_only_and_of_the_command_line() -> None:
    with pytest.raises(ValueError, match="dot_timeout must be a number of seconds > 0 or None, got 0"):
        gradexport.options.RenderOptions(dot_timeout=0)
    with pytest.raises(TypeError, match="dot_timeout applies only to svg"):
        gradexport.to_dot(gpt(1), dot_timeout=5)
    options = gradexport.options.ExportOptions.from_text({"dot_timeout": "2.5"}, formats=("svg",), honoured=honoured_options())
    assert options.render.dot_timeout == 2.5


@needs_dot
def test_show_on_a_large_graph_draws_a_small_folded_picture_and_no_viewer(large: nx.MultiDiGraph) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", gradexport.errors.GraphvizSizeWarning)  # folded for the notebook, far below Graphviz's limit
        view = gradexport.show(large)
        bundle = view._repr_mimebundle_()
    folded = view.static_graph
    assert folded is not None and folded.number_of_nodes() <= NOTEBOOK_NODES < large.number_of_nodes()
    assert folded.graph["collapsed_depth"] >= 1
    # The picture is Graphviz's drawing of the folded graph: one <g class="node"> per node it holds; the cell holds no script.
    assert sorted(bundle) == ["text/html", "text/plain"]
    assert bundle["text/html"].count('class="node') == folded.number_of_nodes()
    assert "<script" not in bundle["text/html"] and "<iframe" not in bundle["text/html"]
    assert f"modules folded from depth {folded.graph['collapsed_depth']}" in bundle["text/html"]
    assert view.interactive()._repr_html_() == html.notebook_iframe(html.to_html(large))  # the whole graph, on demand


@needs_dot
def test_show_with_a_chosen_folding_over_graphvizs_size_folds_for_graphviz_and_warns(large: nx.MultiDiGraph) -> None:
    with pytest.warns(gradexport.errors.GraphvizSizeWarning, match=r"show: 1,143 nodes .* folds modules at depth \d"):
        view = gradexport.show(large, fold_modules=["transformer.h.0"])  # a folding chosen: the notebook folds no further itself
        view._repr_mimebundle_()
    assert view.static_graph is not None and NOTEBOOK_NODES < view.static_graph.number_of_nodes() <= GRAPHVIZ_SLOW_NODES


def test_show_on_a_large_graph_without_modules_gives_the_viewer_alone() -> None:
    x = torch.ones(2, requires_grad=True)
    chain = x
    for _ in range(GRAPHVIZ_SLOW_NODES + 10):
        chain = chain * 1.0
    with pytest.warns(gradexport.errors.GraphvizSizeWarning, match="no modules to fold"):
        bundle = gradexport.show(chain.sum(), params={"x": x})._repr_mimebundle_()
    assert sorted(bundle) == ["text/html", "text/plain"]


@needs_dot
def test_the_command_line_warns_and_stops_dot_after_dot_timeout(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from gradexport.frontends.cli import main

    monkeypatch.setattr(sys, "path", list(sys.path))  # the command adds the file's folder
    user = tmp_path / "large_model.py"
    user.write_text(
        "import torch\nfrom model_zoo import GPTLike\n\n"
        "def loss():\n    torch.manual_seed(0)\n    return GPTLike(blocks=24)(torch.randint(0, 11, (2, 5))).sum()\n"
    )
    slow_dot = tmp_path / "slow-dot"  # real dot may lay this out within 0.5 s on a quiet machine (0.7 s measured)
    slow_dot.write_text("#!/bin/sh\nexec sleep 60\n", encoding="utf-8")
    slow_dot.chmod(0o755)
    status = main([f"{user}:loss", "-f", "svg", "-o", str(tmp_path), "--no-group-modules", "--dot-timeout", "0.5", "--prog", str(slow_dot)])
    err = capsys.readouterr().err
    assert status != 0
    assert "Graphviz may take minutes to lay out 1,191 nodes" in err  # the warning, before dot ran
    assert "within dot_timeout=0.5 s and was stopped" in err
    assert not (tmp_path / "loss.svg").exists()
