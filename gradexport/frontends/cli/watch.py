"""``gradexport watch TARGET``: run a function that trains under `gradexport.watch`; write the history and its plots.

The function takes a ``watch`` keyword, with a default so that it also runs on
its own, and wraps its loop in it:

```python
def train(watch=gradexport.watch):
    model, optimizer = ...
    with watch(model, optimizer=optimizer):
        for batch in data:
            ...
```

The command passes a ``watch`` that writes ``DIR/FUNCTION.watch.jsonl``
(``--every``, ``--details-every``, ``--bad-steps``, ``--tensorboard``,
``--fsync`` go to it) and moves a progress bar at every step, then draws
`gradexport.records.plot_flow` into ``DIR/FUNCTION.flow.png`` and ``.svg``
(``--plot``), prints the modules flagged vanishing or exploding at the last
step, and lists the flight recorder's bundles (``gradexport view BUNDLE``).
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from ...backward.watch import DETAILS_EVERY
from ...core.reports import module_label
from .running import Failure, TargetError, exit_call, load, on_large_stack, one_line, parsed, subparser

__all__ = ["DESCRIPTION", "SUMMARY", "main"]

SUMMARY = "run TARGET, a function that trains, under gradexport.watch; write the history and the gradient-flow plots"

DESCRIPTION = (
    "Run a function that trains under gradexport.watch, with a progress bar: the function takes a watch=\n"
    "keyword (def train(watch=gradexport.watch): ... with watch(model, optimizer=opt): ...). Writes\n"
    "DIR/FUNCTION.watch.jsonl and the gradient-flow plot DIR/FUNCTION.flow.png and .svg."
)

PLOT_FORMATS = ("png", "svg", "pdf")


def main(argv: Sequence[str]) -> int:
    parser = subparser("watch", DESCRIPTION)
    parser.add_argument("-o", "--output", metavar="DIR", default=".", help="the folder to write into (default: the current folder)")
    parser.add_argument("--every", type=int, default=1, metavar="N", help="record every N-th step (default: 1)")
    parser.add_argument(
        "--details-every",
        type=int,
        default=DETAILS_EVERY,
        metavar="N",
        help=f"give one recorded step in N the mean, largest |g| and update ratio (default: {DETAILS_EVERY})",
    )
    parser.add_argument("--bad-steps", metavar="FOLDER", help="the flight recorder: write a bundle into FOLDER for each step that goes bad")
    parser.add_argument("--plot", default="png,svg", metavar="FORMATS", help="plot formats, comma-separated: png, svg, pdf, or none (default: png,svg)")
    parser.add_argument("--tensorboard", metavar="LOGDIR", help="also write TensorBoard scalars into LOGDIR")
    parser.add_argument("--fsync", action="store_true", help="fsync the history file after every step")
    parser.add_argument("--steps", type=int, metavar="N", help="the number of steps the function runs, for the progress bar's total")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--traceback", action="store_true", help="print the full traceback of what the function raised")
    args = parsed(parser, argv)
    if isinstance(args, int):
        return args
    plots = [] if args.plot == "none" else [item.strip() for item in args.plot.split(",") if item.strip()]
    wrong = [item for item in plots if item not in PLOT_FORMATS]
    small = next((flag for flag, value in (("--every", args.every), ("--details-every", args.details_every)) if value < 1), None)
    if wrong or small:
        problem = f"--plot: unknown format {wrong[0]!r} (choose from {', '.join(PLOT_FORMATS)} or none)" if wrong else f"{small} must be at least 1"
        print(f"gradexport watch: error: {problem} (see gradexport watch --help)", file=sys.stderr)
        return 2
    return on_large_stack(lambda bar: _watch_work(args, plots, bar), args, args.steps)


def _watch_work(args: argparse.Namespace, plots: list[str], bar: Any) -> tuple[int, list[str]]:
    from ...analysis.watch_plot import save_flow
    from ...backward.watch import watch
    from ...backward.watch_file import load_watch

    location, name = args.target
    try:
        function: Any = load(location, name)
    except TargetError as error:
        raise Failure(str(error), 2) from None
    except BaseException as error:
        raise Failure(f"importing {location} raised {one_line(error)}") from error
    try:
        takes_watch = "watch" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        takes_watch = False
    if not takes_watch:
        raise Failure(f"{location}:{name}() takes no watch= keyword; write def {name}(watch=gradexport.watch): ... with watch(model, optimizer=...):", 2)
    stem = name.rpartition(".")[2]
    folder = Path(args.output)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.watch.jsonl"
    bar.set_description(f"gradexport: training {name}()")
    watched = partial(
        watch,
        path=path,
        every=args.every,
        details_every=args.details_every,
        bad_steps=args.bad_steps,
        fsync=args.fsync,
        tensorboard=args.tensorboard,
        on_step=lambda _: bar.update(),
    )
    try:
        function(watch=watched)
    except KeyboardInterrupt as error:
        raise Failure(f"interrupted; the steps recorded so far are in {path}", 130) from error
    except SystemExit as error:
        raise Failure(f"{location}:{name}() called {exit_call(error)}") from error
    except BaseException as error:
        raise Failure(f"{location}:{name}() raised {one_line(error)}") from error
    if not path.exists():
        raise Failure(f"{location}:{name}() never called watch(model, ...): nothing was recorded")
    history = load_watch(path)
    lines = [f"{path} ({len(history.steps)} steps recorded)"]
    if history.steps:
        for suffix in plots:
            lines.append(str(save_flow(history, folder / f"{stem}.flow.{suffix}")))
        lines += [f"{module_label(module)}: {'; '.join(reasons)}" for module, reasons in history.flags().items()]
    if args.bad_steps is not None:
        bundles = sorted(Path(args.bad_steps).glob("bad-step-*.json"))
        counted = f"{len(bundles)} bad {'step' if len(bundles) == 1 else 'steps'} recorded in {args.bad_steps}"
        lines.append(counted + (f" (open one with gradexport view {bundles[0]})" if bundles else ""))
        lines += [str(bundle) for bundle in bundles]
    return 0, lines
