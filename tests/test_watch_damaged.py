"""Damaged watch files: every damaged line is a one-line `GraphFormatError` naming the file and the line.

The files are written by `gradexport.watch` itself (a real model, a real
backward), then damaged as a disk, an editor or a killed writer would; the
command line is run as a user runs it, in a subprocess.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import gradexport
from gradexport.frontends.cli import main

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def watch_lines(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """The lines (each with its newline) of a real watch file: header, graph, three steps."""
    path = tmp_path_factory.mktemp("watch") / "run.jsonl"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradexport.watch(model, path=path, optimizer=optimizer):
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(5, 3)).square().sum().backward()
            optimizer.step()
    return path.read_bytes().splitlines(keepends=True)


def kinds(lines: list[bytes]) -> list[str]:
    return [json.loads(line).get("kind", "header") for line in lines]


def test_the_fixture_is_a_header_a_graph_and_three_steps(watch_lines):
    assert kinds(watch_lines) == ["header", "graph", "step", "step", "step"]


@pytest.mark.parametrize("damage", [b"[]\n", b"42\n", b'"step"\n', b"null\n"], ids=["array", "number", "string", "null"])
@pytest.mark.parametrize("line", [1, 2, 4], ids=["header", "graph", "step"])
def test_a_line_that_is_json_but_not_an_object_names_the_file_and_line(tmp_path, watch_lines, damage, line):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join([*watch_lines[: line - 1], damage, *watch_lines[line:]]))
    with pytest.raises(gradexport.errors.GraphFormatError, match=rf"^load_watch: {str(path)!r}, line {line}: .*not an object") as raised:
        gradexport.records.load_watch(path)
    assert "\n" not in str(raised.value)


def test_a_line_nested_a_thousand_deep_is_a_format_error_not_a_recursion_error(tmp_path, watch_lines):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join([*watch_lines[:3], b"[" * 1000 + b"]" * 1000 + b"\n", *watch_lines[3:]]))
    # json's scanner reaches Python's recursion limit at Python's default limit; an earlier test may have raised it.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        with pytest.raises(gradexport.errors.GraphFormatError, match=rf"^load_watch: {str(path)!r}, line 4: nested too deep"):
            gradexport.records.load_watch(path)
    finally:
        sys.setrecursionlimit(limit)


def run_view_watch(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradexport", "view", "--watch", str(path), "--no-open"],
        capture_output=True,
        text=True,
        cwd=path.parent,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )


def test_view_watch_on_a_deeply_nested_line_prints_one_line_and_fails(tmp_path, watch_lines):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join([*watch_lines[:3], b"[" * 5000 + b"]" * 5000 + b"\n", *watch_lines[3:]]))
    result = run_view_watch(path)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"gradexport view: error: GraphFormatError: load_watch: {str(path)!r}, line 4: nested too deep")


def test_a_torn_graph_line_says_it_was_cut_short(tmp_path, watch_lines):
    """The writer killed inside the graph line's write: the history loads, and asking for its graph says what happened."""
    path = tmp_path / "run.jsonl"
    graph_line = watch_lines[1]
    path.write_bytes(watch_lines[0] + graph_line[: len(graph_line) // 2])
    history = gradexport.records.load_watch(path)
    assert history.steps == []
    with pytest.raises(gradexport.errors.GraphFormatError, match=rf"{str(path)!r}, line 2: the graph line is cut short") as raised:
        history.graph()
    assert "trace=False" not in str(raised.value)
    result = run_view_watch(path)
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "line 2: the graph line is cut short" in result.stderr


def test_a_torn_last_step_line_is_still_skipped(tmp_path, watch_lines):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(watch_lines[:-1]) + watch_lines[-1][:-20])
    assert gradexport.records.load_watch(path).steps == [0, 1]


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("step", "3", "step: expected an integer, got string"),
        ("param", [], "param: expected an object, got array"),
        ("module", {"norm": 5}, r"module\.norm: expected a list of 4 numbers or nulls, got number"),
        ("param", {"norm": [1.0]}, r"param\.norm: expected a list of 4 numbers or nulls, got 1 items"),
        ("param", {"norm": [1.0, "x", 2.0, 3.0]}, r"param\.norm\[1\]: expected a number or null, got string"),
    ],
)
def test_a_step_line_of_the_wrong_shape_names_the_field(tmp_path, watch_lines, field, value, problem):
    path = tmp_path / "run.jsonl"
    record = json.loads(watch_lines[3])
    record[field] = value
    path.write_bytes(b"".join([*watch_lines[:3], json.dumps(record).encode() + b"\n", *watch_lines[4:]]))
    with pytest.raises(gradexport.errors.GraphFormatError, match=rf"line 4: {problem}"):
        gradexport.records.load_watch(path)


