"""Sphinx hosts of the block engine: a ``gradexport`` directive (reStructuredText and MyST) and a sphinx-gallery scraper.

Enable it in ``conf.py``:

```python
extensions = ["gradexport.sphinx"]  # add "myst_parser" for MyST Markdown pages
```

Then write an example as a ``gradexport`` directive: in reStructuredText
``.. gradexport::`` with its options one per line below it (``:formats: svg``)
and the code indented under them; in MyST Markdown (and Jupyter Book 1) a
```` ```{gradexport} ```` fence:

````markdown
```{gradexport}
:formats: svg
:direction: LR
import torch
x = torch.ones(3, requires_grad=True)
(x * 2).sum()
```
````

Its options are the MkDocs fence's (`gradexport.frontends.blocks.spec`:
``show``, ``formats``, ``graph``, ``warnings`` and every export option that
can be written as text). The Sphinx guide (``docs/guides/sphinx.md``) has a
page of each kind that works as pasted.

The blocks of one page run in order in one namespace, as in MkDocs, through
the engine's runner (`gradexport.frontends.blocks.runner`): in a child
process forked from the build, with a time limit and an output cap, in a
fresh temporary folder. The page is replaced by the block's code, its printed
output (and the warnings its code raised) and its diagrams.

Settings in ``conf.py``, with their defaults:

```python
gradexport_formats = ["mermaid", "svg"]
gradexport_mermaid_js = "node_modules/mermaid/dist/mermaid.min.js"  # relative to conf.py; "" to load mermaid.js yourself
gradexport_timeout = 60         # seconds per block; 0: no limit
gradexport_max_output = 100_000 # characters of printed output per block; 0: no cap
gradexport_isolate = True       # run the blocks in a forked child process (POSIX but macOS)
gradexport_warnings = "show"    # "strict": a warning of a block's code is a Sphinx warning, so -W stops on it
```

What the build does:

- **Errors**: a block that raises, runs past the time limit or ends its
  process stops the build with a `BlockFailedError` that names the page, the
  block's line, and the traceback of the block's own frames, whose line
  numbers are the page's.
- **Warnings** the block's code raises (a torch ``UserWarning``) end its
  output and are logged as information naming page and line; they are Sphinx
  warnings, which ``sphinx-build -W`` stops on, only with
  ``gradexport_warnings = "strict"`` or a block's ``:warnings: strict``.
- **Incremental builds**: Sphinx reads again only the pages that changed,
  and a page's results are kept in the doctree folder
  (`gradexport.frontends.blocks.cache.ResultStore`), keyed by its blocks' code
  and options (`gradexport.frontends.blocks.cache.results_key`): editing a page's prose reruns
  none of its blocks.
- **Parallel builds**: the extension is ``parallel_read_safe`` and
  ``parallel_write_safe``; with ``sphinx-build -j N`` each reading process runs
  its pages' blocks in its own child.
- **Offline**: mermaid.js is copied to ``_static/gradexport/`` and loaded
  only by the pages with a Mermaid diagram; the SVG is inlined and the viewer
  sits in an ``<iframe srcdoc>`` with its script; nothing is fetched.
- **Themes**: diagrams sit on a light panel (``_static/gradexport/gradexport.css``)
  in light and dark themes alike; the viewer follows the theme's mode.

Diagrams are HTML: builders other than HTML ones show the code and output only.

- `gradexport.frontends.sphinx.extension`: the directive and the build's events;
- `gradexport.frontends.sphinx.gallery`: the sphinx-gallery image scraper
  (``image_scrapers = ("matplotlib", "gradexport")``).
"""

from __future__ import annotations

from .extension import BlockFailedError, setup

__all__ = ["BlockFailedError", "setup"]
