"""The MkDocs plugin's child process: nothing outlives a killed build or a stopped block, and every stream is capped.

Real processes: ``mkdocs build`` is started as a subprocess and killed with
SIGKILL or SIGTERM; the fake ``dot`` and the block record their pids, and the
test checks that those processes are gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_mkdocs_plugin import make_site

from gradexport.core.errors import ExampleError
from gradexport.frontends.mkdocs.blocks import find_blocks
from gradexport.frontends.mkdocs.runner import BlockRunner

REPO = Path(__file__).resolve().parent.parent


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (ended, not yet reaped by its new parent) is gone too
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def wait_until(predicate, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def blocks_of(code: str, show: str = "output"):
    return find_blocks([f'```gradexport show="{show}"', *code.splitlines(), "```"], "page.md")


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_no_child_outlives_a_killed_mkdocs_build(tmp_path, signum):
    pids = tmp_path / "pids"
    page = f"""\
        # Slow

        ```gradexport
        import os, subprocess, time
        sleeper = subprocess.Popen(["sleep", "120"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{sleeper.pid}}")
        time.sleep(120)
        ```
        """
    config = make_site(tmp_path, {"index.md": page})
    build = subprocess.Popen(
        [sys.executable, "-m", "mkdocs", "build", "-q", "-f", str(config)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 2, 120)
        child, sleeper = map(int, pids.read_text().split())
        assert alive(child) and alive(sleeper)
        build.send_signal(signum)
        build.wait(timeout=30)
        assert wait_until(lambda: not alive(child) and not alive(sleeper), 10), "a process outlived the build"
    finally:
        build.kill()
        build.wait()
        if pids.exists():
            for pid in map(int, pids.read_text().split()):
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)


def test_dot_is_killed_after_a_blocks_timeout(tmp_path, monkeypatch):
    marker = tmp_path / "dot-pid"
    fake_dot = tmp_path / "slow-dot"
    fake_dot.write_text(f"#!/bin/sh\necho $$ > {marker}\nexec sleep 120\n", encoding="utf-8")
    fake_dot.chmod(0o755)
    monkeypatch.setenv("GRADEXPORT_DOT", str(fake_dot))
    code = "import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum()"
    blocks = find_blocks(['```gradexport show="diagram" formats="svg"', *code.splitlines(), "```"], "page.md")
    try:
        with BlockRunner(timeout=5) as runner, pytest.raises(ExampleError, match="ran longer than 5 s"):
            runner.run(blocks, "page.md", "page.md")
        pid = int(marker.read_text())
        assert wait_until(lambda: not alive(pid), 10), "dot outlived the block's timeout"
    finally:
        if marker.exists() and alive(int(marker.read_text())):
            os.kill(int(marker.read_text()), signal.SIGKILL)


@pytest.mark.parametrize(
    "code",
    ["import os\nos.write(1, b'x' * 5_000_000)", "import os\nos.write(2, b'x' * 5_000_000)", "import sys\nsys.stderr.write('x' * 5_000_000)"],
    ids=["fd-1", "fd-2", "sys.stderr"],
)
def test_max_output_holds_for_every_stream(capfd, code):
    with BlockRunner(timeout=60, max_output=1_000) as runner:
        (result,) = runner.run(blocks_of(code), "page.md", "page.md")
    out, err = capfd.readouterr()
    assert len(out) + len(err) < 5_000, f"{len(out) + len(err):,} characters reached the build's streams"
    assert result.output == ""


def test_sys_stderr_under_the_cap_still_reaches_the_log(capfd):
    with BlockRunner(timeout=60, max_output=1_000) as runner:
        runner.run(blocks_of("import sys\nsys.stderr.write('a note for the log\\n')"), "page.md", "page.md")
    assert "a note for the log" in capfd.readouterr().err
