"""The command line against a target that interrupts, raises BaseExceptions or exits: one line, a failing status.

Run as real processes: a KeyboardInterrupt escaping ``main()`` in-process would
stop pytest itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HOSTILE_TARGET = """
import os
import sys
import torch

if os.environ.get("HOSTILE_EXIT_ON_IMPORT"):
    sys.exit(0)

def interrupted():
    x = torch.ones(2, requires_grad=True)
    raise KeyboardInterrupt

def generator_exit():
    raise GeneratorExit

def exits_zero():
    x = torch.ones(2, requires_grad=True)
    sys.exit(0)

def exits_three():
    sys.exit(3)

def exits_with_message():
    sys.exit("stopped early")
"""


def run_cli(tmp_path: Path, function: str, **environment: str) -> subprocess.CompletedProcess[str]:
    target = tmp_path / "hostile.py"
    target.write_text(HOSTILE_TARGET, encoding="utf-8")
    command = [sys.executable, "-m", "gradexport", f"{target}:{function}", "-f", "json", "-o", str(tmp_path / "out")]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ, **environment})


def test_an_interrupt_in_the_function_is_one_line_and_status_130(tmp_path):
    result = run_cli(tmp_path, "interrupted")
    assert result.returncode == 130
    assert result.stderr.splitlines() == ["gradexport: error: interrupted"]
    assert not (tmp_path / "out").exists()


def test_generator_exit_in_the_function_is_a_one_line_failure(tmp_path):
    result = run_cli(tmp_path, "generator_exit")
    assert result.returncode == 1
    target = tmp_path / "hostile.py"
    line = next(n for n, text in enumerate(HOSTILE_TARGET.splitlines(), start=1) if "raise GeneratorExit" in text)
    assert result.stderr.splitlines() == [f"gradexport: error: {target}:generator_exit() raised GeneratorExit (at {target}:{line}, in generator_exit)"]


@pytest.mark.parametrize(
    "function, shown",
    [("exits_zero", "sys.exit(0)"), ("exits_three", "sys.exit(3)"), ("exits_with_message", "sys.exit('stopped early')")],
)
def test_sys_exit_in_the_function_fails_with_a_message_and_writes_nothing(tmp_path, function, shown):
    result = run_cli(tmp_path, function)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"gradexport: error: {tmp_path / 'hostile.py'}:{function}() called {shown} instead of returning the roots; nothing was written"
    ]
    assert not (tmp_path / "out").exists()


def test_sys_exit_while_importing_the_target_fails_with_a_message(tmp_path):
    result = run_cli(tmp_path, "exits_zero", HOSTILE_EXIT_ON_IMPORT="1")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [f"gradexport: error: importing {tmp_path / 'hostile.py'} called sys.exit(0)"]
    assert not (tmp_path / "out").exists()


def test_the_targets_run_as_described_when_called_directly(tmp_path):
    """The target file does what the tests above say: checked with plain Python, not gradexport."""
    target = tmp_path / "hostile.py"
    target.write_text(HOSTILE_TARGET, encoding="utf-8")
    script = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('hostile', {str(target)!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "for name in ('interrupted', 'generator_exit', 'exits_zero', 'exits_three', 'exits_with_message'):\n"
        "    try:\n        getattr(module, name)()\n"
        "    except BaseException as error:\n        print(name, type(error).__name__, getattr(error, 'code', None))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.splitlines() == [
        "interrupted KeyboardInterrupt None",
        "generator_exit GeneratorExit None",
        "exits_zero SystemExit 0",
        "exits_three SystemExit 3",
        "exits_with_message SystemExit stopped early",
    ]
