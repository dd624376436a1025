"""Tables, target verdicts and the plot, from the records the workers wrote.

Example:
    >>> record = {"generator": "chain", "size": 1000, "nodes": 1000, "tasks": {
    ...     "walk_nx": {"seconds": 0.004, "us_per_node": 4.0},
    ...     "construct": {"seconds": 0.005, "us_per_node": 5.0}}}
    >>> ratio(record, "construct", "walk_nx")
    1.25
    >>> format_number(1.25), format_number(None)
    ('1.25', '–')
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Verdict", "format_number", "markdown", "plot", "ratio", "update_page", "verdicts"]

TIME_COLUMNS = (
    ("walk", "walk"),
    ("walk_nx", "walk + nx"),
    ("construct", "construct"),
    ("stream", "stream"),
    ("construct_meta", "edge meta"),
    ("construct_saved", "show_saved=True"),
    ("record_gradients", "record grads"),
    ("dot", "DOT"),
    ("mermaid", "Mermaid"),
    ("json", "JSON"),
    ("root_dot", "root→DOT"),
    ("root_mermaid", "root→Mermaid"),
    ("root_json", "root→JSON"),
    ("root_json_meta", "root→JSON, edge meta"),
    ("torchviz", "torchviz"),
    ("svg", "SVG"),
)
MEMORY_COLUMNS = (
    ("walk_nx", "walk + nx"),
    ("construct", "construct"),
    ("root_dot", "root→DOT"),
    ("root_mermaid", "root→Mermaid"),
    ("root_json", "root→JSON"),
    ("torchviz", "torchviz"),
)
EXPORTS = ("root_dot", "root_mermaid", "root_json")
PLOTTED = (
    ("walk", "bare walk (floor 1)", ":"),
    ("walk_nx", "walk + MultiDiGraph (floor 2)", "--"),
    ("construct", "to_networkx", "-"),
    ("root_dot", "root → DOT", "-"),
    ("root_mermaid", "root → Mermaid", "-"),
    ("root_json", "root → JSON", "-"),
    ("torchviz", "torchviz make_dot().source", "-."),
)
START = "<!-- benchmarks:results:start -->"
END = "<!-- benchmarks:results:end -->"


def _task(record: dict[str, Any], name: str) -> dict[str, Any]:
    return record.get("tasks", {}).get(name, {})


def ratio(record: dict[str, Any], numerator: str, denominator: str) -> float | None:
    """Time of one task over another's in the same record (None when either is missing)."""
    top, bottom = _task(record, numerator).get("seconds"), _task(record, denominator).get("seconds")
    return top / bottom if top is not None and bottom else None


def _peak_ratio(record: dict[str, Any], name: str, growth: bool = False) -> float | None:
    task, floor = _task(record, name), _task(record, "walk_nx")
    if "peak_mib" not in task or "peak_mib" not in floor:
        return None
    if growth:
        return (task["peak_mib"] - task["base_mib"]) / (floor["peak_mib"] - floor["base_mib"])
    return task["peak_mib"] / floor["peak_mib"]


