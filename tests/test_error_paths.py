"""Every error gradexport raises and every warning it emits is in its tree, walked path by path.

Readers given a missing file raise `MissingFileError` (a `FileNotFoundError`),
given one they cannot read `UnreadableFileError` (an `OSError`); a string or
another wrong type where a collection is expected is an `ArgumentTypeError`
naming the function and the argument; every ``warnings.warn`` of the package
warns with a `GradexportWarning`.
"""

from __future__ import annotations

import ast
import os
import stat
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import gradexport
from gradexport import errors
from gradexport.formats import svg
from gradexport.formats.json import read_json
from gradexport.records import load_watch, watch_node_data
from gradexport.tools import hide, only_reaching

PACKAGE = Path(gradexport.__file__).parent


@pytest.fixture(scope="module")
def graph():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Tanh())
    with gradexport.capture_modules():
        loss = model(torch.ones(1, 2)).sum()
    return gradexport.to_networkx(loss, module=model)


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    model = torch.nn.Linear(2, 1)
    path = tmp_path_factory.mktemp("watch") / "w.jsonl"
    with gradexport.watch(model, path=path) as watched:
        model(torch.ones(3, 2)).sum().backward()
        watched.step()
    return load_watch(path)


#: Every function that reads a file the user names, called with that path.
READERS: dict[str, Callable[[Path], Any]] = {
    "read_json": read_json,
    "diff": lambda path: gradexport.diff(path, path),
    "load_watch": load_watch,
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_missing_file_is_a_missing_file_error_naming_the_function_and_path(reader, tmp_path):
    missing = tmp_path / "no" / "such.json"
    with pytest.raises(errors.MissingFileError, match=f"{reader}: {missing} does not exist: check the path") as caught:
        READERS[reader](missing)
    assert isinstance(caught.value, FileNotFoundError) and isinstance(caught.value, gradexport.GradexportError)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_folder_is_an_unreadable_file_error(reader, tmp_path):
    with pytest.raises(errors.UnreadableFileError, match=f"{reader}: {tmp_path} cannot be read") as caught:
        READERS[reader](tmp_path)
    assert isinstance(caught.value, OSError) and isinstance(caught.value, gradexport.GradexportError)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads a file without read permission")
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_file_without_read_permission_is_an_unreadable_file_error(reader, tmp_path):
    locked = tmp_path / "locked.json"
    locked.write_text("{}")
    locked.chmod(0)
    try:
        with pytest.raises(errors.UnreadableFileError, match="Permission denied"):
            READERS[reader](locked)
    finally:
        locked.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_a_file_with_no_graph_is_a_format_error_not_an_os_error(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(errors.GraphFormatError):
        read_json(empty)


#: Every argument that takes a collection: the call, and the function and argument its message names.
COLLECTIONS: list[tuple[str, Callable[[Any, Any, Any], Any], str]] = [
    ("hide ops", lambda graph, history, value: hide(graph, ops=value), "hide: ops"),
    ("only_reaching targets", lambda graph, history, value: only_reaching(graph, value), "only_reaching: targets"),
    ("collapse modules", lambda graph, history, value: gradexport.collapse(graph, modules=value), "collapse: modules"),
    ("fold_modules option", lambda graph, history, value: gradexport.to_dot(graph, fold_modules=value), "gradexport: fold_modules"),
    ("watch_node_data steps", lambda graph, history, value: watch_node_data(history, steps=value), "watch_node_data: steps"),
]
#: Wrong values for each: one that is not a collection, and a collection of the wrong items.
STRING_TAKEN = {"collapse modules", "fold_modules option"}  # one module name alone is taken, as collapse documents


@pytest.mark.parametrize(("name", "call", "named"), COLLECTIONS, ids=[name for name, _, _ in COLLECTIONS])
def test_a_wrong_type_for_a_collection_is_an_argument_type_error_saying_what_to_pass(graph, history, name, call, named):
    wrong_values: list[Any] = [3, [object()]] if name != "watch_node_data steps" else [3, ["1"], [True]]
    if name not in STRING_TAKEN:
        wrong_values.append("MulBackward0" if name != "watch_node_data steps" else "1")
    for value in wrong_values:
        with pytest.raises(errors.ArgumentTypeError, match=f"^{named}.* must ") as caught:
            call(graph, history, value)
        assert isinstance(caught.value, TypeError)
        if isinstance(value, str):
            assert "not the string" in str(caught.value) and "wrap it in a set or list" in str(caught.value)


def test_hide_with_one_op_name_as_a_string_says_to_wrap_it(graph):
    with pytest.raises(errors.ArgumentTypeError, match=r"hide: ops must be a collection, such as \{'MulBackward0'\}, not the string 'MulBackward0'"):
        hide(graph, ops="MulBackward0")
    assert hide(graph, ops={"TanhBackward0"}).number_of_nodes() == graph.number_of_nodes() - 1


def test_the_module_warning_of_to_networkx_is_a_gradexport_warning():
    model = torch.nn.Linear(3, 2)
    loss = model(torch.ones(1, 3)).sum()
    with pytest.warns(errors.ModuleNotCapturedWarning, match="to_networkx: module= named no backward node") as caught:
        gradexport.to_networkx(loss, module=model)
    assert all(isinstance(record.message, gradexport.GradexportWarning) for record in caught)


def test_what_graphviz_prints_is_a_gradexport_warning(tmp_path):
    chatty = tmp_path / "chatty-dot"
    chatty.write_text('#!/bin/sh\ncat >/dev/null; echo "Warning: font" >&2; echo "<svg/>"\n')
    chatty.chmod(0o755)
    with pytest.warns(errors.GraphvizWarning, match="Warning: font") as caught:
        svg.render_svg("digraph {}", prog=chatty)
    assert isinstance(caught[0].message, gradexport.GradexportWarning) and isinstance(caught[0].message, RuntimeWarning)


def test_the_old_spelling_saved_is_a_deprecated_alias_of_show_saved():
    x = torch.ones(2, requires_grad=True)
    loss = x.exp().sum()
    with pytest.warns(errors.GradexportDeprecationWarning, match="to_networkx: saved= is now spelled show_saved="):
        old = gradexport.to_networkx(loss, saved=True)
    new = gradexport.to_networkx(loss, show_saved=True)
    assert dict(old.nodes(data="saved")) == dict(new.nodes(data="saved")) != dict(gradexport.to_networkx(loss).nodes(data="saved"))
    with pytest.warns(errors.GradexportDeprecationWarning, match="gradexport.to_dot: saved= is now spelled show_saved="):
        assert gradexport.to_dot(loss, saved=True) == gradexport.to_dot(loss, show_saved=True)


def test_a_name_that_left_the_top_tier_still_imports_with_a_warning_naming_its_home():
    for name, home in gradexport._MOVED.items():
        with pytest.warns(errors.GradexportDeprecationWarning, match=f"gradexport.{name} moved to gradexport.{home}.{name}"):
            moved = getattr(gradexport, name)
        assert moved is getattr(getattr(gradexport, home), name)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        gradexport.nothing_here  # noqa: B018
    assert len(gradexport.__all__) <= 20 and {"GradexportError", "GradexportWarning", "show"} <= set(gradexport.__all__)


def _warning_classes() -> set[str]:
    return {name for name in errors.__all__ if issubclass(getattr(errors, name), Warning) and issubclass(getattr(errors, name), gradexport.GradexportWarning)}


def _returns(tree_by_path: dict[Path, ast.Module]) -> dict[str, str]:
    """The return annotation of every function of the package, by name."""
    return {
        node.name: ast.unparse(node.returns)
        for tree in tree_by_path.values()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None
    }


def test_every_warning_the_package_emits_is_a_gradexport_warning():
    """Read every ``warnings.warn`` call: its warning (or category) must be a class of the tree, or come from a function returning one."""
    texts = {path: path.read_text(encoding="utf-8") for path in sorted(PACKAGE.rglob("*.py"))}
    trees = {path: ast.parse(text) for path, text in texts.items() if "warnings.warn(" in text or "Warning |" in text or "Warning:" in text}
    classes, returns = _warning_classes(), _returns(trees)
    offenders, seen = [], 0
    for path, tree in trees.items():
        assigned = {target.id: node.value for node in ast.walk(tree) if isinstance(node, ast.Assign) for target in node.targets if isinstance(target, ast.Name)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "warnings.warn"):
                continue
            seen += 1
            first = node.args[0]
            category = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "category"), None)
            if isinstance(first, ast.Name) and isinstance(assigned.get(first.id), ast.Call):
                first = assigned[first.id]
            if category is not None:
                name = ast.unparse(category).rpartition(".")[2]
            elif isinstance(first, ast.Call):
                called = ast.unparse(first.func).rpartition(".")[2]
                name = called if called in classes else returns.get(called, "").replace(" | None", "")
            else:
                name = ""
            if name not in classes:
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)[:100]}")
    assert seen > 10  # the reader found the calls
    assert not offenders, "warn with a GradexportWarning subclass (gradexport.core.errors):\n" + "\n".join(offenders)


def test_the_tree_holds_every_class_and_each_derives_from_its_root():
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, (gradexport.GradexportError, gradexport.GradexportWarning)), name
        assert cls.__module__ == "gradexport.errors", name
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert errors.MissingFileError is gradexport.errors.MissingFileError
