"""``python -m benchmarks.floors``: every tool of issue 26 against its floor or peer, in one run.

Each row pairs a gradexport call with what the same job costs without
gradexport (torch's own work, a plain walk, ``json.loads``, torchviz), built on
the same graph and timed interleaved in one process, so load from other
processes hits both alike. A figure is the minimum CPU time of the repeats
(``time.process_time``); the ratio is gradexport's over the floor's, and the
target is the issue's. Writes ``benchmarks/results/floors.json``, ``.md`` and
``.png`` (µs per node against size, one panel per row, so super-linear costs
show at a glance); ``--docs`` also fills the floors block of
``docs/performance.md`` and copies the plot next to it.

Examples::

    python -m benchmarks.floors --quick          # 10^3 and 10^4 nodes (under 2 minutes)
    python -m benchmarks.floors --docs           # 10^3 to 10^6 on each row's first graph (torchviz's to 10^5), its others to their limit
    python -m benchmarks.floors --rows replay,diff --sizes 1e5
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import torch
import torchviz

import gradexport

from .generators import GENERATORS
from .report import update_page

__all__ = ["ROWS", "Row", "hand_replay", "hooked_backward", "json_floor", "saved_walk"]

RESULTS = Path(__file__).parent / "results"
DOCS_PAGE = Path(__file__).parent.parent / "docs" / "performance.md"
DOCS_PLOT = DOCS_PAGE.parent / "performance-floors.png"
START, END = "<!-- benchmarks:floors:start -->", "<!-- benchmarks:floors:end -->"


# ---------------------------------------------------------------- the floors


def _nodes(root: torch.Tensor) -> list[Any]:
    start = root.grad_fn
    seen = {start}
    order = [start]
    stack = [start]
    while stack:
        for child, _ in stack.pop().next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                order.append(child)
                stack.append(child)
    return order


def hand_replay(root: torch.Tensor) -> int:
    """A 30-line backward by hand: Kahn's order over ``next_functions``, each node called on its summed inputs."""
    pending: dict[Any, int] = {}
    for node in _nodes(root):
        for child, _ in node.next_functions:
            if child is not None:
                pending[child] = pending.get(child, 0) + 1
    buffers: dict[Any, list[Any]] = {root.grad_fn: [torch.ones_like(root)]}
    ready = [root.grad_fn]
    calls = 0
    with torch.no_grad():
        while ready:
            node = ready.pop()
            grads = node(*buffers.pop(node, [None] * len(node._input_metadata)))
            calls += 1
            for grad, (child, slot) in zip(grads if isinstance(grads, tuple) else (grads,), node.next_functions, strict=True):
                if child is None:
                    continue
                if grad is not None:
                    shape = child._input_metadata[slot].shape  # the engine's validate_outputs: reduce to the slot
                    if list(grad.shape) != shape:  # the metadata's shape is a list, never equal to a torch.Size
                        grad = grad.sum_to_size(shape)
                    slots = buffers.setdefault(child, [None] * len(child._input_metadata))
                    slots[slot] = grad if slots[slot] is None else slots[slot] + grad
                pending[child] -= 1
                if not pending[child]:
                    ready.append(child)
    return calls


def hooked_backward(root: torch.Tensor, retain_graph: bool = True) -> int:
    """``backward()`` with a pre-hook and a hook on every node (found by a walk), as a recorder must."""
    seen: list[int] = []

    def hook(*_: Any) -> None:
        seen.append(1)

    handles = [handle for node in _nodes(root) for handle in (node.register_prehook(hook), node.register_hook(hook))]
    root.backward(retain_graph=retain_graph)
    for handle in handles:
        handle.remove()
    return len(seen)


_SAVED_NAMES: dict[type, tuple[str, ...]] = {}


def saved_walk(root: torch.Tensor) -> int:
    """A walk reading every node's saved tensors (``_saved_*``), summing their distinct storages."""
    storages: dict[int, int] = {}
    for node in _nodes(root):
        names = _SAVED_NAMES.get(type(node))
        if names is None:
            names = _SAVED_NAMES[type(node)] = tuple(name for name in dir(node) if name.startswith("_saved_"))
        for name in names:
            try:
                value = getattr(node, name)
            except RuntimeError:
                continue
            for tensor in value if isinstance(value, tuple) else (value,):
                if isinstance(tensor, torch.Tensor):
                    storage = tensor.untyped_storage()
                    storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def json_floor(text: str) -> nx.MultiDiGraph:
    """``json.loads`` and the MultiDiGraph built through networkx's public API."""
    data = json.loads(text)
    graph = nx.MultiDiGraph()
    graph.add_nodes_from((record.pop("id"), record) for record in data["nodes"])
    graph.add_edges_from((record.pop("source"), record.pop("target"), record.pop("key"), record) for record in data["edges"])
    graph.graph.update(data["graph"])
    return graph


