"""Hostile names in what the command line prints: every report shows them escaped, and is never lost.

A parameter or module name can hold any character ``register_parameter`` and
``add_module`` accept: a lone surrogate (which no UTF-8 stream can write), a
newline (which would forge a report line), an ANSI escape sequence (which
would recolour or rewrite the user's terminal). Each command runs as a user
runs it, in a subprocess, and its output is read as bytes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: Each hostile name, and how it must show: escaped, on the line it belongs to.
HOSTILE = {"\ud800": "\\ud800", "a\nforged: line": "a\\nforged: line", "\x1b[31mred\x1b[0m": "\\x1b[31mred\\x1b[0m"}

TARGETS = '''
import torch

NAMES = ["\\ud800", "a\\nforged: line", "\\x1b[31mred\\x1b[0m"]


def hostile_model():
    model = torch.nn.Module()
    for index, name in enumerate(NAMES):
        block = torch.nn.Module()
        block.register_parameter(name, torch.nn.Parameter(torch.full((2,), float(index + 1))))
        model.add_module(name, block)
    return model


def unused():
    """Only the first block's parameter is used: the other two get no gradient."""
    model = hostile_model()
    return getattr(model, NAMES[0]).get_parameter(NAMES[0]).sum(), model


def nonfinite():
    """Every parameter is used; a log of zero in each gives infinities."""
    model = hostile_model()
    parameters = [getattr(model, name).get_parameter(name) for name in NAMES]
    return sum((parameter * 0).log().sum() for parameter in parameters), {name: parameter for name, parameter in zip(NAMES, parameters)}


def train(watch=None):
    """Infinite gradients at every module's output: each is flagged exploding, by its hostile name."""
    model = torch.nn.Sequential()
    model.add_module(NAMES[2], torch.nn.Linear(2, 2))
    model.add_module(NAMES[1], torch.nn.Tanh())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with watch(model, optimizer=optimizer):
        for _ in range(2):
            optimizer.zero_grad()
            (model(torch.ones(3, 2)) * float("inf")).sum().backward()
            optimizer.step()


def first():
    x = torch.ones(2, requires_grad=True)
    return (x * 2).sum(), {NAMES[1]: x}


def second():
    x = torch.ones(2, requires_grad=True)
    y = torch.ones(2, requires_grad=True)
    return (x * y).sum(), {NAMES[1]: x, NAMES[2]: y}
'''


def run_cli(tmp_path: Path, *arguments: str, **environment: str) -> subprocess.CompletedProcess[bytes]:
    (tmp_path / "targets.py").write_text(TARGETS, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "gradexport", *arguments],
        cwd=tmp_path,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "", **environment},
        timeout=300,
    )


def assert_escaped(output: bytes, names: list[str]) -> list[str]:
    """No raw control character or lone surrogate reached the stream, and each name shows escaped; the lines."""
    text = output.decode("utf-8")  # strict: a lone surrogate written out with surrogateescape would fail here
    assert "\x1b" not in text and not any(0xD800 <= ord(char) <= 0xDFFF for char in text)
    for name in names:
        assert HOSTILE[name] in text, (name, text)
    lines = text.splitlines()
    assert not any(line.startswith("forged") for line in lines), text
    return lines


def test_check_unused_names_each_hostile_parameter_escaped_and_exits_1(tmp_path):
    result = run_cli(tmp_path, "check", "--unused", "targets.py:unused")
    assert result.returncode == 1, result.stderr
    lines = assert_escaped(result.stdout, ["a\nforged: line", "\x1b[31mred\x1b[0m"])
    assert lines[0] == "2 trainable parameter(s) get no gradient from the roots:"
    assert len(lines) == 3
    assert b"standard output was closed" not in result.stderr and result.stderr == b""


def test_check_reports_nonfinite_gradients_with_hostile_names_escaped(tmp_path):
    result = run_cli(tmp_path, "check", "targets.py:nonfinite")
    assert result.returncode == 1, result.stderr
    assert_escaped(result.stdout, list(HOSTILE))
    assert b"standard output was closed" not in result.stderr


def test_diff_names_hostile_leaves_escaped(tmp_path):
    result = run_cli(tmp_path, "diff", "targets.py:first", "targets.py:second")
    assert result.returncode == 1, result.stderr
    assert_escaped(result.stdout, ["\x1b[31mred\x1b[0m"])


def test_watch_names_hostile_flagged_modules_escaped(tmp_path):
    result = run_cli(tmp_path, "watch", "targets.py:train", "--plot", "none", "-q")
    assert result.returncode == 0, result.stderr
    lines = assert_escaped(result.stdout, ["a\nforged: line", "\x1b[31mred\x1b[0m"])
    assert any(line.startswith("\\x1b[31mred\\x1b[0m: exploding: the gradient norm is") for line in lines), lines


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_report_reaches_a_stream_that_cannot_encode_a_name(tmp_path, encoding):
    """A terminal in another encoding: the report is printed with the name escaped, not declared lost."""
    (tmp_path / "café.py").write_text(
        "import torch\n\ndef f():\n    x = torch.ones(2, requires_grad=True)\n    w = torch.ones(2, requires_grad=True)\n"
        "    return (x * 2).sum(), {'x': x, 'poids_\u00e9t\u00e9': w}\n",
        encoding="utf-8",
    )
    result = run_cli(tmp_path, "check", "--unused", "café.py:f", PYTHONIOENCODING=encoding)
    assert result.returncode == 1, result.stderr
    assert b"standard output was closed" not in result.stderr
    assert "poids_" in result.stdout.decode(encoding) and "1 trainable parameter(s) get no gradient" in result.stdout.decode(encoding)
