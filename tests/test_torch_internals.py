"""Every private torch API gradexport relies on (all wrapped in gradexport.tracing._torch), checked against torch itself.

When one of these fails, torch changed the API that the assertion message
names: fix the wrapper in gradexport/tracing/_torch.py, not its callers.
"""

from __future__ import annotations

import contextlib
import io
import tokenize
from collections import namedtuple
from pathlib import Path
from typing import Any

import pytest
import torch

import gradexport
from gradexport.core.errors import TorchVersionError
from gradexport.tracing import _torch
from gradexport.tracing._torch import TORCH_VERSION, GradientEdge

#: Replay and the engine's capture of a GradientEdge need Node._input_metadata and GradientEdge (torch 2.5).
needs_input_metadata = pytest.mark.skipif(TORCH_VERSION < _torch.INPUT_METADATA_TORCH, reason="Node._input_metadata arrived in torch 2.5")


def changed(api: str, what: str) -> str:
    return f"torch changed {api}: {what} (gradexport/tracing/_torch.py wraps it)"


def test_sequence_nr_is_creation_order_and_largest_for_accumulate_grad() -> None:
    x = torch.ones(2, requires_grad=True)
    first = x * 2
    second = first.sin()
    accumulate = first.grad_fn.next_functions[0][0]
    assert isinstance(_torch.sequence_nr(first.grad_fn), int), changed("Node._sequence_nr()", "not an int")
    assert _torch.sequence_nr(first.grad_fn) < _torch.sequence_nr(second.grad_fn), changed("Node._sequence_nr()", "a later node has a smaller number")
    # replay's engine order and the graph's sequence_nr=-1 for leaves rely on this value.
    assert _torch.sequence_nr(accumulate) == _torch.ACCUMULATE_GRAD_SEQUENCE_NR, changed(
        "AccumulateGrad._sequence_nr()", f"reads {_torch.sequence_nr(accumulate)}, not 2**64 - 1"
    )
    assert _torch.signed(_torch.sequence_nr(accumulate)) == -1


class _Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, value: torch.Tensor) -> torch.Tensor:
        return value * 2

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2


def test_sequence_nr_getter_of_every_kind_of_node_type() -> None:
    x = torch.ones(2, requires_grad=True)
    # The outputs stay alive: a custom Function's node without them crashes _sequence_nr() on some torch.
    outputs = [x * 2, _Twice.apply(x)]
    nodes = [output.grad_fn for output in outputs] + [outputs[0].grad_fn.next_functions[0][0]]
    for node in nodes:
        getter = _torch.sequence_nr_getter(type(node))
        assert getter(node) == _torch.sequence_nr(node), changed(
            f"{type(node).__name__}._sequence_nr", "the unbound method of the type no longer reads the node's number"
        )


def test_next_sequence_nr_is_the_next_nodes_number() -> None:
    x = torch.ones(2, requires_grad=True)
    before = _torch.next_sequence_nr()
    node = (x * 2).grad_fn
    assert _torch.sequence_nr(node) == before, changed("torch._C._autograd._get_sequence_nr()", "it no longer gives the number of the next node created")
    assert _torch.next_sequence_nr() == before + 1, changed("torch._C._autograd._get_sequence_nr()", "does not advance by one per node")


def test_an_orphaned_function_node_is_refused_as_a_root_where_torch_keeps_nothing_of_it() -> None:
    x = torch.ones(2, requires_grad=True)
    node = _Twice.apply(x).grad_fn  # its only output is gone at once
    try:
        node.next_functions
    except RuntimeError:
        kept = False  # this torch emptied the node: _sequence_nr() would crash the interpreter
    else:
        kept = True
    assert _torch.is_orphaned_function_node(node) is not kept
    if kept:
        graph = gradexport.to_networkx(node)
        assert sorted(graph.nodes[n]["kind"] for n in graph) == ["backward", "leaf"]  # the node and x's AccumulateGrad
    else:
        with pytest.raises(gradexport.errors.RootError, match="output tensors were all freed"):
            gradexport.to_networkx(node)


def test_gradient_edge_is_torchs_for_outputs_and_leaves() -> None:
    x = torch.ones(3, requires_grad=True)
    parts = x.unbind()
    assert _torch.gradient_edge(parts[2]) == (parts[2].grad_fn, 2)
    node, slot = _torch.gradient_edge(x)
    assert type(node).__name__ == "AccumulateGrad" and _torch.leaf_variable(node) is x and slot == 0
    if TORCH_VERSION >= (2, 2):
        edge = torch.autograd.graph.get_gradient_edge(x)
        assert (edge.node, edge.output_nr) == (node, slot), changed("torch.autograd.graph.get_gradient_edge", "")


def test_is_compiling_is_false_outside_dynamo_and_true_inside() -> None:
    seen: list[bool] = []

    def body(x: torch.Tensor) -> torch.Tensor:
        seen.append(_torch.is_compiling())
        return x.sin()

    assert not _torch.is_compiling()
    torch.compile(body, backend="eager")(torch.ones(2))
    assert seen == [True], changed("torch.compiler.is_compiling / torch._dynamo.is_compiling", f"read {seen} while Dynamo traced")


