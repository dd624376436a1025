"""The benchmark generators build the graphs they claim, counted by walking torch's own next_functions."""

from __future__ import annotations

from collections import deque

import networkx as nx
import pytest
import torch

from benchmarks.generators import GENERATORS
from benchmarks.tasks import walk, walk_multidigraph


def torch_node_count(root: torch.Tensor) -> int:
    """The root tensor plus every Node reachable through next_functions, without gradexport."""
    return 1 + len(_all_nodes(root))


@pytest.mark.parametrize("name", sorted(GENERATORS))
@pytest.mark.parametrize("knob", [1, 2, 7])
def test_generator_node_count(name: str, knob: int) -> None:
    generator = GENERATORS[name]
    root = generator.build(knob)
    assert torch_node_count(root) == generator.nodes(knob)
    assert walk(root) == generator.nodes(knob) - 1
    assert walk_multidigraph(root).number_of_nodes() == generator.nodes(knob)


def test_chain_of_n_steps_has_n_plus_2_nodes() -> None:
    assert torch_node_count(GENERATORS["chain"].build(50)) == 52


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_knob_for_aims_at_the_size(name: str) -> None:
    generator = GENERATORS[name]
    for target in (1_000, 10_000, 1_000_000):
        assert abs(generator.nodes(generator.knob_for(target)) - target) <= generator.per_unit / 2


def test_floor_graph_keeps_parallel_edges() -> None:
    x = torch.ones(2, requires_grad=True)
    loss = (x + x).sum()
    add = loss.grad_fn.next_functions[0][0]
    graph = walk_multidigraph(loss)
    (add_id,) = [node for node, op in graph.nodes(data="op") if op == type(add).__name__]
    edges = [(key, data["input_nr"]) for _, _, key, data in graph.out_edges(add_id, keys=True, data=True)]
    assert edges == [(index, input_nr) for index, (_, input_nr) in enumerate(add.next_functions)]


@pytest.mark.parametrize("name", ["chain", "mlp", "transformer"])
def test_the_hand_replay_floor_computes_what_backward_does(name: str) -> None:
    from benchmarks.floors import hand_replay

    generator = GENERATORS[name]
    root = generator.build(3)
    leaves = [node.variable for node in _all_nodes(root) if type(node).__name__ == "AccumulateGrad"]
    root.backward(retain_graph=True)
    expected = [leaf.grad.clone() for leaf in leaves]
    for leaf in leaves:
        leaf.grad = None
    assert hand_replay(root) == walk(root)
    for leaf, grad in zip(leaves, expected, strict=True):
        torch.testing.assert_close(leaf.grad, grad)


def _all_nodes(root: torch.Tensor) -> list[object]:
    seen = {root.grad_fn}
    queue = deque(seen)
    while queue:
        for child, _ in queue.popleft().next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                queue.append(child)
    return list(seen)


def test_the_other_floors_do_the_same_job_as_gradexport() -> None:
    import gradexport
    from benchmarks.floors import _same_attributes, hooked_backward, json_floor, saved_walk

    root = GENERATORS["mlp"].build(4)
    # Every node's pre-hook and every post-hook ran once: the engine ran each node.
    assert hooked_backward(root) == 2 * walk(root)
    assert saved_walk(root) == gradexport.tools.saved_memory(root).total
    graph = gradexport.to_networkx(root)
    rebuilt = json_floor(gradexport.to_json(graph))
    assert nx.utils.graphs_equal(rebuilt, gradexport.from_json(gradexport.to_json(graph)))
    walked = _same_attributes(root)
    assert list(walked.nodes(data=True)) == list(graph.nodes(data=True))
    assert list(walked.edges(keys=True, data=True)) == list(graph.edges(keys=True, data=True))


def test_capture_source_benchmark_times_every_variant_of_every_model() -> None:
    from benchmarks import capture_source

    results = capture_source.measure(repeats=1, calls=1)
    assert set(results) == set(capture_source.MODELS)
    assert all(set(best) == set(capture_source.VARIANTS) and all(0 < value < 60 for value in best.values()) for best in results.values())
