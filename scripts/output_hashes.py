"""Hash the DOT, Mermaid and JSON of the whole test corpus, to prove a refactoring changed no byte.

Every case of ``tests/cases.py`` (plus a captured-module model, its collapses
and a ``record_gradients`` graph) is drawn from its roots and from its graph,
with several option sets, through the public functions only. The result is
one SHA-256 per (case, options, format) as JSON.

Usage, from the repository root::

    python scripts/output_hashes.py --write before.json      # on the old commit
    python scripts/output_hashes.py --compare before.json    # on the new one; exit 1 on any difference

A ``git worktree`` of the old commit gives the "before" without touching the
working tree: ``git worktree add /tmp/old REV && (cd /tmp/old && python
scripts/output_hashes.py --write /tmp/before.json)``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import torch  # noqa: E402
from cases import CASES  # noqa: E402

import gradexport  # noqa: E402

#: Option sets drawn for every case.
OPTION_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "lr": {"direction": "LR"},
    "none": {"show_none": True},
    "saved": {"show_saved": True},
    "shapes": {"edge_shapes": True},
    "flat": {"group_modules": False, "direction": "BT"},
}
#: What tracing from roots accepts beyond the diagram options.
TRACE_SETS: dict[str, dict[str, Any]] = {"plain": {}, "metadata": {"edge_metadata": True}}
WRITERS: dict[str, Callable[..., str]] = {
    "dot": gradexport.to_dot,
    "mermaid": gradexport.to_mermaid,
    "json": gradexport.to_json,
}
#: Options that only shape a diagram, which JSON from roots does not take.
DIAGRAM_ONLY = {"direction", "edge_shapes", "group_modules"}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _module_case() -> tuple[Any, torch.nn.Module]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8),
        torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8)),
        torch.nn.LayerNorm(8),
        torch.nn.Linear(8, 1),
    )
    with gradexport.capture_modules():
        loss = model(torch.randn(3, 4)).sum()
    return loss, model


def _drawings(name: str, roots: Any, model_options: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for options_name, options in OPTION_SETS.items():
        graph_options = {"show_none": True} if options.get("show_none") else {}
        if options.get("show_saved"):
            graph_options["saved"] = True
        graph = gradexport.to_networkx(roots, **model_options, **graph_options)
        for trace_name, trace_options in TRACE_SETS.items():
            for format_name, writer in WRITERS.items():
                chosen = {key: value for key, value in options.items() if not (format_name == "json" and key in DIAGRAM_ONLY)}
                yield f"{name}/{options_name}/{trace_name}/roots/{format_name}", writer(roots, **model_options, **trace_options, **chosen)
        for format_name, writer in WRITERS.items():
            # JSON writes a graph as it is: no option applies to it.
            chosen = {} if format_name == "json" else options
            yield f"{name}/{options_name}/graph/{format_name}", writer(graph, **chosen)


def corpus() -> Iterator[tuple[str, str]]:
    """``(label, text)`` for every drawing of the corpus, in a fixed order."""
    for name, builder in CASES.items():
        torch.manual_seed(0)
        case = builder()
        yield from _drawings(name, case.roots, {"params": case.params} if case.params else {})
    loss, model = _module_case()
    yield from _drawings("modules", loss, {"module": model})
    graph = gradexport.to_networkx(loss, module=model)
    for depth in range(4):
        folded = gradexport.collapse(graph, depth)
        for format_name, writer in WRITERS.items():
            yield f"modules/collapse{depth}/{format_name}", writer(folded)
    recorded = gradexport.record_gradients(loss, module=model)
    for format_name, writer in WRITERS.items():
        yield f"modules/gradients/{format_name}", writer(recorded)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", type=Path, help="write the hashes to this JSON file")
    action.add_argument("--compare", type=Path, help="compare with the hashes in this JSON file")
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hashes = {label: _digest(text) for label, text in corpus()}
    if args.write:
        args.write.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
        print(f"{len(hashes)} outputs hashed into {args.write}")
        return 0
    before = json.loads(args.compare.read_text())
    changed = sorted(label for label in before.keys() & hashes.keys() if before[label] != hashes[label])
    missing = sorted(before.keys() - hashes.keys())
    added = sorted(hashes.keys() - before.keys())
    for label in changed:
        print(f"changed: {label}")
    for label in missing:
        print(f"missing: {label}")
    for label in added:
        print(f"new: {label}")
    same = len(before.keys() & hashes.keys()) - len(changed)
    print(f"{same} of {len(before)} outputs identical, {len(changed)} changed, {len(missing)} missing, {len(added)} new")
    return 1 if changed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
