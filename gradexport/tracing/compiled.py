"""Inside a compiled region: the backward graph AOTAutograd made for a ``CompiledFunctionBackward`` node.

``torch.compile`` leaves one ``CompiledFunctionBackward`` node per region in
the autograd graph. Behind it, AOTAutograd keeps the region's backward as an
FX graph: the aten ops the backend compiles, the values the forward saved for
them, and the gradients they return to the region's inputs. `compiled_region`
reads that graph into plain data, the ``compiled_graph`` attribute that
``to_networkx(..., open_compiled=True)`` puts on the region's node:

``ops``
    One record per FX op, in the graph's (topological) order: ``id`` (the FX
    node's name, unique in the region), ``op`` (the aten overload,
    ``"aten.mm.default"``), ``inputs`` (the ids of the values it reads: ops
    or ``inputs``), and where torch recorded them: ``seq_nr`` (the sequence
    number of the forward op it differentiates; ops of one forward op share
    it), ``forward_op`` (that forward op: ``"tanh"``, or ``"Linear"`` for a
    module's call) and
    ``source``, ``source_code``, ``source_function`` (the user's line of
    that forward op, as `gradexport.tools.capture_source` writes them). A
    forward op that the partitioner recomputes in backward rather than save
    has ``seq_nr`` and the line but no ``forward_op``.
``inputs``
    The graph's inputs: ``id`` and ``role``, ``"saved"`` (a tensor the
    forward saved for backward: an activation or a region input) or
    ``"gradient"`` (the gradient arriving for one of the region's outputs).
``outputs``
    The gradients the region returns, one per region input that gets one:
    ``id`` (the op or input that holds it) and ``next_index``, the index in
    the node's ``next_functions`` that it flows along.
``metadata_kept``
    False when torch had emptied the ops' metadata (no ``seq_nr``, no
    source line): the region came from AOTAutograd's cache, or was saved to it
    at its first backward (inductor). Compile inside `capture_compiled` to
    keep it.

The region's node keeps its ``next_functions`` edges as without the option;
the region's ops are data on the node, not nodes of the graph, so every
consumer of the graph sees what it saw before.

Examples:
    >>> import torch, gradexport
    >>> layer = torch.nn.Linear(3, 2)
    >>> with gradexport.tools.capture_compiled():
    ...     loss = torch.compile(lambda x: layer(x).tanh().sum(), backend="aot_eager")(torch.ones(4, 3))
    >>> region = compiled_region(loss.grad_fn)
    >>> [output["next_index"] for output in region["outputs"]]      # weight, bias; the input needs none
    [0, 1]
    >>> {"tanh", "sum"} <= {op.get("forward_op") for op in region["ops"]}   # each op names the forward op it differentiates
    True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.autograd.graph import Node

from ..core.errors import ArgumentTypeError, ArgumentValueError
from ._torch import COMPILED_GRAPH_TORCH, GRADIENT_INPUT_PREFIX, compiled_backward_graph, fx_op_meta, fx_op_name, keep_compiled_metadata, require_torch
from .lines import line_attributes

__all__ = ["capture_compiled", "compiled_region"]


@contextlib.contextmanager
def capture_compiled() -> Iterator[None]:
    """Compile inside this block to keep the source line of every op of a compiled region's backward.

    Torch empties the metadata of a region's backward graph (its ops'
    sequence numbers and stack traces) when AOTAutograd's cache saves the
    region, which inductor does at its first backward, and a region that the
    cache hands back never had it. Inside this block AOTAutograd's cache is off,
    so each region compiled here keeps it. Run the compiled model's first call
    (the one that compiles) inside it. It costs what that cache saves: a
    region is traced and partitioned again in every new process.

    Examples:
        >>> import torch, gradexport
        >>> with gradexport.tools.capture_compiled():
        ...     out = torch.compile(torch.sin, backend="aot_eager")(torch.ones(2, requires_grad=True))
        >>> compiled_region(out.grad_fn)["metadata_kept"]
        True
    """
    require_torch(COMPILED_GRAPH_TORCH, "capture_compiled")
    with keep_compiled_metadata():
        yield


def compiled_region(target: Node | torch.Tensor) -> dict[str, Any] | None:
    """The backward graph of a compiled region, as the ``compiled_graph`` node attribute described in this module's docstring.

    Args:
        target: A ``CompiledFunctionBackward`` node or a tensor whose
            ``grad_fn`` is one.

    Returns:
        The region's ops, inputs and outputs; None when torch kept no graph
        for the region.

    Raises:
        TorchVersionError: before torch 2.3, where torch keeps no such graph.
        ArgumentTypeError: ``target`` is neither a node nor a tensor.
        ArgumentValueError: it is no compiled region's node.
    """
    require_torch(COMPILED_GRAPH_TORCH, "compiled_region")
    node = target.grad_fn if isinstance(target, torch.Tensor) else target
    if not isinstance(node, Node):
        raise ArgumentTypeError(f"compiled_region: target must be a CompiledFunctionBackward node or its output tensor, got {type(target).__name__}")
    if type(node).__name__ != "CompiledFunctionBackward":
        raise ArgumentValueError(
            f"compiled_region: target is not a compiled region's node ({node.name()}); pass the CompiledFunctionBackward node of a torch.compile'd call or its output"
        )
    return region_of(node)


def region_of(node: Node) -> dict[str, Any] | None:
    """`compiled_region` of a node known to be ``CompiledFunctionBackward`` (the graph walk's call)."""
    found = compiled_backward_graph(node)
    if found is None:
        return None
    ops: list[dict[str, Any]] = []
    inputs: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    for fx_node in found.module.graph.nodes:
        if fx_node.op == "placeholder":
            role = "gradient" if fx_node.name.startswith(GRADIENT_INPUT_PREFIX) else "saved"
            inputs.append({"id": fx_node.name, "role": role})
        elif fx_node.op == "output":
            returned = fx_node.args[0]
            for index, value in enumerate(returned if isinstance(returned, (list, tuple)) else (returned,)):
                if isinstance(value, torch.fx.Node):
                    outputs.append({"id": value.name, "next_index": index})
        elif fx_node.op in ("call_function", "call_method"):
            ops.append(_op_record(fx_node))
    return {"ops": ops, "inputs": inputs, "outputs": outputs, "metadata_kept": found.metadata_kept}


def _op_record(fx_node: torch.fx.Node) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": fx_node.name,
        "op": fx_op_name(fx_node.target),
        "inputs": [value.name for value in fx_node.all_input_nodes],
    }
    meta = fx_op_meta(fx_node)
    if meta.seq_nr is not None:
        record["seq_nr"] = meta.seq_nr
    if meta.forward_op is not None:
        record["forward_op"] = meta.forward_op
    if meta.frames:
        record.update(line_attributes(*meta.frames[-1]))
    return record