def test_a_line_in_utf16_is_refused_as_not_utf8(tmp_path, watch_lines):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join([*watch_lines[:2], watch_lines[2].decode().encode("utf-16"), *watch_lines[3:]]))
    with pytest.raises(gradexport.errors.GraphFormatError, match="line 3: not UTF-8"):
        gradexport.records.load_watch(path)


def mutate(lines: list[bytes], chooser: random.Random) -> bytes:
    """One random damage: bytes flipped, cut or repeated, a line dropped, swapped, repeated, truncated, or one JSON value retyped."""
    lines = list(lines)
    kind = chooser.randrange(7)
    index = chooser.randrange(len(lines))
    line = lines[index]
    if kind == 0:  # bytes flipped
        data = bytearray(line)
        for _ in range(chooser.randint(1, 3)):
            data[chooser.randrange(len(data))] = chooser.randrange(256)
        lines[index] = bytes(data)
    elif kind == 1:  # a run of bytes removed
        start = chooser.randrange(len(line))
        lines[index] = line[:start] + line[start + chooser.randint(1, 40) :]
    elif kind == 2:  # the file cut anywhere
        whole = b"".join(lines)
        return whole[: chooser.randrange(len(whole))]
    elif kind == 3:  # a line dropped or repeated
        lines[index : index + 1] = [] if chooser.random() < 0.5 else [line, line]
    elif kind == 4:  # two lines swapped
        other = chooser.randrange(len(lines))
        lines[index], lines[other] = lines[other], lines[index]
    elif kind == 5:  # a line replaced by other JSON
        lines[index] = chooser.choice([b"[]", b"{}", b"0", b"null", b'{"kind": "step"}', b'{"kind": 3}', b"[" * 3000]) + b"\n"
    else:  # one value somewhere in a line replaced by a value of another type
        record = json.loads(line)
        holder, key = _random_place(record, chooser)
        holder[key] = chooser.choice([None, True, -1, 2.5, "x", [], {}, [None], {"a": 1}, "\ud800\x1b[31m"])
        lines[index] = json.dumps(record).encode() + b"\n"
    return b"".join(lines)


def _random_place(record: dict, chooser: random.Random) -> tuple[dict | list, str | int]:
    holder: dict | list = record
    while True:
        keys = list(holder) if isinstance(holder, dict) else list(range(len(holder)))
        if not keys:
            return record, chooser.choice(list(record))
        key = chooser.choice(keys)
        value = holder[key]
        if isinstance(value, (dict, list)) and value and chooser.random() < 0.7:
            holder = value
            continue
        return holder, key


def test_randomly_damaged_watch_files_give_a_history_or_one_line(tmp_path, watch_lines):
    """A fixed seed, 300 damaged files through ``gradexport view --watch`` (in this process, so a traceback fails the test)."""
    chooser = random.Random(38)
    path = tmp_path / "run.jsonl"
    outcomes: dict[str, int] = {}
    for attempt in range(300):
        path.write_bytes(mutate(watch_lines, chooser))
        with contextlib.redirect_stderr(io.StringIO()) as stderr, contextlib.redirect_stdout(io.StringIO()):
            status = main(["view", "--watch", str(path), "--no-open", "-o", str(tmp_path / "page.html")])
        said = stderr.getvalue()
        assert status in (0, 1), (attempt, said)
        if status == 1:
            assert said.startswith("gradexport view: error: ") and said.count("\n") == 1, (attempt, said)
            outcomes[said.split(":")[2].strip()] = outcomes.get(said.split(":")[2].strip(), 0) + 1
        else:
            assert said == "", (attempt, said)
            outcomes["loaded"] = outcomes.get("loaded", 0) + 1
    assert outcomes.get("loaded", 0) > 20 and sum(outcomes.values()) - outcomes.get("loaded", 0) > 100, outcomes
