"""What gradexport's tools cost beyond torch's own work, where that is a fact rather than a timing."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_site_browser import browser  # noqa: F401  (a fixture: Debian's Chromium through Playwright)

SCRIPT = """
import sys
import torch
import gradexport

x = torch.randn(3, requires_grad=True)
(x * 2).sum().backward()
assert "sympy" not in sys.modules, "torch's own backward imports sympy: nothing to compare"
{call}
print(sorted(name for name in ("sympy", "torch.fx.experimental.symbolic_shapes") if name in sys.modules))
"""


@pytest.mark.parametrize(
    "call",
    [
        "gradexport.record_gradients((x * 3).sum())",
        "gradexport.find_nonfinite((x * 3).sum())",
        "gradexport.find_nonfinite({'a': (x * 3).sum(), 'b': (x * 4).sum()})",
    ],
)
def test_a_default_start_gradient_imports_nothing_torch_backward_does_not(call: str) -> None:
    # A start gradient passed to torch.autograd.backward as a tensor makes torch import
    # torch.fx.experimental.symbolic_shapes and sympy (0.4 to 0.6 s once per process);
    # backward() on a scalar passes None there.
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT.format(call=call))], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.browser
def test_a_fan_in_draws_one_bundled_edge_per_pair_of_items(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    # 3,000 leaves each through x * 2 into one StackBackward0: folded, the stack's 3,000 edges at
    # distinct next_functions positions join the same few items; each pair is laid out once.
    import torch

    import gradexport
    from gradexport.formats.html import write_html

    width = 3000
    xs = [torch.randn(1, requires_grad=True) for _ in range(width)]
    graph = gradexport.to_networkx(torch.stack([x * 2 for x in xs]).sum())
    path = tmp_path / "fan_in.html"
    write_html(graph, path)
    page = browser.new_page()
    page.goto(path.as_uri())
    page.wait_for_function("window.gradexportViewer !== undefined")
    visible = page.evaluate("window.gradexportViewer.ready")
    request = page.evaluate("window.gradexportViewer.layoutRequest()")
    pairs = Counter((edge["from"], edge["to"]) for edge in request["edges"])
    assert len(visible) < 40 and max(pairs.values()) <= 8, pairs.most_common(3)
    labels = page.evaluate("[...document.querySelectorAll('.gx-edge-label text:first-of-type')].map((t) => t.textContent)")
    counts = [int(match.group(1)) if (match := re.search(r"×(\d+)", label)) else 1 for label in labels]
    # The stack's edges, all accounted for: next_functions positions 0…width-1 in the bundles' ranges.
    stack = next(node for node, op in graph.nodes(data="op") if op == "StackBackward0")
    assert graph.out_degree(stack) == width
    spans = [tuple(map(int, match.groups())) for label in labels if (match := re.match(r"(\d+)…(\d+)→", label))]
    assert spans and min(low for low, _ in spans) == 0 and max(high for _, high in spans) == width - 1
    assert sum(counts) <= graph.number_of_edges()
    page.close()
