"""Atomic file output: a reader never sees a half-written diagram.

What is guaranteed (POSIX; the same steps run on Windows):

* **No partial file under a final name.** Each file is written to a
  temporary file in its own folder and moved over its target with
  `os.replace` (atomic) only once complete. A crash, an exception or
  SIGKILL at any moment leaves every target either old and complete or new
  and complete.
* **All or nothing for a set of files.** `StagedFiles` publishes its
  files only when every one was written; if one cannot be written, or
  replacing one fails (say a folder now stands at its path), the files
  already replaced get their old content back (kept aside as hard links, or
  copies where the file system has none) and new ones are removed, so every
  target is as it was before and `OutputError` names the path. The
  only gap: a process *killed* during the publish step itself (a few
  renames, after all the content was written) can leave some targets new
  and some old, each complete.
* **No litter.** Temporary files are removed on every failure. Those of a
  killed process, named ``.<target>.gradexport-<pid>-<random>.tmp``, are
  removed by the next write into the same folder once their owner process
  has ended (checked with ``kill(pid, 0)``; on Windows, where that check is
  not available, once they are a day old). Nothing else in the folder is
  touched. A temporary of a writer on another machine sharing the folder
  can look stale; removing it makes that writer fail with
  `OutputError`, never publish a partial file.
* **Racing writers.** Two processes writing the same targets at once each
  publish complete files; which one's file is left at each path is not
  defined (it can differ from path to path).
* **Modes.** A replaced file keeps its mode; a new file gets ``0o666``
  less the process umask, as `open` would give it.
* **Clear errors.** Every file-system failure (no permission, a folder in
  the way, a name too long) is an `OutputError` naming the path.

Examples:
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp()) / "new" / "folder"
    >>> with atomic_open(folder / "a.txt") as file:
    ...     _ = file.write("complete")
    >>> (folder / "a.txt").read_text()
    'complete'
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ..core import temporaries
from ..core.errors import OutputError

__all__ = ["OutputError", "StagedFiles", "TextOutput", "atomic_open", "remove_stale_temporaries", "text_output"]

#: The name of every temporary (and kept-aside old) file this module creates.
TEMPORARY_NAME = re.compile(r"^\..*\.gradexport-(?P<pid>\d+)-[a-z0-9_]+\.tmp$")
#: Where the owner's liveness cannot be checked, a temporary this old (seconds) is stale.
_STALE_AGE = 24 * 3600
# Only so much of the target's name goes into a temporary's, so that a target
# name near the file-name limit still gets a temporary.
_NAME_PART = 64
#: Whether ``kill(pid, 0)`` tells if a process runs (on Windows it would end it).
_CAN_PROBE_PIDS = os.name != "nt"


def _umask() -> int:
    try:  # Linux 4.7+: read it without changing it (os.umask alone would, for every thread)
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _owner_ended(pid: int) -> bool:
    if not _CAN_PROBE_PIDS:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, owned by another user
        return False
    return False


def remove_stale_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporaries a killed writer left in ``folder``; return what was removed.

    Only files named as this module names its temporaries are considered, and
    only those whose owner process has ended (see the module docstring).
    `StagedFiles` calls it for every folder it writes into; errors
    (a file removed meanwhile, no permission) are ignored.

    Examples:
        >>> import pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / ".graph.dot.gradexport-999999999-abc.tmp").write_text("left by a killed write")
        >>> _ = (folder / ".graph.dot.tmp").write_text("not ours")
        >>> [path.name for path in remove_stale_temporaries(folder)]
        ['.graph.dot.gradexport-999999999-abc.tmp']
        >>> sorted(path.name for path in folder.iterdir())
        ['.graph.dot.tmp']
    """
    removed: list[Path] = []
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        match = TEMPORARY_NAME.match(entry.name)
        if match is None or int(match["pid"]) == os.getpid():
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            if _owner_ended(int(match["pid"])) or now - entry.stat(follow_symlinks=False).st_mtime > _STALE_AGE:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


def _error(action: str, path: Path, error: OSError) -> OutputError:
    return OutputError(f"cannot {action} {str(path)!r}: {error.strerror or error}")


