"""Claims the site states in prose, checked against torch itself.

Most claims on the site are values printed when the page is built; these are
the sentences around them that stay prose. Each test names the page.
"""

from __future__ import annotations

import collections

import pytest
import torch
import torch.nn.functional as F

import gradexport


def _types(node: torch.autograd.graph.Node) -> list[str | None]:
    return [None if child is None else type(child).__name__ for child, _ in node.next_functions]


def test_edges_a_number_in_multiplication_is_a_none_slot():
    """concepts/edges.md: `x * 0.5` records MulBackward0 with ((AccumulateGrad, 0), (None, 0))."""
    x = torch.randn(3, requires_grad=True)
    node = (x * 0.5).grad_fn
    assert type(node).__name__ == "MulBackward0"
    assert _types(node) == ["AccumulateGrad", None] and node.next_functions[1][1] == 0


@pytest.mark.parametrize("op", ["index", "index_select", "gather", "embedding", "nll_loss"])
def test_edges_integer_indices_get_no_entry(op):
    """concepts/edges.md, multiply-then-sum.md: an integer index tensor has no place in next_functions."""
    a = torch.randn(5, requires_grad=True)
    index = torch.tensor([0, 2])
    result = {
        "index": lambda: a[index],
        "index_select": lambda: a.index_select(0, index),
        "gather": lambda: a.gather(0, index),
        "embedding": lambda: F.embedding(index, a.view(5, 1)),
        "nll_loss": lambda: F.nll_loss(a.view(1, 5), index[:1]),
    }[op]()
    assert len(result.grad_fn.next_functions) == 1
    assert result.grad_fn.next_functions[0][0] is not None


def test_edges_a_constant_tensor_keeps_its_position():
    """concepts/edges.md and the glossary: a tensor input without requires_grad is a (None, 0) entry."""
    x = torch.randn(3, requires_grad=True)
    assert (x * torch.full((3,), 0.5)).grad_fn.next_functions[1] == (None, 0)
    assert (torch.full((3,), 0.5) * x).grad_fn.next_functions[0] == (None, 0)


def test_edges_gradient_edge_starts_with_node_and_output_nr():
    """concepts/edges.md: get_gradient_edge(t) gives t.grad_fn and t.output_nr (plus a third field in 2.13)."""
    w = torch.randn(6, requires_grad=True)
    third = w.chunk(3)[2]
    edge = torch.autograd.graph.get_gradient_edge(third)
    assert edge.node is third.grad_fn and edge.output_nr == third.output_nr == 2
    assert edge[:2] == (third.grad_fn, 2)


def test_edges_root_edge_reads_0_to_output_nr():
    """concepts/edges.md, glossary: the root edge's i is 0 and its k is the root tensor's output_nr."""
    w = torch.randn(6, requires_grad=True)
    loss = (w * 2).sum()
    second = w.chunk(3)[1]
    for root in (loss, second):
        graph = gradexport.to_networkx(root)
        (edge,) = [data for u, _, data in graph.edges(data=True) if graph.nodes[u]["kind"] == "root"]
        assert edge == {"next_index": 0, "input_nr": root.output_nr}
    assert second.output_nr == 1


def test_nodes_use_zeros_for_a_none_slot_and_are_linear():
    """unbind-then-add.md, concepts/edges.md: the node fills a None gradient with zeros; one call per edge adds up."""
    x = torch.randn(2, requires_grad=True)
    first, second = x.unbind()
    unbind = (first + second).grad_fn.next_functions[0][0]
    a, b = torch.tensor(2.0), torch.tensor(-3.0)
    with torch.no_grad():
        together = unbind(a, b)
        assert torch.equal(unbind(a, None), torch.tensor([2.0, 0.0]))
        assert torch.equal(unbind(a, None) + unbind(None, b), together)
    # The engine calls it once, with both slots filled: a node hook sees one call.
    calls = []
    unbind.register_prehook(lambda grads: calls.append([g is not None for g in grads]))
    (first + second).backward()
    assert calls == [[True, True]]


def test_engine_sums_gradients_at_one_slot_before_the_tensor_hook():
    """hooks.md: a tensor hook gets the gradient once every edge into the slot has delivered."""
    x = torch.randn(3, requires_grad=True)
    y = x.exp()
    seen = []
    y.register_hook(lambda grad: seen.append(grad.clone()))
    (y * 2 + y * 3).sum().backward()
    assert len(seen) == 1 and torch.allclose(seen[0], torch.full((3,), 5.0))


