"""The gradexport command: in-process for its many outcomes, as real processes for what only they show."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gradexport.frontends.cli import main

REPO = Path(__file__).resolve().parent.parent
MAKEFILE_COMMAND = [
    "-m",
    "gradexport",
    "gradexport/examples/blog.py:multiply_then_sum",
    "--format",
    "dot,svg,mermaid,json",
    "--output",
]

USER_CODE = """
import torch
from torch import nn

NOT_A_FUNCTION = 3

def with_module():
    model = nn.Linear(3, 2)
    return model(torch.ones(1, 3)).sum(), model

def with_names():
    x = torch.ones(2, requires_grad=True)
    return {"out": (x * 2).sum()}, {"x": x}

def two_roots():
    x = torch.ones(2, requires_grad=True)
    return x * 2, {"second": x * 3}

def raises():
    raise ValueError("boom\\nsecond line")

def not_a_tensor():
    return 42

def no_grad():
    return torch.ones(2) * 2

def needs_arguments(x):
    return x * 2

def interrupted():
    raise KeyboardInterrupt

def exits_quietly():
    import sys
    sys.exit(0)

def generator_exit():
    raise GeneratorExit

def long_chain():
    x = torch.ones(1, requires_grad=True)
    for _ in range(501):
        x = x + 1
    return x