@pytest.mark.skipif(TORCH_VERSION >= _torch.INPUT_METADATA_TORCH, reason="this torch has Node._input_metadata")
def test_features_that_read_input_slots_name_the_torch_they_need() -> None:
    x = torch.ones(2, requires_grad=True)
    for call, feature in (
        (lambda: gradexport.replay((x * 2).sum()), "replay"),
        (lambda: gradexport.to_networkx((x * 2).sum(), edge_metadata=True), "to_networkx(edge_metadata=True)"),
        (lambda: gradexport.to_html((x * 2).sum(), steps=True), "replay"),
        (lambda: _torch.num_inputs((x * 2).grad_fn), "Node._input_metadata"),
    ):
        with pytest.raises(TorchVersionError, match="needs torch 2.5 or newer") as raised:
            call()
        assert feature in str(raised.value) and raised.value.needed == (2, 5)


@needs_input_metadata
def test_input_metadata_describes_each_input_slot() -> None:
    x = torch.ones(4, 3, dtype=torch.float64, requires_grad=True)
    first, second = x.split([1, 3])
    slots = _torch.input_metadata(first.grad_fn)
    assert _torch.num_inputs(first.grad_fn) == 2, changed("Node._input_metadata", "not one entry per forward output")
    for slot, output in zip(slots, (first, second), strict=True):
        assert tuple(slot.shape) == tuple(output.shape), changed("Node._input_metadata[k].shape", f"{slot.shape}")
        assert slot.dtype == torch.float64 and slot.device == x.device, changed("Node._input_metadata[k].dtype/device", "")
        assert slot.is_nested_tensor is False, changed("Node._input_metadata[k].is_nested_tensor", "")


def test_make_grad_makes_ones_for_scalars_and_raises_torchs_error_otherwise() -> None:
    x = torch.ones(2, requires_grad=True)
    assert torch.equal(_torch.make_grad((x * 2).sum(), None), torch.tensor(1.0)), changed(
        "torch.autograd._make_grads", "None for a scalar root is no longer ones"
    )
    vector = x * 2
    given = torch.full((2,), 3.0)
    if TORCH_VERSION >= (2, 2):
        edge = GradientEdge(vector.grad_fn, 0)
        assert torch.equal(_torch.make_grad(edge, given), given), changed("torch.autograd._make_grads", "GradientEdge targets")
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        _torch.make_grad(vector, None)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        _torch.make_grad(vector, torch.ones(3))


def test_tensor_hook_count_counts_register_hook() -> None:
    for tensor in (torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True) * 2):
        assert _torch.tensor_hook_count(tensor) == 0, changed("Tensor._backward_hooks", "not None/empty without hooks")
        first = tensor.register_hook(lambda grad: None)
        tensor.register_hook(lambda grad: None)
        assert _torch.tensor_hook_count(tensor) == 2, changed("Tensor._backward_hooks", "no longer holds register_hook's hooks")
        first.remove()
        assert _torch.tensor_hook_count(tensor) == 1, changed("Tensor._backward_hooks", "removal not reflected")


def test_node_hook_counts_sees_pre_and_post_hooks_and_leaves_none_behind() -> None:
    node = (torch.ones(2, requires_grad=True) * 2).grad_fn
    assert _torch.node_hook_counts(node) == (0, 0)
    pre = node.register_prehook(lambda grads: None)
    assert _torch.node_hook_counts(node) == (1, 0), changed("RemovableHandle.hooks_dict_ref() of Node.register_prehook", "")
    post = node.register_hook(lambda grad_inputs, grad_outputs: None)
    node.register_hook(lambda grad_inputs, grad_outputs: None)
    assert _torch.node_hook_counts(node) == (1, 2), changed("RemovableHandle.hooks_dict_ref() of Node.register_hook", "")
    pre.remove()
    post.remove()
    assert _torch.node_hook_counts(node) == (0, 1), changed("RemovableHandle.remove() of a Node hook", "")


@needs_input_metadata
def test_run_tensor_hooks_runs_exactly_what_backward_runs_before_a_node() -> None:
    x = torch.ones(2, requires_grad=True)
    hidden = x * 2
    seen: list[torch.Tensor] = []
    hidden.register_hook(lambda grad: seen.append(grad.clone()) or grad * 10)
    hidden.retain_grad()
    incoming = torch.full((2,), 3.0)
    (result,) = _torch.run_tensor_hooks(hidden.grad_fn, [incoming])
    assert torch.equal(result, torch.full((2,), 30.0)), changed(
        "the engine's capture of a GradientEdge (torch.autograd.graph._engine_run_backward)",
        "the node's tensor hooks did not run before the capture",
    )
    assert len(seen) == 1 and torch.equal(seen[0], incoming)
    assert torch.equal(hidden.grad, result), changed("the engine's capture", "retain_grad's hook no longer runs with the tensor hooks")
    assert x.grad is None, changed("the engine's capture", "it ran the captured node or further")
    # backward() gives the node the same: 2 * (3 * 10) flows on to x.
    hidden.grad = None
    torch.autograd.backward(hidden, incoming, retain_graph=True)
    assert torch.equal(x.grad, 2 * result)


