"""gradexport: see, export and replay PyTorch's autograd graph.

The top tier is the verbs a first session needs: `show` a loss (or a model
and its inputs), `write` or `to_*` it in a format, build the graph
(`to_networkx`, `from_json`) and fold it (`collapse`), and run backward with
eyes open (`record_gradients`, `replay`, `find_nonfinite`, `watch`, `diff`), and read
what `watch`'s flight recorder kept of a bad step (`load_bundle`).
Everything else lives in named modules: `gradexport.errors`,
`gradexport.options`, `gradexport.records` (what the verbs return),
`gradexport.tools` (more verbs), `gradexport.streams` and `gradexport.constants`.
The names that used to be here still import from here, with a
`gradexport.errors.GradexportDeprecationWarning` naming their new home.

Examples:
    >>> import torch, gradexport
    >>> x = torch.randn(3, requires_grad=True)
    >>> graph = gradexport.to_networkx((x * 2).sum(), params={"x": x})
    >>> graph.number_of_nodes()
    4
"""

# ruff: noqa: E402
# First, before torch is imported (seconds): Ctrl-C then is one line and exit 130 for the command line.
from .core.temporaries import guard_startup as _guard_startup

_guard_startup()

import warnings as _warnings
from typing import Any as _Any

from . import constants, errors, options, records, streams, tools
from .analysis.simplify import collapse
from .api.diff import diff
from .api.export import to_dot, to_html, to_json, to_mermaid, to_svg, write
from .backward.bundle_file import load_bundle
from .backward.nonfinite import find_nonfinite
from .backward.record_gradients import record_gradients
from .backward.replay import replay
from .backward.watch import watch
from .core.errors import GradexportDeprecationWarning as _GradexportDeprecationWarning
from .core.errors import GradexportError, GradexportWarning
from .core.version import __version__ as __version__
from .formats import from_json
from .frontends.notebook import show
from .tracing.graph import to_networkx
from .tracing.modules import capture_modules

__all__ = [
    "GradexportError",
    "GradexportWarning",
    "capture_modules",
    "collapse",
    "diff",
    "find_nonfinite",
    "from_json",
    "load_bundle",
    "record_gradients",
    "replay",
    "show",
    "to_dot",
    "to_html",
    "to_json",
    "to_mermaid",
    "to_networkx",
    "to_svg",
    "watch",
    "write",
]

# Where each name that left the top tier lives now (its module under gradexport).
_MOVED = {
    **{name: "errors" for name in errors.__all__ if name not in ("GradexportError", "GradexportWarning")},
    **dict.fromkeys(options.__all__, "options"),
    **{name: module.__name__.rpartition(".")[2] for module in (constants, records, streams, tools) for name in module.__all__},
}


def __getattr__(name: str) -> _Any:
    """A name that left the top tier, from its new home, with a deprecation warning naming it (PEP 562)."""
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'gradexport' has no attribute {name!r}")
    _warnings.warn(
        _GradexportDeprecationWarning(
            f"gradexport.{name} moved to gradexport.{home}.{name}: import it from gradexport.{home}; the top tier keeps only the verbs of gradexport.__all__"
        ),
        stacklevel=2,
    )
    return getattr(globals()[home], name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MOVED))


def _get_sg_image_scraper() -> object:
    """sphinx-gallery's hook for ``image_scrapers = ("matplotlib", "gradexport")``: the scraper that turns an
    example's graphs into its pictures (see `gradexport.frontends.sphinx.gallery`).

    Examples:
        >>> callable(_get_sg_image_scraper())
        True
        >>> from gradexport.frontends.notebook import record_shown
        >>> _ = record_shown(keep_recording=False)  # outside a gallery build: record no views
    """
    from .frontends.sphinx.gallery import scrape_for_gallery

    return scrape_for_gallery()