"""


@pytest.fixture
def user_file(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # the command adds the file's folder
    path = tmp_path / "user_code.py"
    path.write_text(USER_CODE)
    return path


def run(capsys, *argv):
    status = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_writes_one_file_per_format_named_after_the_function(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    status, out, err = run(capsys, "gradexport/examples/blog.py:unbind_then_add", "-f", "dot,json", "-o", tmp_path / "out")
    assert (status, err) == (0, "")
    assert out.split() == [str(tmp_path / "out" / "unbind_then_add.dot"), str(tmp_path / "out" / "unbind_then_add.json")]
    text = (tmp_path / "out" / "unbind_then_add.dot").read_text(encoding="utf-8")
    assert '"n1" -> "n2" [label="0→0"];\n  "n1" -> "n2" [label="1→1"];' in text
    assert 'label="x\\n(2,)"' in text


def test_leaves_named_by_a_module_or_a_mapping(capsys, user_file, tmp_path):
    assert run(capsys, f"{user_file}:with_module", "-f", "dot", "-o", tmp_path, "-q")[:2] == (0, "")
    text = (tmp_path / "with_module.dot").read_text(encoding="utf-8")
    assert 'label="weight\\n(2, 3)"' in text and 'label="bias\\n(2,)"' in text
    assert run(capsys, f"{user_file}:with_names", "-f", "dot", "-o", tmp_path, "--stem", "named", "-q")[0] == 0
    text = (tmp_path / "named.dot").read_text(encoding="utf-8")
    assert 'label="x\\n(2,)"' in text and 'label="out\\n()"' in text
    assert run(capsys, f"{user_file}:two_roots", "-f", "dot", "-o", tmp_path, "-q")[0] == 0
    text = (tmp_path / "two_roots.dot").read_text(encoding="utf-8")
    assert 'label="0\\n(2,)"' in text and 'label="1.second\\n(2,)"' in text  # both are roots


def test_package_module_target(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    package = tmp_path / "mypackage"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "losses.py").write_text(USER_CODE)
    monkeypatch.chdir(tmp_path)
    status, _, err = run(capsys, "mypackage.losses:with_names", "-f", "json", "-o", "out", "-q")
    assert (status, err) == (0, "")
    assert (tmp_path / "out" / "with_names.json").is_file()


@pytest.mark.parametrize(
    ("target", "extra", "message"),
    [
        ("gradexport/examples/blog.py", [], "has no ':FUNCTION'"),
        ("{file}:with_names", ["-f", "dot,png"], "unknown format(s) png"),
        ("{file}:with_names", ["--direction", "up"], "--direction: expected one of TB, BT, LR, RL, got 'up'"),
        ("missing.py:f", [], "no such file: 'missing.py'"),
        ("{file}:nope", [], "has no attribute 'nope'"),
        ("{file}:NOT_A_FUNCTION", [], "is an int, not a function"),
        ("{file}:needs_arguments", [], "user_code.py:needs_arguments cannot be called without arguments (missing a required argument: 'x')"),
        ("{file}:with_names", ["--stem", "a/b"], "argument --stem: 'a/b' is not a plain file name"),
        ("{file}:with_names", ["--stem", ".."], "argument --stem: '..' is not a plain file name"),
        ("no_such_package.module:f", [], "no module named 'no_such_package'"),
    ],
)
def test_bad_usage_exits_2_with_one_line(capsys, user_file, tmp_path, target, extra, message):
    status, out, err = run(capsys, target.format(file=user_file), *extra, "-o", tmp_path)
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("gradexport: error: ") and message in err
    assert list(tmp_path.glob("*.dot")) == []


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("raises", "user_code.py:raises() raised ValueError: boom second line"),
        ("not_a_tensor", "not_a_tensor() returned no autograd graph (gradexport.write: root 'output' is a"),
        ("no_grad", "does not require grad"),
        ("exits_quietly", "exits_quietly() called sys.exit(0) instead of returning the roots; nothing was written"),
        ("generator_exit", "generator_exit() raised GeneratorExit"),
    ],
)
def test_failures_exit_1_with_one_line(capsys, user_file, tmp_path, function, message):
    status, out, err = run(capsys, f"{user_file}:{function}", "-f", "dot", "-o", tmp_path)
    assert status == 1
    assert err.count("\n") == 1 and err.startswith("gradexport: error: ") and message in err
    assert not (tmp_path / f"{function}.dot").exists()


def test_an_interrupt_is_one_line_and_exit_130(capsys, user_file, tmp_path):
    status, out, err = run(capsys, f"{user_file}:interrupted", "-f", "dot", "-o", tmp_path)
    assert (status, out, err) == (130, "", "gradexport: error: interrupted\n")


def test_traceback_shows_where_the_function_failed(capsys, user_file, tmp_path):
    status, _, err = run(capsys, f"{user_file}:raises", "-f", "dot", "-o", tmp_path, "--traceback")
    assert status == 1
    assert "Traceback (most recent call last)" in err and 'raise ValueError("boom' in err
    assert err.rstrip("\n").splitlines()[-1].startswith("gradexport: error: ")


def test_version_is_the_installed_distributions(capsys):
    from importlib.metadata import version

    status, out, _ = run(capsys, "--version")
    assert (status, out) == (0, f"gradexport {version('gradexport')}\n")


def test_svg_failure_exits_1(capsys, user_file, tmp_path):
    status, _, err = run(capsys, f"{user_file}:with_names", "-o", tmp_path, "--prog", "no-such-dot")
    assert status == 1 and "Graphviz program 'no-such-dot'" in err
    assert list(tmp_path.glob("with_names.*")) == []


def test_mermaid_size_warning_is_one_line(capsys, user_file, tmp_path):
    status, _, err = run(capsys, f"{user_file}:long_chain", "-f", "mermaid", "-o", tmp_path, "-q")
    assert status == 0
    assert err.startswith("gradexport: warning: this Mermaid diagram has") and err.count("\n") == 1


def test_help_shows_examples(capsys):
    status, out, _ = run(capsys, "--help")
    assert status == 0
    assert "gradexport.examples.blog:multiply_then_sum --format dot,svg,mermaid,json --output" in out
    assert "exit status: 0 success, 1 failure, 2 bad usage, 130 interrupted" in out


def python(*argv, cwd=REPO, timeout=120):
    environment = {**os.environ, "PYTHONHASHSEED": "random"}
    return subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=environment)


def test_the_makefile_command_gives_identical_bytes_in_two_processes(tmp_path):
    outputs = []
    for run_number in range(2):
        folder = tmp_path / str(run_number)
        result = python(*MAKEFILE_COMMAND, str(folder))
        assert result.returncode == 0, result.stderr
        outputs.append({path.name: path.read_bytes() for path in sorted(folder.iterdir())})
    assert sorted(outputs[0]) == [f"multiply_then_sum.{ext}" for ext in ("dot", "json", "mmd", "svg")]
    assert outputs[0] == outputs[1]


def test_console_script_reports_bad_usage():
    script = Path(sys.executable).with_name("gradexport")
    if not script.exists():
        pytest.skip("the gradexport console script is not installed (pip install -e .)")
    result = subprocess.run([str(script), "gradexport/examples/blog.py", "-f", "dot"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.startswith("gradexport: error: argument TARGET") and result.stderr.count("\n") == 1


def test_ctrl_c_while_the_function_runs_is_one_line_and_exit_130(tmp_path):
    import signal
    import time

    (tmp_path / "slow.py").write_text("import time\n\ndef wait():\n    print('started', flush=True)\n    time.sleep(60)\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "gradexport", f"{tmp_path / 'slow.py'}:wait", "-f", "dot", "-o", str(tmp_path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline() == "started\n"
    time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert (process.returncode, err) == (130, "gradexport: error: interrupted\n")


@pytest.mark.slow
def test_a_graph_deep_enough_to_crash_a_normal_stack_exports(tmp_path):
    # Freeing a 60,000-node chain that Python walked overflows the main thread's stack (exit -11 / 139).
    code = textwrap.dedent(
        """
        import torch

        def deep():
            x0 = torch.zeros(1, requires_grad=True)
            x = x0
            for _ in range(60_000):
                x = x * 1.0
            return x, {"x": x0}
        """
    )
    (tmp_path / "deep.py").write_text(code)
    result = python("-m", "gradexport", f"{tmp_path / 'deep.py'}:deep", "-f", "json", "-o", str(tmp_path), "-q")
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "deep.json").stat().st_size > 60_000 * 50
