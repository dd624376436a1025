"""Measure every task on one generated graph, in a process of its own.

``python -m benchmarks.worker GENERATOR SIZE RESULT.json [options]`` builds the
generator's graph nearest to SIZE nodes once and writes one JSON record. The runner starts one such process per
generator and size, so that a size's memory high-water mark, a crash or a leak
cannot spill into the next measurement.

How it measures, the same way for every task:

- Everything runs inside :func:`gradexport.streams.run_with_large_stack`: the deep
  graphs would otherwise segfault when freed.
- Time: Python's cyclic GC is off during timing (as :mod:`timeit` does; gradexport
  pauses it itself anyway) and a full collection runs before each sample, over
  what the previous sample left (the graph under test is frozen out of it). Tasks
  are interleaved round by round, so a slow spell of this shared machine hits
  all of them alike; each task's time is the median of its samples, with fewer
  samples once a task has used ``budget`` seconds.
- Peak memory: before any timing, each memory task runs once in a forked child,
  which inherits the built autograd graph; the child reports its ``VmHWM``
  (the kernel's peak resident set, which starts at the parent's size at the
  fork). The parent's ``VmRSS`` at the fork is the baseline: the process with
  the torch graph built, before any exporting.
- ``recursive`` tasks (torchviz) first run at the interpreter's default
  recursion limit; if that raises RecursionError the record says so and the
  limit is raised for the rest.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from io import StringIO
from statistics import median
from typing import Any

import torch

import gradexport

from .generators import GENERATORS, Generator
from .tasks import TASKS, Subject, Task

__all__ = ["Settings", "measure", "profile"]

DEFAULT_RECURSION_LIMIT = sys.getrecursionlimit()
TINY_KNOB = 3


@dataclass(frozen=True)
class Settings:
    repeats: int = 3
    #: Seconds per task after which no further samples are taken.
    budget: float = 10.0
    memory: bool = True
    tasks: tuple[str, ...] = tuple(task.name for task in TASKS)


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1])
    raise KeyError(key)


@contextmanager
def _recursion_limit(limit: int) -> Iterator[None]:
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def _children() -> list[int]:
    """Process ids whose parent is this process (Linux: read from /proc)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    # The field after the parenthesised command name: state, then parent id.
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == me:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


@contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    """Kill the programs this process started if the block is still running after ``seconds``."""
    if seconds is None:
        yield
        return
    timer = threading.Timer(seconds, lambda: [os.kill(pid, signal.SIGKILL) for pid in _children()])
    timer.start()
    try:
        yield
    except Exception as error:
        if not timer.is_alive():
            raise TimeoutError(f"over {seconds:.0f} s, stopped") from error
        raise
    finally:
        timer.cancel()


def _raised_limit(nodes: int) -> int:
    # torchviz recurses once per level and a level is at most one node.
    return max(DEFAULT_RECURSION_LIMIT, 2 * nodes + 10_000)


def _timed(run: Callable[[], Any]) -> float:
    gc.collect()
    start = time.perf_counter()
    result = run()
    elapsed = time.perf_counter() - start
    del result
    return elapsed


def _peak_in_child(run: Callable[[], Any]) -> dict[str, Any]:
    """Run once in a forked child: the parent's resident memory at the fork and the peak with the run, in MiB.

    The child's own count starts lower than the parent's (the kernel does not copy
    the page-table entries of shared file mappings such as libtorch's code), so the
    peak is the parent's size plus what the child grew by.
    """
    gc.collect()
    baseline = _status_kib("VmRSS:")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            start = _status_kib("VmRSS:")
            run()
            report = {"peak_mib": (baseline + _status_kib("VmHWM:") - start) / 1024}
        except BaseException as error:  # reported to the parent, which records it
            report = {"error": f"{type(error).__name__}: {error}"[:300]}
        with os.fdopen(write_end, "w") as pipe:
            json.dump(report, pipe)
        # Skip freeing the graph and interpreter teardown: the parent still owns both.
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    report = json.loads(text) if text else {"error": "child died without reporting"}
    report["base_mib"] = baseline / 1024
    return report


def _sample(task: Task, subject: Subject, raised_limit: int, recursion: dict[str, str]) -> float:
    """One timed run; a recursive task's first run tries the default limit and notes the outcome."""
    if task.recursive and task.name not in recursion:
        try:
            with _recursion_limit(DEFAULT_RECURSION_LIMIT):
                seconds = _timed(partial(task.run, subject))
            recursion[task.name] = "ok"
            return seconds
        except RecursionError:
            recursion[task.name] = "RecursionError"
    with _recursion_limit(raised_limit), _deadline(task.timeout):
        return _timed(partial(task.run, subject))


