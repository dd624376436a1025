"""gradexport.formats.files: all-or-nothing publishing, stale temporaries, modes, long names."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gradexport
from gradexport.errors import OutputError
from gradexport.formats import files
from gradexport.formats.files import StagedFiles, atomic_open, remove_stale_temporaries


def temporaries(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name.endswith(".tmp"))


def contents(folder: Path) -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(folder.iterdir()) if path.is_file()}


def stage_three(folder: Path) -> StagedFiles:
    staged = StagedFiles()
    for name in ("a.txt", "b.txt", "c.txt"):
        staged.open(folder / name).write(f"new {name}")
    return staged


def test_a_failed_second_rename_puts_the_first_file_back(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text("old a")
    (tmp_path / "b.txt").write_text("old b")
    (tmp_path / "a.txt").chmod(0o640)
    real_replace = os.replace
    calls = []

    def replace(source, target):
        calls.append(Path(target).name)
        if Path(target).name == "b.txt" and calls.count("b.txt") == 1:
            raise PermissionError(1, "Operation not permitted")  # what an immutable file gives
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OutputError, match=r"cannot write '.*b\.txt': Operation not permitted"), stage_three(tmp_path):
        pass
    assert contents(tmp_path) == {"a.txt": "old a", "b.txt": "old b"}  # c.txt, new, never appeared
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o640
    assert calls[:2] == ["a.txt", "b.txt"] and "a.txt" in calls[2:]  # a was replaced, then put back
    assert temporaries(tmp_path) == []


def test_a_folder_appearing_at_a_target_rolls_back_every_file(tmp_path):
    (tmp_path / "b.txt").write_text("old b")
    (tmp_path / "c.txt").write_text("old c")
    with pytest.raises(OutputError, match=r"cannot write '.*c\.txt'"), stage_three(tmp_path):
        (tmp_path / "c.txt").unlink()
        (tmp_path / "c.txt").mkdir()  # a real failure of rename(2): a non-empty folder is in the way
        (tmp_path / "c.txt" / "inside").write_text("keep me")
    assert contents(tmp_path) == {"b.txt": "old b"}  # a.txt was new: removed again
    assert (tmp_path / "c.txt" / "inside").read_text() == "keep me"
    assert temporaries(tmp_path) == []


def test_without_hard_links_the_old_file_is_copied_aside(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text("old a")

    def no_links(*args, **kwargs):
        raise OSError(1, "no hard links on this file system")

    monkeypatch.setattr(os, "link", no_links)
    with pytest.raises(OutputError, match=r"x\.txt"), StagedFiles() as staged:
        staged.open(tmp_path / "a.txt").write("new a")
        staged.open(tmp_path / "x.txt").write("new x")
        (tmp_path / "x.txt").mkdir()
        (tmp_path / "x.txt" / "inside").write_text("")
    assert (tmp_path / "a.txt").read_text() == "old a"
    assert temporaries(tmp_path) == []


def test_success_publishes_every_file_and_leaves_nothing_aside(tmp_path):
    (tmp_path / "a.txt").write_text("old a")
    with stage_three(tmp_path):
        pass
    assert contents(tmp_path) == {"a.txt": "new a.txt", "b.txt": "new b.txt", "c.txt": "new c.txt"}
    assert temporaries(tmp_path) == []


KILLED_WRITER = """
import sys, time
from gradexport.formats.files import StagedFiles
with StagedFiles() as staged:
    staged.open(sys.argv[1] + "/graph.dot").write("x" * 100_000)
    staged.open(sys.argv[1] + "/graph.svg").write("half")
    print("staged", flush=True)
    time.sleep(60)
"""


def start_writer(folder: Path) -> subprocess.Popen[str]:
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(folder)], stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline() == "staged\n"
    return writer


def test_temporaries_of_a_killed_writer_are_removed_by_the_next_write(tmp_path):
    (tmp_path / "graph.dot").write_text("old")
    (tmp_path / ".graph.dot.tmp").write_text("someone else's")
    (tmp_path / ".notes.gradexport-1-x.txt").write_text("not a temporary")
    killed = start_writer(tmp_path)
    killed.send_signal(signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL
    left = temporaries(tmp_path)
    assert len(left) == 3 and all(f"gradexport-{killed.pid}-" in name for name in left if name != ".graph.dot.tmp")
    assert (tmp_path / "graph.dot").read_text() == "old" and not (tmp_path / "graph.svg").exists()

    alive = start_writer(tmp_path)  # a writer still running keeps its temporaries
    try:
        w = torch.ones(1, requires_grad=True)
        gradexport.write(w * 2, tmp_path, "json")
        left = temporaries(tmp_path)
        assert ".graph.dot.tmp" in left and not any(f"-{killed.pid}-" in name for name in left)
        assert sum(f"gradexport-{alive.pid}-" in name for name in left) == 2
    finally:
        alive.kill()
        alive.wait()
    assert (tmp_path / ".notes.gradexport-1-x.txt").exists() and (tmp_path / "graph.dot").read_text() == "old"


def test_stale_means_the_owner_ended_or_a_day_old_where_that_cannot_be_checked(tmp_path, monkeypatch):
    mine = tmp_path / f".g.gradexport-{os.getpid()}-abc.tmp"
    mine.write_text("")
    monkeypatch.setattr(files, "_CAN_PROBE_PIDS", False)
    fresh, old = tmp_path / ".g.gradexport-999999999-a.tmp", tmp_path / ".g.gradexport-999999999-b.tmp"
    fresh.write_text("")
    old.write_text("")
    os.utime(old, (0, 0))
    assert remove_stale_temporaries(tmp_path) == [old]
    assert mine.exists() and fresh.exists()


@pytest.mark.parametrize("umask, expected", [(0o077, 0o600), (0o022, 0o644), (0o002, 0o664)])
def test_new_files_honour_the_umask(tmp_path, umask, expected):
    previous = os.umask(umask)
    try:
        with atomic_open(tmp_path / "new.txt") as file:
            file.write("x")
        assert files._umask() == umask
    finally:
        os.umask(previous)
    assert (tmp_path / "new.txt").stat().st_mode & 0o777 == expected


def test_umask_without_proc(monkeypatch):
    def no_proc(*args, **kwargs):
        raise FileNotFoundError("/proc/self/status")

    monkeypatch.setattr(files, "open", no_proc, raising=False)
    previous = os.umask(0o027)
    try:
        assert files._umask() == 0o027
        assert os.umask(previous) == 0o027  # and left as it was
    finally:
        os.umask(previous)


def test_an_over_long_name_is_an_output_error(tmp_path):
    w = torch.ones(1, requires_grad=True)
    with pytest.raises(OutputError, match=r"cannot write '.*a{300}\.dot': File name too long"):
        gradexport.write(w * 2, tmp_path, "dot", stem="a" * 300)
    with pytest.raises(OutputError, match="File name too long"), atomic_open(tmp_path / ("b" * 300)):
        pass
    long_but_valid = "c" * 250 + ".dot"  # the temporary's name is shortened to fit
    gradexport.write(w * 2, tmp_path, "dot", stem="c" * 250)
    assert (tmp_path / long_but_valid).read_text().startswith("digraph")
    assert list(tmp_path.iterdir()) == [tmp_path / long_but_valid]
