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


def test_edges_a_python_number_is_a_none_slot_not_a_missing_entry():
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
