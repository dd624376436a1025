"""``gradexport check``, ``gradexport diff`` and ``gradexport view``: the debugging commands."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from gradexport.frontends.cli import main

TARGETS = """
import torch

def finite():
    x = torch.tensor([1.0, 4.0], requires_grad=True)
    return x.sqrt().sum(), {"x": x}

def sqrt_at_zero():
    x = torch.tensor([0.0, 4.0], requires_grad=True)
    return x.sqrt().sum(), {"x": x}

def one_layer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3))
    return model(torch.ones(1, 3)).sum(), model

def two_layers():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    return model(torch.ones(1, 3)).sum(), model
"""


@pytest.fixture
def targets(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    path = tmp_path / "targets.py"
    path.write_text(TARGETS)
    return path


def test_check_finite_is_one_line_and_exit_0(targets, capsys):
    assert main(["check", f"{targets}:finite"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "finite" in out


def test_check_reports_where_the_infinity_started(targets, capsys):
    x = torch.tensor([0.0, 4.0], requires_grad=True)
    x.sqrt().sum().backward()
    assert torch.isinf(x.grad[0])  # what torch itself computes: d sqrt(x)/dx at 0
    assert main(["check", f"{targets}:sqrt_at_zero"]) == 1
    out = capsys.readouterr().out
    assert "SqrtBackward0" in out and "reaches the parameters: x" in out


def test_check_usage_errors_exit_2(targets, capsys):
    assert main(["check", str(targets)]) == 2
    assert main(["check", f"{targets}:missing"]) == 2


def test_diff_of_json_files_and_targets(targets, tmp_path, capsys):
    assert main([f"{targets}:one_layer", "-f", "json", "-o", str(tmp_path), "-q"]) == 0
    saved = tmp_path / "one_layer.json"
    assert main(["diff", str(saved), f"{targets}:one_layer"]) == 0
    assert "0 changed, 0 added, 0 removed" in capsys.readouterr().out
    assert main(["diff", str(saved), f"{targets}:two_layers", "-f", "mermaid", "-o", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "added:" in out and (tmp_path / "diff.mmd").is_file()


def test_diff_of_something_that_is_no_graph_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert main(["diff", str(bad), str(bad)]) == 2
    assert main(["diff", "nothing", "else"]) == 2
    assert "neither a JSON file nor" in capsys.readouterr().err


def test_view_writes_the_page_without_opening_it(targets, tmp_path, capsys, monkeypatch):
    opened = []
    monkeypatch.setattr("webbrowser.open", opened.append)
    page = tmp_path / "out" / "page.html"
    assert main(["view", f"{targets}:one_layer", "-o", str(page), "--no-open", "-q"]) == 0
    assert page.is_file() and opened == []
    assert Path(capsys.readouterr().out.strip()) == page
    assert main(["view", f"{targets}:one_layer", "-o", str(page), "-q"]) == 0
    assert opened == [page.resolve().as_uri()]


def test_diff_opens_both_graphs_in_model_explorer(targets, tmp_path, capsys, monkeypatch):
    pytest.importorskip("model_explorer", reason="the explorer extra is not installed")
    served = {}

    def serve(a, b, *, labels, merged, open_browser):
        served.update(a=a, b=b, labels=labels, merged=merged, open_browser=open_browser)
        return "http://127.0.0.1:1/"

    monkeypatch.setattr("gradexport.frontends.model_explorer_server.serve_model_explorer_diff", serve)
    assert main(["diff", f"{targets}:one_layer", f"{targets}:two_layers", "--model-explorer", "--no-open", "-f", "dot", "-o", str(tmp_path)]) == 1
    assert served["open_browser"] is False and served["labels"][0].startswith("a: ") and (tmp_path / "diff.dot").is_file()
    states = {state for _, state in served["merged"].nodes(data="diff")}
    assert "added" in states and "added:" in capsys.readouterr().out


def test_the_main_help_names_every_command(capsys):
    """``gradexport --help`` lists view, check and diff with what each does, and each command's own --help works."""
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    commands = text[text.index("commands (") :]
    for command, words in (("view", "viewer"), ("check", "NaN"), ("diff", "compare")):
        line = next((line for line in commands.splitlines() if line.strip().startswith(f"gradexport {command} ")), None)
        assert line is not None and words in line, f"{command} missing from --help:\n{commands}"
        assert main([command, "--help"]) == 0
        assert f"usage: gradexport {command}" in capsys.readouterr().out
