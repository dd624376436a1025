"""Deep graphs on the user's own main thread: the process survives freeing them, or is warned once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # each test walks a 10^4 to 10^5-node chain in a fresh interpreter

WALK_AND_DROP = """
import resource, sys, warnings
import torch, gradexport
x = torch.zeros(1, requires_grad=True)
y = x
for _ in range({depth}):
    y = y * 1.0
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    graph = gradexport.to_networkx(y)
    gradexport.to_networkx(y)  # a second walk warns no more
assert graph.number_of_nodes() == {depth} + 2
del y, graph  # torch frees the chain recursively, here, on the main thread
print(resource.getrlimit(resource.RLIMIT_STACK)[0], [str(w.message)[:40] for w in caught])
"""


def run_python(code: str, environment: dict[str, str] | None = None, preexec=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, **(environment or {})},
        preexec_fn=preexec,
    )


def stack_limits(soft: int, hard: int):
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_STACK, (soft, hard))

    return apply


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the stack limit is raised on Linux only")
def test_a_100k_chain_walked_and_dropped_on_the_main_thread_exits_cleanly() -> None:
    import resource

    hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
    if hard != resource.RLIM_INFINITY and hard < 1 << 30:
        pytest.skip(f"this machine's hard stack limit ({hard} bytes) is too low to show the fix")
    result = run_python(WALK_AND_DROP.format(depth=100_000), preexec=stack_limits(8 << 20, hard))
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    soft, warned = result.stdout.split(" ", 1)
    assert int(soft) == hard and warned.strip() == "[]"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the stack limit is raised on Linux only")
def test_opting_out_keeps_the_limit_and_a_small_graph_changes_nothing() -> None:
    kept = run_python(WALK_AND_DROP.format(depth=25_000), {"GRADEXPORT_STACK_LIMIT": "keep"}, stack_limits(8 << 20, -1))
    assert kept.returncode == 0, kept.stderr[-2000:]
    assert kept.stdout.split(" ", 1)[0] == str(8 << 20)
    small = run_python(WALK_AND_DROP.format(depth=1_000), preexec=stack_limits(8 << 20, -1))
    assert small.returncode == 0 and small.stdout.split(" ", 1)[0] == str(8 << 20)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the stack limit is raised on Linux only")
def test_a_finite_hard_limit_warns_once_with_what_to_do() -> None:
    result = run_python(WALK_AND_DROP.format(depth=25_000), preexec=stack_limits(8 << 20, 64 << 20))
    assert result.returncode == 0, result.stderr[-2000:]
    soft, warned = result.stdout.split(" ", 1)
    assert int(soft) == 64 << 20  # raised as far as allowed
    assert warned.strip() == "['this graph has more than 20,000 nodes: i']"
