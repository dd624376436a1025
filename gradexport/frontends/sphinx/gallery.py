"""The sphinx-gallery image scraper: an example's graphs become its pictures and its thumbnail.

sphinx-gallery finds scrapers by module name: with

```python
sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "image_scrapers": ("matplotlib", "gradexport"),
}
```

it imports ``gradexport`` and calls its ``_get_sg_image_scraper()``, which
returns `scrape`. After each code block of an example, `scrape` takes every
`gradexport.show` view the block made and the block's last value when that
is a view or a graph (from `gradexport.to_networkx`), writes each as an SVG
laid out by Graphviz where sphinx-gallery keeps the example's images, and
gives sphinx-gallery the reST that shows them. The first picture is the
example's thumbnail, as for matplotlib figures. A view left as the last
value also shows the interactive viewer under it (sphinx-gallery's
``capture_repr`` takes its ``_repr_html_``).

Examples:
    >>> scrape_for_gallery() is scrape
    True
    >>> _ = record_shown(keep_recording=False)  # outside a gallery build: record no views
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

import networkx as nx

from ..notebook import GraphView, record_shown, show, start_recording

__all__ = ["scrape", "scrape_for_gallery"]


def scrape_for_gallery() -> Any:
    """Start recording `gradexport.show`'s views, and return the scraper (what ``gradexport._get_sg_image_scraper`` returns).

    sphinx-gallery calls it when it reads its configuration and again before every scraping.
    """
    start_recording()
    return scrape


def scrape(block: Any, block_vars: dict[str, Any], gallery_conf: dict[str, Any]) -> str:
    """sphinx-gallery's scraper call after a code block: save the block's graphs as SVG files and return their reST."""
    views = record_shown()
    last = _last_value(block, block_vars)
    if isinstance(last, nx.MultiDiGraph):
        last = show(last)
        record_shown()  # made here, by the scraper: taken now so that the next block does not count it
    if isinstance(last, GraphView) and not any(view is last for view in views):
        views.append(last)
    paths = []
    for view in views:
        path = Path(next(block_vars["image_path_iterator"])).with_suffix(".svg")
        path.write_text(view.svg, encoding="utf-8")
        paths.append(str(path))
    if not paths:
        return ""
    figure_rst: Any = importlib.import_module("sphinx_gallery.scrapers").figure_rst
    return str(figure_rst(paths, gallery_conf["src_dir"]))


def _last_value(block: Any, block_vars: dict[str, Any]) -> Any:
    """The value of the block's last line when that is an expression (sphinx-gallery keeps it as ``___``), else ``None``."""
    try:
        body = ast.parse(block.content).body
    except SyntaxError:
        return None
    if not body or not isinstance(body[-1], ast.Expr):
        return None
    return block_vars["example_globals"].get("___")
