"""``python -m benchmarks``: measure, then write the table, the plot and the docs page.

Examples::

    python -m benchmarks                      # the full run (about 35 minutes on 2 shared cores)
    python -m benchmarks --quick              # 10^3 and 10^4 nodes only, written as results/quick.*
    python -m benchmarks --sizes 1e5 --generators chain,mlp
    python -m benchmarks --profile construct --generators transformer --sizes 1e5
    python -m benchmarks --report-only        # redraw latest.md/png and the docs page from latest.json
    python -m benchmarks --update --sizes 1e5 --generators mlp   # remeasure some, keep the rest of latest.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .generators import GENERATORS
from .report import markdown, plot, update_page
from .tasks import TASKS
from .worker import Settings

RESULTS = Path(__file__).parent / "results"
DOCS_PAGE = Path(__file__).parent.parent / "docs" / "performance.md"
FULL_SIZES = "1e3,1e4,1e5,1e6"
QUICK_SIZES = "1e3,1e4"
#: One worker may not run longer than this (seconds).
WORKER_TIMEOUT = 1800


def _sizes(text: str) -> list[int]:
    return [int(float(item)) for item in text.split(",") if item]


def _names(text: str, known: dict[str, Any] | list[str]) -> list[str]:
    names = list(known) if text == "all" else text.split(",")
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"unknown: {', '.join(unknown)} (choose from {', '.join(known)})")
    return names


def _worker(args: list[str]) -> tuple[str | None, str]:
    """Run ``benchmarks.worker``; its result file's text (None on failure) and its stderr's tail."""
    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "result"
        try:
            done = subprocess.run(
                [sys.executable, "-m", "benchmarks.worker", *args[:2], str(result), *args[2:]],
                cwd=Path(__file__).parent.parent,
                capture_output=True,
                text=True,
                timeout=WORKER_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None, f"timed out after {WORKER_TIMEOUT} s"
        if done.returncode != 0 or not result.exists():
            return None, f"exit {done.returncode}: {done.stderr.strip()[-500:]}"
        return result.read_text(), done.stderr


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return f"{os.cpu_count()} × {cpu}, Python {platform.python_version()}"


def _versions() -> str:
    from importlib.metadata import version

    return ", ".join(f"{name} {version(name)}" for name in ("torch", "networkx", "torchviz", "gradexport"))


def measure(args: argparse.Namespace, sizes: list[int], generators: list[str]) -> dict[str, Any]:
    jobs = [(GENERATORS[name], size) for name in generators for size in sizes]
    runs: list[dict[str, Any]] = []
    for generator, size in (progress := tqdm(jobs, unit="graph")):
        progress.set_postfix_str(f"{generator.name} {size:,}")
        if size > generator.max_nodes and not args.all_sizes:
            runs.append({"generator": generator.name, "size": size, "reason": "above its practical size, see --all-sizes"})
            continue
        options = ["--repeats", str(args.repeats), "--budget", str(args.budget), "--tasks", args.tasks]
        text, log = _worker([generator.name, str(size), *options, *([] if args.memory else ["--no-memory"])])
        if text is None:
            tqdm.write(f"{generator.name} {size:,}: {log}")
            runs.append({"generator": generator.name, "size": size, "reason": log})
            continue
        runs.append(json.loads(text))
    return {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": _machine(),
            "versions": _versions(),
            "command": shlex.join(["python", "-m", "benchmarks", *sys.argv[1:]]),
            "settings": {"repeats": args.repeats, "budget_s": args.budget, "memory": args.memory},
        },
        "generators": {g.name: {"description": g.description, "per_unit": g.per_unit, "base": g.base} for g in GENERATORS.values()},
        "runs": runs,
    }


def profile(args: argparse.Namespace, sizes: list[int], generators: list[str]) -> None:
    folder = args.output / "profiles"
    folder.mkdir(parents=True, exist_ok=True)
    for name in generators:
        for size in sizes:
            text, log = _worker([name, str(size), "--profile", args.profile])
            if text is None:
                raise SystemExit(f"profiling {args.profile} on {name} {size:,} failed: {log}")
            path = folder / f"{args.profile}-{name}-{size:.0e}.txt".replace("+0", "")
            path.write_text(text)
            print(text)
            print(f"written to {path}")


def _merged(previous: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``previous`` with the runs of ``new`` in place of those of the same generator and size."""
    fresh = {(run["generator"], run["size"]): run for run in new["runs"]}
    runs = [fresh.pop((run["generator"], run["size"]), run) for run in previous["runs"]]
    meta = {**previous["meta"], "updates": [*previous["meta"].get("updates", []), new["meta"]]}
    return {**previous, "meta": meta, "runs": runs + list(fresh.values())}


def report(results: dict[str, Any], folder: Path, name: str, docs: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    plot(results, folder / f"{name}.png")
    (folder / f"{name}.md").write_text("# gradexport benchmarks\n\n" + markdown(results, f"{name}.png"))
    if docs:
        shutil.copyfile(folder / f"{name}.png", DOCS_PAGE.with_suffix(".png"))
        update_page(DOCS_PAGE, markdown(results, DOCS_PAGE.with_suffix(".png").name))
    print(f"written: {folder / name}.json, .md, .png" + (f"; {DOCS_PAGE} and its plot" if docs else ""))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Time and memory of gradexport against a traversal floor and torchviz.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 1)[1],
    )
    parser.add_argument("--sizes", help=f"node counts, comma-separated (default {FULL_SIZES}; --quick: {QUICK_SIZES})")
    parser.add_argument("--generators", default="all", help=f"comma-separated, from {', '.join(GENERATORS)}")
    parser.add_argument("--tasks", default="all", help=f"comma-separated, from {', '.join(t.name for t in TASKS)}")
    parser.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}, written as quick.*")
    parser.add_argument("--repeats", type=int, default=Settings.repeats, help="samples per task, at most")
    parser.add_argument("--budget", type=float, default=Settings.budget, help="seconds per task after which it is not repeated")
    parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip the peak-memory runs")
    parser.add_argument("--all-sizes", action="store_true", help="also sizes above a generator's practical maximum")
    parser.add_argument("--output", type=Path, default=RESULTS, help="folder for NAME.json/.md/.png (default benchmarks/results)")
    parser.add_argument("--name", help="file name stem (default latest; --quick: quick)")
    parser.add_argument(
        "--docs",
        action=argparse.BooleanOptionalAction,
        help="fill docs/performance.md's results block and plot (default: on, except with --quick)",
    )
    parser.add_argument("--profile", metavar="TASK", help="cProfile TASK on each generator and size instead of measuring")
    parser.add_argument("--report-only", action="store_true", help="rewrite the table, plot and page from NAME.json")
    parser.add_argument("--update", action="store_true", help="replace only the measured generators and sizes in an existing NAME.json")
    args = parser.parse_args(argv)

    sizes = _sizes(args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES))
    generators = _names(args.generators, GENERATORS)
    args.tasks = ",".join(_names(args.tasks, [t.name for t in TASKS]))
    name = args.name or ("quick" if args.quick else "latest")
    docs = not args.quick if args.docs is None else args.docs
    if args.profile:
        profile(args, sizes, generators)
        return
    path = args.output / f"{name}.json"
    if args.report_only:
        results = json.loads(path.read_text())
    else:
        results = measure(args, sizes, generators)
        if args.update:
            results = _merged(json.loads(path.read_text()), results)
        args.output.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1) + "\n")
    report(results, args.output, name, docs)


if __name__ == "__main__":
    main()