def _applicable(size: int, names: tuple[str, ...]) -> list[Task]:
    return [task for task in TASKS if task.name in names and (task.max_nodes is None or size <= task.max_nodes)]


def _warm_up(generator: Generator, tasks: list[Task]) -> None:
    # Imports, caches and first-call costs, on a tiny graph of the same kind.
    subject = Subject(generator.build(TINY_KNOB))
    subject.built_graph()
    for task in tasks:
        with _recursion_limit(_raised_limit(generator.nodes(TINY_KNOB))):
            task.run(subject)


def measure(generator: Generator, size: int, settings: Settings) -> dict[str, Any]:
    """Build ``generator``'s graph of about ``size`` nodes and measure the tasks; a JSON-ready record."""
    knob = generator.knob_for(size)
    nodes = generator.nodes(knob)
    tasks = _applicable(size, settings.tasks)
    _warm_up(generator, tasks)
    gc.disable()
    start = time.perf_counter()
    subject = Subject(generator.build(knob))
    build_seconds = time.perf_counter() - start
    raised = _raised_limit(nodes)
    results: dict[str, dict[str, Any]] = {task.name: {"samples": []} for task in tasks}

    if settings.memory:
        for task in tasks:
            if task.memory:
                with _recursion_limit(raised):
                    results[task.name].update(_peak_in_child(partial(task.run, subject)))

    graph = subject.built_graph()
    if graph.number_of_nodes() != nodes:
        raise AssertionError(f"{generator.name}({knob}): graph has {graph.number_of_nodes()} nodes, not {nodes}")
    # The graph under test and its torch objects live until the end: keep the collection
    # before each sample from rescanning them (seconds per collection at 10^6 nodes).
    gc.freeze()

    recursion: dict[str, str] = {}
    for _ in range(settings.repeats):
        for task in tasks:
            record = results[task.name]
            if "error" in record or sum(record["samples"]) >= settings.budget:
                continue
            try:
                record["samples"].append(_sample(task, subject, raised, recursion))
            except Exception as error:  # recorded in the table; the other tasks go on
                record["error"] = f"{type(error).__name__}: {error}"[:300]
    for record in results.values():
        if record["samples"]:
            record["seconds"] = median(record["samples"])
            record["us_per_node"] = record["seconds"] / nodes * 1e6
    gc.enable()
    return {
        "generator": generator.name,
        "size": size,
        "knob": knob,
        "nodes": nodes,
        "edges": graph.number_of_edges(),
        "build_seconds": build_seconds,
        "default_recursion_limit": recursion,
        "tasks": results,
    }


def profile(generator: Generator, size: int, task_name: str, top: int = 25) -> str:
    """cProfile one run of a task on ``generator``'s graph of about ``size`` nodes; the top functions, as text."""
    knob = generator.knob_for(size)
    (task,) = [task for task in TASKS if task.name == task_name]
    _warm_up(generator, [task])
    gc.disable()
    subject = Subject(generator.build(knob))
    if task.needs_graph:
        subject.built_graph()
    profiler = cProfile.Profile()
    with _recursion_limit(_raised_limit(generator.nodes(knob))):
        profiler.runcall(task.run, subject)
    gc.enable()
    out = StringIO()
    out.write(f"cProfile of {task.name} ({task.label}) on {generator.name}, {generator.nodes(knob):,} nodes\n")
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worker", description=__doc__.splitlines()[0])
    parser.add_argument("generator", choices=sorted(GENERATORS))
    parser.add_argument("size", type=int, help="node count to aim at")
    parser.add_argument("result", help="where to write the JSON record (or the profile text with --profile)")
    parser.add_argument("--repeats", type=int, default=Settings.repeats)
    parser.add_argument("--budget", type=float, default=Settings.budget)
    parser.add_argument("--no-memory", dest="memory", action="store_false")
    parser.add_argument("--tasks", default=",".join(Settings.tasks))
    parser.add_argument("--profile", metavar="TASK", help="profile this task instead of measuring")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", gradexport.errors.MermaidSizeWarning)
    generator = GENERATORS[args.generator]
    if args.profile:
        text = gradexport.streams.run_with_large_stack(profile, generator, args.size, args.profile)
        with open(args.result, "w") as out:
            out.write(text)
        return
    settings = Settings(args.repeats, args.budget, args.memory, tuple(args.tasks.split(",")))
    record = gradexport.streams.run_with_large_stack(measure, generator, args.size, settings)
    with open(args.result, "w") as out:
        json.dump(record, out)


if __name__ == "__main__":
    main()