def test_hooks_do_not_run_when_a_node_is_called_by_hand():
    """hooks.md: node hooks and pre-hooks belong to the engine's run, not to a direct call."""
    x = torch.randn(3, requires_grad=True)
    loss = x.sin().sum()
    calls = []
    loss.grad_fn.register_prehook(lambda grads: calls.append("pre"))
    loss.grad_fn.register_hook(lambda grad_inputs, grad_outputs: calls.append("post"))
    with torch.no_grad():
        loss.grad_fn(torch.tensor(1.0))
    assert calls == []
    loss.backward()
    assert calls == ["pre", "post"]


def test_hooks_add_no_node_except_module_backward_hooks():
    """hooks.md: tensor and node hooks leave next_functions alone; a full backward hook adds BackwardHookFunctionBackward."""
    x = torch.randn(3, requires_grad=True)
    y = x.sin()
    before = _types(y.grad_fn)
    y.register_hook(lambda grad: grad)
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: None)
    assert _types(y.grad_fn) == before == ["AccumulateGrad"]
    layer = torch.nn.Linear(3, 1)
    layer.register_full_backward_hook(lambda module, grad_input, grad_output: None)
    out = layer(torch.randn(2, 3))
    assert type(out.grad_fn).__name__ == "BackwardHookFunctionBackward"


def test_node_name_can_differ_from_its_type_and_metadata_is_kept():
    """hooks.md, glossary: name() of a leaf's node carries its C++ namespace; metadata is one dict per node."""
    x = torch.randn(3, requires_grad=True)
    loss = (x * 2).sum()
    accumulate = loss.grad_fn.next_functions[0][0].next_functions[0][0]
    assert type(accumulate).__name__ == "AccumulateGrad" and accumulate.name() != "AccumulateGrad"
    assert loss.grad_fn.name() == type(loss.grad_fn).__name__
    loss.grad_fn.metadata["note"] = 1
    assert loss.grad_fn.metadata == {"note": 1}


def test_leaves_only_the_first_matrix_product_has_a_none_slot():
    """leaves-and-roots.md: in Linear-Tanh-Linear on an input without grad, only the first addmm has (None, 0)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    loss = model(torch.randn(2, 4)).sum()
    second = loss.grad_fn.next_functions[0][0]
    (tanh,) = [child for child, _ in second.next_functions if type(child).__name__ == "TanhBackward0"]
    first = tanh.next_functions[0][0]
    assert type(first).__name__ == type(second).__name__ == "AddmmBackward0"
    assert None in _types(first) and None not in _types(second)


def test_transformer_block_residual_additions():
    """gallery/transformer-block.md: the later residual add gets one gradient and sends two; the earlier gets two, has a None slot."""
    torch.manual_seed(0)
    width = 8
    norm1, norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
    inner, outer = torch.nn.Linear(width, width), torch.nn.Linear(width, width)
    x = torch.randn(1, 3, width)
    h = x + inner(norm1(x))
    out = (h + outer(norm2(h))).pow(2).mean()
    later = out.grad_fn.next_functions[0][0].next_functions[0][0]
    earlier = later.next_functions[0][0]
    assert type(later).__name__ == type(earlier).__name__ == "AddBackward0"
    assert None not in _types(later) and _types(earlier)[0] is None  # the block's input needs no gradient
    # Count the edges into each add by walking next_functions from the root.
    incoming: collections.Counter[int] = collections.Counter()
    seen, stack = set(), [out.grad_fn]
    while stack:
        node = stack.pop()
        for child, _ in node.next_functions:
            if child is not None:
                incoming[id(child)] += 1
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
    assert incoming[id(later)] == 1 and incoming[id(earlier)] == 2


def test_large_model_counts():
    """gallery/large-model.md: a six-layer encoder of width 16 has a few hundred nodes (241 backward, 72 leaves)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0)
    model = torch.nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False)
    loss = model(torch.randn(5, 2, 16)).pow(2).mean()
    graph = gradexport.to_networkx(loss)
    kinds = collections.Counter(kind for _, kind in graph.nodes(data="kind"))
    assert kinds["leaf"] == len(list(model.parameters())) == 72
    assert 100 < kinds["backward"] < 1000


def test_blog_second_example_names():
    """glossary: the blog's `back_sum` in its second example is an AddBackward0, its `back_split` an UnbindBackward0."""
    torch.manual_seed(6)
    x = torch.randn(2, requires_grad=True)
    x1, x2 = x.unbind()
    back_sum = (x1 + x2).grad_fn
    back_split = back_sum.next_functions[0][0]
    assert type(back_sum).__name__ == "AddBackward0" and type(back_split).__name__ == "UnbindBackward0"
    assert type(back_split.next_functions[0][0]).__name__ == "AccumulateGrad"


