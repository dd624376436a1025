"""Targets that misbehave, run by the real command line in a subprocess: they change folder, close standard
output, exit inside backward, call os._exit or fork. Each gives the files where asked or one clear line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

TARGETS = """
import os
import sys
import torch

def _loss():
    x = torch.ones(2, requires_grad=True)
    return (x * 2).sum(), {"x": x}

def moves():
    os.makedirs("elsewhere", exist_ok=True)
    os.chdir("elsewhere")
    return _loss()

def closes_stdout():
    sys.stdout.close()
    return _loss()

def closes_descriptor_1():
    os.close(1)
    return _loss()

class Exits(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        sys.exit(4)

def exits_in_backward():
    x = torch.ones(2, requires_grad=True)
    return Exits.apply(x).sum(), {"x": x}

def hard_exit():
    _loss()
    os._exit(0)

def forks():
    roots = _loss()
    os.fork()  # parent and child both return the roots
    return roots

def forks_and_exits_child():
    if os.fork() == 0:
        os._exit(0)  # the usual pattern: the child's own exit is left alone
    os.wait()
    return _loss()
"""


def run(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "targets.py").write_text(TARGETS, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "gradexport", *arguments],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_a_target_that_changes_folder_writes_where_the_user_said(tmp_path):
    result = run(tmp_path, "targets.py:moves", "-f", "dot,json", "-o", "out")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == ["out/moves.dot", "out/moves.json"]
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["moves.dot", "moves.json"]
    assert not (tmp_path / "elsewhere" / "out").exists()


def test_view_of_a_target_that_changes_folder_writes_the_page_where_the_user_said(tmp_path):
    result = run(tmp_path, "view", "targets.py:moves", "--no-open", "-q")
    assert (result.returncode, result.stdout, result.stderr) == (0, "moves.html\n", "")
    assert (tmp_path / "moves.html").is_file() and not (tmp_path / "elsewhere" / "moves.html").exists()


@pytest.mark.parametrize("function", ["closes_stdout", "closes_descriptor_1"])
@pytest.mark.parametrize("command", [["check"], ["view", "--no-open", "-q"], []])
def test_a_target_that_closes_stdout_gives_no_traceback(tmp_path, function, command):
    arguments = [*command, f"targets.py:{function}"] + (["-f", "json", "-o", "out"] if not command else [])
    result = run(tmp_path, *arguments)
    assert result.returncode == 0
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr
    assert result.stderr.splitlines() == ["gradexport: warning: standard output was closed (by the function?): nothing more could be printed there"]


def test_sys_exit_inside_backward_is_named_not_a_silent_status(tmp_path):
    result = run(tmp_path, "check", "targets.py:exits_in_backward")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "gradexport: error: sys.exit(4) was called during backward through targets.py:exits_in_backward() "
        "(a hook or a custom Function's backward?); nothing was written"
    ]


def test_os_exit_in_a_target_is_a_failure_with_a_message(tmp_path):
    result = run(tmp_path, "targets.py:hard_exit", "-f", "json", "-o", "out")
    assert result.returncode == 1
    assert result.stderr.splitlines() == ["gradexport: error: targets.py:hard_exit() called os._exit(0) instead of returning the roots; nothing was written"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("function", ["forks", "forks_and_exits_child"])
def test_a_target_that_forks_exports_once_and_its_child_exits_cleanly(tmp_path, function):
    result = run(tmp_path, f"targets.py:{function}", "-f", "json", "-o", "out")
    assert result.returncode == 0
    assert result.stdout.splitlines() == [f"out/{function}.json"]  # once: the child exported nothing
    assert "Fatal Python error" not in result.stderr
    assert [line for line in result.stderr.splitlines() if "fork" not in line.lower()] == []
