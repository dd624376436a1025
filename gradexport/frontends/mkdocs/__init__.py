"""A MkDocs plugin that runs autograd examples at build time and embeds their graphs.

Enable it in ``mkdocs.yml``:

```yaml
plugins:
  - search
  - gradexport
```

Then write an example as a fenced block whose language is ``gradexport``;
options go on the fence line, as ``key="value"`` pairs:

````markdown
```gradexport formats="mermaid svg" show="code output diagram"
import torch
x = torch.ones(3, requires_grad=True)
loss = (x * 2).sum()
print(loss)
loss
```
````

The block is replaced by its code, what it printed, and the autograd graph of
its roots. The roots are the value of the block's last line when that line is
an expression (``loss`` above), or the Python expression given as
``graph="..."``. A block with neither (or whose last expression is ``None``)
shows no diagram. Blocks of one page run in order in one namespace, like the
cells of a notebook, so a later block sees the tensors of an earlier one.

Options (each optional):

- ``show``: which parts to show, any of ``code``, ``output``, ``diagram``
  (default: all three; ``output`` is left out when nothing was printed).
- ``formats``: ``mermaid`` (drawn by mermaid.js in the browser), ``svg`` (laid
  out by Graphviz at build time and inlined), ``html`` (the interactive
  viewer, in an isolating iframe), ``dot`` and ``json`` (the text, highlighted),
  or several, shown as content tabs (needs the ``pymdownx.tabbed``
  extension). ``model-explorer`` is refused: it is a file for another app.
  Default: the plugin's ``formats`` option.
- ``graph``: a Python expression, evaluated after the block ran, giving the
  roots (anything `gradexport.to_networkx` takes, or a graph it built). A
  record of `gradexport.replay` draws its graph, and in the ``html``
  format the viewer steps through the replay (as on the blog pages).
- Export options: any option of the export functions that can be written as
  text (see `gradexport.core.options`; the guide lists them all), e.g.
  ``direction="LR" edge_shapes="true" depth="2"``; ``true``, ``false`` and
  ``none`` are read as Python's ``True``, ``False``, ``None``. An option that
  applies to none of the block's formats stops the build.

Which fences run: only those Markdown renders as fences, at the top level or
inside admonitions, content tabs and list items. A ``gradexport`` fence inside
another fence, inside an indented code block, or inside an HTML comment that
starts a line is text and does not run (see `find_blocks`).

How blocks run. **Blocks are trusted code**: they run with the rights of
whoever builds the site, as any code a docs build imports does; build only
documentation whose examples you would run yourself. Each page's blocks run
in a new empty temporary working directory (removed afterwards), so files an
example writes with relative paths land there, not in the project. By
default (plugin option ``isolate: true``, on Linux and other POSIX systems
but macOS) they run in a child process forked from the build, which already
has torch and gradexport imported, and which serves every page of the build:
a block that runs longer than
``timeout`` seconds (default 60; 0 for none) is stopped and fails the build
naming the page and line, and a block that ends its process
(``os._exit(0)``, a crash) fails the build instead of ending it with exit
status 0. ``sys.exit()`` in a block is a failure either way. With
``isolate: false`` blocks run in the build process itself: no time limit.
Printed output is kept up to ``max_output`` characters per block (default
100,000; 0 for no cap); what is cut is said in the output shown. Pages
listed in MkDocs' ``draft_docs`` are not rendered by ``mkdocs build``, so their
blocks do not run there; ``mkdocs serve`` renders drafts and runs their
blocks, and a failing one shows as an error of the served build.

A failing block stops the build with a `mkdocs.exceptions.PluginError`
naming the page, the block's line and the traceback, whose line numbers are
those of the Markdown file. A warning raised while a block runs is logged as a
MkDocs warning, so ``mkdocs build --strict`` stops on it too. Examples run inside
`gradexport.streams.run_with_large_stack`, so deep graphs are safe to build and
free. Results are cached in memory per page, keyed by the page's blocks, the
gradexport version and the library's source files: ``mkdocs serve`` re-runs a
page's examples when the page or the library changes (the plugin watches the
gradexport package), and re-imports the library when its sources changed.

The plugin also copies a local ``mermaid.min.js`` into the site (option
``mermaid_js``, default ``node_modules/mermaid/dist/mermaid.min.js``, relative
to ``mkdocs.yml``; run ``npm ci`` to get it) and loads it before the theme's
scripts, so that Material for MkDocs finds it and fetches nothing from a CDN.
Set ``mermaid_js: ""`` to load mermaid.js yourself.

All plugin options, with their defaults:

```yaml
plugins:
  - gradexport:
      formats: [mermaid, svg]
      mermaid_js: node_modules/mermaid/dist/mermaid.min.js
      timeout: 60        # seconds per block; 0: no limit
      max_output: 100000 # characters of printed output per block; 0: no cap
      isolate: true      # run each page's blocks in a forked child process
```

The package, one module per job:

- `gradexport.frontends.mkdocs.blocks`: finding the ``gradexport`` fences
  in a page and reading their options;
- `gradexport.frontends.mkdocs.runner`: running a page's blocks (in a
  forked child, with a time limit and an output cap) and rendering their diagrams;
- `gradexport.frontends.mkdocs.embed`: the Markdown and HTML that replace a block;
- `gradexport.frontends.mkdocs.plugin`: the MkDocs plugin that ties them
  to the build (``mkdocs.plugins`` entry point ``gradexport``).

It may import every other layer of gradexport: it is a front end. It imports
them lazily, inside the functions that need them, so that reading
``mkdocs.yml`` does not import torch.
"""
