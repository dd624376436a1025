"""The one place where gradexport touches PyTorch's private API or matches torch's error text.

Everything here reads or calls something torch does not promise to keep
(names starting with ``_``, ``torch._C``, a hook handle's ``hooks_dict_ref``,
the wording of torch's errors) or relies on an engine behaviour that only its
source states. Each function is small, typed and tested on its own in
``tests/test_torch_internals.py``, whose assertion messages name the torch API
that changed: when a new torch breaks gradexport, that file says where.

The private APIs used, with the torch 2.13 behaviour relied on:

* ``Node._sequence_nr()``: creation order; 2**64 - 1 for ``AccumulateGrad``
  (`sequence_nr`, `sequence_nr_getter`).
* ``torch._C._autograd._get_sequence_nr()``: the thread's next sequence number
  (`next_sequence_nr`).
* ``Node._input_metadata``: shape, dtype and device per input slot
  (`input_metadata`, `num_inputs`).
* ``torch.autograd._make_grads``: the start gradients of
  `torch.autograd.backward` (`make_grad`).
* ``Tensor._backward_hooks``: a tensor's ``register_hook`` hooks
  (`tensor_hook_count`).
* ``RemovableHandle.hooks_dict_ref()`` of a Node hook: the node's hook dict,
  where the hook's key is the handle's ``id`` (`node_hook_counts`).
* ``Node._saved_<name>`` and ``Node._raw_saved_<name>`` with
  ``SavedTensor.unpack_hook`` (`saved_names`, `read_saved`,
  `saved_getters`, `saved_is_hook_packed`) and the text of the errors that reading them
  raises (`saved_read_failure`).
* ``torch.utils._pytree.tree_leaves`` (`tensor_leaves`).
* ``BackwardCFunction._forward_cls``: the ``autograd.Function`` a custom
  node belongs to (`function_codes`).
* ``torch._dynamo.utils.orig_code_map``: the code objects Dynamo wrote in
  place of a compiled function's (`is_dynamo_code`).
* ``torch._foreach_norm``, ``torch._foreach_sub_`` and ``torch._foreach_copy_``:
  one call for a list of tensors, as ``clip_grad_norm_`` and the optimizers use
  them (`foreach_norm`, `foreach_sub_`, `foreach_copy_`).
* ``torch.autograd.graph._engine_run_backward`` (what `torch.autograd.grad`
  calls), and the engine's capture of a ``GradientEdge`` input, which runs the
  node's tensor hooks first (`run_tensor_hooks`).
* ``torch._functorch.config.donated_buffer``, the ``metadata.bw_donated_idxs``
  and ``compiled_bw`` of a compiled region's ``CompiledFunction`` (``node._forward_cls``) and
  ``torch._C._autograd._get_current_graph_task_keep_graph()``, which that
  region's backward reads to refuse running while the graph is kept
  (`donates_saved_buffers`, `apply_with_graph_freed`).
* The ``ctx`` of ``torch.utils.checkpoint.CheckpointFunction`` (a reentrant
  checkpoint's node): ``run_function``, ``inputs``, ``tensor_indices``,
  ``saved_tensors``, ``preserve_rng_state``, ``fwd_cpu_state`` and the autocast
  keywords, the same from torch 2.1 to 2.15 but for the device type
  (``device`` before torch 2.2, ``device_type`` after) and the
  ``device_type`` keyword of ``set_device_states`` (`is_reentrant_checkpoint`,
  `rerun_checkpoint`).
* ``Module._forward_hooks``, and ``Module._call_impl`` taking the list of
  forward hooks to run (the global ones, then the module's) once, before the
  first runs: a hook that one of them removes still runs for that call
  (`forward_hook_count`).
* ``torch.nn.modules.module._global_forward_hooks`` and its siblings, and the
  wording of the warning ``OptimizedModule.__call__`` issues (torch 2.8 and
  later) when any global module hook is registered
  (`has_global_module_hooks`, `COMPILED_GLOBAL_HOOKS_WARNING`).
* FSDP2's state on a ``fully_shard`` module (``_get_fsdp_state()``, its
  ``_fsdp_param_groups``, ``_fsdp_param_group`` before torch 2.9 or so, each
  group's ``fsdp_params`` with ``sharded_param`` and ``_unsharded_param``)
  (`fsdp_unsharded`).
* A compiled region's backward FX graph, ``node._forward_cls._lazy_backward_info``
  (``bw_module``, or ``bw_module_fn()`` after AOTAutograd's cache), from torch 2.3;
  its nodes' ``meta`` (``seq_nr``, ``stack_trace`` in the form of
  ``traceback.format_list``, ``fwd_source_fn_stack``, ``original_aten``), the
  ``tangents`` prefix of its gradient inputs, and
  ``torch._functorch.config.enable_autograd_cache``, whose saving empties that
  meta, ``torch._ops.OpOverload`` (`compiled_backward_graph`, `fx_op_meta`, `fx_stack_frames`, `fx_op_name`, `GRADIENT_INPUT_PREFIX`,
  `keep_compiled_metadata`).
* Inductor's cache folder, where it writes the Python code it generates
  (``torch._inductor.runtime.cache_dir_utils.cache_dir()``;
  ``torch._inductor.codecache.cache_dir()`` before torch 2.3)
  (`inductor_cache_dir`).
* The wording of the engine's in-place error, ``[torch.FloatTensor [1, 3]],
  which is output 0 of ReluBackward0, is at version 1; expected version 0``,
  and the legacy tensor type names in it (`in_place_versions`).
* ``torch.Tensor.backward`` as a plain Python method that ``loss.backward()``
  looks up on the class each time (`observe_backward_calls` stands a wrapper in its place).

It also holds the public behaviours that torch's type stubs do not declare on
`torch.autograd.graph.Node`, so that the rest of the package is type-checked:
``AccumulateGrad.variable`` (`leaf_variable`), calling a node
(`call_node`) and ``Node.metadata``, declared as a method (`node_metadata`).

Examples:
    >>> import torch
    >>> x = torch.ones(2, requires_grad=True)
    >>> node = (x * 2).grad_fn
    >>> sequence_nr(node) < sequence_nr(node.next_functions[0][0]), require_torch((2, 1), "the graph model")
    (True, None)
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import operator
import re
import sys
import types
from collections.abc import Callable, Sequence
from functools import cache, partial, wraps
from typing import Any, ClassVar, Literal, NamedTuple, Protocol

import torch
from torch.autograd.graph import Node
from torch.utils import _pytree

from ..core.errors import TorchVersionError


def _major_minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int("".join(char for char in minor if char.isdigit()) or 0)


#: The installed torch's ``(major, minor)``, as `require_torch` compares it.
TORCH_VERSION: tuple[int, int] = _major_minor(torch.__version__)

if TORCH_VERSION >= (2, 2):
    from torch.autograd.graph import GradientEdge
else:  # pragma: no cover - torch 2.1

    class GradientEdge(NamedTuple):  # type: ignore[no-redef]
        """A stand-in for torch 2.2's ``torch.autograd.graph.GradientEdge``: torch 2.1 makes none, so no root is one."""

        node: Node
        output_nr: int


if TORCH_VERSION >= (2, 4):
    from torch.autograd.graph import _engine_run_backward
else:  # pragma: no cover - torch 2.1 to 2.3: what torch.autograd.grad calls, with the same arguments
    _engine_run_backward = torch.autograd.Variable._execution_engine.run_backward


