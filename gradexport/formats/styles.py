"""How each kind of node and each gradient looks, in every diagram format.

Writers map `NodeStyle` to their own syntax; `GradScale`
colours edges by the norm of the gradient they carry (from
`gradexport.record_gradients`).

Examples:
    >>> NODE_STYLES["leaf"].shape
    'box'
    >>> GradScale(-2.0, 2.0).style({"norm": 100.0})
    ('#08306b', 3.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from ..core.source import Source

__all__ = ["FONT", "GRAD_BAD_COLOR", "GRAD_COLORS", "MARK_COLORS", "MARK_STYLES", "NODE_STYLES", "STYLES", "GradScale", "NodeStyle", "is_bad"]

#: A font whose metrics Graphviz knows without a font library (``monospace`` warns).
FONT = "Helvetica"


class NodeStyle(NamedTuple):
    """How a kind of node looks; writers map ``shape`` to their own syntax."""

    #: ``"stadium"``, ``"rounded"``, ``"box"``, ``"hexagon"``, ``"note"`` or ``"subroutine"``.
    shape: str
    fill: str
    stroke: str
    text: str
    dashed: bool = False


#: Style of each node class. A node's class is its ``kind``, or ``"special"``
#: for backward nodes with a ``special`` attribute.
NODE_STYLES: dict[str, NodeStyle] = {
    "root": NodeStyle("stadium", "#c8e6c9", "#2e7d32", "#1b1b1b"),
    "backward": NodeStyle("rounded", "#eeeeee", "#616161", "#1b1b1b"),
    "special": NodeStyle("hexagon", "#ffe0b2", "#e65100", "#1b1b1b"),
    "leaf": NodeStyle("box", "#bbdefb", "#1565c0", "#1b1b1b"),
    "none": NodeStyle("note", "#ffffff", "#9e9e9e", "#757575", dashed=True),
    "module": NodeStyle("subroutine", "#ede7f6", "#5e35b1", "#1b1b1b"),
}

#: Style of each mark, which wins over the node's kind: where a non-finite
#: gradient started (gradexport.find_nonfinite), and what a diff
#: (gradexport.diff) added, removed or changed. Only marked graphs use them.
MARK_STYLES: dict[str, NodeStyle] = {
    "nonfinite": NodeStyle("rounded", "#ffcdd2", "#b71c1c", "#1b1b1b"),
    "added": NodeStyle("rounded", "#c8e6c9", "#1b5e20", "#1b1b1b"),
    "removed": NodeStyle("rounded", "#ffcdd2", "#b71c1c", "#1b1b1b", dashed=True),
    "changed": NodeStyle("rounded", "#ffe0b2", "#e65100", "#1b1b1b"),
}

#: Every style class, kinds and marks.
STYLES: dict[str, NodeStyle] = {**NODE_STYLES, **MARK_STYLES}

#: Edge colours of the marks: a non-finite gradient's path, and a diff's states.
MARK_COLORS = {"origin": "#b71c1c", "path": "#b71c1c", "added": "#1b5e20", "removed": "#b71c1c", "changed": "#e65100"}

#: Edge colours for gradient norms, smallest to largest (log scale), and for NaN/inf.
GRAD_COLORS = ("#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b")
GRAD_BAD_COLOR = "#d32f2f"


class GradScale:
    """Maps a gradient norm to a colour and line width, on a log scale over the graph's norms."""

    def __init__(self, low: float, high: float):
        self.low = low
        self.high = high

    @classmethod
    def of(cls, source: Source) -> GradScale:
        """The scale over every gradient norm of ``source``'s edges (a stream cannot give them before drawing)."""
        graph = source.whole("colouring edges by gradient norm (or pass grad_norms=False)")
        records = (data.get("grad") for _, _, data in graph.edges(data=True))
        grads = [grad for grad in records if isinstance(grad, Mapping) and "norm" in grad]
        logs = [math.log10(grad["norm"]) for grad in grads if not is_bad(grad) and grad["norm"] > 0]
        return cls(min(logs, default=0.0), max(logs, default=0.0))

    def style(self, grad: Mapping[str, Any]) -> tuple[str, float]:
        """The colour and line width of an edge carrying ``grad``."""
        if is_bad(grad):
            return GRAD_BAD_COLOR, 2.5
        norm = grad["norm"]
        if norm <= 0:
            position = 0.0
        elif self.high == self.low:
            position = 0.5
        else:
            position = (math.log10(norm) - self.low) / (self.high - self.low)
        step = round(position * (len(GRAD_COLORS) - 1))
        return GRAD_COLORS[step], 1.0 + 2.0 * step / (len(GRAD_COLORS) - 1)


def is_bad(grad: Mapping[str, Any]) -> bool:
    norm = grad.get("norm")
    return bool(grad.get("has_nan") or grad.get("has_inf")) or not (isinstance(norm, (int, float)) and math.isfinite(norm))
