"""Model Explorer: the backward graph in Google's viewer for very large graphs.

Google's Model Explorer (github.com/google-ai-edge/model-explorer;
``pip install gradexport[explorer]``) draws graphs of hundreds of thousands
of nodes: namespaces become nested layers that open one level at a time, it
renders with WebGL, shows every node's attributes and colours nodes by
*node data*. `to_model_explorer` builds a graph of `gradexport.tracing.graph`
(or a stream of it, see `gradexport.core.source`) with Model
Explorer's own classes (`model_explorer.graph_builder`), and
`write_model_explorer` writes the JSON file that Model Explorer opens.

The mapping (one graph ``"backward"`` in a `GraphCollection`):

- Every node becomes a ``GraphNode`` with the same id. Its ``namespace`` is
  its ``module`` path with ``/`` for ``.`` (``encoder/layers/3/self_attn``),
  so modules become the layers Model Explorer folds and unfolds; nodes
  without a module sit at the top level. Its ``label`` is the op
  (``MulBackward0``); a leaf shows its parameter names, a root its name, a
  None slot ``None``, a folded module (`gradexport.collapse`) the
  last part of its path.
- Its ``attrs`` hold every attribute of the graph model's node, one
  ``KeyValue`` each: strings as they are, any other value as JSON text
  (``[4, 4]``, ``-1``, ``["x"]``).
- An edge ``F -> G`` with key ``i`` and ``input_nr`` ``k`` (``F.next_functions[i]
  == (G, k)``) is an ``IncomingEdge`` of G with ``sourceNodeId = F``,
  ``sourceNodeOutputId = "i"`` and ``targetNodeInputId = "k"``. Parallel
  edges (``a + a``, recombined ``unbind``) stay distinct, as their output ids
  differ.
- The other attributes of the edge (``shape``, ``dtype``, ``device`` with
  ``edge_metadata=True``; the ``grad`` record of
  `gradexport.record_gradients`, one key per field, ``grad.norm``...)
  go into F's ``outputsMetadata`` under output id ``"i"``, with
  ``tensor_shape`` (``float32[4, 4]``) where the shape is known: Model
  Explorer can write that on the edges.
- Each module layer gets ``groupNodeAttributes``: its ``module`` path, and
  its ``class`` when the graph has a ``module_classes`` attribute
  (``{path: class name}``). The graph's own attributes (``roots``,
  ``torch_version``...) are the attributes shown when nothing is selected.
- Roots, leaves, special nodes and None slots keep the colours of the other
  diagrams (``style``).

None slots follow ``DiagramOptions.show_none``: ``None`` (default) maps the
``kind="none"`` nodes the graph has (``show_none=True`` when tracing), each
in the layer of the node it belongs to; ``True`` also adds one for every
entry of ``none_slots`` (id ``<node>_none<slot>``); ``False`` leaves them out
(``none_slots`` still lists them in the attributes). The other diagram
options do not apply: Model Explorer lays out top to bottom, roots first.

`gradient_node_data` turns the ``grad`` records into Model Explorer
node data, so that its colour scale shows where gradients vanish or explode;
`mark_node_data` does the same for the marks of `gradexport.tracing.graph`
(``nonfinite``, ``saved_bytes``, ``exec_order``, ``diff``, see
`MARK_METRICS`), and `node_data_for` gives every metric a graph
has. Marked nodes (a non-finite origin, a diff's added, removed and changed
nodes) also keep the colours of the other diagrams in their ``style``.
`diff_panes` turns a `gradexport.diff` into the two graphs that
Model Explorer puts side by side (see `gradexport.frontends.model_explorer_server.serve_model_explorer_diff`).

Model Explorer is imported only when one of these functions runs; without it
they raise `ModelExplorerNotInstalledError`.

Examples:
    >>> import networkx as nx
    >>> g = nx.MultiDiGraph(roots=[{"name": "loss", "node": "n0", "input_nr": None}])
    >>> g.add_node("n0", kind="backward", op="AddBackward0", module="block")
    >>> g.add_node("n1", kind="leaf", op="AccumulateGrad", names=["block.a"], module="block")
    >>> _ = g.add_edge("n0", "n1", key=0, next_index=0, input_nr=0)
    >>> _ = g.add_edge("n0", "n1", key=1, next_index=1, input_nr=0)
    >>> leaf = to_model_explorer(g).graphs[0].nodes[1]
    >>> leaf.label, leaf.namespace
    ('block.a', 'block')
    >>> [(edge.sourceNodeId, edge.sourceNodeOutputId, edge.targetNodeInputId) for edge in leaf.incomingEdges]
    [('n0', '0', '0'), ('n0', '1', '0')]
"""

from ...core.errors import ModelExplorerNotInstalledError
from .graph import EXTENSION, GRAPH_ID, INSTALL_HINT, generate_model_explorer, to_model_explorer, write_model_explorer
from .node_data import DIFF_VALUES, GRADIENT_METRICS, MARK_METRICS, NONFINITE_VALUES, gradient_node_data, mark_node_data, node_data_for
from .panes import diff_panes

__all__ = [
    "DIFF_VALUES",
    "EXTENSION",
    "GRADIENT_METRICS",
    "GRAPH_ID",
    "INSTALL_HINT",
    "MARK_METRICS",
    "NONFINITE_VALUES",
    "ModelExplorerNotInstalledError",
    "diff_panes",
    "generate_model_explorer",
    "gradient_node_data",
    "mark_node_data",
    "node_data_for",
    "to_model_explorer",
    "write_model_explorer",
]
