"""One ``mkdocs build --strict`` of the project's site per test session, shared by the site tests.

The site test modules import :func:`built_site` from here (``pythonpath =
["tests"]`` in pyproject.toml puts this folder on ``sys.path``). The fixture is then
defined in two modules, so the build itself is memoised per session folder.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class BuiltSite:
    directory: Path
    #: What ``mkdocs build`` printed (stdout and stderr).
    log: str
    #: Wall time of the build, for information (nothing asserts on it).
    seconds: float


@functools.cache
def _build(site_dir: Path) -> BuiltSite:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"), "--site-dir", str(site_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # a banner about MkDocs 2, not about this site
    )
    seconds = time.perf_counter() - started
    log = result.stdout + result.stderr
    if result.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed (exit {result.returncode}):\n{log}", pytrace=False)
    print(f"\nmkdocs build --strict took {seconds:.1f} s")
    return BuiltSite(site_dir, log, seconds)


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> BuiltSite:
    """The project's site, built once with ``mkdocs build --strict`` into a temporary folder."""
    return _build(tmp_path_factory.getbasetemp() / "site")
