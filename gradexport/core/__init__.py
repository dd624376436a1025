"""The vocabulary every other wing speaks: plain data, no torch, no I/O.

- `gradexport.core.kinds`: the node kinds (``root``, ``backward``, ``leaf``,
  ``none``), the special kinds, what a node id looks like;
- `gradexport.core.source`: the adjacency record and `Source`, which
  reads a whole graph and a one-pass stream of it the same way;
- `gradexport.core.marks`: the marks analyses put on a graph (diff states,
  non-finite origins) and the keys of the gradient record on an edge;
- `gradexport.core.options`: every export option, declared once;
- `gradexport.core.limits`: the sizes the consumers (mermaid.js) accept;
- `gradexport.core.errors`: every exception and warning, one tree under
  `gradexport.GradexportError`;
- `gradexport.core.reports`: names escaped in report text (`printable`), the
  escaped HTML that report objects show in a notebook, and how reports name a
  module (`MODEL_LABEL` for the model itself);
- `gradexport.core.temporaries`: the temporary files and folders a signal
  handler removes, and the child processes it kills, before the process exits;
- `gradexport.core.children`: running a child process (Graphviz) that
  cannot outlive this one.

May import: nothing of gradexport.
"""