class StagedFiles:
    """Open files that appear at their paths only when the ``with`` block succeeds.

    On an exception inside the block, or a failure while publishing, every
    temporary file is removed and every target keeps its old content (see the
    module docstring for the exact guarantee).

    Examples:
        >>> import pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> (folder / "a.txt").write_text("old a")
        5
        >>> try:
        ...     with StagedFiles() as staged:
        ...         _ = staged.open(folder / "a.txt").write("new a")
        ...         _ = staged.open(folder / "b.txt").write("new b")
        ...         raise RuntimeError("the second writer failed")
        ... except RuntimeError:
        ...     pass
        >>> (folder / "a.txt").read_text(), (folder / "b.txt").exists()
        ('old a', False)
    """

    def __init__(self) -> None:
        self._staged: list[tuple[IO[Any], str, Path]] = []
        self._cleaned: set[Path] = set()
        self._tracked: list[str] = []  # in gradexport.core.temporaries until the block ends

    def open(self, path: str | os.PathLike[str], *, binary: bool = False) -> IO[Any]:
        """A new temporary file that will replace ``path``; text files are UTF-8 with ``\\n`` newlines."""
        target = Path(path)
        folder = target.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise _error("create folder", folder, error) from error
        try:
            is_folder = target.is_dir()
        except OSError as error:  # a name too long, say: Path.is_dir lets that through
            raise _error("write", target, error) from error
        if is_folder:
            raise OutputError(f"cannot write {str(target)!r}: it is a folder")
        if folder not in self._cleaned:
            self._cleaned.add(folder)
            remove_stale_temporaries(folder)
        try:
            descriptor, temporary = self._temporary(target)
        except OSError as error:
            raise _error("write in folder", folder, error) from error
        if binary:
            file: IO[Any] = os.fdopen(descriptor, "wb")
        else:
            file = os.fdopen(descriptor, "w", encoding="utf-8", newline="\n")
        self._staged.append((file, temporary, target))
        return file

    def _temporary(self, target: Path) -> tuple[int, str]:
        prefix = f".{target.name[:_NAME_PART]}.gradexport-{os.getpid()}-"
        with temporaries.lock():  # a signal handler cannot remove them between creation and tracking
            descriptor, path = tempfile.mkstemp(dir=target.parent, prefix=prefix, suffix=".tmp")
            temporaries.track(path)
        self._tracked.append(path)
        return descriptor, path

    def __enter__(self) -> StagedFiles:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None) -> None:
        try:
            for file, _, _ in self._staged:
                file.close()
            if kind is None:
                self._publish()
        finally:
            for _, temporary, _ in self._staged:
                with suppress(FileNotFoundError):
                    os.unlink(temporary)
            self._staged.clear()
            for path in self._tracked:
                temporaries.untrack(path)
            self._tracked.clear()

    def _publish(self) -> None:
        new_mode = 0o666 & ~_umask()
        # (target, its old content kept aside or None when it is new), for each target replaced so far
        replaced: list[tuple[Path, str | None]] = []
        try:
            for _, temporary, target in self._staged:
                try:
                    mode = target.stat().st_mode & 0o7777 if target.exists() else new_mode
                    os.chmod(temporary, mode)  # mkstemp creates 0600
                    kept = self._keep_aside(target)
                    try:
                        os.replace(temporary, target)
                    except BaseException:
                        if kept is not None:
                            with suppress(OSError):
                                os.unlink(kept)
                        raise
                    replaced.append((target, kept))
                except OSError as error:
                    raise _error("write", target, error) from error
        except BaseException:
            self._restore(replaced)
            raise
        for _, kept in replaced:
            if kept is not None:
                with suppress(OSError):
                    os.unlink(kept)

    def _keep_aside(self, target: Path) -> str | None:
        """A second name for the old ``target`` (or a copy of it), so that it can be put back."""
        if not os.path.lexists(target):
            return None
        descriptor, kept = self._temporary(target)
        os.close(descriptor)
        os.unlink(kept)
        try:
            os.link(target, kept, follow_symlinks=False)
        except OSError:  # no hard links here (FAT, some network file systems)
            shutil.copy2(target, kept, follow_symlinks=False)
        return kept

    @staticmethod
    def _restore(replaced: list[tuple[Path, str | None]]) -> None:
        for target, kept in reversed(replaced):
            with suppress(OSError):
                if kept is None:
                    os.unlink(target)
                else:
                    os.replace(kept, target)


@contextmanager
def atomic_open(path: str | os.PathLike[str], *, binary: bool = False) -> Iterator[IO[Any]]:
    """Open ``path`` for writing so that it changes only, and completely, when the block succeeds."""
    with StagedFiles() as staged:
        yield staged.open(path, binary=binary)


#: Where a writer writes: a path (written atomically) or a text file already open.
TextOutput = str | os.PathLike[str] | IO[str]


@contextmanager
def text_output(file_or_path: TextOutput) -> Iterator[IO[str]]:
    """A text file to write to: ``file_or_path`` itself when it is open, else `atomic_open` of the path.

    Every writer's ``write_*`` takes either, as NetworkX's ``@open_file``
    lets its writers do; an open file is left open.

    Examples:
        >>> import io
        >>> with text_output(io.StringIO()) as file:
        ...     _ = file.write("text")
        ...     file.getvalue()
        'text'
    """
    if isinstance(file_or_path, (str, os.PathLike)):
        with atomic_open(file_or_path) as file:
            yield file
    else:
        yield file_or_path
