"""What people use directly: the command line, the MkDocs plugin, the notebook display, the Model Explorer server.

- `gradexport.frontends.cli`: the ``gradexport`` command;
- `gradexport.frontends.blocks`: the build-time block engine every documentation host shares;
- `gradexport.frontends.mkdocs`: the MkDocs plugin;
- `gradexport.frontends.sphinx`: the Sphinx extension (``gradexport.sphinx``) and sphinx-gallery scraper;
- `gradexport.frontends.notebook`: `gradexport.show` for Jupyter;
- `gradexport.frontends.model_explorer_server`: opening a graph or a diff
  in Google's Model Explorer.

The interactive viewer's script is a front end too; it lives in
``gradexport/viewer`` (JavaScript, bundled), and the HTML writer embeds it.

May import: core, tracing, backward, analysis, formats, api.
"""
