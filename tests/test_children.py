"""No child process of gradexport outlives it, whichever signal ends it.

Each test starts the command line as a user would, in a subprocess (in a
session of its own, so that clean-up can reach a survivor through the
process group), waits until the child is running, sends the signal to the
command line's own pid, as ``kill``, a CI timeout or a job scheduler does
(a terminal's Ctrl-C signals the whole group, which would hide the bug), and
checks the child is gone. ``dot`` is kept busy by a graph that takes it
tens of seconds to lay out.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from gradexport.core import children, temporaries
from gradexport.core.children import run_child

REPO = Path(os.environ.get("GRADEXPORT_TREE", Path(__file__).resolve().parent.parent))  # another tree: the same tests before a change

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from Linux's /proc")

SLOW_LAYOUT = """
import torch


def wide():
    # Every leaf meets every other: thousands of crossing edges keep dot's ordering busy for minutes.
    leaves = [torch.ones(1, requires_grad=True) for _ in range(60)]
    total = sum(a * b for a in leaves for b in leaves[::3])
    return total, {f"x{index}": leaf for index, leaf in enumerate(leaves)}


def served():
    x = torch.ones(2, requires_grad=True)
    return (x * 2).sum(), {"x": x}
"""


def parent_and_state(pid: int) -> tuple[int, str] | None:
    """``(ppid, state)`` from /proc, or ``None`` once the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0]


def alive(pid: int) -> bool:
    found = parent_and_state(pid)
    return found is not None and found[1] not in ("Z", "X")  # a zombie has ended; only its parent has not reaped it


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (state := parent_and_state(int(entry.name))) is not None and state[0] == pid:
            found.append(int(entry.name))
    return found


def running(pid: int, name: str) -> str:
    """``name`` of /proc/PID (``comm``, ``cmdline``), or ``""`` once the process is gone."""
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes().decode(errors="replace").strip()
    except OSError:
        return ""


def laying_out(pid: int) -> list[int]:
    """The children of ``pid`` running Graphviz (past setpriv's exec; torch's import and gradexport start other, short ones)."""
    return [child for child in children_of(pid) if "-Tsvg" in running(child, "cmdline") and running(child, "comm") != "setpriv"]


def sleeping(pid: int) -> list[int]:
    """The children of ``pid`` running ``sleep``."""
    return [child for child in children_of(pid) if running(child, "comm") == "sleep"]


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def start(tmp_path: Path, *arguments: str) -> subprocess.Popen[bytes]:
    (tmp_path / "targets.py").write_text(SLOW_LAYOUT, encoding="utf-8")
    return subprocess.Popen(
        [sys.executable, "-m", "gradexport", *arguments],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,
    )


def end_all(process: subprocess.Popen[bytes]) -> None:
    """Clean-up: whatever is left of the group, survivors re-parented to PID 1 included."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass
    process.communicate(timeout=60)


SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL]


@pytest.mark.slow
@pytest.mark.parametrize("signum", SIGNALS, ids=[signal.Signals(number).name for number in SIGNALS])
def test_graphviz_dies_with_the_command_line(tmp_path, signum):
    process = start(tmp_path, "targets.py:wide", "-f", "svg", "-o", "out", "--quiet")
    try:
        assert wait_until(lambda: laying_out(process.pid), 120), process.stderr.read1().decode() if process.poll() is not None else "Graphviz never started"
        (graphviz,) = laying_out(process.pid)
        time.sleep(0.5)
        assert alive(graphviz), "Graphviz finished before the signal: the layout is not slow enough for this test"
        process.send_signal(signum)
        process.wait(timeout=30)
        assert wait_until(lambda: not alive(graphviz), 5), f"Graphviz (pid {graphviz}) outlived the command line ({signum!r})"
        expected = -signal.SIGKILL if signum == signal.SIGKILL else temporaries.EXIT_STATUS[signum][0]
        assert process.returncode == expected
        assert not (tmp_path / "out" / "wide.svg").exists()
    finally:
        end_all(process)


def test_the_command_line_handles_sighup_as_a_stop():
    assert temporaries.EXIT_STATUS[signal.SIGHUP] == (129, "hung up")


@pytest.mark.parametrize("way", ["setpriv", "ctypes"])
def test_a_child_is_killed_when_its_parent_is_killed_with_sigkill(tmp_path, way):
    """The kernel's guard alone (PR_SET_PDEATHSIG), set by setpriv or by prctl through ctypes: a parent running sleep, SIGKILLed."""
    if way == "setpriv" and children._setpriv_prefix() is None:
        pytest.skip("util-linux's setpriv (2.33 or newer) is not installed")
    without_setpriv = "children._setpriv_prefix = lambda: None\n" if way == "ctypes" else ""
    script = tmp_path / "parent.py"
    script.write_text(f"from gradexport.core import children\n{without_setpriv}children.run_child(['sleep', '60'], input=b'')\n", encoding="utf-8")
    parent = subprocess.Popen([sys.executable, str(script)], env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    try:
        assert wait_until(lambda: sleeping(parent.pid), 60)  # past setpriv's exec; importing torch starts short children too
        (child,) = sleeping(parent.pid)
        parent.kill()
        parent.wait(timeout=30)
        assert wait_until(lambda: not alive(child), 5), "sleep outlived its SIGKILLed parent"
    finally:
        end_all(parent)


def test_run_child_kills_the_child_on_a_timeout_and_forgets_it():
    with pytest.raises(subprocess.TimeoutExpired):
        run_child(["sleep", "60"], input=b"", timeout=0.2)
    assert temporaries.kill_children() == 0  # nothing left tracked
    assert run_child(["cat"], input=b"x").stdout == b"x"


def test_no_process_outlives_model_explorer_and_its_port_closes(tmp_path):
    pytest.importorskip("model_explorer")
    process = start(tmp_path, "view", "targets.py:served", "--model-explorer", "--no-open", "--quiet")
    try:
        address = None

        def serving() -> bool:
            nonlocal address
            line = process.stdout.readline().decode() if process.poll() is None else ""
            if "http://" in line:
                address = line[line.index("http://") :].split("/?")[0].strip()
            return address is not None and listening(address)

        assert wait_until(serving, 120), process.stderr.read().decode() if process.poll() is not None else "never served"
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        assert process.returncode == 143
        assert children_of(process.pid) == []
        assert not listening(address)
    finally:
        end_all(process)


def listening(address: str) -> bool:
    """Whether something accepts connections at ``http://HOST:PORT``."""
    host, port = urlsplit(address).hostname, urlsplit(address).port
    try:
        socket.create_connection((host, port), timeout=2).close()
        return True
    except OSError:
        return False
