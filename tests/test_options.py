"""One option model and one format registry: every entry point takes the same options, each once."""

from __future__ import annotations

import contextlib
import importlib
import sys
import typing
from pathlib import Path

import pytest
import torch

import gradexport
from gradexport.api import registry
from gradexport.api.export import prepare
from gradexport.api.registry import FORMATS, Format, register
from gradexport.core.options import ExportKeywords, ExportOptions, OptionWarning, option_table
from gradexport.frontends.cli import main
from gradexport.frontends.mkdocs.blocks import find_blocks
from gradexport.frontends.mkdocs.runner import run_blocks
from gradexport.streams import GraphStream


@pytest.fixture
def blog():
    torch.manual_seed(6)
    x = torch.randn(4, 4, requires_grad=True)
    y = torch.randn(4, 4, requires_grad=True)
    return (x * y).sum(), {"x": x, "y": y}


def test_the_typed_keywords_are_the_options():
    declared = {item.name: item.type for _, item, _ in option_table()}
    hints = typing.get_type_hints(ExportKeywords)
    assert list(hints) == list(declared), "add the new option's typed keyword to ExportKeywords, in the same order"
    for name, annotation in ExportKeywords.__annotations__.items():
        annotation = getattr(annotation, "__forward_arg__", annotation)  # postponed annotations: compare their text
        assert annotation == declared[name], f"ExportKeywords.{name} is {annotation}, the option field says {declared[name]}"


def test_every_option_is_on_the_command_line_and_in_fences_unless_only_python_can_give_it(capsys):
    assert main(["--help"]) == 0
    help_text = capsys.readouterr().out
    for _, item, info in option_table():
        if item.name in ("params", "module"):
            assert info.flag is None and info.parse is None  # a tensor or a module is not text
            continue
        assert info.flag in help_text, f"--help does not list {item.name}"
        assert info.parse is not None
        text = {"direction": "LR", "depth": "1", "box_depth": "1", "prog": "dot", "dot_timeout": "30"}.get(item.name, "true")
        formats = {"prog": "svg", "dot_timeout": "svg", "steps": "html", "edge_metadata": "json", "open_compiled": "json"}.get(item.name, "mermaid")
        blocks = find_blocks([f'```gradexport formats="{formats}" {item.name}="{text}"', "x = 1", "```"], "page.md")
        assert dict(blocks[0].options.export) == {item.name: info.parse(text)}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda roots, params: gradexport.to_dot(roots, fit=False), "fit applies only to mermaid, not to dot"),
        (lambda roots, params: gradexport.to_json(roots, direction="LR"), "direction applies only to dot, svg, mermaid, html, not to json"),
        (lambda roots, params: gradexport.to_json(roots, prog="dot"), "prog applies only to svg, not to json"),
        (lambda roots, params: gradexport.to_dot(gradexport.to_networkx(roots), params=params), "params applies only while tracing roots"),
        (lambda roots, params: gradexport.to_json(gradexport.to_networkx(roots), show_none=True), "show_none applies only while tracing roots"),
        (lambda roots, params: gradexport.write(roots, "unused", "json", group_modules=False), "group_modules applies only to dot, svg, mermaid, html"),
        (lambda roots, params: gradexport.to_html(roots, box_depth=1), "box_depth applies only to dot, svg, mermaid, not to html"),
        (lambda roots, params: gradexport.to_dot(roots, grad_norms=False), "grad_norms applies only to a graph already built"),
        (lambda roots, params: gradexport.to_dot(roots, colour="red"), "unknown option.*colour"),
    ],
)
def test_an_option_that_does_nothing_for_the_call_is_a_type_error_naming_where_it_applies(blog, call, message):
    roots, params = blog
    with pytest.raises(TypeError, match=message):
        call(roots, params)


def test_an_option_that_applies_to_one_of_several_formats_is_taken(blog, tmp_path):
    roots, params = blog
    paths = gradexport.write(roots, tmp_path, "dot,json", params=params, direction="LR")
    assert 'rankdir="LR"' in paths["dot"].read_text()
    assert paths["json"].read_text() == gradexport.to_json(roots, params=params)