def gradient_edge(tensor: torch.Tensor) -> tuple[Node, int]:
    """``torch.autograd.graph.get_gradient_edge(tensor)`` (torch 2.2+): the node and input slot a gradient for ``tensor`` flows into.

    For a leaf that is its ``AccumulateGrad``; before torch 2.2 that node is
    reached through a throwaway view, as torch's own tests did.

    Examples:
        >>> x = torch.ones(2, requires_grad=True)
        >>> node, slot = gradient_edge(x.unbind()[1])
        >>> type(node).__name__, slot
        ('UnbindBackward0', 1)
        >>> type(gradient_edge(x)[0]).__name__
        'AccumulateGrad'
    """
    if TORCH_VERSION >= (2, 2):
        edge = torch.autograd.graph.get_gradient_edge(tensor)
        return edge.node, edge.output_nr
    if tensor.grad_fn is not None:
        return tensor.grad_fn, tensor.output_nr
    view = tensor.view_as(tensor).grad_fn
    accumulate = view.next_functions[0][0] if view is not None else None
    assert accumulate is not None  # a leaf that requires grad: its view's one edge leads to its AccumulateGrad
    return accumulate, 0


def is_orphaned_function_node(node: Node) -> bool:
    """Whether ``node`` is a custom ``autograd.Function``'s node whose output tensors are all gone.

    Up to some torch 2.x release such a node is an empty shell: its
    ``next_functions`` raise "is invalid for this instance of
    _C._FunctionBase", and its ``_sequence_nr()`` crashes the interpreter
    (segfault, torch 2.1 and 2.6). Newer torch keeps it whole. Only a bare
    Node root can be such a shell: every node reached from a live tensor is.

    Examples:
        >>> class Twice(torch.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x): return x * 2
        ...     @staticmethod
        ...     def backward(ctx, grad): return grad * 2
        >>> y = Twice.apply(torch.ones(1, requires_grad=True))
        >>> is_orphaned_function_node(y.grad_fn)
        False
    """
    if not isinstance(node, torch.autograd.function.BackwardCFunction):
        return False
    try:
        node.next_functions  # noqa: B018 - reading it is the test
    except RuntimeError:
        return True
    return False


def require_torch(needed: tuple[int, int], feature: str) -> None:
    """Raise `TorchVersionError` unless the installed torch is ``needed`` or newer.

    Args:
        needed: The oldest ``(major, minor)`` that has what ``feature`` uses.
        feature: What the caller asked for, as the message names it.

    Examples:
        >>> require_torch((2, 1), "the graph model")
        >>> try:
        ...     require_torch((99, 0), "time travel")
        ... except TorchVersionError as error:
        ...     print(str(error).split(";")[0])
        time travel needs torch 99.0 or newer
    """
    if needed > TORCH_VERSION:
        wanted = f"{needed[0]}.{needed[1]}"
        raise TorchVersionError(
            f"{feature} needs torch {wanted} or newer; this is torch {torch.__version__}: install a newer torch (pip install 'torch>={wanted}')",
            feature=feature,
            needed=needed,
        )


__all__ = [
    "ACCUMULATE_GRAD_SEQUENCE_NR",
    "COMPILED_GLOBAL_HOOKS_WARNING",
    "COMPILED_GRAPH_TORCH",
    "FREED_TEXTS",
    "GRADIENT_INPUT_PREFIX",
    "INPUT_METADATA_TORCH",
    "SAVED_HOOKS_VISIBLE",
    "STALE_TEXTS",
    "TORCH_VERSION",
    "CompiledBackwardGraph",
    "FxFrame",
    "FxOpMeta",
    "GradientEdge",
    "NodeHooks",
    "SavedGetter",
    "SavedHookedError",
    "SlotMetadata",
    "aminmax",
    "apply_with_graph_freed",
    "call_node",
    "compiled_backward_graph",
    "compiled_original",
    "donates_saved_buffers",
    "foreach_copy_",
    "foreach_norm",
    "foreach_sub_",
    "forward_hook_count",
    "fsdp_unsharded",
    "full_value",
    "function_codes",
    "function_saved_tensors",
    "fx_op_meta",
    "fx_op_name",
    "fx_stack_frames",
    "grad_tensors",
    "gradient_edge",
    "has_global_module_hooks",
    "in_place_versions",
    "inductor_cache_dir",
    "input_metadata",
    "is_compiling",
    "is_dynamo_code",
    "is_orphaned_function_node",
    "is_reentrant_checkpoint",
    "keep_compiled_metadata",
    "leaf_variable",
    "make_grad",
    "next_sequence_nr",
    "node_hook_counts",
    "node_metadata",
    "num_inputs",
    "observe_backward_calls",
    "post_accumulate_hook_count",
    "raw_saved",
    "read_saved",
    "register_step_hooks",
    "require_torch",
    "rerun_checkpoint",
    "run_tensor_hooks",
    "saved_getters",
    "saved_is_hook_packed",
    "saved_names",
    "saved_read_failure",
    "sequence_nr",
    "sequence_nr_getter",
    "signed",
    "tensor_hook_count",
    "tensor_leaves",
]

#: What ``AccumulateGrad._sequence_nr()`` reads: torch gives leaves the largest
#: sequence number so that its engine runs them first among ready nodes.
ACCUMULATE_GRAD_SEQUENCE_NR = 2**64 - 1

#: Fragments of the errors torch raises when a saved value was freed by backward().
FREED_TEXTS = ("Trying to backward through the graph a second time", "freed")
#: Fragments of the errors torch raises when a saved tensor was modified in place after it was saved.
STALE_TEXTS = ("modified by an inplace operation", "is at version")

_SAVED = "_saved_"
_RAW = "_raw_saved_"


class SlotMetadata(Protocol):
    """What ``Node._input_metadata`` holds per input slot (``torch._C._autograd._InputMetadata``)."""

    @property
    def shape(self) -> Sequence[int]: ...
    @property
    def dtype(self) -> torch.dtype: ...
    @property
    def device(self) -> torch.device: ...
    @property
    def is_nested_tensor(self) -> bool: ...


def signed(value: int) -> int:
    """Undo torch's unsigned read-back of negative ints (``dim=-1`` and ``AccumulateGrad``'s sequence number read as 2**64 - 1).

    Examples:
        >>> signed(2**64 - 1), signed(3)
        (-1, 3)
    """
    return value - 2**64 if 2**63 <= value < 2**64 else value


def sequence_nr(node: Node) -> int:
    """``node._sequence_nr()``: the node's creation order on its thread, as torch reads it (unsigned).

    Examples:
        >>> import torch
        >>> x = torch.ones(1, requires_grad=True)
        >>> sequence_nr((x * 2).grad_fn.next_functions[0][0]) == ACCUMULATE_GRAD_SEQUENCE_NR
        True
    """
    return node._sequence_nr()


@cache
def sequence_nr_getter(node_type: type) -> Callable[[Node], int]:
    """The unbound ``_sequence_nr`` of a Node type, for hot loops: ``getter(node)`` costs what ``node._sequence_nr()`` does.

    Examples:
        >>> import torch
        >>> node = (torch.ones(1, requires_grad=True) * 2).grad_fn
        >>> sequence_nr_getter(type(node))(node) == sequence_nr(node)
        True
    """
    return node_type._sequence_nr  # type: ignore[attr-defined]


#: ``next_sequence_nr()``: the sequence number the next Node created on this thread gets.
#: torch's builtin itself (``torch._C._autograd._get_sequence_nr``), not a wrapper:
#: `gradexport.tools.capture_source` reads it twice per op.
next_sequence_nr: Callable[[], int] = torch._C._autograd._get_sequence_nr

