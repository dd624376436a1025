"""Analyses of a graph already built: folding, comparing, counting memory.

- `gradexport.analysis.simplify`: `gradexport.collapse`, `gradexport.fit`,
  `gradexport.hide`, `gradexport.only_reaching`;
- `gradexport.analysis.diff`: what changed between two graphs (`gradexport.diff`
  takes files and roots too, see `gradexport.api.diff`);
- `gradexport.analysis.memory`: which nodes and modules hold saved tensors'
  bytes (`gradexport.saved_memory`);
- `gradexport.analysis.watch_plot`: the gradient-flow plot and heat map of a
  watched training run (`gradexport.plot_flow`).

May import: core, tracing, backward.
"""