def test_options_read_from_text_are_checked_like_keywords():
    assert ExportOptions.from_text({"depth": "2", "direction": "rl"}, formats=["svg"], honoured=registry.honoured_options()).fold.depth == 2
    with pytest.raises(ValueError, match="depth='two': expected a whole number"):
        ExportOptions.from_text({"depth": "two"}, formats=["svg"], honoured=registry.honoured_options())
    with pytest.raises(TypeError, match="module can only be given from Python"):
        ExportOptions.from_text({"module": "model"}, formats=["svg"], honoured=registry.honoured_options())
    with pytest.raises(ValueError, match="depth must be a whole number"):
        registry.read_options({"depth": -1}, formats=["dot"], from_roots=True)


def test_edge_shapes_on_a_graph_without_them_warns_with_the_fix(blog):
    roots, params = blog
    bare = gradexport.to_networkx(roots, params=params)
    with pytest.warns(OptionWarning, match="edge_metadata=True"):
        gradexport.show(bare, edge_shapes=True)
    with_shapes = gradexport.to_networkx(roots, params=params, edge_metadata=True)
    with warnings_as_errors():
        gradexport.to_dot(with_shapes, edge_shapes=True)


def test_depth_on_a_graph_without_modules_warns(blog):
    roots, params = blog
    with pytest.warns(OptionWarning, match="depth= and fold_modules= fold nothing"):
        gradexport.to_dot(roots, params=params, depth=1)


def test_module_for_a_forward_pass_outside_capture_modules_warns():
    model = torch.nn.Linear(3, 2)
    loss = model(torch.ones(1, 3)).sum()
    with pytest.warns(UserWarning, match="capture_modules"):
        graph = gradexport.to_networkx(loss, module=model)
    assert {names[0] for _, names in graph.nodes(data="names") if names} == {"weight", "bias"}  # the leaves are named
    with gradexport.capture_modules():
        loss = model(torch.ones(1, 3)).sum()
    with warnings_as_errors():
        gradexport.to_networkx(loss, module=model)


def test_show_with_a_bad_program_is_an_error_not_mermaid(blog):
    roots, params = blog
    with pytest.raises(gradexport.errors.GraphvizNotFoundError):
        gradexport.show(roots, params=params, prog="/no/such/dot")


def test_cli_depth_without_a_module_and_an_option_for_no_format_are_usage_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "path", list(sys.path))
    user = tmp_path / "user.py"
    user.write_text("import torch\ndef loss():\n    x = torch.ones(2, requires_grad=True)\n    return (x * 2).sum()\n")
    assert main([f"{user}:loss", "-f", "dot", "-o", str(tmp_path), "--depth", "1", "-q"]) == 2
    assert "--depth fold modules" in capsys.readouterr().err
    assert main([f"{user}:loss", "-f", "json", "-o", str(tmp_path), "--direction", "LR", "-q"]) == 2
    assert "direction applies only to dot, svg, mermaid, html" in capsys.readouterr().err
    assert not list(tmp_path.glob("loss.*"))


def test_one_trace_per_call_whatever_the_formats(blog, tmp_path, monkeypatch):
    roots, params = blog
    traced = []
    # The plugin's tests may have re-imported the library (as `mkdocs serve` does): count on the modules in use now.
    current = importlib.import_module("gradexport")
    stream_class = importlib.import_module("gradexport.api.export").GraphStream
    original = stream_class.__init__

    def counting(self, *args, **kwargs):
        traced.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(stream_class, "__init__", counting)
    current.write(roots, tmp_path, "dot,mermaid,json", params=params)
    assert len(traced) == 1
    page = ['```gradexport formats="mermaid svg"', "import torch", "x = torch.ones(2, requires_grad=True)", "(x * 2).sum()", "```"]
    results = run_blocks(find_blocks(page, "page.md"), "page.md", "page.md")
    assert len(traced) == 2 and sorted(results[0].diagrams) == ["mermaid", "svg"]