#: ``set_grad_enabled(flag)``: switch autograd on or off on this thread, as a plain call
#: (``torch._C._set_grad_enabled``; ``torch.set_grad_enabled`` builds an object at each call).
set_grad_enabled: Callable[[bool], None] = torch._C._set_grad_enabled


#: The first torch whose nodes expose ``_input_metadata`` (what `input_metadata` and `num_inputs` read).
INPUT_METADATA_TORCH = (2, 5)


def input_metadata(node: Node | torch.autograd.function.BackwardCFunction) -> Sequence[SlotMetadata]:
    """``node._input_metadata``: shape, dtype, device of the gradient each input slot receives.

    Raises:
        RuntimeError, AttributeError: for a node type that does not expose it.

    Examples:
        >>> import torch
        >>> x = torch.ones(2, 3, requires_grad=True)
        >>> [(list(m.shape), m.dtype) for m in input_metadata((x * 2).grad_fn)]
        [([2, 3], torch.float32)]
    """
    if TORCH_VERSION < INPUT_METADATA_TORCH:
        require_torch(INPUT_METADATA_TORCH, "reading a node's input slots (Node._input_metadata)")
    return node._input_metadata  # type: ignore[union-attr]  # a custom Function's node has it too


def num_inputs(node: Node) -> int:
    """How many input slots ``node`` has (the number of its forward op's outputs).

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> num_inputs(x.unbind()[0].grad_fn)
        2
    """
    return len(input_metadata(node))


def make_grad(target: torch.Tensor | GradientEdge, grad: torch.Tensor | None) -> torch.Tensor:
    """The start gradient `torch.autograd.backward` makes for ``target`` from ``grad``.

    ``None`` becomes ones for a scalar; shapes and complex-ness are checked by
    torch's own ``torch.autograd._make_grads``, so the errors are torch's.

    Raises:
        RuntimeError: as torch does (``grad`` missing for a non-scalar, wrong shape).

    Examples:
        >>> import torch
        >>> make_grad((torch.ones(2, requires_grad=True) * 2).sum(), None)
        tensor(1.)
    """
    targets: Any = (target,)  # the stub takes a sequence of tensors or of edges; one of either is both
    (made,) = torch.autograd._make_grads(targets, (grad,), is_grads_batched=False)
    assert made is not None  # made from a target, never None
    return made


def leaf_variable(node: Node) -> torch.Tensor:
    """``AccumulateGrad.variable``: the leaf tensor whose ``.grad`` the node writes.

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> leaf_variable((x * 2).grad_fn.next_functions[0][0]) is x
        True
    """
    return node.variable  # type: ignore[attr-defined]


def call_node(node: Node, *grads: torch.Tensor | None) -> Any:
    """Call a C++ backward node on its input gradients, as ``node(*grads)`` does (no hooks, no shape reduction).

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> call_node((x * 3).grad_fn, torch.ones(2))
        (tensor([3., 3.]), None)
    """
    return node(*grads)  # type: ignore[operator]


def node_metadata(node: Node) -> dict[Any, Any]:
    """``node.metadata``: the dict torch keeps on a node for its users (a property; the stub declares a method).

    Examples:
        >>> import torch
        >>> node = (torch.ones(2, requires_grad=True) * 2).grad_fn
        >>> node_metadata(node) is node.metadata
        True
    """
    return node.metadata  # type: ignore[return-value]


def tensor_hook_count(tensor: torch.Tensor) -> int:
    """How many ``Tensor.register_hook`` hooks ``tensor`` holds (``tensor._backward_hooks``).

    Examples:
        >>> import torch
        >>> x = torch.ones(1, requires_grad=True)
        >>> _ = x.register_hook(lambda grad: None)
        >>> tensor_hook_count(x)
        1
    """
    hooks = tensor._backward_hooks
    return 0 if hooks is None else len(hooks)


def post_accumulate_hook_count(tensor: torch.Tensor) -> int:
    """How many ``register_post_accumulate_grad_hook`` hooks ``tensor`` holds (``tensor._post_accumulate_grad_hooks``).

    Examples:
        >>> import torch
        >>> x = torch.ones(1, requires_grad=True)
        >>> _ = x.register_post_accumulate_grad_hook(lambda tensor: None)
        >>> post_accumulate_hook_count(x)
        1
    """
    hooks = getattr(tensor, "_post_accumulate_grad_hooks", None)
    return 0 if hooks is None else len(hooks)


class NodeHooks(NamedTuple):
    """How many hooks a Node holds of each kind."""

    #: ``Node.register_prehook`` hooks (run on the gradients the node receives).
    pre: int
    #: ``Node.register_hook`` hooks (run on what the node returns).
    post: int


def node_hook_counts(node: Node) -> NodeHooks:
    """Count the node pre-hooks and post-hooks registered on ``node``.

    Node hooks live in C++ and cannot be listed, but registering a probe hands
    back a handle whose ``hooks_dict_ref()`` is the node's hook dict: any entry
    besides the probe is someone else's hook. The probe is removed at once
    (which leaves an empty dict on the node, as removing any hook does).

    Examples:
        >>> import torch
        >>> node = (torch.ones(1, requires_grad=True) * 2).grad_fn
        >>> _ = node.register_prehook(lambda grads: None)
        >>> node_hook_counts(node)
        NodeHooks(pre=1, post=0)
    """
    return NodeHooks(_others_than(node.register_prehook(_probe_hook)), _others_than(node.register_hook(_probe_hook)))


def _others_than(probe: Any) -> int:
    # Removes the probe from its dict by its key, as probe.remove() would: measured 2.6 µs
    # per node (both kinds) against 3.3 µs with remove() and a loop over the kinds.
    hooks = probe.hooks_dict_ref()
    if hooks is None:
        return 0
    del hooks[probe.id]
    return len(hooks)


def _probe_hook(*_: Any) -> None:
    return None


def run_tensor_hooks(node: Node, grads: Sequence[torch.Tensor | None]) -> tuple[torch.Tensor | None, ...]:
    """Pass the gradients that reached ``node`` through its tensor hooks, as the engine does before calling it.

    A ``Tensor.register_hook`` hook on a non-leaf tensor lives in C++ on the
    tensor's ``grad_fn`` (so does ``retain_grad``) and cannot be listed from
    Python. The engine itself can run them: asked for the gradient of a
    ``GradientEdge`` into ``node``, it runs the node's tensor hooks (then
    ``retain_grad``'s, which sets ``.grad``) on the node's whole input buffer
    and hands back the result, without calling the node. Returns ``grads``
    unchanged, slot by slot, where no hook replaced it; ``None`` slots stay
    ``None``. Node pre-hooks and post-hooks are not run.

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> hidden = x * 2
        >>> _ = hidden.register_hook(lambda grad: grad * 10)
        >>> run_tensor_hooks(hidden.grad_fn, [torch.ones(2)])
        (tensor([10., 10.]),)
    """
    if len(grads) == 1:
        # Most nodes have one input slot: measured 6.1 µs per call this way against 7.7 µs
        # through the slot lists below.
        grad = grads[0]
        return (None,) if grad is None else _capture((GradientEdge(node, 0),), (grad,))
    slots = [slot for slot, grad in enumerate(grads) if grad is not None]
    if not slots:
        return tuple(grads)
    captured = _capture(tuple(GradientEdge(node, slot) for slot in slots), tuple(grads[slot] for slot in slots))
    result = list(grads)
    for slot, grad in zip(slots, captured, strict=True):
        result[slot] = grad
    return tuple(result)


