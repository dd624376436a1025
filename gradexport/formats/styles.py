"""How each kind of node and each gradient looks, in every diagram format.

Writers map `NodeStyle` to their own syntax; `GradScale`
colours edges by the norm of the gradient they carry (from
`gradexport.record_gradients`).

Examples:
    >>> NODE_STYLES["leaf"].shape
    'box'
    >>> GradScale().style({"norm": 0.05}), GradScale().style({"norm": 100.0})
    (('#306a8e', 2.3), ('#440154', 3.5))
    >>> grad_legend()[0], grad_legend()[-1]
    (('< 0.001', '#21918c', 1.5), ('≥ 10', '#440154', 3.5))
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..core.source import Source

__all__ = [
    "FONT",
    "GRAD_BAD_COLOR",
    "GRAD_BOUNDS",
    "GRAD_COLORS",
    "GRAD_COLORS_DARK",
    "MARK_COLORS",
    "MARK_STYLES",
    "NODE_STYLES",
    "STYLES",
    "WATCH_GRAD_BOUNDS",
    "WATCH_GRAD_COLORS",
    "WATCH_GRAD_COLORS_DARK",
    "GradScale",
    "NodeStyle",
    "grad_legend",
    "is_bad",
]

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

#: The fixed scale of gradient norms: an edge's colour is the decade of its
#: norm, below 0.001, 0.001 to 0.01, ..., 10 and above, the same in every
#: picture, so that two pictures compare (a scale stretched over each graph's
#: own range made 3.6 against 4.5 look like small against large).
GRAD_BOUNDS = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
#: One colour per step of `GRAD_BOUNDS`, smallest to largest (viridis from 0.5
#: down to 0). Each has at least 3.8:1 contrast on white, so every line shows.
GRAD_COLORS = ("#21918c", "#287d8e", "#306a8e", "#3b528b", "#46307e", "#440154")
#: The same steps for the viewer's dark theme (viridis from 0.5 up to 1): larger is brighter.
GRAD_COLORS_DARK = ("#21918c", "#22a884", "#44bf70", "#7ad151", "#bddf26", "#fde725")
GRAD_BAD_COLOR = "#d32f2f"
#: The scale of a watch history's page (`gradexport.to_html` of a `gradexport.records.WatchHistory`):
#: a vanishing gradient spans many decades, so its steps are three decades wide, from below 1e-15 to
#: 1000 and above; 1e-5 and 1e-18 fall in different steps. Fixed too, so two histories compare.
WATCH_GRAD_BOUNDS = (1e-15, 1e-12, 1e-9, 1e-6, 1e-3, 1.0, 1e3)
#: One colour per step of `WATCH_GRAD_BOUNDS` (viridis from 0.5 down to 0, as `GRAD_COLORS`).
WATCH_GRAD_COLORS = ("#21918c", "#277f8e", "#2e6e8e", "#365c8d", "#3f4788", "#46327e", "#481b6d", "#440154")
#: The same steps for the dark theme (viridis from 0.5 up to 1).
WATCH_GRAD_COLORS_DARK = ("#21918c", "#1fa187", "#2db27d", "#4ac16d", "#73d056", "#a0da39", "#d0e11c", "#fde725")


def _width(step: int, steps: int = len(GRAD_COLORS)) -> float:
    return 1.5 + 2.0 * step / (steps - 1)


class GradScale:
    """Maps a gradient norm to a colour and line width on the fixed scale `GRAD_BOUNDS`."""

    @classmethod
    def of(cls, source: Source) -> GradScale:
        """The scale for ``source``'s edges: the fixed one, whatever the graph (a stream draws with it too)."""
        return cls()

    def style(self, grad: Mapping[str, Any]) -> tuple[str, float]:
        """The colour and line width of an edge carrying ``grad``."""
        if is_bad(grad):
            return GRAD_BAD_COLOR, 2.5
        step = bisect.bisect_right(GRAD_BOUNDS, grad["norm"])
        return GRAD_COLORS[step], _width(step)


def grad_legend(bounds: Sequence[float] = GRAD_BOUNDS, colors: Sequence[str] = GRAD_COLORS) -> list[tuple[str, str, float]]:
    """The scale's steps as ``(range, colour, line width)``, for a legend (default: `GRAD_BOUNDS`).

    Examples:
        >>> [text for text, _, _ in grad_legend(WATCH_GRAD_BOUNDS, WATCH_GRAD_COLORS)][:3]
        ['< 1e-15', '1e-15 – 1e-12', '1e-12 – 1e-09']
    """
    texts = [f"< {bounds[0]:g}"]
    texts += [f"{low:g} – {high:g}" for low, high in itertools.pairwise(bounds)]
    texts.append(f"≥ {bounds[-1]:g}")
    return [(text, colour, _width(step, len(colors))) for step, (text, colour) in enumerate(zip(texts, colors))]


def is_bad(grad: Mapping[str, Any]) -> bool:
    norm = grad.get("norm")
    return bool(grad.get("has_nan") or grad.get("has_inf")) or not (isinstance(norm, (int, float)) and math.isfinite(norm))
