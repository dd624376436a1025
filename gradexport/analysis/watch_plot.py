"""Pictures of a `gradexport.records.WatchHistory`: the gradient-flow plot and a module × step heat map (matplotlib).

`plot_flow` draws, for one step, the mean and the largest ``|g|`` of every
parameter in forward order on a log scale (the plot many training scripts
copy as ``plot_grad_flow``), and beside it the norm of the gradient at each
module's output over every recorded step, modules in forward order, on a log
colour scale. matplotlib is the ``plot`` extra; no pyplot state is touched.

Examples:
    >>> import torch, gradexport
    >>> model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    >>> with gradexport.watch(model, details_every=1) as w:
    ...     for _ in range(2):
    ...         model.zero_grad()
    ...         model(torch.randn(4, 3)).sum().backward()
    ...         w.step()
    >>> figure = gradexport.records.plot_flow(w.history)
    >>> [axes.get_title() for axes in figure.axes[:2]]
    ['gradient flow at step 1', 'gradient norm at module outputs']
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backward.watch_file import WatchHistory
from ..core.errors import ArgumentKeyError, ArgumentValueError
from ..core.extras import import_extra
from ..core.reports import module_label

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["flow_order", "plot_flow", "save_flow"]


def flow_order(history: WatchHistory) -> list[str]:
    """The parameters in forward order: by the position of their module in `WatchHistory.order`, then by name order."""
    position = {name: index for index, name in enumerate(history.order)}

    def owner(parameter: str) -> int:
        module = parameter.rpartition(".")[0]
        return position.get(module, len(position))

    return sorted(history.parameters, key=lambda name: (owner(name), history.parameters.index(name)))


def plot_flow(history: WatchHistory, step: int | None = None, *, layers_only: bool = False) -> Figure:
    """The gradient-flow plot at ``step`` (default: the last recorded with details) and the module × step heat map, as one Figure.

    The first axes hold two bars per parameter: the largest ``|g|`` and the
    mean ``|g|`` (log scale; a parameter without gradient has none). These
    are in the steps recorded with details (``watch(details_every=...)``);
    a ``step`` without them raises `ArgumentKeyError` naming those that have. The
    second is the heat map of `WatchHistory.module_table`, one row per module
    in forward order (only the layers with ``layers_only``), one column per
    recorded step; white where a module received no gradient. A flagged
    module's row label ends in ``⚠``.

    Examples:
        >>> import torch, gradexport
        >>> model = torch.nn.Linear(2, 1)
        >>> with gradexport.watch(model) as w:
        ...     model(torch.ones(1, 2)).sum().backward()
        ...     w.step()
        >>> [tick.get_text() for tick in gradexport.records.plot_flow(w.history).axes[0].get_xticklabels()]
        ['weight', 'bias']
    """
    import_extra("matplotlib", "plot", "gradexport.records.plot_flow")
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    if not history.steps:
        raise ArgumentValueError("the history has no recorded step to plot")
    if step is not None and step not in history.steps:
        raise ArgumentKeyError(f"step {step} was not recorded; recorded: {history.steps[0]} to {history.steps[-1]}")
    largest_table = history.param_table("max_abs")
    detailed = [recorded for recorded, row in zip(largest_table.steps, largest_table.rows) if any(value is not None for value in row)]
    if step is None:
        step = detailed[-1] if detailed else history.steps[-1]
    elif step not in detailed and detailed:
        raise ArgumentKeyError(f"step {step} was recorded without the largest and mean |g| (watch's details_every); steps with them: {detailed[-8:]}")
    stats = history.param_stats(step)
    names = flow_order(history)
    figure = Figure(figsize=(max(8.0, 0.35 * len(names) + 6), 5.0), layout="constrained")
    flow, heat = figure.subplots(1, 2, width_ratios=[3, 2])
    positions = list(range(len(names)))
    largest = [_positive(stats[name]["max_abs"]) for name in names]
    means = [_positive(stats[name]["mean_abs"]) for name in names]
    flow.bar(positions, largest, width=0.8, color="#4fa3d1", alpha=0.6, label="max |g|")
    flow.bar(positions, means, width=0.8, color="#0b3d91", label="mean |g|")
    flow.set_xticks(positions, names, rotation=90, fontsize=7)
    if any(value > 0 for value in largest + means):
        flow.set_yscale("log")
    flow.set_ylabel("|gradient| (log)")
    flow.set_title(f"gradient flow at step {step}")
    flow.legend(loc="upper right", fontsize=8)

    flags = history.flags(step)
    rows = [name for name in history.order if not layers_only or name in history.layers]
    table = history.module_table()
    columns = [table.columns.index(name) for name in rows]
    data = [[_masked(row[column]) for row in table.rows] for column in columns]
    finite = [value for line in data for value in line if value is not None and value > 0]
    matrix = [[math.nan if value is None or value <= 0 else value for value in line] for line in data]
    norm = LogNorm(vmin=min(finite), vmax=max(finite)) if finite else None
    image = heat.imshow(matrix, aspect="auto", interpolation="nearest", norm=norm, cmap="viridis")
    heat.set_yticks(range(len(rows)), [f"{module_label(name)}{' ⚠' if name in flags else ''}" for name in rows], fontsize=7)
    ticks = sorted({0, len(table.steps) - 1, *range(0, len(table.steps), max(1, len(table.steps) // 8))})
    heat.set_xticks(ticks, [str(table.steps[index]) for index in ticks], fontsize=7)
    heat.set_xlabel("step")
    heat.set_title("gradient norm at module outputs")
    figure.colorbar(image, ax=heat, label="‖∂loss/∂output‖")
    return figure


def save_flow(history: WatchHistory, path: str | os.PathLike[str], step: int | None = None) -> Path:
    """Write `plot_flow` to ``path``, in the format its suffix names (``.png``, ``.svg``, ``.pdf``)."""
    target = Path(path)
    plot_flow(history, step).savefig(target, format=target.suffix.lstrip(".") or "png", dpi=120)
    return target


def _positive(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else 0.0


def _masked(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None
