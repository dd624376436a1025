"""What running the docs' examples in a child process costs: ``python -m benchmarks.docs_blocks [--repeats N]``.

Runs every ``gradexport`` block of ``docs/`` page by page, as the MkDocs plugin
does, with :class:`gradexport.frontends.mkdocs.plugin.BlockRunner` isolated (one forked
child serving all pages) and in-process, alternating the two so that load from
other processes hits both alike. Prints, per page and in total, the best wall
time of each mode, and the CPU time (this process and its waited children).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from gradexport.frontends.mkdocs.blocks import find_blocks
from gradexport.frontends.mkdocs.runner import BlockRunner

DOCS = Path(__file__).resolve().parent.parent / "docs"


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    pages = [(page, find_blocks(page.read_text(encoding="utf-8").split("\n"), page.name)) for page in sorted(DOCS.rglob("*.md"))]
    pages = [(page, blocks) for page, blocks in pages if blocks]
    best: dict[tuple[str, bool], float] = {}
    cpu = {True: 0.0, False: 0.0}
    for _ in range(args.repeats):
        for isolate in (True, False):
            start_cpu = cpu_seconds()
            with BlockRunner(isolate=isolate) as runner:
                for page, blocks in pages:
                    start = time.perf_counter()
                    runner.run(blocks, str(page), page.name)
                    key = (page.relative_to(DOCS).as_posix(), isolate)
                    best[key] = min(best.get(key, float("inf")), time.perf_counter() - start)
            cpu[isolate] += (cpu_seconds() - start_cpu) / args.repeats
    print(f"{'page':40} {'isolated':>9} {'in-process':>11}  (best of {args.repeats}, seconds)")
    for page, _ in pages:
        name = page.relative_to(DOCS).as_posix()
        print(f"{name:40} {best[name, True]:9.2f} {best[name, False]:11.2f}")
    totals = {isolate: sum(value for (_, mode), value in best.items() if mode == isolate) for isolate in (True, False)}
    print(f"{'total wall':40} {totals[True]:9.2f} {totals[False]:11.2f}")
    print(f"{'mean CPU per pass':40} {cpu[True]:9.2f} {cpu[False]:11.2f}")


if __name__ == "__main__":
    main()