def _capture(edges: tuple[GradientEdge, ...], grads: tuple[torch.Tensor | None, ...]) -> tuple[torch.Tensor | None, ...]:
    # What torch.autograd.grad(edges, edges, grads, retain_graph=True) runs, minus its argument
    # checks and _make_grads (the gradients already fit their slots): half the cost per node.
    return _engine_run_backward(
        edges,
        grads,
        True,  # keep_graph
        False,  # create_graph
        edges,  # inputs: capture what reaches these slots
        True,  # allow_unreachable
        False,  # accumulate_grad
    )


@cache
def saved_names(node_type: type) -> tuple[str, ...]:
    """The names of what nodes of this type save for backward (``_saved_<name>`` attributes), without the prefix.

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> saved_names(type((x * x).grad_fn))
        ('other', 'self')
    """
    return tuple(attr[len(_SAVED) :] for attr in dir(node_type) if attr.startswith(_SAVED))


class SavedGetter(NamedTuple):
    """How to read one saved attribute of a node type: `read_saved` and `raw_saved` as ready getters."""

    name: str
    #: ``node._saved_<name>``, as `read_saved` reads it.
    read: Callable[[Node], Any]
    #: ``node._raw_saved_<name>``, as `raw_saved` reads it; ``None`` where the type has none
    #: (torch generates one exactly for the tensors and tensor lists a node saves).
    raw: Callable[[Node], Any] | None


@cache
def saved_getters(node_type: type) -> tuple[SavedGetter, ...]:
    """A `SavedGetter` per name of `saved_names`, built once per type.

    Reading the saved tensors of every node of a large graph goes through
    these: ``getattr(node, "_saved_" + name)`` built the attribute name anew
    per read, and ``_raw_saved_<name>`` of a value that is no tensor (a size, a
    scalar) raised and caught an AttributeError.

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> node = x.pow(2).grad_fn                       # saves the scalar exponent and the tensor self
        >>> [(getter.name, getter.raw is None) for getter in saved_getters(type(node))]
        [('exponent', True), ('self', False)]
        >>> getter = saved_getters(type(node))[1]
        >>> getter.read(node) is not None and type(getter.raw(node)).__name__
        'SavedTensor'
    """
    return tuple(
        SavedGetter(
            name,
            _saved_reader(_SAVED + name),
            operator.attrgetter(_RAW + name) if hasattr(node_type, _RAW + name) else None,
        )
        for name in saved_names(node_type)
    )


class SavedHookedError(RuntimeError):
    """Reading a saved value stopped before its saved-tensor unpack hook ran (torch without ``SavedTensor.unpack_hook``)."""


def _refuse_python_calls(frame: Any, event: str, arg: Any) -> None:
    if event == "call":
        raise SavedHookedError("reading this saved value would run a saved-tensor unpack hook")


def _without_unpack_hooks(read: Callable[[Node], Any], node: Node) -> Any:
    """``read(node)``, stopped with `SavedHookedError` at its first Python call, before any of it runs.

    Reading a saved value is C++ alone unless a Python unpack hook packed it;
    where torch cannot say so beforehand (no ``SavedTensor.unpack_hook``), a
    profile function that refuses every Python call stops such a hook on its
    first line, so that a non-reentrant checkpoint is not recomputed. ``read``
    must be a C callable (an ``operator.attrgetter``) for the same reason.
    """
    previous = sys.getprofile()
    sys.setprofile(_refuse_python_calls)
    try:
        return read(node)
    finally:
        sys.setprofile(previous)


def _saved_reader(attribute: str) -> Callable[[Node], Any]:
    getter = operator.attrgetter(attribute)
    return getter if SAVED_HOOKS_VISIBLE else partial(_without_unpack_hooks, getter)


def read_saved(node: Node, name: str) -> Any:
    """``node._saved_<name>``: the saved value, unpacked (a saved-tensor hook's unpack runs).

    Where torch cannot tell beforehand whether hooks packed it (see
    `saved_is_hook_packed`), the read stops before the unpack hook runs and
    raises `SavedHookedError`.

    Raises:
        RuntimeError: when it was freed or modified in place, or hooked; see `saved_read_failure`.
    """
    return _saved_reader(_SAVED + name)(node)


def function_saved_tensors(node: torch.autograd.function.BackwardCFunction) -> tuple[torch.Tensor, ...]:
    """``node.saved_tensors`` of a custom Function's node, read as `read_saved` reads (unpack hooks refused where unseen).

    Examples:
        >>> class Square(torch.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         ctx.save_for_backward(x)
        ...         return x * x
        >>> x = torch.ones(1, requires_grad=True)
        >>> y = Square.apply(x)
        >>> function_saved_tensors(y.grad_fn)[0] is x
        True
    """
    return _saved_reader("saved_tensors")(node)  # type: ignore[arg-type]


def raw_saved(node: Node, name: str) -> Any:
    """``node._raw_saved_<name>``: the packed ``SavedTensor`` (or a list of them), ``None`` for non-tensor values."""
    return getattr(node, _RAW + name, None)


#: Whether this torch's ``SavedTensor`` has ``unpack_hook``, which `saved_is_hook_packed` reads (torch 2.6 and older have none).
SAVED_HOOKS_VISIBLE: bool = hasattr(torch._C._autograd, "SavedTensor") and hasattr(torch._C._autograd.SavedTensor, "unpack_hook")


def saved_is_hook_packed(raw: Any) -> bool:
    """Whether a raw saved value (or any item of a list of them) was packed by saved-tensor hooks (reading it would run their unpack).

    A freed ``SavedTensor`` reads as not packed: reading its value reports it.
    Where a ``SavedTensor`` does not say whether hooks packed it (no
    ``unpack_hook``, torch 2.6 and older; see `SAVED_HOOKS_VISIBLE`), every one reads as not
    packed here, and `read_saved` stops before the unpack hook runs instead.
    """
    if isinstance(raw, (list, tuple)):
        return any(saved_is_hook_packed(item) for item in raw)
    try:
        return getattr(raw, "unpack_hook", None) is not None
    except RuntimeError:
        return False


def saved_read_failure(error: RuntimeError) -> Literal["freed", "stale", "hooked"] | None:
    """Why reading a saved value raised: ``"freed"`` or ``"stale"`` (from torch's message), ``"hooked"`` (`SavedHookedError`) or ``None`` (another error).

    Examples:
        >>> saved_read_failure(RuntimeError("Trying to backward through the graph a second time"))
        'freed'
    """
    if isinstance(error, SavedHookedError):
        return "hooked"
    message = str(error)
    if any(text in message for text in FREED_TEXTS):
        return "freed"
    if any(text in message for text in STALE_TEXTS):
        return "stale"
    return None


class InPlaceVersions(NamedTuple):
    """What torch's in-place error says of the tensor: ``"float32 [1, 3], output 0 of ReluBackward0"``, and its versions."""

    tensor: str
    saved_version: int
    version: int


_IN_PLACE = re.compile(
    r"\[(?P<type>[\w.]+)(?: \[(?P<shape>[\d, ]*)\])?\], which is (?P<what>.+?), is at version (?P<now>\d+); "
    r"expected version (?P<saved>\d+)"
)


