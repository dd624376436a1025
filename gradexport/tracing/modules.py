"""Which ``nn.Module`` created each backward node.

Autograd keeps no record of modules, so attribution must be captured while the
forward pass runs. `capture_modules` installs global forward hooks; when a
module's forward returns, every backward node created during that call (its
``_sequence_nr()`` is at least the counter's value when the call began) and
reachable from the call's outputs is tagged with the module in the node's
writable ``metadata`` dict. Inner modules return first, so the innermost module
wins; modules called several times, nested modules and functional calls inside
a forward are all covered, and so are the module's own forward pre-hooks and
forward hooks (an op a forward hook makes belongs to the module it hooks). `gradexport.to_networkx` then turns the tagged
module into its qualified name (``encoder.layers.3.self_attn``) when given the
model as ``module=``, as the node attribute ``module``.

Where attribution is impossible, nodes carry no ``module``: nodes created
outside every module (a loss computed after the model), nodes created inside a
module but not on a path to its outputs (a tensor stashed on ``self``), and
forward passes run before the capture began or after it ended. A forward run
on another thread *while* a capture is active is attributed like one on the
capturing thread: the hooks are global and each thread keeps its own call
stack (torch's sequence numbers are per thread too), so two threads running
forwards at once each tag their own nodes. A ``torch.compile``
region is one opaque node (``CompiledFunctionBackward``) and gets the module
that called it: the compiled module (``torch.compile(model)`` gives
``model``'s own path, ``""``). The hooks stay out of what Dynamo traces, so a
model compiles into the same graphs with and without the capture. torch
warns on every call of a compiled module that global hooks fire "an extra
time" for its wrapper; that extra call is how the region gets its module, so
the capture silences that one warning while its block runs, unless global
module hooks of someone else's were registered when it began (the warning is
then theirs to see). The filter is set with ``warnings.catch_warnings``, so
warning filters changed inside the block are put back when it ends.

Examples:
    >>> import torch, gradexport
    >>> model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    >>> with gradexport.capture_modules():
    ...     out = model(torch.randn(2, 3))
    >>> graph = gradexport.to_networkx(out.sum(), module=model)
    >>> sorted({(data["op"], data["module"]) for _, data in graph.nodes(data=True) if "module" in data})[:3]
    [('AccumulateGrad', '0'), ('AccumulateGrad', '2'), ('AddmmBackward0', '0')]
"""

from __future__ import annotations

import contextlib
import threading
import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.autograd.graph import Node
from torch.utils.hooks import RemovableHandle

from ._torch import (
    COMPILED_GLOBAL_HOOKS_WARNING,
    compiled_original,
    forward_hook_count,
    has_global_module_hooks,
    is_compiling,
    next_sequence_nr,
    node_metadata,
    sequence_nr,
    tensor_leaves,
)

__all__ = ["CALLS", "METADATA_KEY", "ModuleCall", "capture_modules", "module_classes", "module_of", "named_module_of", "qualified_names"]

#: Key in ``Node.metadata`` under which the creating module is kept.
METADATA_KEY = "gradexport.module"

_ACCUMULATE_GRAD = "AccumulateGrad"


class _CallStack(threading.local):
    def __init__(self) -> None:
        self.starts: list[int] = []
        self.grad_enabled: list[bool] = []
        #: Per open call: the handle of the hook that ends a call whose module has forward hooks of its own, else None.
        self.closers: list[RemovableHandle | None] = []
        #: ``id(module) -> (start, grad_enabled)`` of a call whose forward returned, waiting for its own hooks to run.
        self.pending: dict[int, tuple[int, bool]] = {}


class ModuleCall(NamedTuple):
    """What `capture_modules` keeps of a module's last forward call, for `gradexport.tools.unreached`."""

    #: Whether gradients were enabled when the call began (False: under ``torch.no_grad()``).
    grad_enabled: bool
    #: The ``grad_fn`` of every output tensor that has one.
    outputs: tuple[Node, ...]


#: The last forward call of every module called inside the latest outermost
#: `capture_modules` block (the outputs' nodes are held until the next block).
CALLS: weakref.WeakKeyDictionary[nn.Module, ModuleCall] = weakref.WeakKeyDictionary()
_depth = [0]


