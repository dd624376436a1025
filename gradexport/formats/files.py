"""Atomic file output: a reader never sees a half-written diagram.

Each file is written to a temporary file in its own folder and moved over the
target with `os.replace` (atomic on POSIX and Windows) once complete.
`StagedFiles` stages several files and publishes them only when all
were written, so a failed render (say, Graphviz missing for the SVG) leaves
every old file as it was and no temporary file behind.

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
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import IO, Any

__all__ = ["OutputError", "StagedFiles", "atomic_open"]

_NEW_FILE_MODE = 0o644


class OutputError(OSError):
    """A diagram file or its folder cannot be written (the message names the path and why)."""


class StagedFiles:
    """Open files that appear at their paths only when the ``with`` block succeeds.

    On an exception inside the block, every temporary file is removed and
    every target keeps its old content.
    """

    def __init__(self) -> None:
        self._staged: list[tuple[IO[Any], str, Path]] = []

    def open(self, path: str | os.PathLike[str], *, binary: bool = False) -> IO[Any]:
        """A new temporary file that will replace ``path``; text files are UTF-8 with ``\\n`` newlines."""
        target = Path(path)
        folder = target.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise OutputError(f"cannot create folder {str(folder)!r}: {error.strerror or error}") from error
        if target.is_dir():
            raise OutputError(f"cannot write {str(target)!r}: it is a folder")
        try:
            descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
        except OSError as error:
            raise OutputError(f"cannot write in folder {str(folder)!r}: {error.strerror or error}") from error
        if binary:
            file: IO[Any] = os.fdopen(descriptor, "wb")
        else:
            file = os.fdopen(descriptor, "w", encoding="utf-8", newline="\n")
        self._staged.append((file, temporary, target))
        return file

    def __enter__(self) -> StagedFiles:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
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

    def _publish(self) -> None:
        for _, temporary, target in self._staged:
            try:
                mode = target.stat().st_mode & 0o7777 if target.exists() else _NEW_FILE_MODE
                os.chmod(temporary, mode)  # mkstemp creates 0600; keep the old file's mode
                os.replace(temporary, target)
            except OSError as error:
                raise OutputError(f"cannot write {str(target)!r}: {error.strerror or error}") from error


@contextmanager
def atomic_open(path: str | os.PathLike[str], *, binary: bool = False) -> Iterator[IO[Any]]:
    """Open ``path`` for writing so that it changes only, and completely, when the block succeeds."""
    with StagedFiles() as staged:
        yield staged.open(path, binary=binary)
