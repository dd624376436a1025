"""The graph model against torch itself: every node's out-edges plus its None slots are its ``next_functions``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import networkx as nx
import pytest
import torch
from cases import CASES, Case, Cube, deep_chain, multi_output
from nx_compat import node_link_data, node_link_graph
from torch import nn
from torch_versions import needs_gradient_edge

import gradexport
from gradexport.tracing._torch import INPUT_METADATA_TORCH, TORCH_VERSION
from gradexport.tracing.graph import trace
from gradexport.tracing.roots import collect_roots


def torch_walk(starts: list[torch.autograd.graph.Node]) -> list[torch.autograd.graph.Node]:
    """Every Node reachable through ``next_functions``, found with torch alone (the reference)."""
    found: dict[torch.autograd.graph.Node, None] = dict.fromkeys(starts)
    stack = list(starts)
    while stack:
        for child, _ in stack.pop().next_functions:
            if child is not None and child not in found:
                found[child] = None
                stack.append(child)
    return list(found)


def assert_faithful(case: Case, **options: object) -> nx.MultiDiGraph:
    result = trace(case.roots, params=case.params, module=case.module, **options)
    graph, ids = result.graph, result.ids
    roots = collect_roots(case.roots)
    nodes = torch_walk([root.node for root in roots])

    assert isinstance(graph, nx.MultiDiGraph)
    assert set(ids) == set(nodes)
    assert len(set(ids.values())) == len(ids)
    for node in nodes:
        node_id = ids[node]
        attributes = graph.nodes[node_id]
        assert attributes["op"] == type(node).__name__
        assert attributes["torch_name"] == node.name()
        assert attributes["num_next"] == len(node.next_functions)
        expected_kind = "leaf" if type(node).__name__ == "AccumulateGrad" else "backward"
        assert attributes["kind"] == expected_kind
        none_slots = attributes.get("none_slots", [])
        out_edges = sorted(graph.out_edges(node_id, keys=True, data=True), key=lambda edge: edge[2])
        rebuilt: list[tuple[object, int]] = []
        edges_by_key = {key: (target, data) for _, target, key, data in out_edges}
        for position in range(len(node.next_functions)):
            if position in none_slots:
                if options.get("show_none"):
                    target, data = edges_by_key[position]
                    assert graph.nodes[target]["kind"] == "none"
                rebuilt.append((None, 0))
            else:
                target, data = edges_by_key[position]
                assert data["next_index"] == position
                rebuilt.append((target, data["input_nr"]))
        expected = [(None if child is None else ids[child], nr) for child, nr in node.next_functions]
        assert rebuilt == expected
        assert len(out_edges) == len(node.next_functions) - (0 if options.get("show_none") else len(none_slots))
        for child, input_nr in node.next_functions:
            if child is not None and options.get("edge_metadata"):
                metadata = child._input_metadata[input_nr]
                for _, target, data in graph.out_edges(node_id, data=True):
                    if target == ids[child] and data["input_nr"] == input_nr:
                        assert data["shape"] == list(metadata.shape)
                        assert data["dtype"] == str(metadata.dtype).removeprefix("torch.")
        if expected_kind == "leaf":
            variable = node.variable
            assert attributes["shape"] == list(variable.shape)
            assert attributes["dtype"] == str(variable.dtype).removeprefix("torch.")
            assert attributes["device"] == str(variable.device)

    root_records = graph.graph["roots"]
    assert [record["name"] for record in root_records] == [root.name for root in roots]
    for record, root in zip(root_records, roots, strict=True):
        if root.tensor is not None and root.tensor.grad_fn is not None:
            root_attributes = graph.nodes[record["node"]]
            assert root_attributes["kind"] == "root"
            assert root_attributes["shape"] == list(root.tensor.shape)
            ((_, target, key, data),) = graph.out_edges(record["node"], keys=True, data=True)
            assert target == ids[root.tensor.grad_fn]
            assert (key, data["input_nr"]) == (0, root.tensor.output_nr)
        else:
            assert record["node"] == ids[root.node]

    none_total = sum(len(graph.nodes[ids[n]].get("none_slots", [])) for n in nodes)
    assert graph.graph["num_none_slots"] == none_total
    assert graph.graph["num_nodes"] == graph.number_of_nodes()
    assert graph.graph["num_edges"] == graph.number_of_edges()
    assert graph.graph["torch_version"] == torch.__version__
    return graph


@pytest.mark.parametrize("name", sorted(CASES))
def test_graph_reproduces_next_functions(name: str) -> None:
    with_metadata = TORCH_VERSION >= INPUT_METADATA_TORCH  # edge_metadata reads Node._input_metadata
    graph = assert_faithful(CASES[name](), edge_metadata=with_metadata)
    assert all(("shape" in data) is with_metadata for _, _, data in graph.edges(data=True))


@pytest.mark.parametrize("name", ["none_slot", "multi_output", "mlp_tied", "lstm", "custom_function"])
def test_none_slots_as_nodes_and_without_edge_metadata(name: str) -> None:
    graph = assert_faithful(CASES[name](), show_none=True, edge_metadata=False)
    none_nodes = [n for n, kind in graph.nodes(data="kind") if kind == "none"]
    assert len(none_nodes) == graph.graph["num_none_slots"]
    assert all(graph.in_degree(n) == 1 and graph.out_degree(n) == 0 for n in none_nodes)


def node_by_op(graph: nx.MultiDiGraph, op: str) -> str:
    (found,) = [n for n, node_op in graph.nodes(data="op") if node_op == op]
    return found


def test_blog_multiply_then_sum_schema() -> None:
    case = CASES["blog_multiply_then_sum"]()
    graph = gradexport.to_networkx(case.roots, params=case.params)
    assert list(graph) == ["n0", "n1", "n2", "n3", "n4"]
    assert [graph.nodes[n]["kind"] for n in graph] == ["root", "backward", "backward", "leaf", "leaf"]
    mul = node_by_op(graph, "MulBackward0")
    edges = sorted((key, data["input_nr"], graph.nodes[v]["names"]) for _, v, key, data in graph.out_edges(mul, keys=True, data=True))
    assert edges == [(0, 0, ["x"]), (1, 0, ["y"])]
    assert graph.nodes["n3"]["shape"] == [4, 4]


def test_unbind_gives_two_parallel_edges_with_input_indices_0_and_1() -> None:
    graph = gradexport.to_networkx(CASES["blog_unbind_then_add"]().roots)
    add, unbind = node_by_op(graph, "AddBackward0"), node_by_op(graph, "UnbindBackward0")
    assert graph.number_of_edges(add, unbind) == 2
    assert sorted((key, data["input_nr"]) for key, data in graph[add][unbind].items()) == [(0, 0), (1, 1)]


def test_a_plus_a_gives_two_edges_into_one_leaf() -> None:
    case = CASES["add_to_itself"]()
    graph = gradexport.to_networkx(case.roots, params=case.params)
    add, leaf = node_by_op(graph, "AddBackward0"), node_by_op(graph, "AccumulateGrad")
    assert sorted((key, data["input_nr"]) for key, data in graph[add][leaf].items()) == [(0, 0), (1, 0)]
    assert graph.nodes[leaf]["names"] == ["a"]


def test_two_roots_from_different_outputs_of_one_node() -> None:
    a = torch.randn(4, requires_grad=True)
    first, second = (a * 2).split(2)
    graph = gradexport.to_networkx({"first": first, "second": second})
    split = node_by_op(graph, "SplitBackward0")
    root_edges = sorted((graph.nodes[u]["root"], data["input_nr"]) for u, _, data in graph.in_edges(split, data=True))
    assert root_edges == [("first", first.output_nr), ("second", second.output_nr)] == [("first", 0), ("second", 1)]


def test_leaf_root_is_its_accumulate_grad_node_alone() -> None:
    leaf = torch.randn(2, 3, requires_grad=True)
    graph = gradexport.to_networkx(leaf, params={"w": leaf})
    assert list(graph.nodes(data="kind")) == [("n0", "leaf")]
    assert graph.nodes["n0"]["names"] == ["w"] and graph.nodes["n0"]["shape"] == [2, 3]
    assert graph.graph["roots"] == [{"name": "output", "node": "n0", "input_nr": 0}]


@needs_gradient_edge
def test_node_and_gradient_edge_roots() -> None:
    x = torch.randn(3, requires_grad=True)
    hidden = x.exp()
    loss = hidden.sum()
    edge = torch.autograd.graph.get_gradient_edge(hidden)
    graph = gradexport.to_networkx([loss.grad_fn, edge])
    assert [record["name"] for record in graph.graph["roots"]] == ["0", "1"]
    assert graph.graph["roots"][0] == {"name": "0", "node": "n0", "input_nr": None}
    assert graph.nodes[graph.graph["roots"][1]["node"]]["op"] == "ExpBackward0"
    assert all(kind != "root" for _, kind in graph.nodes(data="kind"))


def test_nested_root_names_follow_the_collection() -> None:
    x = torch.randn(2, requires_grad=True)
    roots = {"loss": x.sum(), "pair": (x * 2, [x * 3])}
    names = [record["name"] for record in gradexport.to_networkx(roots).graph["roots"]]
    assert names == ["loss", "pair.0", "pair.1.0"]


def test_tied_weights_get_all_names_and_module_names_leaves() -> None:
    case = CASES["mlp_tied"]()
    graph = gradexport.to_networkx(case.roots, module=case.module)
    names = sorted(tuple(names) for _, names in graph.nodes(data="names") if names is not None)
    assert names == [("embed.weight",), ("hidden.bias",), ("hidden.weight",), ("out.weight", "unembed.weight")]


def test_params_accepts_pairs_and_merges_with_module() -> None:
    model = nn.Linear(2, 1)
    extra = torch.randn(1, requires_grad=True)
    graph = gradexport.to_networkx(model(torch.randn(3, 2)).sum() + extra.sum(), module=model, params=[("shift", extra), ("w", model.weight)])
    names = {tuple(names) for _, names in graph.nodes(data="names") if names is not None}
    assert names == {("weight", "w"), ("bias",), ("shift",)}


def test_lattice_with_exponentially_many_paths_visits_each_node_once() -> None:
    x = torch.randn(2, requires_grad=True)
    y = x
    for _ in range(40):  # 2**40 root-to-leaf paths
        y = torch.sin(y) + torch.cos(y)
    graph = gradexport.to_networkx(y)
    assert graph.number_of_nodes() == 3 * 40 + 2
    assert graph.number_of_edges() == 4 * 40 + 1
    assert sum(1 for _ in nx.topological_sort(graph)) == graph.number_of_nodes()


def test_special_nodes_are_flagged() -> None:
    specials: dict[str, str] = {}
    for name in ("copy_slices", "custom_function", "checkpoint_reentrant", "compiled"):
        graph = gradexport.to_networkx(CASES[name]().roots)
        specials.update({op: special for _, op, special in _specials(graph)})
    model = nn.Linear(2, 2)
    model.register_full_backward_hook(lambda *_: None)
    hooked = gradexport.to_networkx(model(torch.randn(1, 2, requires_grad=True)).sum())
    specials.update({op: special for _, op, special in _specials(hooked)})
    assert specials == {
        "CopySlices": "copy_slices",
        "CubeBackward": "custom_function",
        "CheckpointFunctionBackward": "checkpoint",
        "CompiledFunctionBackward": "compiled",
        "BackwardHookFunctionBackward": "backward_hook",
    }
    assert set(specials.values()) <= set(gradexport.constants.SPECIAL_KINDS)


def _specials(graph: nx.MultiDiGraph) -> list[tuple[str, str, str]]:
    return [(n, data["op"], data["special"]) for n, data in graph.nodes(data=True) if "special" in data]


def test_error_node_from_once_differentiable_is_flagged() -> None:
    class OnceOnly(torch.autograd.Function):
        @staticmethod
        def forward(ctx, value):  # type: ignore[no-untyped-def]
            return value * 2

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            return grad * 2

    x = torch.randn(3, requires_grad=True)
    seed = torch.ones(3, requires_grad=True)
    (grad,) = torch.autograd.grad(OnceOnly.apply(x), x, grad_outputs=seed, create_graph=True)
    graph = gradexport.to_networkx(grad)
    errors = [data["op"] for _, data in graph.nodes(data=True) if data.get("special") == "error"]
    assert errors and errors[0] in ("Error", "DelayedError")
    with pytest.raises(RuntimeError):
        grad.sum().backward()  # torch agrees the node is an error


def test_saved_tensors_summaries_and_their_guarded_states() -> None:
    x = torch.randn(3, 2, requires_grad=True)
    product = x * x.detach().clone().requires_grad_()
    graph = gradexport.to_networkx(product.sum(), show_saved=True)
    mul = graph.nodes[node_by_op(graph, "MulBackward0")]
    assert mul["saved"]["self"] == {"shape": [3, 2], "dtype": "float32", "device": "cpu"}
    sum_node = graph.nodes[node_by_op(graph, "SumBackward0")]
    assert sum_node["saved"]["self_sym_sizes"] == [3, 2]

    softmax = torch.softmax(x, dim=-1)
    graph = gradexport.to_networkx(softmax, show_saved=True)
    assert graph.nodes[node_by_op(graph, "SoftmaxBackward0")]["saved"]["dim"] == -1

    loss = (x.exp() * 2).sum()
    loss.backward()
    freed = gradexport.to_networkx(loss, show_saved=True)
    assert freed.nodes[node_by_op(freed, "ExpBackward0")]["saved"]["result"] == {"unavailable": "freed"}

    base = torch.randn(3, requires_grad=True) * 1
    stale_source = base.sin()
    base.add_(1)
    stale = gradexport.to_networkx(stale_source, show_saved=True)
    assert stale.nodes[node_by_op(stale, "SinBackward0")]["saved"]["self"] == {"unavailable": "stale"}


def test_saved_of_custom_function_lists_ctx_tensors() -> None:
    a = torch.randn(3, requires_grad=True)
    graph = gradexport.to_networkx(Cube.apply(a, torch.ones(3)), show_saved=True)
    cube = graph.nodes[node_by_op(graph, "CubeBackward")]
    assert cube["saved"]["saved_tensors"] == [{"shape": [3], "dtype": "float32", "device": "cpu"}]


def test_saved_of_non_reentrant_checkpoint_does_not_recompute() -> None:
    calls = []
    layer = nn.Linear(3, 3)

    def region(value: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return layer(value).sin()

    out = torch.utils.checkpoint.checkpoint(region, torch.randn(2, 3), use_reentrant=False)
    graph = gradexport.to_networkx(out.sum(), show_saved=True)
    assert len(calls) == 1
    sin = graph.nodes[node_by_op(graph, "SinBackward0")]
    assert sin["saved"]["self"] == {"unavailable": "hooked"}


def test_graph_holds_no_torch_objects_and_round_trips_through_json() -> None:
    case = multi_output()
    graph = gradexport.to_networkx(case.roots, params=case.params, show_none=True, show_saved=True)
    data = node_link_data(graph)
    text = json.dumps(data, sort_keys=True)
    again = node_link_graph(json.loads(text))
    assert isinstance(again, nx.MultiDiGraph)
    assert nx.utils.graphs_equal(graph, again)
    assert list(graph.edges(keys=True, data=True)) == list(again.edges(keys=True, data=True))


def test_ids_are_identical_across_processes() -> None:
    program = textwrap.dedent(
        """
        import json, sys, torch, gradexport
        sys.path.insert(0, TESTS)
        from nx_compat import node_link_data
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        out = model(torch.randn(3, 4))
        graph = gradexport.to_networkx({"loss": out.pow(2).sum(), "out": out}, module=model, show_none=True, show_saved=True)
        data = node_link_data(graph)
        data["graph"].pop("torch_version")
        print(json.dumps(data, sort_keys=True))
        """
    ).replace("TESTS", repr(str(Path(__file__).resolve().parent)))
    runs = [subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout for _ in range(2)]
    assert runs[0] == runs[1]
    assert '"root": "loss"' in runs[0] and '"0.weight"' in runs[0]


@pytest.mark.parametrize(
    ("roots", "message"),
    [
        (torch.randn(3), "'output' is a tensor that does not require grad"),
        (torch.randn(3, requires_grad=True).detach(), "does not require grad"),
        (torch.arange(3), "dtype int64"),
        ([], "empty list"),
        ({}, "empty dict"),
        (3.0, "'output' is a float, not a tensor"),
        ("loss", "is a str, not a tensor"),
        (None, "is a NoneType"),
    ],
)
def test_bad_roots_raise_clear_errors(roots: object, message: str) -> None:
    with pytest.raises(gradexport.errors.RootError, match=message.replace("(", r"\(")) as raised:
        gradexport.to_networkx(roots)
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, ValueError)


def test_bad_root_inside_a_collection_is_named_by_its_path() -> None:
    x = torch.randn(2, requires_grad=True)
    with torch.no_grad():
        frozen = x * 2
    with pytest.raises(gradexport.errors.RootError, match=r"root 'outputs\.1'"):
        gradexport.to_networkx({"outputs": [x.sum(), frozen], "argmax": x.argmax()})
    with pytest.raises(gradexport.errors.RootError, match=r"'argmax' is a tensor that does not require grad"):
        gradexport.to_networkx({"argmax": x.argmax()})


def test_bad_params_and_module_raise() -> None:
    x = torch.randn(2, requires_grad=True)
    with pytest.raises(TypeError, match=r"params\['x'\] is a list"):
        gradexport.to_networkx(x * 2, params={"x": [1]})
    with pytest.raises(TypeError, match="module must be a torch.nn.Module"):
        gradexport.to_networkx(x * 2, module={"x": x})  # type: ignore[arg-type]


def build_and_free_chain(length: int) -> tuple[int, int]:
    graph = gradexport.to_networkx(deep_chain(length))
    return graph.number_of_nodes(), graph.number_of_edges()


@pytest.mark.slow
def test_million_node_chain_without_recursion_error_on_a_large_stack() -> None:
    assert gradexport.streams.run_with_large_stack(build_and_free_chain, 1_000_000) == (1_000_002, 1_000_001)


def test_freeing_a_deep_walked_chain_on_the_main_thread_is_the_torch_hazard_we_guard_against() -> None:
    # Documents why run_with_large_stack exists: on some torch releases, the same work on a thread with
    # the main thread's usual 8 MiB stack dies with SIGSEGV (in a child process) when the chain is freed.
    # Whether it does is torch's: a walk of next_functions without gradexport says so for this torch.
    program = textwrap.dedent(
        """
        import sys, threading, torch, gradexport
        def work():
            x = torch.zeros(1, requires_grad=True)
            y = x
            for _ in range(200_000):
                y = y * 1.5
            if sys.argv[1] == "plain torch":
                node = y.grad_fn
                while node is not None and node.next_functions:
                    node = node.next_functions[0][0]
            else:
                gradexport.to_networkx(y)
        if sys.argv[1] == "guarded":
            gradexport.streams.run_with_large_stack(work)
        else:
            threading.stack_size(8 * 2**20)
            thread = threading.Thread(target=work)
            thread.start()
            thread.join()
        print("survived")
        """
    )
    guarded = subprocess.run([sys.executable, "-c", program, "guarded"], capture_output=True, text=True)
    assert guarded.returncode == 0 and "survived" in guarded.stdout
    plain = subprocess.run([sys.executable, "-c", program, "plain torch"], capture_output=True, text=True)
    unguarded = subprocess.run([sys.executable, "-c", program, "unguarded"], capture_output=True, text=True)
    torch_crashes = plain.returncode != 0
    assert (unguarded.returncode != 0) == torch_crashes, (plain.returncode, unguarded.returncode, unguarded.stderr[-500:])
    assert ("survived" in unguarded.stdout) is not torch_crashes