def in_place_versions(message: str) -> InPlaceVersions | None:
    """Read the tensor and its versions from torch's "modified by an inplace operation" error, or None.

    Examples:
        >>> in_place_versions(
        ...     "one of the variables needed for gradient computation has been modified by an inplace operation: "
        ...     "[torch.FloatTensor [1, 3]], which is output 0 of ReluBackward0, is at version 1; expected version 0 instead."
        ... )
        InPlaceVersions(tensor='float32 [1, 3], output 0 of ReluBackward0', saved_version=0, version=1)
    """
    found = _IN_PLACE.search(message)
    if found is None:
        return None
    kind: Any = torch
    for part in found["type"].split(".")[1:]:
        kind = getattr(kind, part, None)
    dtype = getattr(kind, "dtype", None)
    name = str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else found["type"]
    shape = f" [{found['shape']}]" if found["shape"] is not None else ""
    return InPlaceVersions(f"{name}{shape}, {found['what']}", int(found["saved"]), int(found["now"]))


def compiled_original(module: torch.nn.Module) -> torch.nn.Module | None:
    """``module._orig_mod``: the module that ``torch.compile(module)`` wraps, or None for any other module.

    Examples:
        >>> linear = torch.nn.Linear(2, 2)
        >>> compiled_original(torch.compile(linear)) is linear, compiled_original(linear)
        (True, None)
    """
    return getattr(module, "_orig_mod", None)


def tensor_leaves(tree: Any) -> list[torch.Tensor]:
    """Every tensor in a nested output (tuples, lists, dicts, dataclasses torch knows), via ``torch.utils._pytree``.

    A tensor alone (what most modules return, read by hooks at every call)
    skips pytree's walk.

    Examples:
        >>> import torch
        >>> len(tensor_leaves({"a": torch.ones(1), "b": (torch.ones(1), 3)}))
        2
    """
    if isinstance(tree, torch.Tensor):
        return [tree]
    return [leaf for leaf in _tree_leaves(tree) if isinstance(leaf, torch.Tensor)]


def grad_tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors of a nested output (`tensor_leaves`) that require grad, in order: those a backward reaches.

    Examples:
        >>> import torch
        >>> [tensor.shape for tensor in grad_tensors((torch.ones(2, requires_grad=True) * 2, torch.ones(3)))]
        [torch.Size([2])]
    """
    return [tensor for tensor in tensor_leaves(tree) if tensor.requires_grad]


def _tree_leaves_before_2_2(tree: Any) -> list[Any]:
    leaves, _ = _pytree.tree_flatten(tree)
    return leaves


#: ``torch.utils._pytree.tree_leaves`` from torch 2.2; ``tree_flatten``'s leaves before.
_tree_leaves: Callable[[Any], list[Any]] = getattr(_pytree, "tree_leaves", _tree_leaves_before_2_2)


#: Whether Dynamo is tracing the current frame: ``torch.compiler.is_compiling`` from torch 2.3,
#: ``torch._utils.is_compiling`` before (False when run, True as Dynamo traces it).
is_compiling: Callable[[], bool] = getattr(torch.compiler, "is_compiling", None) or torch._utils.is_compiling


def donates_saved_buffers(node: Node | torch.autograd.function.BackwardCFunction) -> bool:
    """Whether ``node`` is a ``torch.compile`` region whose backward is compiled already and reuses (donates) its saved buffers.

    Such a backward runs only while the graph is freed: called outside the
    engine, where ``_get_current_graph_task_keep_graph()`` reads True, it
    raises "compiled with non-empty donated buffers". Inductor compiles a
    region's backward lazily; measured with torch 2.13: one compiled under
    ``backward()`` without ``retain_graph``, and one that AOTAutograd's cache
    hands back, donate; one first compiled while the graph is kept does not
    (AOTAutograd then empties ``bw_donated_idxs``), so a region whose backward
    is not compiled yet (``CompiledFunction.compiled_bw`` is None) is left to
    the direct call, which keeps it repeatable.

    Examples:
        >>> x = torch.ones(2, requires_grad=True)
        >>> donates_saved_buffers((x * 2).grad_fn)
        False
    """
    forward_cls = getattr(node, "_forward_cls", None)
    metadata = getattr(forward_cls, "metadata", None)
    # Not compiled yet (``compiled_bw`` None): the first call compiles it, without donation
    # when the graph is kept, so a direct call works and the region can run again.
    if not getattr(metadata, "bw_donated_idxs", None) or getattr(forward_cls, "compiled_bw", None) is None:
        return False
    from torch._functorch import config  # loaded by torch.compile already, when it made such a node

    return bool(config.donated_buffer)


class _FreedGraphCall(torch.autograd.Function):
    """A one-node graph whose backward makes a call inside the engine's graph task."""

    @staticmethod
    def forward(ctx: Any, seed: torch.Tensor, call: Callable[[], None]) -> torch.Tensor:
        ctx.call = call
        return seed.detach().clone()

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None]:
        ctx.call()
        return grads[0], None


def apply_with_graph_freed(node: torch.autograd.function.BackwardCFunction, *grads: torch.Tensor) -> Any:
    """``node.apply(*grads)`` run as the engine runs it in ``backward()`` without ``retain_graph``.

    The call happens inside the backward of a throwaway one-node graph that
    `torch.autograd.grad` runs with ``retain_graph=False``, so the graph task
    that the node sees does not keep the graph: a compiled region's backward
    that donates buffers runs (see `donates_saved_buffers`) and frees its
    saved tensors, as under ``backward()``.

    Examples:
        >>> x = torch.ones(2, requires_grad=True)
        >>> class Double(torch.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, t): return t * 2
        ...     @staticmethod
        ...     def backward(ctx, g): return g * 2
        >>> apply_with_graph_freed(Double.apply(x).grad_fn, torch.ones(2))
        tensor([2., 2.])
    """
    results: list[Any] = []

    def call() -> None:
        results.append(node.apply(*grads))

    with torch.enable_grad():
        seed = torch.zeros((), requires_grad=True)
        output = _FreedGraphCall.apply(seed, call)
    torch.autograd.grad(output, seed, retain_graph=False)
    return results[0]


def is_dynamo_code(code: Any) -> bool:
    """Whether ``code`` is one that ``torch.compile`` wrote to run a compiled function (``torch._dynamo.utils.orig_code_map``).

    Such a frame keeps the compiled function's name and file but stands on
    its ``def`` line; it is torch's, not the user's. False until Dynamo is imported.

    Examples:
        >>> is_dynamo_code(is_dynamo_code.__code__)
        False
    """
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    if dynamo_utils is None:
        return False
    return code in dynamo_utils.orig_code_map


@cache
def function_codes(node_type: type) -> frozenset[Any]:
    """The code objects of ``forward`` and ``setup_context`` of the custom ``autograd.Function`` behind a node type (``_forward_cls``); empty for other nodes.

    Examples:
        >>> class Twice(torch.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         return x * 2
        >>> node = Twice.apply(torch.ones(1, requires_grad=True)).grad_fn
        >>> function_codes(type(node)) == {Twice.forward.__code__}
        True
    """
    forward_cls = getattr(node_type, "_forward_cls", None)
    codes = set()
    for name in ("forward", "setup_context"):
        code = getattr(getattr(forward_cls, name, None), "__code__", None)
        if code is not None and code is not getattr(getattr(torch.autograd.Function, name), "__code__", None):
            codes.add(code)
    return frozenset(codes)