def test_mermaid_and_dot_draw_module_boxes_differently():
    """guides/formats.md: node styles are shared, module boxes are each tool's own (DOT dashed cluster, Mermaid subgraph)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Tanh())
    with gradexport.capture_modules():
        loss = model(torch.randn(1, 2)).sum()
    graph = gradexport.to_networkx(loss, module=model)
    dot, mermaid = gradexport.to_dot(graph), gradexport.to_mermaid(graph)
    assert 'subgraph "cluster_' in dot and "dashed" in dot[dot.index('subgraph "cluster_') :]
    assert "\n  subgraph " in mermaid
    assert "style g" not in mermaid and "dashed" not in mermaid[mermaid.index("subgraph") :]


# ---- issue 22: the claims a learner tried, each against torch ----


class _Scale(torch.autograd.Function):
    """A custom Function with a Python-number argument."""

    @staticmethod
    def forward(ctx, tensor, factor):  # type: ignore[override]
        ctx.factor = factor
        return tensor * factor

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return grad * ctx.factor, None


NUMBER_WITHOUT_ENTRY = {
    "x ** 2": lambda x: x**2,
    "x.pow(2)": lambda x: x.pow(2),
    "2 ** x": lambda x: 2**x,
    "2 - x": lambda x: 2 - x,
    "x.clamp(min=0)": lambda x: x.clamp(min=0),
    "x.masked_fill(m, 1.)": lambda x: x.masked_fill(torch.tensor([True, False, True]), 1.0),
    "custom Function": lambda x: _Scale.apply(x, 3.0),
}


@pytest.mark.parametrize("text", sorted(NUMBER_WITHOUT_ENTRY))
def test_edges_most_python_numbers_get_no_entry(text):
    """concepts/edges.md, multiply-then-sum.md, glossary: a number argument usually has no entry at all."""
    x = torch.randn(3, requires_grad=True)
    node = NUMBER_WITHOUT_ENTRY[text](x).grad_fn
    assert _types(node) == ["AccumulateGrad"]


@pytest.mark.parametrize("text", ["x * 0.5", "x + 1", "x - 1", "x / 2"])
def test_edges_arithmetic_with_a_number_keeps_a_none_slot(text):
    """concepts/edges.md: the binary arithmetic ops wrap the number as the other operand, a (None, 0) entry."""
    x = torch.randn(3, requires_grad=True)
    node = eval(text, {"x": x}).grad_fn
    assert _types(node) == ["AccumulateGrad", None] and node.next_functions[1] == (None, 0)


def test_edges_an_absent_optional_tensor_is_a_none_slot():
    """concepts/edges.md, glossary: layer_norm without weight and bias, a conv without bias give (None, 0) slots."""
    x = torch.randn(2, 3, requires_grad=True)
    assert F.layer_norm(x, (3,)).grad_fn.next_functions[1:] == ((None, 0), (None, 0))
    conv = torch.nn.Conv1d(1, 1, 2, bias=False)
    node = conv(torch.randn(1, 1, 4, requires_grad=True)).grad_fn
    assert type(node).__name__ == "ConvolutionBackward0"
    assert _types(node)[:2] == ["AccumulateGrad", "AccumulateGrad"] and node.next_functions[2] == (None, 0)


def test_glossary_next_index_counts_differentiable_inputs_only():
    """glossary: in torch.where(cond, x, c) x is argument 1 but entry 0; F.embedding's weight is argument 1, entry 0."""
    x = torch.randn(3, requires_grad=True)
    where = torch.where(torch.tensor([True, False, True]), x, torch.zeros(3)).grad_fn
    assert len(where.next_functions) == 2 and where.next_functions[0][0].variable is x
    assert where.next_functions[1] == (None, 0)
    table = torch.randn(4, 3, requires_grad=True)
    embedding = F.embedding(torch.tensor([0, 2]), table).grad_fn
    assert len(embedding.next_functions) == 1 and embedding.next_functions[0][0].variable is table


@pytest.mark.parametrize("op", ["max(dim)", "sort", "topk", "unbind"])
def test_glossary_one_slot_per_differentiable_output(op):
    """glossary, edges.md: max(dim), sort, topk return values and indices but their node has one slot."""
    x = torch.randn(2, 3, requires_grad=True)
    outputs = {"max(dim)": lambda: x.max(dim=1), "sort": lambda: x.sort(), "topk": lambda: x.topk(2), "unbind": lambda: x.unbind()}[op]()
    differentiable = [t for t in outputs if t.requires_grad]
    node = differentiable[0].grad_fn
    assert len(node._input_metadata) == len(differentiable) == (2 if op == "unbind" else 1)
    assert len(outputs) == 2  # two tensors came out either way
    with torch.no_grad(), pytest.raises(TypeError):
        node(*[torch.ones(2)] * (len(differentiable) + 1))


