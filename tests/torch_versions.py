"""Skip marks for tests of features that need a newer torch than the oldest one gradexport supports.

Each mark names the torch the feature needs, the way `gradexport.tracing._torch.require_torch` does;
`tests/test_torch_internals.py` checks that calling such a feature on an older torch raises
`gradexport.errors.TorchVersionError` instead.
"""

from __future__ import annotations

import pytest

from gradexport.tracing._torch import INPUT_METADATA_TORCH, TORCH_VERSION

#: replay, steps=True and edge_metadata read Node._input_metadata (torch 2.5).
needs_input_metadata = pytest.mark.skipif(TORCH_VERSION < INPUT_METADATA_TORCH, reason="replay and edge_metadata read Node._input_metadata, torch 2.5")

#: A GradientEdge root (torch 2.2).
needs_gradient_edge = pytest.mark.skipif(TORCH_VERSION < (2, 2), reason="torch.autograd.graph.GradientEdge arrived in torch 2.2")
