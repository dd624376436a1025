"""What gradexport's tools cost beyond torch's own work, where that is a fact rather than a timing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

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
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT.format(call=call))], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
