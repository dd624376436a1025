"""The engine's order as docs/concepts/execution-order.md states it, against the order torch ran.

The rule (torch 2.13, one CPU thread, no reentrant backward): the engine first
counts, for every node reachable from the roots, the edges that lead into it.
A node becomes ready when that many gradients have arrived. Ready nodes wait
in a priority queue that hands out the one with the highest ``sequence_nr``
first: the node whose forward operation was recorded last. ``AccumulateGrad``
has ``sequence_nr`` 2**64 - 1, so a leaf's gradient is stored as soon as it is
complete. `predicted_order` below applies the rule; the tests compare it with
``exec_order`` from `gradexport.record_gradients` and with node pre-hooks.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

import pytest
import torch
from cases import CASES, Case
from replay_cases import REPLAY_CASES, grad_outputs_for
from test_exec_order import engine_order, recorded_order
from torch.autograd.graph import Node

import gradexport
from gradexport.tracing.graph import trace

LEAF = "AccumulateGrad"


def predicted_order(roots: Any) -> list[str]:
    """Graph ids in the order the rule above runs the nodes."""
    traced = trace(roots)
    ids = traced.ids
    starts: list[Node] = [root.node for root in traced.roots]
    dependencies: dict[Node, int] = {}
    seen, stack = set(starts), list(dict.fromkeys(starts))
    while stack:
        node = stack.pop()
        for child, _ in node.next_functions:
            if child is None:
                continue
            dependencies[child] = dependencies.get(child, 0) + 1
            if child not in seen:
                seen.add(child)
                stack.append(child)
    # The engine's GraphRoot has one edge per root (three roots in one node's
    # three slots are three edges); a root that another root's graph also
    # reaches waits for those edges too.
    ready: list[tuple[int, int, Node]] = []
    tie = itertools.count()

    def arrive(node: Node) -> None:
        dependencies[node] = dependencies.get(node, 0) - 1
        if dependencies[node] <= 0:
            heapq.heappush(ready, (-node._sequence_nr(), next(tie), node))

    for node in starts:
        dependencies[node] = dependencies.get(node, 0) + 1
    for node in starts:
        arrive(node)
    order: list[str] = []
    while ready:
        _, _, node = heapq.heappop(ready)
        order.append(ids[node])
        for child, _ in node.next_functions:
            if child is not None:
                arrive(child)
    return order


def comparable(order: list[str], graph: Any) -> list[str]:
    """Ids, with every AccumulateGrad as one token: leaves tie at 2**64 - 1 and have no children,
    so which of several ready leaves the heap hands out first changes nothing else."""
    return [LEAF if graph.nodes[node].get("op") == LEAF else node for node in order]


# Reentrant checkpoint runs a nested backward inside its node, and compiled
# regions have their own engine inside; the rule is about one engine run.
RULE_CASES = {name: build for name, build in {**CASES, **REPLAY_CASES}.items() if name not in {"compiled", "freed_buffers", "checkpoint_reentrant"}}


@pytest.mark.parametrize("name", sorted(RULE_CASES))
def test_the_rule_predicts_the_engines_order(name: str) -> None:
    case: Case = RULE_CASES[name]()
    predicted = predicted_order(case.roots)
    graph = gradexport.record_gradients(case.roots, grad_outputs=grad_outputs_for(case.roots), params=case.params, module=case.module)
    recorded = recorded_order(graph)
    assert sorted(predicted) == sorted(recorded)
    assert comparable(predicted, graph) == comparable(recorded, graph)


def branching() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The debugging guide's graph: two branches joined by an add, w used in both."""
    x = torch.tensor([0.5, 1.0], requires_grad=True)
    w = torch.tensor([2.0, 3.0], requires_grad=True)
    return (x.exp() * w).sum() + w.sin().sum(), {"x": x, "w": w}


def ops_in_order(graph: Any) -> list[str]:
    return [graph.nodes[node]["op"] + "".join(f" ({name})" for name in graph.nodes[node].get("names", [])) for node in recorded_order(graph)]


def test_the_later_branch_runs_first() -> None:
    """SinBackward0 runs before MulBackward0 because w.sin() was recorded after x.exp() * w."""
    loss, params = branching()
    graph = gradexport.record_gradients(loss, params=params)
    assert ops_in_order(graph) == [
        "AddBackward0",
        "SumBackward0",  # of w.sin(), recorded after the other sum
        "SinBackward0",
        "SumBackward0",
        "MulBackward0",
        "AccumulateGrad (w)",  # both its edges have arrived: it runs before ExpBackward0 waiting in the queue
        "ExpBackward0",
        "AccumulateGrad (x)",
    ]


def test_writing_the_branches_the_other_way_round_swaps_them() -> None:
    """The order follows the forward's recording order, not the position in the expression."""
    x = torch.tensor([0.5, 1.0], requires_grad=True)
    w = torch.tensor([2.0, 3.0], requires_grad=True)
    sines = w.sin().sum()  # recorded first now
    loss = (x.exp() * w).sum() + sines
    graph = gradexport.record_gradients(loss, params={"x": x, "w": w})
    order = ops_in_order(graph)
    assert order.index("MulBackward0") < order.index("SinBackward0")
    assert comparable(predicted_order(loss), graph) == comparable(recorded_order(graph), graph)


def test_a_node_waits_for_every_incoming_edge() -> None:
    """A node used by a short and a long branch runs only after the long one delivered."""
    x = torch.randn(3, requires_grad=True)
    shared = x.exp()
    long = shared.sin().cos().tanh()
    loss = (shared + long).sum()
    predicted = predicted_order(loss)
    graph = gradexport.record_gradients(loss, params={"x": x})
    order = ops_in_order(graph)
    # ExpBackward0 was recorded first, so it has the lowest number of all: it
    # would run last anyway; TanhBackward0 has the highest and runs right after AddBackward0.
    assert order[:2] == ["SumBackward0", "AddBackward0"] and order[2] == "TanhBackward0"
    assert order.index("SinBackward0") < order.index("ExpBackward0")
    assert predicted == recorded_order(graph)


def test_the_rule_matches_pre_hooks_on_a_fresh_graph() -> None:
    """Against torch directly, without gradexport's recording: pre-hooks on every node."""
    loss, params = branching()
    case = Case(loss, params)
    assert comparable(predicted_order(loss), gradexport.to_networkx(loss, params=params)) == comparable(
        engine_order(case, [None]), gradexport.to_networkx(loss, params=params)
    )


def test_sequence_numbers_follow_recording_and_leaves_have_the_largest() -> None:
    x = torch.randn(3, requires_grad=True)
    first = x.exp()
    second = x.sin()
    leaf = first.grad_fn.next_functions[0][0]
    assert first.grad_fn._sequence_nr() < second.grad_fn._sequence_nr() < leaf._sequence_nr() == 2**64 - 1
