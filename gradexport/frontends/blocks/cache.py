"""Keys for a page's results, so that a host reruns a page's blocks only when they, or the library, changed.

A page's blocks share one namespace, so the key covers all of them in
order: editing the prose of a page reruns nothing, editing one block reruns
that page's blocks. The key includes the gradexport version and a digest
of its sources (`library_fingerprint`), so an edited library reruns
everything.

Examples:
    >>> from gradexport.frontends.blocks.markdown import find_blocks
    >>> first = find_blocks(["```gradexport", "x = 1", "```"], "page.md")
    >>> moved = find_blocks(["Prose.", "", "```gradexport", "x = 1", "```"], "page.md")
    >>> results_key(first, "page.md") == results_key(moved, "page.md")
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import pickle
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from .runner import BlockResult
from .spec import Block

__all__ = ["PACKAGE_DIR", "ResultStore", "library_fingerprint", "results_key"]

#: The gradexport package, whose sources the hosts watch and fingerprint.
PACKAGE_DIR = Path(__file__).resolve().parents[2]


def library_fingerprint() -> str:
    """A digest of the gradexport sources: it changes when the library is edited."""
    digest = hashlib.sha256()
    for source in sorted(PACKAGE_DIR.rglob("*.py")):
        digest.update(source.relative_to(PACKAGE_DIR).as_posix().encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()


@cache
def _fingerprint_once() -> str:
    return library_fingerprint()


def results_key(blocks: list[Block], shown_as: str, *settings: Any) -> str:
    """A digest of what a page's results depend on: its blocks' code and options (not their lines),
    the name it is shown as, the host's ``settings``, and the library (version and sources)."""
    described = [
        shown_as,
        [(block.code, sorted(block.options.show), block.options.formats, block.options.graph, repr(block.options.export)) for block in blocks],
        [repr(setting) for setting in settings],
        importlib.metadata.version("gradexport"),
        _fingerprint_once(),
    ]
    return hashlib.sha256(json.dumps(described).encode()).hexdigest()


class ResultStore:
    """Results of pages kept in a folder between builds, one file per `results_key`.

    Written atomically (a temporary file renamed), so parallel builds and
    readers never see half a file; a file that cannot be read is a miss.

    Examples:
        >>> import tempfile
        >>> store = ResultStore(Path(tempfile.mkdtemp()))
        >>> store.get("k") is None
        True
        >>> store.put("k", [BlockResult("42\\n", {})])
        >>> store.get("k")[0].output
        '42\\n'
    """

    def __init__(self, folder: Path):
        self.folder = folder

    def get(self, key: str) -> list[BlockResult] | None:
        """The results stored under ``key``, or ``None``."""
        with contextlib.suppress(OSError, pickle.UnpicklingError, EOFError, AttributeError):
            results = pickle.loads((self.folder / f"{key}.pickle").read_bytes())
            if isinstance(results, list) and all(isinstance(result, BlockResult) for result in results):
                return results
        return None

    def put(self, key: str, results: list[BlockResult]) -> None:
        """Store ``results`` under ``key``."""
        self.folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=self.folder, suffix=".part")
        with os.fdopen(handle, "wb") as file:
            pickle.dump(results, file)
        os.replace(temporary, self.folder / f"{key}.pickle")
