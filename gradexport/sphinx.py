"""The Sphinx extension, by the name ``conf.py`` gives it: ``extensions = ["gradexport.sphinx"]``.

It lives in `gradexport.frontends.sphinx`, which says what it does.
"""

from __future__ import annotations

from .frontends.sphinx import setup

__all__ = ["setup"]
