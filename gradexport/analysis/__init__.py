"""Analyses of a graph already built: folding, comparing, counting memory.

- `gradexport.analysis.simplify`: `gradexport.collapse`, `gradexport.tools.fit`,
  `gradexport.tools.hide`, `gradexport.tools.only_reaching`;
- `gradexport.analysis.diff`: what changed between two graphs (`gradexport.diff`
  takes files and roots too, see `gradexport.api.diff`);
- `gradexport.analysis.memory`: which nodes and modules hold saved tensors'
  bytes (`gradexport.tools.saved_memory`);
- `gradexport.analysis.watch_plot`: the gradient-flow plot and heat map of a
  watched training run (`gradexport.records.plot_flow`).

May import: core, tracing, backward.
"""