# ---------------------------------------------------------------- the rows


@dataclass
class Subject:
    """What one row times on: a root (rebuilt by ``fresh`` where a run consumes it) and derived inputs."""

    root: torch.Tensor
    nodes: int
    extra: dict[str, Any]


@dataclass(frozen=True)
class Row:
    name: str
    label: str
    floor_label: str
    #: The issue's target: gradexport / floor at most this (a "faster" row: floor / gradexport at least).
    target: float
    ours: Callable[[Subject], Any]
    floor: Callable[[Subject], Any]
    generators: tuple[str, ...] = ("chain",)
    #: The largest size for the row's other graphs; the first is measured up to ``first_max_nodes``, so
    #: that every row's plot spans 10^3 to 10^6 where its peer can run there.
    max_nodes: int = 10**6
    first_max_nodes: int = 10**6
    #: Where the target is "n times faster than the peer", as for torchviz.
    faster: bool = False
    prepare: Callable[[Subject], None] | None = None
    #: Frees the graph (a backward without retain_graph): both sides get a fresh graph, built untimed.
    consumes: bool = False


def _diff_prepare(subject: Subject) -> None:
    length = subject.nodes
    subject.extra["b"] = _chain_with(length, "cos")
    subject.root = _chain_with(length, "sin")


def _chain_with(length: int, middle: str) -> torch.Tensor:
    y = torch.zeros(1, requires_grad=True)
    for step in range(length):
        y = y + 1
        if step == length // 2:
            y = getattr(y, middle)()
    return y


def _diff_floor(subject: Subject) -> Any:
    return gradexport.to_networkx(subject.root), gradexport.to_networkx(subject.extra["b"])


def _json_prepare(subject: Subject) -> None:
    subject.extra["json"] = gradexport.to_json(subject.root)


def _model_explorer(subject: Subject) -> None:
    with tempfile.TemporaryDirectory() as folder:
        gradexport.write(subject.root, folder, ["model-explorer"])


ROWS: tuple[Row, ...] = (
    Row(
        "dot",
        "to_dot(root)",
        "torchviz make_dot(root).source",
        4.0,
        lambda s: gradexport.to_dot(s.root),
        lambda s: torchviz.make_dot(s.root).source,
        ("chain", "mlp", "transformer"),
        10**5,
        faster=True,
        # torchviz recurses several frames per level: a RecursionError on the 10^6 chain even at a limit of 10^6.
        first_max_nodes=10**5,
    ),
    Row(
        "networkx",
        "to_networkx(root)",
        "walk + MultiDiGraph, same attributes",
        1.3,
        lambda s: gradexport.to_networkx(s.root),
        lambda s: _same_attributes(s.root),
        ("chain", "mlp", "transformer"),
    ),
    Row(
        "replay",
        "replay(root)",
        "25-line hand loop over next_functions",
        2.0,
        lambda s: gradexport.replay(s.root),
        lambda s: hand_replay(s.root),
        ("chain", "mlp"),
        10**5,
    ),
    Row(
        "record_gradients",
        "record_gradients(root)",
        "backward() with a hook on every node",
        1.5,
        lambda s: gradexport.record_gradients(s.root, retain_graph=True),
        lambda s: hooked_backward(s.root),
        ("chain", "mlp"),
        10**5,
    ),
    Row(
        "find_nonfinite",
        "find_nonfinite(root), all finite",
        "backward() with a hook on every node",
        1.5,
        lambda s: gradexport.find_nonfinite(s.root),
        lambda s: hooked_backward(s.root, retain_graph=False),
        ("chain", "mlp"),
        10**5,
        consumes=True,
    ),
    Row(
        "saved_memory",
        "saved_memory(root)",
        "walk reading the saved tensors",
        1.5,
        lambda s: gradexport.tools.saved_memory(s.root),
        lambda s: saved_walk(s.root),
        ("mlp", "transformer"),
        10**5,
    ),
    Row(
        "diff",
        "diff(root_a, root_b), one op swapped",
        "to_networkx of both",
        3.0,
        lambda s: gradexport.diff(s.root, s.extra["b"]),
        _diff_floor,
        ("chain",),
        prepare=_diff_prepare,
    ),
    Row("model_explorer", "to_model_explorer + write", "to_json(root)", 2.0, _model_explorer, lambda s: gradexport.to_json(s.root), ("chain", "mlp"), 10**5),
    Row(
        "from_json",
        "from_json(text)",
        "json.loads + MultiDiGraph",
        1.3,
        lambda s: gradexport.from_json(s.extra["json"]),
        lambda s: json_floor(s.extra["json"]),
        ("chain", "mlp"),
        prepare=_json_prepare,
    ),
    Row("viewer", "to_html(root)", "to_json(root)", 1.5, lambda s: gradexport.to_html(s.root), lambda s: gradexport.to_json(s.root), ("chain", "fan_in")),
)


