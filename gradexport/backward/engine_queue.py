"""The order in which torch's autograd engine calls the nodes of a CPU backward pass.

`engine_order` simulates the engine's ``GraphTask`` on the CPU thread, step by
step, and returns the node order that `gradexport.replay` follows. The rule,
read from torch's ``engine.cpp``/``engine.h`` and checked here against the order
the engine really takes (node pre-hooks, ``exec_order`` of
`gradexport.record_gradients`) on the test cases and on hundreds of random
branching graphs (``tests/test_engine_queue.py``):

1. **Dependencies.** Before the pass, every node counts the edges that point at
   it (``next_functions`` entries of the nodes reachable from the roots; two
   edges from one node count twice).
2. **Start.** One root edge: its node is pushed to the ready queue. Several: a
   ``GraphRoot`` node runs first and hands out the roots' gradients in root
   order, like any other node (step 3).
3. **A node runs**, then walks its ``next_functions`` in position order; each
   edge decrements its target's count, and a target whose count reaches zero
   has all its inputs and is **pushed** to the ready queue at that moment.
   A ``None`` output is delivered too (as an undefined gradient): it still counts.
4. **The ready queue** is a ``std::priority_queue`` ordered by
   ``CompareNodeTaskTime``: the node with the *higher* ``sequence_nr`` (created
   later in the forward pass) runs first. ``AccumulateGrad`` nodes have
   ``sequence_nr`` 2**64 - 1, so a leaf whose gradient is complete is written
   before any other ready node. (Reentrant depth comes first in the
   comparator; within one pass all tasks share a depth.)
5. **Ties** (several ready ``AccumulateGrad``, or equal sequence numbers) are
   not broken by any rule of torch's: the winner is whatever libstdc++'s
   ``push_heap``/``pop_heap`` leave on top. `ReadyQueue` is a line-by-line
   port of those two functions (``__push_heap``, ``__adjust_heap``), so even
   ties come out in torch's order. A plain "sort by key" gets them wrong
   (measured: two leaves ready together do not leave in push order once a
   third ready node sits in the heap).

The viewer's step panel says, per step, which of these rules picked the node
(``gradexport/viewer/src/steps.js``, ``reason``).

Only the CPU queue is modelled: nodes on an accelerator run on that device's
own thread, whose interleaving with the CPU thread is not deterministic.

Examples:
    >>> import torch
    >>> from gradexport.backward.engine_queue import ReadyQueue
    >>> queue = ReadyQueue()
    >>> for name, priority in [("a", 1), ("b", 3), ("c", 2)]:
    ...     queue.push(priority, name)
    >>> [queue.pop() for _ in range(3)]
    ['b', 'c', 'a']
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

__all__ = ["ReadyQueue", "engine_order"]

T = TypeVar("T")
_Item = tuple[int, T]


class ReadyQueue(Generic[T]):
    """``std::priority_queue`` with libstdc++'s heap algorithms: ``pop`` returns the item of highest priority.

    Priorities are compared with ``<`` only (``CompareNodeTaskTime`` returns
    ``t1.sequence_nr < t2.sequence_nr``); equal priorities leave in the order
    libstdc++'s heap leaves them, which is what the engine does.
    """

    def __init__(self) -> None:
        self._heap: list[_Item[T]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def items(self) -> list[T]:
        """The queued items, in heap order (not pop order)."""
        return [item for _, item in self._heap]

    def push(self, priority: int, item: T) -> None:
        """``c.push_back(x); std::push_heap(c.begin(), c.end(), comp)``."""
        self._heap.append((priority, item))
        value = self._heap[-1]
        self._push_heap(len(self._heap) - 1, 0, value)

    def pop(self) -> T:
        """``std::pop_heap(c.begin(), c.end(), comp); c.pop_back()``; returns what was ``top()``."""
        heap = self._heap
        top = heap[0]
        if len(heap) > 1:
            # __pop_heap(first, last - 1, last - 1): the last element becomes the value sifted from the root.
            value = heap[-1]
            heap[-1] = heap[0]
            self._adjust_heap(0, len(heap) - 1, value)
        heap.pop()
        return top[1]

    # libstdc++ bits/stl_heap.h; comp(a, b) is a[0] < b[0].
    def _push_heap(self, hole: int, top: int, value: _Item[T]) -> None:
        heap = self._heap
        parent = (hole - 1) // 2
        while hole > top and heap[parent][0] < value[0]:
            heap[hole] = heap[parent]
            hole = parent
            parent = (hole - 1) // 2
        heap[hole] = value

    def _adjust_heap(self, hole: int, length: int, value: _Item[T]) -> None:
        heap = self._heap
        top = hole
        child = hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if heap[child][0] < heap[child - 1][0]:
                child -= 1
            heap[hole] = heap[child]
            hole = child
        if length & 1 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            heap[hole] = heap[child - 1]
            hole = child - 1
        self._push_heap(hole, top, value)


K = TypeVar("K", bound=Hashable)


def engine_order(
    root_edges: Sequence[K],
    next_nodes: Callable[[K], Sequence[K | None]],
    priority: Callable[[K], int],
) -> list[K]:
    """The order the engine calls the nodes reachable from ``root_edges`` (see the module docstring).

    Args:
        root_edges: The node each root gradient enters, in root order (one per
            root edge: a node twice if two roots enter it).
        next_nodes: A node's ``next_functions`` targets in position order (``None`` for ``(None, 0)``).
        priority: A node's ``sequence_nr``.

    Examples:
        >>> import torch
        >>> from gradexport.tracing._torch import sequence_nr
        >>> x = torch.ones(2, requires_grad=True)
        >>> loss = (x.exp() * x).sum()
        >>> order = engine_order([loss.grad_fn], lambda n: [c for c, _ in n.next_functions], sequence_nr)
        >>> [node.name() for node in order]
        ['SumBackward0', 'MulBackward0', 'ExpBackward0', 'torch::autograd::AccumulateGrad']
    """
    dependencies: dict[K, int] = {}
    seen: set[K] = set()
    stack = list(dict.fromkeys(root_edges))
    seen.update(stack)
    while stack:
        node = stack.pop()
        for child in next_nodes(node):
            if child is None:
                continue
            dependencies[child] = dependencies.get(child, 0) + 1
            if child not in seen:
                seen.add(child)
                stack.append(child)
    queue: ReadyQueue[K] = ReadyQueue()
    order: list[K] = []

    def hand_out(children: Sequence[K | None]) -> None:
        for child in children:
            if child is None:
                continue
            dependencies[child] -= 1
            if dependencies[child] == 0:
                queue.push(priority(child), child)

    if len(root_edges) == 1:
        queue.push(priority(root_edges[0]), root_edges[0])
    else:
        for root in root_edges:
            dependencies[root] = dependencies.get(root, 0) + 1
        hand_out(list(root_edges))  # what GraphRoot does when it runs
    while queue:
        node = queue.pop()
        order.append(node)
        hand_out(next_nodes(node))
    return order
