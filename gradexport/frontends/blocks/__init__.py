"""The block engine: what every host of build-time example blocks shares.

A *block* is Python code in a documentation page whose autograd graph the
built page shows. The hosts find blocks in their own syntax and show the
results in their own markup; everything between is here, so a block behaves
the same in each:

- `gradexport.frontends.blocks.spec`: a block, and its options (``show``,
  ``formats``, ``graph``, ``warnings`` and the export options), read from
  ``key="value"`` text;
- `gradexport.frontends.blocks.markdown`: the ``gradexport`` fences of a
  Markdown page (MkDocs, ``gradexport render-md``);
- `gradexport.frontends.blocks.runner`: running a page's blocks in order in
  one namespace, in a forked child process with a time limit and an output
  cap, with errors that carry the page, the block's line and the user's
  traceback, and warnings reported with the block's line;
- `gradexport.frontends.blocks.cache`: the key of a page's results, and a
  folder that keeps them between builds;
- `gradexport.frontends.blocks.embed`: a diagram's HTML.

The hosts: `gradexport.frontends.mkdocs` (MkDocs plugin),
`gradexport.frontends.sphinx` (Sphinx and MyST directive, sphinx-gallery
scraper) and ``gradexport render-md`` (`gradexport.frontends.cli.render_md`).

Examples:
    >>> from gradexport.frontends.blocks.markdown import find_blocks
    >>> from gradexport.frontends.blocks.runner import BlockRunner
    >>> blocks = find_blocks(['```gradexport show="output"', "print(6 * 7)", "```"], "page.md")
    >>> with BlockRunner(timeout=10) as runner:
    ...     [result.output for result in runner.run(blocks, "page.md", "page.md")]
    ['42\\n']
"""