def _same_attributes(root: torch.Tensor) -> nx.MultiDiGraph:
    """The walk building what to_networkx builds by default: every node and edge attribute, through public torch API."""
    graph = nx.MultiDiGraph()
    start = root.grad_fn
    graph.add_node("n0", kind="root", root="output", shape=list(root.shape), dtype=str(root.dtype).removeprefix("torch."), device=str(root.device))
    ids = {start: "n1"}
    queue = deque([start])
    graph.add_edge("n0", "n1", key=0, next_index=0, input_nr=root.output_nr)
    while queue:
        node = queue.popleft()
        source = ids[node]
        next_functions = node.next_functions
        attributes: dict[str, Any] = {
            "kind": "backward",
            "op": type(node).__name__,
            "torch_name": node.name(),
            "sequence_nr": node._sequence_nr(),
            "num_next": len(next_functions),
        }
        none_slots = [index for index, (child, _) in enumerate(next_functions) if child is None]
        if none_slots:
            attributes["none_slots"] = none_slots
        if attributes["op"] == "AccumulateGrad":
            variable = node.variable
            attributes.update(
                kind="leaf", shape=list(variable.shape), dtype=str(variable.dtype).removeprefix("torch."), device=str(variable.device), names=[], sequence_nr=-1
            )
        graph.add_node(source, **attributes)
        for index, (child, input_nr) in enumerate(next_functions):
            if child is None:
                continue
            target = ids.get(child)
            if target is None:
                target = ids[child] = f"n{len(ids) + 1}"
                queue.append(child)
            graph.add_edge(source, target, key=index, next_index=index, input_nr=input_nr)
    return graph


# ---------------------------------------------------------------- measuring


def _cpu(function: Callable[[], Any]) -> float:
    gc.collect()
    start = time.process_time()
    function()
    return time.process_time() - start


def measure_row(row: Row, generator: str, size: int, repeats: int, budget: float) -> dict[str, Any]:
    maker = GENERATORS[generator]
    knob = maker.knob_for(size)

    def fresh() -> Subject:
        subject = Subject(maker.build(knob), maker.nodes(knob), {})
        if row.prepare is not None:
            subject.nodes = size
            row.prepare(subject)
        return subject

    subject = fresh()
    ours: list[float] = []
    floor: list[float] = []
    spent = time.perf_counter()
    for _ in range(repeats):
        floor.append(_cpu(lambda: row.floor(subject)))
        if row.consumes:
            subject = fresh()
        ours.append(_cpu(lambda: row.ours(subject)))
        if row.consumes:
            subject = fresh()
        if time.perf_counter() - spent > budget:
            break
    best_ours, best_floor = min(ours), min(floor)
    ratio = best_floor / best_ours if row.faster else best_ours / best_floor
    return {
        "row": row.name,
        "generator": generator,
        "size": subject.nodes,
        "ours_s": best_ours,
        "floor_s": best_floor,
        "ratio": ratio,
        "met": ratio >= row.target if row.faster else ratio <= row.target,
        "samples": len(ours),
    }


def run(rows: list[Row], sizes: list[int], repeats: int, budget: float, quiet: bool = False) -> list[dict[str, Any]]:
    results = []
    for row in rows:
        for position, generator in enumerate(row.generators):
            for size in sizes:
                if size > min(row.max_nodes if position else row.first_max_nodes, GENERATORS[generator].max_nodes):
                    continue
                found = gradexport.streams.run_with_large_stack(measure_row, row, generator, size, repeats, budget)
                results.append(found)
                if not quiet:
                    mark = "" if found["met"] else "  (target missed)"
                    print(
                        f"{row.name:17} {generator:12} {found['size']:>9,}  ours {found['ours_s']:8.3f} s  "
                        f"floor {found['floor_s']:8.3f} s  ratio {found['ratio']:5.2f}{mark}",
                        file=sys.stderr,
                        flush=True,
                    )
    return results


# ---------------------------------------------------------------- reporting


def markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    rows = {row.name: row for row in ROWS}
    lines = [
        f"Measured {meta['date']} on {meta['machine']} (`{meta['command']}`): minimum CPU time of up to "
        f"{meta['repeats']} interleaved runs; ratio = gradexport / floor (for `to_dot`: torchviz / gradexport, times faster).",
        *[f"Remeasured {update['date']}: `{update['command']}`." for update in meta.get("updates", [])],
        "",
        "| task | floor or peer | graph | nodes | gradexport (s) | floor (s) | ratio | target | met |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for found in results:
        row = rows[found["row"]]
        target = f"≥ {row.target:g}× faster" if row.faster else f"≤ {row.target:g}×"
        ratio = f"{found['ratio']:.2f}× faster" if row.faster else f"{found['ratio']:.2f}×"
        lines.append(
            f"| `{row.label}` | {row.floor_label} | {found['generator']} | {found['size']:,} | {found['ours_s']:.3f} | "
            f"{found['floor_s']:.3f} | {ratio} | {target} | {'yes' if found['met'] else '**no**'} |"
        )
    return "\n".join(lines) + "\n"


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(found["row"] for found in results))
    columns = min(4, len(names))
    rows_n = -(-len(names) // columns)
    figure, axes = plt.subplots(rows_n, columns, figsize=(4 * columns, 3.2 * rows_n), squeeze=False)
    labels = {row.name: row for row in ROWS}
    for axis, name in zip(axes.flat, names, strict=False):
        for generator in dict.fromkeys(found["generator"] for found in results if found["row"] == name):
            points = sorted((f["size"], f["ours_s"], f["floor_s"]) for f in results if f["row"] == name and f["generator"] == generator)
            sizes = [size for size, _, _ in points]
            line = axis.plot(sizes, [ours / size * 1e6 for size, ours, _ in points], marker="o", label=f"{generator}")
            axis.plot(sizes, [floor / size * 1e6 for size, _, floor in points], marker=".", linestyle="--", color=line[0].get_color())
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_title(labels[name].label, fontsize=9)
        axis.set_xlabel("nodes", fontsize=8)
        axis.set_ylabel("µs per node (dashed: floor)", fontsize=8)
        axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(names) :]:
        axis.set_visible(False)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floors", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes 1e3,1e4, one generator per row, written as floors-quick.*")
    parser.add_argument("--sizes", help="node counts, comma-separated (default 1e3,1e4,1e5,1e6)")
    parser.add_argument("--rows", default="all", help=f"comma-separated, from {', '.join(row.name for row in ROWS)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per row and size after which it is not repeated")
    parser.add_argument("--docs", action="store_true", help="fill docs/performance.md's floors block and plot")
    parser.add_argument("--update", action="store_true", help="replace only the measured rows, graphs and sizes in the existing results")
    args = parser.parse_args(argv)
    sizes = [int(float(item)) for item in (args.sizes or ("1e3,1e4" if args.quick else "1e3,1e4,1e5,1e6")).split(",")]
    chosen = [row for row in ROWS if args.rows == "all" or row.name in args.rows.split(",")]
    if args.quick:
        chosen = [Row(**{**row.__dict__, "generators": row.generators[:1]}) for row in chosen]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10**6))  # torchviz recurses once per level
    started = time.perf_counter()
    results = run(chosen, sizes, args.repeats, args.budget)
    from .__main__ import _machine

    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": _machine(),
        "repeats": args.repeats,
        "command": "python -m benchmarks.floors " + " ".join(argv if argv is not None else sys.argv[1:]),
        "seconds": round(time.perf_counter() - started, 1),
    }
    stem = "floors-quick" if args.quick else "floors"
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.update and (RESULTS / f"{stem}.json").exists():
        previous = json.loads((RESULTS / f"{stem}.json").read_text())
        fresh = {(found["row"], found["generator"], found["size"]): found for found in results}
        results = [fresh.pop((found["row"], found["generator"], found["size"]), found) for found in previous["results"]]
        results += list(fresh.values())
        meta = {**previous["meta"], "updates": [*previous["meta"].get("updates", []), meta]}
    (RESULTS / f"{stem}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    block = markdown(results, meta)
    (RESULTS / f"{stem}.md").write_text("# gradexport against its floors\n\n" + block)
    plot(results, RESULTS / f"{stem}.png")
    if args.docs:
        plot(results, DOCS_PLOT)
        update_page(DOCS_PAGE, block + f"\n![µs per node against size, gradexport and its floor]({DOCS_PLOT.name})\n\n", (START, END))
    print(f"written: {RESULTS / stem}.json, .md, .png in {meta['seconds']} s", file=sys.stderr)


if __name__ == "__main__":
    main()