class _StepWrap:
    """Calls ``before`` and ``after`` around an optimizer's ``step``, set on the instance; ``remove()`` puts it back."""

    def __init__(self, optimizer: torch.optim.Optimizer, before: Callable[..., None], after: Callable[..., None]) -> None:
        self.optimizer = optimizer
        step = optimizer.step

        def wrapped(_: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
            before(optimizer, args, kwargs)
            result = step(*args, **kwargs)
            after(optimizer, args, kwargs)
            return result

        # A bound method, as torch's own step is: an LR scheduler made afterwards wraps it through __self__ and __func__.
        optimizer.step = types.MethodType(wrapped, optimizer)  # type: ignore[method-assign]

    def remove(self) -> None:
        vars(self.optimizer).pop("step", None)


class _ClosureWrap:
    """Stands in for an optimizer's ``step`` on the instance: a closure it is given is replaced as ``around`` says; ``remove()`` puts it back."""

    def __init__(self, optimizer: torch.optim.Optimizer, around: Callable[[Callable[[], Any]], contextlib.AbstractContextManager[Callable[[], Any]]]) -> None:
        self.optimizer = optimizer
        self.had = "step" in vars(optimizer)
        self.active = True
        step = self.step = optimizer.step

        def wrapped(_: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
            closure = kwargs.get("closure", args[0] if args else None)
            if closure is None or not self.active:
                return step(*args, **kwargs)
            with around(closure) as replaced:
                if "closure" in kwargs:
                    return step(*args, **{**kwargs, "closure": replaced})
                return step(replaced, *args[1:], **kwargs)

        # A bound method, as torch's own step is: an LR scheduler made afterwards wraps it through its __func__.
        self.wrapped = types.MethodType(wrapped, optimizer)
        optimizer.step = self.wrapped  # type: ignore[method-assign]

    def remove(self) -> None:
        # Something that wrapped step after us (an LR scheduler's counter) keeps calling this wrapper: it passes through.
        self.active = False
        if vars(self.optimizer).get("step") is self.wrapped:
            if self.had:
                self.optimizer.step = self.step  # type: ignore[method-assign]
            else:
                del self.optimizer.step


def wrap_step_closure(
    optimizer: torch.optim.Optimizer, around: Callable[[Callable[[], Any]], contextlib.AbstractContextManager[Callable[[], Any]]]
) -> _ClosureWrap:
    """At ``optimizer.step(closure)``, run the step inside ``around(closure)`` with the closure it yields in place of the given one.

    For an optimizer that calls its closure (``torch.optim.LBFGS`` calls it
    once per evaluation, several times per step): the yielded closure sees
    every evaluation. A step without a closure runs as it is. The instance's
    ``step`` is wrapped (the class's, and its step hooks, run inside);
    ``remove()`` the handle to stop.

    Examples:
        >>> from contextlib import contextmanager
        >>> model = torch.nn.Linear(2, 1)
        >>> optimizer = torch.optim.LBFGS(model.parameters(), max_iter=2)
        >>> seen = []
        >>> @contextmanager
        ... def counting(closure):
        ...     yield lambda: (seen.append("evaluation"), closure())[1]
        >>> def closure():
        ...     optimizer.zero_grad()
        ...     loss = model(torch.ones(1, 2)).pow(2).sum()
        ...     loss.backward()
        ...     return loss
        >>> handle = wrap_step_closure(optimizer, counting)
        >>> _ = optimizer.step(closure)
        >>> evaluations = len(seen)
        >>> handle.remove()
        >>> _ = optimizer.step(closure)
        >>> evaluations > 1, len(seen) == evaluations
        (True, True)
    """
    return _ClosureWrap(optimizer, around)


def register_step_hooks(optimizer: torch.optim.Optimizer, before: Callable[..., None], after: Callable[..., None]) -> list[Any]:
    """``optimizer.register_step_pre_hook(before)`` and ``register_step_post_hook(after)``; handles to remove them.

    torch before 2.3 loses them once Dynamo has been imported: its patch of
    every optimizer class's ``step`` leaves out the wrapper that runs the
    hooks for optimizers made afterwards (measured on torch 2.1: neither
    hook runs). There the instance's ``step`` is wrapped instead.

    Examples:
        >>> model = torch.nn.Linear(2, 1)
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> seen = []
        >>> handles = register_step_hooks(optimizer, lambda *_: seen.append("before"), lambda *_: seen.append("after"))
        >>> model(torch.ones(1, 2)).sum().backward()
        >>> optimizer.step()
        >>> seen
        ['before', 'after']
        >>> for handle in handles:
        ...     handle.remove()
    """
    if TORCH_VERSION < (2, 3):
        return [_StepWrap(optimizer, before, after)]
    return [optimizer.register_step_pre_hook(before), optimizer.register_step_post_hook(after)]


class _BackwardObservers:
    """Calls each observer with the tensor whose ``backward()`` is called, while any is registered; ``remove()`` one.

    ``Tensor.backward`` is a Python method looked up on the class at every
    ``loss.backward()``: while an observer is registered, one wrapper stands in
    its place on ``torch.Tensor``; removing the last puts torch's own back.
    """

    observers: ClassVar[dict[int, Callable[[torch.Tensor], None]]] = {}
    original: ClassVar[Callable[..., Any] | None] = None

    def __init__(self, observer: Callable[[torch.Tensor], None]) -> None:
        if not _BackwardObservers.observers:
            original = _BackwardObservers.original = torch.Tensor.backward

            @wraps(original)
            def backward(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                for each in list(_BackwardObservers.observers.values()):
                    each(tensor)
                return original(tensor, *args, **kwargs)

            torch.Tensor.backward = backward  # type: ignore[method-assign,assignment]
        _BackwardObservers.observers[id(self)] = observer

    def remove(self) -> None:
        """Stop calling this observer (and put torch's ``Tensor.backward`` back after the last)."""
        if _BackwardObservers.observers.pop(id(self), None) is not None and not _BackwardObservers.observers:
            torch.Tensor.backward = _BackwardObservers.original  # type: ignore[method-assign,assignment]


def observe_backward_calls(observer: Callable[[torch.Tensor], None]) -> _BackwardObservers:
    """Call ``observer(tensor)`` at every ``tensor.backward(...)``, before the backward runs; ``remove()`` the handle to stop.

    `torch.autograd.backward` called directly is not seen (only the method).

    Examples:
        >>> seen = []
        >>> handle = observe_backward_calls(lambda tensor: seen.append(tensor.item()))
        >>> (torch.ones(1, requires_grad=True) * 3).sum().backward()
        >>> handle.remove()
        >>> (torch.ones(1, requires_grad=True) * 4).sum().backward()
        >>> seen
        [3.0]
    """
    return _BackwardObservers(observer)


def aminmax(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.aminmax(tensor)``: the least and the largest element, as 0-d tensors.

    Where this torch has no ``aminmax`` kernel for the tensor's dtype and
    device (float16 on the CPU in torch 2.1), ``min()`` and ``max()`` give
    the same two elements in two passes.

    Examples:
        >>> [float(value) for value in aminmax(torch.tensor([1.0, -2.0], dtype=torch.float16))]
        [-2.0, 1.0]
    """
    try:
        least, most = torch.aminmax(tensor)
    except RuntimeError as error:
        if "not implemented for" not in str(error):
            raise
        return tensor.min(), tensor.max()
    return least, most


def foreach_norm(tensors: Sequence[torch.Tensor], ord: float = 2.0) -> list[torch.Tensor]:
    """The ``ord``-norm of each tensor, 0-d tensors, from one ``torch._foreach_norm`` call (``inf``: the largest ``|x|``).

    A NaN anywhere makes that tensor's norm NaN, for ``inf`` too.

    Examples:
        >>> import torch
        >>> [float(n) for n in foreach_norm([torch.tensor([3.0, -4.0]), torch.tensor([-2.0])], float("inf"))]
        [4.0, 2.0]
    """
    return list(torch._foreach_norm(list(tensors), ord))


def foreach_sub_(first: Sequence[torch.Tensor], second: Sequence[torch.Tensor]) -> None:
    """``first[i] -= second[i]`` for every ``i``, in place, from one ``torch._foreach_sub_`` call.

    Examples:
        >>> import torch
        >>> first = [torch.tensor([3.0])]
        >>> foreach_sub_(first, [torch.tensor([1.0])])
        >>> first
        [tensor([2.])]
    """
    torch._foreach_sub_(list(first), list(second))


def foreach_copy_(targets: Sequence[torch.Tensor], sources: Sequence[torch.Tensor]) -> None:
    """``targets[i].copy_(sources[i])`` for every ``i``, from one ``torch._foreach_copy_`` call.

    Examples:
        >>> import torch
        >>> target = [torch.zeros(2)]
        >>> foreach_copy_(target, [torch.tensor([1.0, 2.0])])
        >>> target
        [tensor([1., 2.])]
    """
    torch._foreach_copy_(list(targets), list(sources))


def is_reentrant_checkpoint(node: Node) -> bool:
    """Whether ``node`` is the one opaque node of ``torch.utils.checkpoint.checkpoint(..., use_reentrant=True)`` (``CheckpointFunctionBackward``).

    Examples:
        >>> from torch.utils.checkpoint import checkpoint
        >>> x = torch.ones(2, requires_grad=True)
        >>> is_reentrant_checkpoint(checkpoint(torch.sin, x, use_reentrant=True).grad_fn), is_reentrant_checkpoint((x * 2).grad_fn)
        (True, False)
    """
    from torch.utils.checkpoint import CheckpointFunction

    return getattr(node, "_forward_cls", None) is CheckpointFunction


def rerun_checkpoint(node: Node) -> tuple[tuple[torch.Tensor, ...], tuple[Any, ...]]:
    """Run a reentrant checkpoint's function again, as its backward does, and return ``(outputs, inputs)``.

    ``CheckpointFunction.backward`` recomputes the region under
    ``enable_grad`` on detached copies of its saved inputs, with the random
    state and autocast of the forward; this does the same and stops before
    the nested backward. The outputs' ``grad_fn`` graph is the region's
    contents, reaching the parameters used inside; the inputs are the
    detached copies (non-tensor arguments as they were). The user's RNG state
    is left as it was.

    Raises:
        RuntimeError: as torch does when the saved inputs were freed (after ``backward()``).

    Examples:
        >>> from torch.utils.checkpoint import checkpoint
        >>> weight = torch.ones(2, requires_grad=True)
        >>> out = checkpoint(lambda t: (t * weight).exp(), torch.ones(2, requires_grad=True), use_reentrant=True)
        >>> outputs, inputs = rerun_checkpoint(out.grad_fn)
        >>> outputs[0].grad_fn.name(), outputs[0].grad_fn.next_functions[0][0].next_functions[1][0].variable is weight
        ('ExpBackward0', True)
    """
    from torch.utils.checkpoint import detach_variable

    ctx: Any = node
    arguments = list(ctx.inputs)
    for index, tensor in zip(ctx.tensor_indices, ctx.saved_tensors, strict=True):
        arguments[index] = tensor
    devices = ctx.fwd_devices if ctx.preserve_rng_state and ctx.had_device_in_fwd else []
    device_type = ctx.device_type if hasattr(ctx, "device_type") else ctx.device
    device_autocast = ctx.device_autocast_kwargs or {"enabled": False}
    with torch.random.fork_rng(devices=devices, enabled=ctx.preserve_rng_state, device_type=device_type):
        if ctx.preserve_rng_state:
            torch.set_rng_state(ctx.fwd_cpu_state)
            if ctx.had_device_in_fwd:
                from torch.utils.checkpoint import set_device_states

                keywords = {"device_type": device_type} if "device_type" in inspect.signature(set_device_states).parameters else {}
                set_device_states(ctx.fwd_devices, ctx.fwd_device_states, **keywords)
        detached = detach_variable(tuple(arguments))
        device_context: Any = torch.autocast(device_type, **device_autocast) if device_type != "cpu" else contextlib.nullcontext()
        with torch.enable_grad(), device_context, torch.autocast("cpu", **ctx.cpu_autocast_kwargs):
            outputs = ctx.run_function(*detached)
    return (tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)), detached


def forward_hook_count(module: torch.nn.Module) -> int:
    """How many ``register_forward_hook`` hooks ``module`` holds of its own (``module._forward_hooks``; global hooks not counted).

    Examples:
        >>> layer = torch.nn.Linear(2, 2)
        >>> _ = layer.register_forward_hook(lambda module, args, output: None)
        >>> forward_hook_count(layer)
        1
    """
    return len(module._forward_hooks)


#: The start of the warning (a regular expression for ``warnings.filterwarnings``) that
#: ``torch.compile(module)``'s wrapper issues on every call while a global module hook is registered.
COMPILED_GLOBAL_HOOKS_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks on modules"

_GLOBAL_MODULE_HOOKS = ("_global_backward_pre_hooks", "_global_backward_hooks", "_global_forward_pre_hooks", "_global_forward_hooks")


def has_global_module_hooks() -> bool:
    """Whether any global module hook (``register_module_forward_hook`` and its siblings) is registered.

    Examples:
        >>> has_global_module_hooks()
        False
        >>> handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, output: None)
        >>> has_global_module_hooks()
        True
        >>> handle.remove()
    """
    module = torch.nn.modules.module
    return any(getattr(module, name, None) for name in _GLOBAL_MODULE_HOOKS)


def full_value(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` itself, or for a ``DTensor`` (FSDP2's parameters and gradients, tensor parallel) its whole value, ``full_tensor()``.

    For a DTensor this is a collective (a partial sum or norm is reduced, a
    shard gathered): every rank of its mesh must call it, in the same order.
    ``torch.distributed.tensor`` is looked up only once something imported
    it, so plain tensors cost a dictionary look-up.

    Examples:
        >>> full_value(torch.ones(2))
        tensor([1., 1.])
    """
    dtensor_module = sys.modules.get("torch.distributed.tensor")
    dtensor_type = getattr(dtensor_module, "DTensor", None)
    if dtensor_type is not None and isinstance(tensor, dtensor_type):
        return tensor.full_tensor()
    return tensor


def fsdp_unsharded(module: torch.nn.Module) -> dict[int, torch.Tensor]:
    """``id(sharded parameter) -> unsharded parameter`` for every FSDP2 (``fully_shard``) parameter in ``module``.

    FSDP2 registers the sharded ``DTensor`` on the module and swaps in an
    unsharded ``nn.Parameter`` for the forward; the autograd graph's
    ``AccumulateGrad`` holds that one, and FSDP moves its gradient into the
    sharded parameter's ``.grad`` after backward. After a forward that
    resharded (``reshard_after_forward``), ``named_parameters()`` gives the
    sharded ones again, so the graph's leaves are named through this map.
    Empty for a module without FSDP2, and for parameters not unsharded yet.

    Examples:
        >>> fsdp_unsharded(torch.nn.Linear(2, 2))
        {}
    """
    found: dict[int, torch.Tensor] = {}
    for submodule in module.modules():
        state_of = getattr(submodule, "_get_fsdp_state", None)
        if state_of is None:
            continue
        state = state_of()
        groups = getattr(state, "_fsdp_param_groups", None)
        if groups is None:
            group = getattr(state, "_fsdp_param_group", None)
            groups = [] if group is None else [group]
        for group in groups:
            for fsdp_param in group.fsdp_params:
                unsharded = getattr(fsdp_param, "_unsharded_param", None)
                if unsharded is not None:
                    found[id(fsdp_param.sharded_param)] = unsharded
    return found


def inductor_cache_dir() -> str | None:
    """The folder where inductor writes the code it generates (``TORCHINDUCTOR_CACHE_DIR`` or its default), or None until inductor is imported.

    A frame of a compiled region's runtime (``call`` in a generated module
    there) is torch's code, not the user's.

    Examples:
        >>> import torch._inductor.config
        >>> inductor_cache_dir().startswith("/")
        True
    """
    if "torch._inductor" not in sys.modules:
        return None
    try:
        where: Any = importlib.import_module("torch._inductor.runtime.cache_dir_utils")
    except ImportError:  # pragma: no cover - torch before 2.3
        where = importlib.import_module("torch._inductor.codecache")
    return str(where.cache_dir())


#: The torch from which a compiled region's ``CompiledFunction`` keeps its backward graph (``_lazy_backward_info``).
COMPILED_GRAPH_TORCH = (2, 3)


class CompiledBackwardGraph(NamedTuple):
    """The FX graph of a compiled region's backward, as AOTAutograd made it, and whether torch kept each op's metadata."""

    module: torch.fx.GraphModule
    #: False when the region came from AOTAutograd's cache, or its first backward saved it there:
    #: torch then empties every FX node's ``meta`` (no ``seq_nr``, no ``stack_trace``).
    metadata_kept: bool


def compiled_backward_graph(node: Node) -> CompiledBackwardGraph | None:
    """The backward FX graph behind a ``CompiledFunctionBackward`` node, or None for any other node.

    AOTAutograd keeps it on the region's ``CompiledFunction`` (``node._forward_cls``) as
    ``_lazy_backward_info``: an ``AutogradLazyBackwardCompileInfo`` whose
    ``bw_module`` is the partitioned backward graph that the backend compiles
    (lazily, at the first backward), or, when AOTAutograd's cache gave the
    region, a ``CachedAutogradLazyBackwardCompileInfo`` whose ``bw_module_fn()``
    rebuilds it without metadata. Measured with torch 2.13: saving a region to
    that cache (at its first backward, inductor only) empties the ``meta`` of
    the kept graph too; `keep_compiled_metadata` turns the cache off.

    Before torch 2.3 (`COMPILED_GRAPH_TORCH`) the graph is kept in a closure only: None.

    Examples:
        >>> x = torch.ones(2, requires_grad=True)
        >>> compiled_backward_graph((x * 2).grad_fn) is None
        True
    """
    info = getattr(getattr(node, "_forward_cls", None), "_lazy_backward_info", None)
    if info is None:
        return None
    module = getattr(info, "bw_module", None)
    if module is None:
        rebuild = getattr(info, "bw_module_fn", None)
        if rebuild is None:
            return None
        module = rebuild()
    if not isinstance(module, torch.fx.GraphModule):
        return None
    kept = any("seq_nr" in fx_node.meta or "stack_trace" in fx_node.meta for fx_node in module.graph.nodes)
    return CompiledBackwardGraph(module, kept)


def keep_compiled_metadata() -> contextlib.AbstractContextManager[Any]:
    """A context in which ``torch.compile`` keeps each backward op's source line: AOTAutograd's cache off.

    ``torch._functorch.config.enable_autograd_cache`` (torch 2.5 and later;
    before, there is no such cache and this does nothing). Compiling inside
    it costs the cache's savings: each region is traced and partitioned anew.

    Examples:
        >>> with keep_compiled_metadata():
        ...     pass
    """
    config: Any = importlib.import_module("torch._functorch.config")
    if not hasattr(config, "enable_autograd_cache"):
        return contextlib.nullcontext()
    return config.patch(enable_autograd_cache=False)


#: One frame of an FX node's ``stack_trace``, as torch writes it (``traceback.format_list``'s form).
_STACK_FRAME = re.compile(r'^\s*File "(?P<path>[^"]*)", line (?P<line>\d+), in (?P<function>\S+)\n(?P<code>[^\n]*)', re.MULTILINE)


class FxFrame(NamedTuple):
    path: str
    line: int
    function: str
    code: str


def fx_stack_frames(stack_trace: str) -> list[FxFrame]:
    """The frames of an FX node's ``meta["stack_trace"]``, outermost first (the user's line is the last).

    Examples:
        >>> fx_stack_frames('  File "/m.py", line 9, in forward\\n    h = self.lin(x)\\n')
        [FxFrame(path='/m.py', line=9, function='forward', code='h = self.lin(x)')]
    """
    return [FxFrame(match["path"], int(match["line"]), match["function"], match["code"].strip()) for match in _STACK_FRAME.finditer(stack_trace)]


class FxOpMeta(NamedTuple):
    """What torch recorded on one op of a compiled region's backward graph; None or empty where it recorded nothing."""

    #: The sequence number of the forward op it differentiates.
    seq_nr: int | None
    #: That forward op: a function's or method's name (``"tanh"``), or a module's class name (``"Linear"``).
    forward_op: str | None
    #: The frames of the forward op's stack, outermost first.
    frames: list[FxFrame]


def fx_op_meta(fx_node: torch.fx.Node) -> FxOpMeta:
    """``meta["seq_nr"]``, the last entry of ``meta["fwd_source_fn_stack"]`` and ``meta["stack_trace"]`` of an FX node.

    Examples:
        >>> graph = torch.fx.Graph()
        >>> node = graph.call_function(torch.sin, (graph.placeholder("x"),))
        >>> node.meta.update(seq_nr=4, fwd_source_fn_stack=[("sin_1", torch.sin)], stack_trace='  File "/m.py", line 2, in f\\n    y = x.sin()\\n')
        >>> fx_op_meta(node)
        FxOpMeta(seq_nr=4, forward_op='sin', frames=[FxFrame(path='/m.py', line=2, function='f', code='y = x.sin()')])
    """
    meta = fx_node.meta
    seq_nr = meta.get("seq_nr")
    forward_stack = meta.get("fwd_source_fn_stack")
    forward_op = None
    if forward_stack:
        made_by = forward_stack[-1][1]
        forward_op = made_by if isinstance(made_by, str) else str(getattr(made_by, "__name__", made_by))
    return FxOpMeta(seq_nr if isinstance(seq_nr, int) else None, forward_op, fx_stack_frames(meta.get("stack_trace") or ""))


#: The prefix AOTAutograd gives the backward graph's inputs that are the gradients of the region's outputs;
#: the other inputs are what the forward saved.
GRADIENT_INPUT_PREFIX = "tangents"


def fx_op_name(target: Any) -> str:
    """The name of an FX node's ``target``: ``"aten.mm.default"`` for an aten overload (``torch._ops.OpOverload``), else its ``__name__``.

    Examples:
        >>> fx_op_name(torch.ops.aten.mm.default), fx_op_name(operator.getitem)
        ('aten.mm.default', 'getitem')
    """
    if isinstance(target, (str, torch._ops.OpOverload)):
        return str(target)
    return str(getattr(target, "__name__", target))
