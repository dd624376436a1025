"""Fixtures shared by every test module."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
from hypothesis import settings

from gradexport.tracing._torch import COMPILED_GRAPH_TORCH, INPUT_METADATA_TORCH, TORCH_VERSION

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


#: Docstring examples that replay a backward pass (replay, steps, the step picture, the engine's capture): they need
#: Node._input_metadata, torch 2.5; on an older torch the functions raise TorchVersionError (tests/test_torch_internals.py).
REPLAY_DOCTESTS = (
    "gradexport.backward.replay",
    "gradexport.backward.replay_record",
    "gradexport.backward.steps",
    "gradexport.examples.blog.step_picture",
    "gradexport.records",
    "gradexport.tracing._torch.run_tensor_hooks",
    "gradexport.tracing._torch.num_inputs",
    "gradexport.tracing._torch.input_metadata",
)


#: Docstring examples that open a compiled region: torch keeps its backward graph from torch 2.3.
COMPILED_DOCTESTS = ("gradexport.tracing.compiled",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skips = []
    if TORCH_VERSION < INPUT_METADATA_TORCH:
        skips.append((REPLAY_DOCTESTS, pytest.mark.skip(reason="replays a backward pass: needs Node._input_metadata, torch 2.5")))
    if TORCH_VERSION < COMPILED_GRAPH_TORCH:
        skips.append((COMPILED_DOCTESTS, pytest.mark.skip(reason="opens a compiled region: CompiledFunction keeps its backward graph from torch 2.3")))
    for names, skip in skips:
        for item in items:
            if isinstance(item, pytest.DoctestItem) and item.name.startswith(names):
                item.add_marker(skip)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers("tool_missing"):
        pytest.fail(f"{marker.args[0]}; under make or with CI=true this is a failure, not a skip")