def test_debugging_anomaly_mode_names_the_output_position():
    """guides/debugging.md: anomaly mode's error names the node and the output position, nothing else."""
    import warnings

    x = torch.tensor([0.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.detect_anomaly():
            x.sqrt().sum().backward()  # an Inf alone: no error
            assert torch.isinf(x.grad).all()
            with pytest.raises(RuntimeError) as raised:
                (x.sqrt() * 0).sum().backward()  # 0 * Inf is NaN, inside SqrtBackward0
    assert str(raised.value).startswith("Function 'SqrtBackward0' returned nan values in its 0th output.")


def test_hooks_full_backward_pre_hook_adds_nodes_too():
    """concepts/hooks.md: register_full_backward_pre_hook wraps the outputs in BackwardHookFunctionBackward as well."""
    layer = torch.nn.Linear(3, 1)
    layer.register_full_backward_pre_hook(lambda module, grad_output: None)
    assert type(layer(torch.randn(2, 3)).grad_fn).__name__ == "BackwardHookFunctionBackward"
    plain = torch.nn.Linear(3, 1)
    plain.register_forward_hook(lambda module, args, output: None)
    assert type(plain(torch.randn(2, 3)).grad_fn).__name__ == "AddmmBackward0"


def test_leaves_an_unrecorded_result_is_a_leaf():
    """concepts/leaves-and-roots.md: an op on tensors that need no gradient records nothing; its result is a leaf."""
    made = torch.randn(3) * 2
    assert made.is_leaf and made.grad_fn is None
    with torch.no_grad():
        under = torch.randn(3, requires_grad=True) * 2
    assert under.is_leaf and under.grad_fn is None
    recorded = torch.randn(3, requires_grad=True) * 2
    assert not recorded.is_leaf


def test_in_place_version_counter_is_shared_by_view_and_base():
    """concepts/in-place.md: a view and its base share one _version counter."""
    base = torch.randn(4)
    view = base[1:3]
    view.add_(1)
    assert base._version == view._version == 1
    base.mul_(2)
    assert base._version == view._version == 2
    other = base.clone()
    assert other._version == 0


def test_edges_lstm_h_n_and_c_n_come_from_stack_backward():
    """concepts/edges.md: on CPU nn.LSTM's h_n and c_n are outputs of StackBackward0, not slots of the LSTM's node."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(3, 4, num_layers=2)
    out, (h_n, c_n) = lstm(torch.randn(2, 1, 3))
    assert type(h_n.grad_fn).__name__ == type(c_n.grad_fn).__name__ == "StackBackward0"
    assert h_n.grad_fn is not c_n.grad_fn and h_n.output_nr == c_n.output_nr == 0
    assert type(out.grad_fn).__name__ != "StackBackward0"
    one = torch.nn.LSTM(3, 4)
    out, (h_n, c_n) = one(torch.randn(2, 1, 3))
    layer = out.grad_fn  # one node per layer, with slots for the output, h and c
    assert len(layer._input_metadata) == 3 and out.output_nr == 0
    assert h_n.grad_fn.next_functions == ((layer, 1),) and c_n.grad_fn.next_functions == ((layer, 2),)


def test_edges_some_float_tensors_have_no_entry():
    """concepts/edges.md: nll_loss's class weight and batch_norm's running statistics get no entry; its absent weight and bias do."""
    logits = torch.randn(2, 3, requires_grad=True)
    assert len(F.nll_loss(logits, torch.tensor([0, 1]), weight=torch.ones(3)).grad_fn.next_functions) == 1
    rows = torch.randn(2, 3, requires_grad=True)
    node = F.batch_norm(rows, torch.zeros(3), torch.ones(3), training=True).grad_fn
    assert node.next_functions[1:] == ((None, 0), (None, 0))
    weight = torch.ones(3, requires_grad=True)
    with_weight = F.batch_norm(rows, torch.zeros(3), torch.ones(3), weight=weight, training=True).grad_fn
    assert with_weight.next_functions[1][0].variable is weight and len(with_weight.next_functions) == 3


def test_hooks_replay_refuses_a_node_hook_it_can_see():
    """concepts/hooks.md: gradexport.replay raises ReplayError naming the node instead of skipping a hook."""
    x = torch.randn(3, requires_grad=True)
    loss = x.sin().sum()
    loss.grad_fn.register_prehook(lambda grads: None)
    with pytest.raises(gradexport.errors.ReplayError, match="SumBackward0"):
        gradexport.replay(loss, params={"x": x})


def test_saved_tensors_freed_by_backward_sizes_survive_retain_graph_keeps():
    """concepts/saved-tensors.md, multiply-then-sum.md: backward() frees buffers (reading raises, a second pass fails); sizes stay."""
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    loss = (x * w).sin().sum()
    sin = loss.grad_fn.next_functions[0][0]
    mul = sin.next_functions[0][0]
    assert type(sin).__name__ == "SinBackward0" and torch.equal(mul._saved_self, x) and torch.equal(mul._saved_other, w)
    loss.backward()
    with pytest.raises(RuntimeError, match="freed"):
        mul._saved_self  # noqa: B018
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()
    assert tuple(loss.grad_fn._saved_self_sym_sizes) == (3,)
    kept = (x * w).sin().sum()
    kept.backward(retain_graph=True)
    kept.backward()
    assert torch.allclose(x.grad, 3 * torch.cos(x * w).detach() * w.detach())


def test_blog_accumulate_grad_adds_and_no_grad_keeps_gradients_plain():
    """multiply-then-sum.md: AccumulateGrad adds to .grad; outside no_grad a hand call records a graph; backward() records none."""
    x = torch.randn(3, requires_grad=True)
    y = torch.randn(3, requires_grad=True)
    loss = (x * y).sum()
    back_mul = loss.grad_fn.next_functions[0][0]
    back_x = back_mul.next_functions[0][0]
    assert back_x.variable is x
    dx, _ = back_mul(loss.grad_fn(torch.tensor(1.0)))
    assert dx.grad_fn is not None
    back_x(dx)
    assert x.grad.grad_fn is not None
    x.grad = None
    with torch.no_grad():
        back_x(y.detach())
        back_x(y.detach())
    assert torch.equal(x.grad, 2 * y.detach()) and x.grad.grad_fn is None
    x.grad = None
    (x * y).sum().backward()
    assert x.grad.grad_fn is None
    x.grad = None
    (x * y).sum().backward(create_graph=True)
    assert x.grad.grad_fn is not None


def test_edges_the_engine_passes_none_to_a_slot_that_received_nothing():
    """concepts/edges.md: chunk's unused middle output: the engine calls SplitBackward0 with None in slot 1."""
    w = torch.randn(6, requires_grad=True)
    first, _, third = w.chunk(3)
    loss = (third * 2 + first).sum()
    split = loss.grad_fn.next_functions[0][0].next_functions[1][0]
    seen = []
    split.register_prehook(lambda grads: seen.append([g is not None for g in grads]))
    loss.backward()
    assert type(split).__name__ == "SplitBackward0" and seen == [[True, False, True]]
    assert torch.equal(w.grad, torch.tensor([1.0, 1.0, 0.0, 0.0, 2.0, 2.0]))


def test_edges_the_multidigraph_key_is_next_index():
    """concepts/edges.md: the edge key in gradexport's MultiDiGraph is i, so a + a keeps two edges."""
    a = torch.randn(3, requires_grad=True)
    graph = gradexport.to_networkx(a + a, params={"a": a})
    add_edges = [(key, data) for u, _, key, data in graph.edges(keys=True, data=True) if graph.nodes[u].get("op") == "AddBackward0"]
    assert sorted(add_edges, key=lambda item: item[0]) == [(0, {"next_index": 0, "input_nr": 0}), (1, {"next_index": 1, "input_nr": 0})]


def test_opaque_reentrant_checkpoint_hides_parameters_non_reentrant_keeps_them():
    """concepts/opaque-nodes.md: use_reentrant=True records one CheckpointFunctionBackward without the block's parameters."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
    x = torch.randn(2, 4, requires_grad=True)
    names = {"x": x, **dict(block.named_parameters())}

    def leaves(out: torch.Tensor) -> set[str]:
        graph = gradexport.to_networkx(out, params=names)
        return {name for _, data in graph.nodes(data=True) if data["kind"] == "leaf" for name in data["names"]}

    opaque = checkpoint(block, x, use_reentrant=True).sum()
    assert type(opaque.grad_fn.next_functions[0][0]).__name__ == "CheckpointFunctionBackward"
    assert leaves(opaque) == {"x"}
    assert leaves(checkpoint(block, x, use_reentrant=False).sum()) == set(names)
