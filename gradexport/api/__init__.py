"""The façade: one call from roots or a graph to text, files or a comparison.

- `gradexport.api.registry`: the one list of output formats and the
  options each takes (`read_options`);
- `gradexport.api.export`: `gradexport.write` and the ``to_*`` functions:
  trace once, fold as asked, write each format;
- `gradexport.api.diff`: `gradexport.diff`, which reads JSON files and
  traces roots before comparing;
- `gradexport.api.distributed`: `gradexport.tools.compare_ranks`, which diffs
  the ranks' graphs of a ``torch.distributed`` job.

May import: core, tracing, backward, analysis, formats.
"""