@needs_input_metadata
@pytest.mark.parametrize("slots", [1, 2])
def test_run_tensor_hooks_gives_the_node_what_backward_gives_it(slots: int) -> None:
    # A node with one input slot takes a shorter path through run_tensor_hooks than one with several.
    x = torch.ones(4, requires_grad=True)
    parts = (x * 2).split(4 // slots)
    node = parts[0].grad_fn
    for index, part in enumerate(parts):
        part.register_hook(lambda grad, index=index: grad * (10 + index))
        part.retain_grad()
    incoming = [torch.full((4 // slots,), 3.0 + index) for index in range(slots)]
    result = _torch.run_tensor_hooks(node, incoming)
    assert all(torch.equal(part.grad, grad) for part, grad in zip(parts, result, strict=True)), changed(
        "the engine's capture", "retain_grad's hook no longer sets .grad to what the node receives"
    )
    for part in parts:
        part.grad = None
    seen: list[tuple[torch.Tensor, ...]] = []
    handle = node.register_prehook(lambda grads: seen.append(tuple(grad.clone() for grad in grads)))
    torch.autograd.backward(parts, incoming, retain_graph=True)
    handle.remove()
    assert len(seen) == 1 and len(result) == slots, changed("the engine's capture", f"{len(result)} gradients for {slots} slots")
    for got, engine in zip(result, seen[0], strict=True):
        assert torch.equal(got, engine), changed("the engine's capture", "it hands over other gradients than backward() gives the node")
    for part, engine in zip(parts, seen[0], strict=True):
        assert torch.equal(part.grad, engine)


@needs_input_metadata
def test_run_tensor_hooks_without_hooks_hands_back_the_same_tensors() -> None:
    x = torch.ones(2, requires_grad=True)
    first, _ = (x * 2).split(1)
    incoming = torch.ones(1)
    result = _torch.run_tensor_hooks(first.grad_fn, [incoming, None])
    assert result[0] is incoming and result[1] is None, changed("the engine's capture", "it copies or fills slots")
    assert _torch.run_tensor_hooks(first.grad_fn, [None, None]) == (None, None)
    single = (x * 2).grad_fn
    whole = torch.ones(2)
    assert _torch.run_tensor_hooks(single, [whole])[0] is whole, changed("the engine's capture", "it copies a single slot")
    assert _torch.run_tensor_hooks(single, [None]) == (None,)


def test_saved_values_read_and_raw() -> None:
    x = torch.randn(3, requires_grad=True)
    node = (x * x).grad_fn
    assert _torch.saved_names(type(node)) == ("other", "self"), changed("Node._saved_<name>", "MulBackward0's names")
    assert torch.equal(_torch.read_saved(node, "self"), x), changed("Node._saved_self", "not the saved tensor")
    raw = _torch.raw_saved(node, "self")
    assert type(raw).__name__ == "SavedTensor", changed("Node._raw_saved_self", f"is a {type(raw).__name__}")
    assert not _torch.saved_is_hook_packed(raw), changed("SavedTensor.unpack_hook", "set without saved-tensor hooks")
    with torch.autograd.graph.saved_tensors_hooks(lambda tensor: tensor, lambda packed: packed):
        hooked = (x * x).grad_fn
    assert _torch.SAVED_HOOKS_VISIBLE == hasattr(raw, "unpack_hook")
    assert _torch.saved_is_hook_packed(_torch.raw_saved(hooked, "self")) is _torch.SAVED_HOOKS_VISIBLE, changed(
        "SavedTensor.unpack_hook", "None for a tensor packed by saved_tensors_hooks"
    )
    negative = x.sum(dim=-1).grad_fn
    dims = _torch.read_saved(negative, "dim")
    assert [_torch.signed(dim) for dim in dims] == [-1], changed("Node._saved_dim", f"dim=-1 reads as {dims}")


def _graph_nodes(*roots: torch.Tensor) -> list[Any]:
    seen: dict[Any, None] = {}
    stack = [root.grad_fn for root in roots]
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen[node] = None
            stack += [child for child, _ in node.next_functions]
    return list(seen)


def test_saved_getters_have_a_raw_getter_exactly_for_tensors() -> None:
    """saved_storages reads only the values with a raw getter: every other saved value must hold no tensor."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    v = torch.randn(6, 6, requires_grad=True)
    conv = torch.nn.functional.conv2d(x, w, padding=1, stride=2)
    norm = torch.nn.functional.batch_norm(conv, torch.zeros(4), torch.ones(4), w[:, 0, 0, 0], None, training=True)
    pooled = torch.nn.functional.max_pool2d(norm.relu(), 2)
    picked = v[torch.tensor([0, 2]), 1:4]  # IndexBackward0 saves a list of optional tensors
    embedded = torch.nn.functional.embedding(torch.tensor([1, 0, 1]), v)
    lstm, _ = torch.nn.LSTM(6, 2)(v.unsqueeze(1))
    roots = [
        pooled.sum(),
        picked.softmax(-1).sum(),
        torch.nn.functional.layer_norm(embedded, (6,)).logsumexp(-1).sum(),
        torch.stack([v, v.tanh()]).where(v > 0, v.sigmoid()).pow(2.5).sum(),
        torch.cat([v, v.exp()]).max(dim=0).values.sum() + torch.linalg.norm(v) + v.clamp(min=-0.5).prod(),
        lstm.sum(),
    ]
    with_raw = 0
    for node in _graph_nodes(*roots):
        for getter in _torch.saved_getters(type(node)):
            try:
                value = getter.read(node)
            except RuntimeError:
                continue
            items = value if isinstance(value, (list, tuple)) else [value]
            if getter.raw is None:
                assert not any(isinstance(item, torch.Tensor) for item in items), changed(
                    f"{type(node).__name__}._saved_{getter.name}", "a saved tensor without _raw_saved_"
                )
            else:
                with_raw += 1
                assert not _torch.saved_is_hook_packed(getter.raw(node)), changed("SavedTensor.unpack_hook", "set without hooks")
    assert with_raw > 20


def test_a_hooked_saved_value_is_known_before_its_unpack_hook_runs() -> None:
    """Either SavedTensor.unpack_hook says so, or the read stops before the hook's first line; a plain value reads as ever."""
    x = torch.randn(3, requires_grad=True)
    unpacked: list[object] = []

    def unpack(packed: torch.Tensor) -> torch.Tensor:
        unpacked.append(packed)
        return packed

    with torch.autograd.graph.saved_tensors_hooks(lambda tensor: tensor, unpack):
        hooked = (x * x).grad_fn
    if _torch.SAVED_HOOKS_VISIBLE:
        assert _torch.saved_is_hook_packed(_torch.raw_saved(hooked, "self"))
    else:
        with pytest.raises(_torch.SavedHookedError) as stopped:
            _torch.read_saved(hooked, "self")
        assert _torch.saved_read_failure(stopped.value) == "hooked"
        (getter,) = [getter for getter in _torch.saved_getters(type(hooked)) if getter.name == "self"]
        with pytest.raises(_torch.SavedHookedError):
            getter.read(hooked)
    assert unpacked == [], "the unpack hook ran"
    assert torch.equal(_torch.read_saved((x * x).grad_fn, "self"), x)


def test_saved_is_hook_packed_for_a_list_of_saved_tensors() -> None:
    v = torch.randn(3, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda tensor: tensor, lambda packed: packed):
        node = v[torch.tensor([0, 2])].grad_fn  # IndexBackward0 saves its indices as a list
    (getter,) = [getter for getter in _torch.saved_getters(type(node)) if getter.name == "indices"]
    assert getter.raw is not None and isinstance(getter.raw(node), (list, tuple)), changed("IndexBackward0._raw_saved_indices", "no longer a list")
    assert _torch.saved_is_hook_packed(getter.raw(node)) is _torch.SAVED_HOOKS_VISIBLE, changed("SavedTensor.unpack_hook", "None in a hooked list")


def test_saved_read_failure_recognises_torchs_real_errors() -> None:
    x = torch.randn(3, requires_grad=True)
    loss = (x * x).sum()
    node = loss.grad_fn.next_functions[0][0]
    loss.backward()
    with pytest.raises(RuntimeError) as after_backward:
        _torch.read_saved(node, "self")
    assert _torch.saved_read_failure(after_backward.value) == "freed", changed("the error text of reading a freed saved tensor", str(after_backward.value))
    hidden = x * 1
    stale = (hidden * hidden).grad_fn
    with torch.no_grad():
        hidden.add_(1)
    with pytest.raises(RuntimeError) as after_in_place:
        _torch.read_saved(stale, "self")
    assert _torch.saved_read_failure(after_in_place.value) == "stale", changed(
        "the error text of reading a saved tensor modified in place", str(after_in_place.value)
    )
    assert _torch.saved_read_failure(RuntimeError("something else")) is None


def test_tensor_leaves_flattens_model_outputs() -> None:
    Output = namedtuple("Output", "logits hidden")
    a, b, c = torch.ones(1), torch.zeros(2), torch.ones(3)
    leaves = _torch.tensor_leaves({"out": Output(a, [b, "text", 3]), "aux": (c,)})
    assert [leaf.shape[0] for leaf in leaves] == [1, 2, 3], changed("torch.utils._pytree.tree_leaves", "order or coverage")


def test_function_codes_names_a_custom_functions_forward() -> None:
    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @staticmethod
        def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
            return grad * 2

    node = Twice.apply(torch.ones(1, requires_grad=True)).grad_fn
    assert _torch.function_codes(type(node)) == {Twice.forward.__code__}, changed("BackwardCFunction._forward_cls", "the Function class")
    assert _torch.function_codes(type((torch.ones(1, requires_grad=True) * 2).grad_fn)) == frozenset()


def test_is_dynamo_code_knows_a_compiled_functions_code() -> None:
    seen: list[object] = []

    def body(x: torch.Tensor) -> torch.Tensor:
        return x.sin()

    def spy(gm: torch.fx.GraphModule, example_inputs: object) -> object:
        return gm.forward

    import sys

    def tracer(frame: object, event: str, arg: object) -> None:
        if event == "call" and getattr(frame, "f_code", None) is not None and frame.f_code.co_name == "body":  # type: ignore[attr-defined]
            seen.append(frame.f_code)  # type: ignore[attr-defined]

    compiled = torch.compile(body, backend=spy)
    sys.setprofile(tracer)
    try:
        compiled(torch.ones(2))
    finally:
        sys.setprofile(None)
    assert any(_torch.is_dynamo_code(code) for code in seen), changed("torch._dynamo.utils.orig_code_map", "its keys")
    assert not _torch.is_dynamo_code(body.__code__)


def test_foreach_norm_sub_and_copy_agree_with_one_tensor_at_a_time() -> None:
    tensors = [torch.tensor([3.0, -4.0]), torch.tensor([[1.0, float("nan")]]), torch.tensor([float("inf"), 1.0])]
    for order in (2.0, float("inf")):
        expected = [torch.linalg.vector_norm(tensor, order) for tensor in tensors]
        got = _torch.foreach_norm(tensors, order)
        assert all(torch.equal(a, b) or (a.isnan() and b.isnan()) for a, b in zip(got, expected)), changed("torch._foreach_norm", f"ord={order}")
    target = [torch.zeros(2)]
    _torch.foreach_copy_(target, tensors[:1])
    assert target[0].tolist() == [3.0, -4.0], changed("torch._foreach_copy_", "result")
    _torch.foreach_sub_(target, [torch.ones(2)])
    assert target[0].tolist() == [2.0, -5.0], changed("torch._foreach_sub_", "result")


#: Names of torch's private API that only gradexport/tracing/_torch.py may use (besides ``_saved_*`` and ``_raw_saved_*``).
PRIVATE_NAMES = {
    "_sequence_nr",
    "_get_sequence_nr",
    "_input_metadata",
    "_make_grads",
    "_backward_hooks",
    "hooks_dict_ref",
    "_pytree",
    "_engine_run_backward",
    "_execution_engine",
    "_C",
    "_register_hook_dict",
    "_forward_cls",
    "orig_code_map",
    "_pytree",
    "_engine_run_backward",
    "_execution_engine",
    "_C",
    "_register_hook_dict",
    "_foreach_norm",
    "_foreach_sub_",
    "_foreach_copy_",
}


def test_no_other_module_touches_torch_internals() -> None:
    package = Path(gradexport.__file__).parent
    error_texts = ("a second time", "inplace operation", "is at version")
    offenders = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "_torch.py":
            continue
        previous = ""
        for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            saved_attribute = previous == "." and token.string.startswith(("_saved_", "_raw_saved_"))
            if token.type == tokenize.NAME and (token.string in PRIVATE_NAMES or saved_attribute):
                offenders.append(f"{path.name}:{token.start[0]} {token.string}")
            elif token.type == tokenize.STRING:  # docstrings may name the APIs; code may not match torch's messages
                if token.string.strip("\"'") in ("_saved_", "_raw_saved_"):
                    offenders.append(f"{path.name}:{token.start[0]} {token.string}")
                offenders += [f"{path.name}:{token.start[0]} {text!r}" for text in error_texts if text in token.string]
            previous = token.string
    assert not offenders, f"private torch API outside gradexport/tracing/_torch.py (wrap it there): {offenders}"


@pytest.mark.skipif(not hasattr(torch._C._autograd, "_get_current_graph_task_keep_graph"), reason="this torch cannot read the graph task's retain_graph")
def test_apply_with_graph_freed_runs_the_node_in_a_graph_task_that_frees_the_graph() -> None:
    seen: list[bool] = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
            return tensor * 2

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            seen.append(torch._C._autograd._get_current_graph_task_keep_graph())
            return grad * 2

    x = torch.ones(2, requires_grad=True)
    node = Probe.apply(x).grad_fn
    assert torch.equal(_torch.apply_with_graph_freed(node, torch.ones(2)), torch.full((2,), 2.0))
    torch.autograd.backward(Probe.apply(x).sum())
    assert seen == [False, False], "_get_current_graph_task_keep_graph no longer reads the engine's retain_graph"
    assert x.grad is not None and torch.equal(x.grad, torch.full((2,), 2.0))  # the probe's graph leaves x alone
    assert not _torch.donates_saved_buffers(node), "CompiledFunction.metadata.bw_donated_idxs read on a plain Function"


def test_post_accumulate_hook_count_reads_the_hooks() -> None:
    x = torch.ones(2, requires_grad=True)
    assert _torch.post_accumulate_hook_count(x) == 0
    seen: list[torch.Tensor] = []
    handle = x.register_post_accumulate_grad_hook(seen.append)
    assert _torch.post_accumulate_hook_count(x) == 1, changed("Tensor._post_accumulate_grad_hooks", "does not count the hook")
    x.sum().backward()
    assert seen == [x]
    handle.remove()
    assert _torch.post_accumulate_hook_count(x) == 0


def test_reading_a_result_with_autograd_off_makes_no_node_so_capture_source_sees_no_gap() -> None:
    """capture_source's NaN/Inf check reads each result as ``result.sum().item()`` with grad mode switched off by ``set_grad_enabled``, between two ops."""
    x = torch.ones(3, requires_grad=True)
    y = x * 2
    before = _torch.next_sequence_nr()
    _torch.set_grad_enabled(False)
    try:
        switched_off = not torch.is_grad_enabled()
        total = y.sum()
    finally:
        _torch.set_grad_enabled(True)
    torch.isfinite(y.detach()).all()
    assert switched_off and torch.is_grad_enabled(), changed("torch._C._set_grad_enabled", "it no longer switches this thread's grad mode")
    assert total.grad_fn is None and total.item() == 6.0, changed("torch._C._set_grad_enabled(False)", "a sum under it has a node or another value")
    assert _torch.next_sequence_nr() == before, changed("the sequence counter", "a read with autograd off or of a detached tensor advanced it")


def test_a_function_modes_own_calls_are_not_sent_back_to_it() -> None:
    """capture_source's check calls torch inside its TorchFunctionMode handler: torch must not route those calls to the mode again."""
    from torch.overrides import TorchFunctionMode

    seen: list[str] = []

    class Reads(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            seen.append(getattr(func, "__name__", str(func)))
            result = func(*args, **(kwargs or {}))
            if isinstance(result, torch.Tensor) and result.is_floating_point():
                result.detach().sum().item()
            return result

    with Reads():
        torch.sqrt(torch.ones(2))
    assert "sum" not in seen and "sqrt" in seen, changed("TorchFunctionMode", f"its handler's own calls reach it: {seen}")


def test_rerun_checkpoint_recomputes_what_the_reentrant_checkpoint_backward_does() -> None:
    from torch.utils.checkpoint import checkpoint

    weight = torch.randn(3, requires_grad=True)
    x = torch.randn(3, requires_grad=True)
    out = checkpoint(lambda t, scale: torch.nn.functional.dropout(t * weight, 0.5) * scale, x, 2.0, use_reentrant=True)
    node = out.grad_fn
    assert _torch.is_reentrant_checkpoint(node), changed("CheckpointFunctionBackward._forward_cls", "is not torch.utils.checkpoint.CheckpointFunction")
    before = torch.get_rng_state()
    outputs, inputs = _torch.rerun_checkpoint(node)
    assert torch.equal(torch.get_rng_state(), before), changed("CheckpointFunction's ctx.fwd_cpu_state", "the rerun moved the caller's random state")
    assert inputs[1] == 2.0 and inputs[0] is not x and torch.equal(inputs[0], x) and inputs[0].requires_grad, changed(
        "CheckpointFunction's ctx.inputs / tensor_indices / saved_tensors", "the region's arguments are not rebuilt"
    )
    assert torch.equal(outputs[0], out), changed("CheckpointFunction's ctx.fwd_cpu_state", "the rerun drew another dropout mask than the forward")
    (gradient,) = torch.autograd.grad(outputs[0].sum(), weight)
    out.sum().backward()
    assert torch.equal(gradient, weight.grad), changed("CheckpointFunction.backward", "its recomputation differs from the rerun")
    with pytest.raises(RuntimeError) as freed:
        _torch.rerun_checkpoint(node)
    assert _torch.saved_read_failure(freed.value) == "freed", changed(
        "CheckpointFunction's ctx.saved_tensors", "reading them after backward raised another error"
    )


def test_forward_hooks_are_listed_once_per_call_so_a_hook_removed_by_an_earlier_one_still_runs() -> None:
    layer = torch.nn.Linear(2, 2)
    ran: list[str] = []
    later = layer.register_forward_hook(lambda module, args, output: ran.append("later"))
    assert _torch.forward_hook_count(layer) == 1, changed("Module._forward_hooks", "does not hold the module's forward hooks")
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, output: later.remove())
    assert _torch.has_global_module_hooks(), changed("torch.nn.modules.module._global_forward_hooks", "a global hook is not there")
    try:
        layer(torch.ones(1, 2))
        layer(torch.ones(1, 2))
    finally:
        handle.remove()
    assert not _torch.has_global_module_hooks()
    # capture_modules removes its closing hook from a global hook that runs before it, and relies on this.
    assert ran == ["later"], changed("Module._call_impl", "the hooks to run are no longer listed before the first runs")


@pytest.mark.skipif(_torch.TORCH_VERSION < (2, 8), reason="torch.compile(module) warns about global hooks from torch 2.8 (pytorch PR 152740)")
def test_compiled_module_warning_text_is_what_the_capture_silences() -> None:
    compiled = torch.compile(torch.nn.Linear(2, 2), backend="eager")
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, output: None)
    try:
        with pytest.warns(UserWarning, match=_torch.COMPILED_GLOBAL_HOOKS_WARNING):
            compiled(torch.ones(1, 2))
    finally:
        handle.remove()


def test_step_hooks_run_after_dynamo_has_compiled_something() -> None:
    """watch ends a step in the optimizer's step hooks; torch before 2.3 drops them once Dynamo has patched the optimizers."""
    torch.compile(lambda value: value.sin(), backend="eager")(torch.ones(2))
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: list[str] = []
    handles = _torch.register_step_hooks(optimizer, lambda *_: seen.append("before"), lambda *_: seen.append("after"))
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    assert seen == ["before", "after"], changed("Optimizer.register_step_pre_hook/post_hook after torch._dynamo", f"ran {seen}")
    for handle in handles:
        handle.remove()
    optimizer.step()
    assert seen == ["before", "after"]


def test_observe_backward_calls_sees_the_loss_before_backward_and_restores_the_method() -> None:
    original = torch.Tensor.backward
    weight = torch.ones(2, requires_grad=True)
    seen: list[tuple[float, bool]] = []
    first = _torch.observe_backward_calls(lambda tensor: seen.append((tensor.item(), weight.grad is None)))
    second = _torch.observe_backward_calls(lambda tensor: seen.append((-tensor.item(), weight.grad is None)))
    (weight * 3).sum().backward()
    first.remove()
    (weight * 2).sum().backward()
    second.remove()
    (weight * 5).sum().backward()
    assert seen == [(6.0, True), (-6.0, True), (-4.0, False)], changed("Tensor.backward looked up on the class at each call", f"saw {seen}")
    assert torch.Tensor.backward is original
    assert weight.grad is not None and weight.grad.tolist() == [10.0, 10.0]


@pytest.mark.slow
@pytest.mark.skipif(TORCH_VERSION < _torch.COMPILED_GRAPH_TORCH, reason="CompiledFunction keeps its backward graph from torch 2.3")
def test_compiled_region_keeps_its_backward_graph_with_source_lines() -> None:
    weight = torch.ones(2, requires_grad=True)

    def body(x: torch.Tensor) -> torch.Tensor:
        return (x * weight).sin().sum()

    with _torch.keep_compiled_metadata():
        loss = torch.compile(body, backend="aot_eager")(torch.ones(2))
    found = _torch.compiled_backward_graph(loss.grad_fn)
    api = "CompiledFunction._lazy_backward_info.bw_module"
    assert found is not None and isinstance(found.module, torch.fx.GraphModule), changed(api, "no FX graph on the region's node")
    assert found.metadata_kept, changed(api, "its nodes' meta has no seq_nr or stack_trace")
    placeholders = [node.name for node in found.module.graph.nodes if node.op == "placeholder"]
    gradients = [name for name in placeholders if name.startswith(_torch.GRADIENT_INPUT_PREFIX)]
    assert len(gradients) == 1, changed(
        "AOTAutograd's backward inputs", f"the loss's gradient is not the one named {_torch.GRADIENT_INPUT_PREFIX}_*: {placeholders}"
    )
    (output,) = [node for node in found.module.graph.nodes if node.op == "output"]
    assert len(output.args[0]) == len(loss.grad_fn.next_functions), changed("AOTAutograd's backward outputs", "not one per next_functions entry")
    line = body.__code__.co_firstlineno + 1
    metas = [_torch.fx_op_meta(node) for node in found.module.graph.nodes if node.op == "call_function"]
    frames = [meta.frames[-1] for meta in metas if meta.frames]
    assert frames and all((frame.path, frame.line, frame.function) == (__file__, line, "body") for frame in frames), changed(
        "FX node meta['stack_trace']", f"{frames}"
    )
    assert all(meta.seq_nr is not None for meta in metas), changed("FX node meta['seq_nr']", "missing on a backward op")
    forward_ops = {meta.forward_op for meta in metas}
    assert "sin" in forward_ops, changed("FX node meta['fwd_source_fn_stack']", f"the forward ops named are {forward_ops}")
    assert all(_torch.fx_op_name(node.target).startswith("aten.") for node in found.module.graph.nodes if node.op == "call_function"), changed(
        "torch._ops.OpOverload", "the backward graph's ops are not aten overloads"
    )
    assert _torch.compiled_backward_graph((weight * 2).grad_fn) is None


@pytest.mark.slow
@pytest.mark.skipif(TORCH_VERSION < (2, 5), reason="AOTAutograd's cache arrived in torch 2.5")
def test_autograd_cache_empties_the_kept_metadata_unless_kept() -> None:
    """Why capture_compiled exists: inductor saves the region to AOTAutograd's cache at its first backward, emptying the graph's meta."""
    kept = []
    for keep in (False, True):
        torch._dynamo.reset()
        weight = torch.full((2,), 1.0 + keep, requires_grad=True)
        with _torch.keep_compiled_metadata() if keep else contextlib.nullcontext():
            loss = torch.compile(lambda x: (x * weight).cos().sum(), backend="inductor")(torch.ones(2))
        loss.backward()
        found = _torch.compiled_backward_graph(loss.grad_fn)
        assert found is not None
        kept.append(found.metadata_kept)
    assert kept == [False, True], changed("torch._functorch.config.enable_autograd_cache", f"metadata kept without and with the patch: {kept}")
    # Compiled again, the region comes from the cache that the first run filled: its graph rebuilt by bw_module_fn, ops and no meta.
    torch._dynamo.reset()
    weight = torch.full((2,), 1.0, requires_grad=True)
    loss = torch.compile(lambda x: (x * weight).cos().sum(), backend="inductor")(torch.ones(2))
    found = _torch.compiled_backward_graph(loss.grad_fn)
    api = "CachedAutogradLazyBackwardCompileInfo.bw_module_fn"
    assert found is not None and not found.metadata_kept, changed(api, "no graph, or one with metadata, from AOTAutograd's cache")
    assert any(node.op == "call_function" for node in found.module.graph.nodes), changed(api, "a graph without ops")


def test_the_saved_values_each_formula_reads_are_kept_by_this_torch() -> None:
    """``_saved_other``, ``_saved_self_sym_sizes``, ``_saved_result``, ``_saved_mat2``, ``_saved_dim``... as
    gradexport.backward.vjp reads them (through `read_saved`): each node type of its table keeps them, and the
    product they give is torch's own gradient for that input."""
    from test_vjp import CASES, leaves

    from gradexport.backward.vjp import step_math

    for op, (shapes, forward) in CASES.items():
        inputs = leaves(shapes, positive=op in ("LogBackward0", "DivBackward0"))
        outputs = forward(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        grads = tuple(torch.randn(out.shape) for out in outputs)
        node = outputs[0].grad_fn
        math = step_math(node, type(node).__name__, grads)
        assert type(node).__name__ == op and math.note == "", changed(f"the saved values of {op}", math.note or f"the node is a {type(node).__name__}")
        expected = torch.autograd.grad(outputs, inputs, grads)
        for product in math.products:
            torch.testing.assert_close(product.value, expected[product.position])


def test_wrap_step_closure_sees_every_evaluation_lbfgs_and_sgd_make() -> None:
    """torch.optim.LBFGS calls the closure it is given once per evaluation (several per step), SGD once; both take it by keyword too."""
    for optimizer_class, many in ((torch.optim.LBFGS, True), (torch.optim.SGD, False)):
        model = torch.nn.Linear(2, 1)
        optimizer = optimizer_class(model.parameters(), lr=0.1)
        calls: list[str] = []
        wrapped: list[str] = []

        @contextlib.contextmanager
        def around(closure: Any) -> Any:
            yield lambda: (wrapped.append("evaluation"), closure())[1]

        def closure() -> torch.Tensor:
            calls.append("evaluation")
            optimizer.zero_grad()
            loss = model(torch.ones(3, 2)).pow(2).sum()
            loss.backward()
            return loss

        handle = _torch.wrap_step_closure(optimizer, around)
        optimizer.step(closure)
        optimizer.step(closure=closure)
        assert wrapped == calls and (len(calls) > 2) == many, changed(f"{optimizer_class.__name__}.step(closure)", f"called it {len(calls)} times in 2 steps")
        handle.remove()
        optimizer.step(closure)
        assert len(wrapped) < len(calls) and "step" not in vars(optimizer)
    # An LR scheduler made afterwards wraps the step through its __func__ (a bound method's): the closure is still seen.
    handle = _torch.wrap_step_closure(optimizer, around)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    before = len(wrapped)
    optimizer.step(closure)
    scheduler.step()
    assert len(wrapped) == before + 1
    handle.remove()
    optimizer.step(closure)
    assert len(wrapped) == before + 1


def test_step_hooks_leave_a_step_that_an_lr_scheduler_made_afterwards_can_wrap() -> None:
    """torch's LR schedulers wrap ``optimizer.step`` through its ``__self__`` and ``__func__``: it must stay a bound method."""
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: list[str] = []
    handles = _torch.register_step_hooks(optimizer, lambda *_: seen.append("before"), lambda *_: seen.append("after"))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    scheduler.step()
    for handle in handles:
        handle.remove()
    assert seen == ["before", "after"]