def test_one_streaming_format_is_drawn_while_walked(blog, tmp_path, monkeypatch):
    roots, params = blog

    def forbidden(self):
        raise AssertionError("built the MultiDiGraph for a format that streams")

    expected = gradexport.to_json(gradexport.to_networkx(roots, params=params))
    monkeypatch.setattr(GraphStream, "to_networkx", forbidden)
    paths = gradexport.write(roots, tmp_path, "json", params=params)
    assert paths["json"].read_text() == expected
    source, _ = prepare(roots, ["dot"], {"params": params}, caller="test")
    assert source.is_stream


def test_a_format_registered_once_reaches_write_and_the_command_line(blog, tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "FORMATS", dict(FORMATS))
    monkeypatch.setattr(gradexport.api.export, "FORMATS", registry.FORMATS)
    monkeypatch.setattr(gradexport.frontends.cli.export, "FORMATS", registry.FORMATS)
    register(Format("edges", ".edges", "one line per edge", text=_edge_lines, diagram=False))
    roots, params = blog
    paths = gradexport.write(roots, tmp_path, "edges,dot", params=params)
    graph = gradexport.to_networkx(roots, params=params)
    assert paths["edges"].read_text().splitlines() == [f"{u} {v} {k}" for u, v, k in graph.edges(keys=True)]
    with pytest.raises(TypeError, match="direction applies only to dot, svg, mermaid, html, not to edges"):
        gradexport.write(roots, tmp_path, "edges", direction="LR")
    with pytest.raises(ValueError, match="already"):
        register(Format("edges", ".e", "again", text=_edge_lines))
    with pytest.raises(ValueError, match="dot"):
        register(Format("nodot", "txt", "no dot", text=_edge_lines))


def _edge_lines(source, options) -> str:
    return "".join(f"{node} {target} {key}\n" for node, _, out in source.records() for target, keyed in out.items() for key in keyed)


def test_no_writer_asks_whether_it_got_a_graph_or_a_stream():
    formats = Path(gradexport.__file__).parent / "formats"
    offenders = [
        f"{path.name}:{number}"
        for path in sorted(formats.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "isinstance(" in line and ("nx.Graph" in line or "nx.MultiDiGraph" in line or "GraphStream" in line)
    ]
    assert offenders == [], "writers read core.source.Source, the one place that tells a graph from a stream"


@contextlib.contextmanager
def warnings_as_errors():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def test_fold_modules_folds_by_name_in_every_entry_point(tmp_path, monkeypatch, capsys):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh()))
    with gradexport.capture_modules():
        loss = model(torch.ones(1, 3)).sum()
    graph = gradexport.to_networkx(loss, module=model)
    folded = gradexport.collapse(graph, modules=["1"])
    assert [data["module"] for _, data in folded.nodes(data=True) if data["kind"] == "module"] == ["1"]
    assert gradexport.to_dot(loss, module=model, fold_modules="1") == gradexport.to_dot(folded)
    assert ExportOptions.from_text({"fold_modules": "1, 0"}, formats=["dot"], honoured=registry.honoured_options()).fold.fold_modules == ("1", "0")
    monkeypatch.setattr(sys, "path", list(sys.path))
    user = tmp_path / "user.py"
    user.write_text(
        "import torch, gradexport\n"
        "def loss():\n"
        "    torch.manual_seed(0)\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh()))\n"
        "    return model(torch.ones(1, 3)).sum(), model\n"
    )
    assert main([f"{user}:loss", "-f", "dot", "-o", str(tmp_path), "--fold", "1", "-q"]) == 0
    assert (tmp_path / "loss.dot").read_text() == gradexport.to_dot(folded)


def test_formats_that_are_not_names_are_a_clear_error(blog, tmp_path):
    roots, params = blog
    with pytest.raises(TypeError, match="formats must be format names or one comma-separated string, got NoneType"):
        gradexport.write(roots, tmp_path, formats=None, params=params)
    with pytest.raises(ValueError, match="unknown format.*png.*choose from dot, svg, mermaid, json, html, model-explorer"):
        gradexport.write(roots, tmp_path, "png", params=params)
