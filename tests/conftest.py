"""Fixtures shared by every test module."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
from hypothesis import settings

# The same examples on every run: a property test that fails does so in CI and on a laptop alike.
# No deadline: hypothesis's 200 ms per example is a timed assertion, and on this shared 2-core
# machine a loaded run made test_gradient_stats exceed it once.
settings.register_profile("gradexport", derandomize=True, deadline=None)
settings.load_profile("gradexport")


@pytest.fixture
def without_graphviz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Graphviz anywhere: an empty PATH, no GRADEXPORT_DOT, no scripts folder beside the interpreter."""
    empty = tmp_path / "no-graphviz"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("GRADEXPORT_DOT", raising=False)
    monkeypatch.setattr(sysconfig, "get_path", lambda name, *args, **kwargs: str(empty))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "tool_missing(reason): a required tool is missing; the test fails (format_fixtures.needs_tool)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers("tool_missing"):
        pytest.fail(f"{marker.args[0]}; under make or with CI=true this is a failure, not a skip")