def format_number(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _row_name(record: dict[str, Any]) -> str:
    return f"{record['generator']} | {record['nodes']:,}"


def _cell(record: dict[str, Any], name: str, key: str) -> str:
    task = _task(record, name)
    if "error" in task:
        return "timeout" if task["error"].startswith("TimeoutError") else "error"
    return format_number(task.get(key))


@dataclass(frozen=True)
class Verdict:
    target: str
    met: bool | None
    evidence: list[str]


def _check(values: Iterable[tuple[str, float | None]], passes: Any) -> tuple[bool | None, list[str]]:
    evidence, outcomes = [], []
    for label, value in values:
        evidence.append(f"{label}: {format_number(value)}")
        outcomes.append(value is not None and passes(value))
    return (all(outcomes) if outcomes else None), evidence


def verdicts(records: list[dict[str, Any]]) -> list[Verdict]:
    """Each target of the performance issue, met or not, with the numbers that decide it."""
    by_key = {(r["generator"], r["size"]): r for r in records if "tasks" in r}
    large = [r for r in by_key.values() if r["size"] >= 10**5]
    at_1e5 = [r for r in by_key.values() if r["size"] == 10**5]
    at_1e6 = [r for r in by_key.values() if r["size"] == 10**6]
    out = []

    met, evidence = _check(((f"{r['generator']} {r['nodes']:,}", ratio(r, "construct", "walk_nx")) for r in large), lambda v: v <= 1.5)
    out.append(Verdict("to_networkx (defaults) ≤ 1.5 × walk + MultiDiGraph, at 10^5 and 10^6", met, evidence))

    for name, label in (("root_dot", "DOT"), ("root_mermaid", "Mermaid"), ("root_json", "JSON")):
        met, evidence = _check(((r["generator"], ratio(r, "torchviz", name)) for r in at_1e5), lambda v: v >= 4)
        out.append(Verdict(f"root → {label} ≥ 4 × faster than torchviz at 10^5, every generator", met, evidence))

    rows = [r for r in at_1e6 if r["generator"] in ("chain", "transformer")]
    errors = [f"{r['generator']} {name}" for r in rows for name in EXPORTS if "seconds" not in _task(r, name)]
    out.append(
        Verdict(
            "10^6 chain and transformer export to DOT, Mermaid and JSON with no error",
            (not errors) if len(rows) == 2 else None,
            [f"errors: {', '.join(errors) or 'none'}", f"measured: {', '.join(r['generator'] for r in rows) or 'none'}"],
        )
    )
    met, evidence = _check(((f"{r['generator']} {name}", _peak_ratio(r, name)) for r in rows for name in EXPORTS), lambda v: v <= 1.3)
    out.append(Verdict("their peak memory ≤ 1.3 × that of walk + MultiDiGraph (process peak)", met, evidence))
    _, evidence = _check(((f"{r['generator']} {name}", _peak_ratio(r, name, growth=True)) for r in rows for name in EXPORTS), bool)
    out.append(Verdict("(for reference, not a target: the same ratio of growth above the built torch graph)", None, evidence))

    pairs = [(r, by_key.get((r["generator"], 10**4))) for r in at_1e6]
    met, evidence = _check(
        ((f"{r['generator']} {name}", _growth(r, small, name)) for r, small in pairs if small is not None for name in ("construct", *EXPORTS)),
        lambda v: v <= 1.5,
    )
    out.append(Verdict("per-node time at 10^6 ≤ 1.5 × that at 10^4 (construct and root → each format)", met, evidence))
    return out


def _growth(large: dict[str, Any], small: dict[str, Any], name: str) -> float | None:
    top, bottom = _task(large, name).get("us_per_node"), _task(small, name).get("us_per_node")
    return top / bottom if top is not None and bottom else None


def markdown(results: dict[str, Any], plot_path: str) -> str:
    """The results as Markdown: verdicts, plot, the time, ratio and memory tables, and notes."""
    records = sorted((r for r in results["runs"] if "tasks" in r), key=lambda r: (list(results["generators"]).index(r["generator"]), r["nodes"]))
    meta = results["meta"]
    lines = [f"Measured {meta['date']} on {meta['machine']} with {meta['versions']}; command `{meta['command']}`."]
    lines += [f"Updated {update['date']}: `{update['command']}`." for update in meta.get("updates", [])]
    lines += [
        "",
        "### Targets",
        "",
        "| target | met | numbers |",
        "|---|---|---|",
    ]
    for verdict in verdicts(records):
        mark = {True: "**met**", False: "**not met**", None: "–"}[verdict.met]
        lines.append(f"| {verdict.target} | {mark} | {'; '.join(verdict.evidence)} |")
    lines += ["", f"![Time per node against graph size]({plot_path})", "", "### Time per node (µs, median)", ""]
    lines.append("| generator | nodes | " + " | ".join(label for _, label in TIME_COLUMNS) + " |")
    lines.append("|---|--:|" + "--:|" * len(TIME_COLUMNS))
    for record in records:
        lines.append(f"| {_row_name(record)} | " + " | ".join(_cell(record, n, "us_per_node") for n, _ in TIME_COLUMNS) + " |")
    lines += ["", "### Ratios", ""]
    header = (
        "construct ÷ floor 2",
        "root→DOT ÷ floor 2",
        "torchviz ÷ root→DOT",
        "torchviz ÷ root→Mermaid",
        "torchviz ÷ root→JSON",
        "torchviz at default recursion limit",
    )
    lines.append("| generator | nodes | " + " | ".join(header) + " |")
    lines.append("|---|--:|" + "--:|" * len(header))
    for record in records:
        cells = [
            ratio(record, "construct", "walk_nx"),
            ratio(record, "root_dot", "walk_nx"),
            ratio(record, "torchviz", "root_dot"),
            ratio(record, "torchviz", "root_mermaid"),
            ratio(record, "torchviz", "root_json"),
        ]
        limit = record.get("default_recursion_limit", {}).get("torchviz", "–")
        lines.append(f"| {_row_name(record)} | " + " | ".join(map(format_number, cells)) + f" | {limit} |")
    lines += ["", "### Peak memory (MiB, whole process)", ""]
    lines.append("| generator | nodes | torch graph built | " + " | ".join(label for _, label in MEMORY_COLUMNS) + " | worst export ÷ floor 2 |")
    lines.append("|---|--:|--:|" + "--:|" * len(MEMORY_COLUMNS) + "--:|")
    for record in records:
        base = _task(record, "walk_nx").get("base_mib")
        worst = [v for v in (_peak_ratio(record, n) for n in EXPORTS) if v is not None]
        lines.append(
            f"| {_row_name(record)} | {format_number(base)} | "
            + " | ".join(_cell(record, n, "peak_mib") for n, _ in MEMORY_COLUMNS)
            + f" | {format_number(max(worst) if worst else None)} |"
        )
    skipped = [r for r in results["runs"] if "tasks" not in r]
    if skipped:
        lines += ["", "Not measured: " + "; ".join(f"{r['generator']} at {r['size']:,} ({r['reason']})" for r in skipped) + "."]
    errors = [f"{r['generator']} {r['nodes']:,} {name}: {task['error']}" for r in records for name, task in r["tasks"].items() if "error" in task]
    if errors:
        lines += ["", "Errors: " + "; ".join(errors) + "."]
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    """µs per node against node count, one panel per generator, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    generators = [g for g in results["generators"] if any(r["generator"] == g and "tasks" in r for r in results["runs"])]
    columns = 4
    rows = -(-len(generators) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3.2 * rows), squeeze=False, sharey=True)
    for axis, generator in zip(axes.flat, generators, strict=False):
        records = sorted((r for r in results["runs"] if r["generator"] == generator and "tasks" in r), key=lambda r: r["nodes"])
        for name, label, style in PLOTTED:
            points = [(r["nodes"], _task(r, name)["us_per_node"]) for r in records if "us_per_node" in _task(r, name)]
            if points:
                axis.plot(*zip(*points, strict=True), style, marker="o", markersize=3, label=label)
        axis.set_title(generator)
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.grid(True, which="both", alpha=0.3)
        axis.set_xlabel("nodes")
    for axis in axes[:, 0]:
        axis.set_ylabel("µs per node")
    for axis in list(axes.flat)[len(generators) :]:
        axis.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower right", fontsize="small", frameon=False)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def update_page(page: Path, block: str, markers: tuple[str, str] = (START, END)) -> None:
    """Replace what lies between the ``markers`` (default: the result markers) of a docs page with ``block``."""
    start, end = markers
    text = page.read_text()
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"{page} has no {start} ... {end} block to fill")
    page.write_text(pattern.sub(lambda _: f"{start}\n{block}{end}", text))
