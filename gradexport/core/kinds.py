"""The graph model's vocabulary for nodes: what ``kind`` and ``special`` can hold, and what an id looks like.

Examples:
    >>> KINDS
    ('root', 'backward', 'leaf', 'none')
    >>> bool(is_model_id("n12")), bool(is_model_id("x"))
    (True, False)
"""

from __future__ import annotations

import re

__all__ = ["KINDS", "SPECIAL_KINDS", "is_model_id"]

#: Values of the node attribute ``kind``.
KINDS = ("root", "backward", "leaf", "none")

#: Values of the node attribute ``special``, for nodes a reader should notice.
SPECIAL_KINDS = {
    "copy_slices": "in-place operation on a view (CopySlices)",
    "custom_function": "backward of a custom torch.autograd.Function",
    "checkpoint": "reentrant activation checkpoint: opaque, the parameters used inside are not in the graph",
    "compiled": "torch.compile region: one opaque node for the whole region",
    "backward_hook": "module backward hook (register_full_backward_hook)",
    "error": "a node that raises when backward reaches it",
}

#: Whether an id is one of the graph model's (``n`` followed by digits).
is_model_id = re.compile("n[0-9]+").fullmatch