@contextmanager
def capture_modules() -> Iterator[None]:
    """Tag the backward nodes created by every module's forward call inside the block.

    Nesting is allowed; the hooks are removed when the outermost block exits,
    also on error. Tags live on the nodes, so they last as long as the graph.
    What a module's own forward pre-hooks and forward hooks compute belongs to
    that module. A compiled module (``torch.compile(model)``) raises no torch
    warning about global hooks inside the block: see `gradexport.tracing.modules`.

    Examples:
        >>> import torch, gradexport
        >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Tanh())
        >>> with capture_modules():
        ...     loss = model(torch.ones(1, 2)).sum()
        >>> graph = gradexport.to_networkx(loss, module=model)
        >>> sorted({data["module"] for _, data in graph.nodes(data=True) if "module" in data})
        ['0', '1']
    """
    calls = _CallStack()

    # While Dynamo traces a forward (torch.compile), is_compiling() is True and
    # the hooks do nothing: Dynamo cannot trace the private sequence-number
    # call or grad_fn, and would split the user's graph there. The compiled
    # module's wrapper still calls them eagerly, around the whole region, so
    # its CompiledFunctionBackward is tagged with the module that called it.
    #
    # Global forward hooks run before the module's own, so what a module's own
    # forward hook makes comes after `after`. For a module that has such hooks,
    # `before` also appends `close` to them, to run last; `after` removes it at
    # once (torch has listed the hooks to run already, so it still runs when
    # the forward returned, and never on a later call) and leaves the tagging
    # to it, with the output the module's hooks made.
    def before(module: nn.Module, args: Any) -> None:
        if not is_compiling():
            calls.starts.append(next_sequence_nr())
            calls.grad_enabled.append(torch.is_grad_enabled())
            calls.closers.append(module.register_forward_hook(close) if forward_hook_count(module) else None)

    def after(module: nn.Module, args: Any, output: Any) -> None:
        if calls.starts and not is_compiling():
            start, grad_enabled, closer = calls.starts.pop(), calls.grad_enabled.pop(), calls.closers.pop()
            if closer is None:
                CALLS[module] = ModuleCall(grad_enabled, _tag(output, module, start))
            else:
                closer.remove()
                calls.pending[id(module)] = (start, grad_enabled)

    def close(module: nn.Module, args: Any, output: Any) -> None:
        start, grad_enabled = calls.pending.pop(id(module))
        CALLS[module] = ModuleCall(grad_enabled, _tag(output, module, start))

    if not _depth[0]:
        CALLS.clear()
    _depth[0] += 1
    # torch.compile(module)'s wrapper warns on every call that global hooks fire for it too:
    # with only ours registered, that call is how its region gets its module, as intended.
    silence = contextlib.ExitStack()
    if not has_global_module_hooks():
        silence.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", COMPILED_GLOBAL_HOOKS_WARNING, UserWarning)
    handles: list[RemovableHandle] = [
        nn.modules.module.register_module_forward_pre_hook(before),
        nn.modules.module.register_module_forward_hook(after, always_call=True),
    ]
    try:
        yield
    finally:
        _depth[0] -= 1
        for handle in handles:
            handle.remove()
        silence.close()


def _tag(output: Any, module: nn.Module, start: int) -> tuple[Node, ...]:
    """Tag the nodes the call made; return its outputs' nodes."""
    outputs = tuple(leaf.grad_fn for leaf in tensor_leaves(output) if leaf.grad_fn is not None)
    stack: list[Node] = list(outputs)
    seen: set[Node] = set(stack)
    while stack:
        node = stack.pop()
        if type(node).__name__ == _ACCUMULATE_GRAD or sequence_nr(node) < start:
            continue  # a leaf, or created before this call began
        node_metadata(node).setdefault(METADATA_KEY, module)
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                stack.append(child)
    return outputs


def module_of(node: Node) -> nn.Module | None:
    """The module captured for ``node``, or ``None``."""
    return node_metadata(node).get(METADATA_KEY)


def named_module_of(node: Node, names: dict[int, str]) -> str | None:
    """The qualified name (from `qualified_names`) of the module captured for ``node``, or ``None``.

    A region of ``torch.compile(model)`` is tagged with the compiled wrapper,
    which is not among ``model``'s modules: it is named as the module it wraps.
    """
    tagged = node_metadata(node).get(METADATA_KEY)
    if tagged is None:
        return None
    name = names.get(id(tagged))
    if name is None:
        wrapped = compiled_original(tagged)
        name = names.get(id(wrapped)) if wrapped is not None else None
    return name


def qualified_names(model: nn.Module) -> dict[int, str]:
    """``id(submodule) -> qualified name`` for every submodule of ``model`` (first name of a shared one).

    The top-level model itself is ``""``.
    """
    names: dict[int, str] = {}
    for name, submodule in model.named_modules(remove_duplicate=False):
        names.setdefault(id(submodule), name)
    return names


def module_classes(model: nn.Module) -> dict[str, str]:
    """``qualified name -> class name`` for ``model`` (``""``) and every submodule, in ``named_modules`` order.

    Examples:
        >>> module_classes(torch.nn.Sequential(torch.nn.Linear(2, 2)))
        {'': 'Sequential', '0': 'Linear'}
    """
    return {name: type(submodule).__name__ for name, submodule in model.named_modules(remove_duplicate=False)}
