"""The marks analyses put on a graph, and the gradient record on its edges: their names and values.

Writers draw these marks and analyses set them; both take the values from here.
`gradexport.tracing.graph` documents where each attribute sits.

Examples:
    >>> DIFF_STATES
    ('same', 'changed', 'added', 'removed')
"""

from __future__ import annotations

__all__ = ["DIFF_STATES", "GRAD_KEYS", "NONFINITE_EDGE_MARKS", "NONFINITE_NODE_MARKS"]

#: Values of the node and edge attribute ``diff`` (`gradexport.diff`).
DIFF_STATES = ("same", "changed", "added", "removed")

#: Values of the node attribute ``nonfinite`` (`gradexport.find_nonfinite`): where a
#: non-finite gradient started, and where one arrived.
NONFINITE_NODE_MARKS = ("origin", "reached")

#: Values of the edge attribute ``nonfinite``: sent by an origin, or passed on.
NONFINITE_EDGE_MARKS = ("origin", "path")

#: Keys of the ``grad`` record on an edge (`gradexport.record_gradients`).
GRAD_KEYS = ("shape", "dtype", "norm", "min", "max", "has_nan", "has_inf")
