"""Gradient flow over training: `watch` a model's gradients per parameter and per module, step after step.

`watch` puts hooks on a model for the length of a training loop. At every
``every``-th step it keeps, per parameter, the norm and the non-finite count
of its ``.grad``, and per module the norm of the gradient that arrived at the
module's output (a hook on the output's autograd node, placed by a forward
hook), so that a gradient vanishing between layers shows. One recorded step
in ``details_every`` (and every step with a non-finite gradient) also keeps
each ``.grad``'s mean, mean and largest ``|g|`` and, given the optimizer, the
update-to-weight ratio ``‖w_after - w_before‖ / ‖w_before‖`` of the step:
these take several more passes over the gradients and a copy of the weights,
which would cost more than the rest of the step on a small model. The graph
is traced once, at the first recorded step, and again only after the modules a
step calls change (a `gradexport.errors.StructureChangedWarning` says so).

A step ends at ``optimizer.step()`` when the optimizer is given (a step
pre-hook reads the gradients, a post-hook the update), otherwise at
`Watch.step`, to be called after ``backward()``. Statistics are computed as
tensors in as few calls as the gradients allow (one ``torch._foreach_norm``
over all gradients; the details in `gradexport.backward.watch_stats`) and
turned into Python numbers once per step. With ``bad_steps``, the flight
recorder judges the step from the same norms. A container that
returns its last child's output (``nn.Sequential``) shares that output's one
hook and norm. The hooks return ``None`` and read, never write:
training under `watch` is bit-identical to training without it.

What is recorded under ``DistributedDataParallel``: a parameter's ``.grad``
after ``backward()`` is the all-reduced average over the ranks (DDP's reducer
writes it during backward); a module's output gradient is this rank's own,
before any all-reduce. Each rank records; ``ranks="zero"`` (default) writes
only rank 0's file, ``ranks="each"`` one file per rank.

The file is described in `gradexport.backward.watch_file`.

Examples:
    >>> import torch, gradexport
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> with gradexport.watch(model, optimizer=optimizer) as w:
    ...     for _ in range(3):
    ...         optimizer.zero_grad()
    ...         model(torch.randn(16, 4)).pow(2).mean().backward()
    ...         optimizer.step()
    >>> history = w.history
    >>> history.steps, history.order, history.flags()
    ([0, 1, 2], ['0', '1', '2', ''], {})
    >>> stats = history.param_stats(0)["0.weight"]  # step 0 has the details (details_every=10)
    >>> sorted(stats), history.param_stats(2)["0.weight"]["max_abs"]
    (['max_abs', 'mean', 'mean_abs', 'nonfinite', 'norm', 'update_ratio'], None)
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import Any, Literal

import networkx as nx
import torch
from torch import nn
from torch.autograd.graph import Node
from torch.utils.hooks import RemovableHandle

from ..core.errors import ArgumentTypeError, ArgumentValueError, RootError, StructureChangedWarning
from ..core.extras import import_extra
from ..core.reports import module_label
from ..tracing._torch import foreach_copy_, foreach_norm, foreach_sub_, grad_tensors, register_step_hooks
from ..tracing.graph import to_networkx
from ..tracing.modules import capture_modules
from .recorder import BadSteps, FlightRecorder
from .watch_file import EDGES_KEYWORD, THRESHOLDS, WatchFile, WatchHistory
from .watch_stats import GradientStatistics, floats

__all__ = ["DETAILS_EVERY", "RECORDED", "Watch", "watch"]

#: Default ``details_every``: one recorded step in this many gets the largest |g|, the means and the update ratio.
DETAILS_EVERY = 10

#: What the gradients in a watch file are, as its header says.
RECORDED = (
    "parameters: .grad after backward (under DistributedDataParallel: after its all-reduce, the average over ranks); "
    "modules: the gradient at the module's output on this rank (before any all-reduce)"
)


def watch(
    model: nn.Module,
    *,
    every: int = 1,
    details_every: int = DETAILS_EVERY,
    optimizer: torch.optim.Optimizer | None = None,
    path: str | os.PathLike[str] | None = None,
    fsync: bool = False,
    trace: bool = True,
    ranks: Literal["zero", "each"] = "zero",
    tensorboard: str | os.PathLike[str] | None = None,
    thresholds: dict[str, float] | None = None,
    on_step: Callable[[int], None] | None = None,
    bad_steps: str | os.PathLike[str] | BadSteps | None = None,
) -> Watch:
    """Watch ``model``'s gradients over a training loop: a context manager, or call `Watch.start` and `Watch.close`.

    Args:
        model: The module to watch: all its parameters and all its modules.
        every: Record every ``every``-th step (steps 0, every, 2·every...).
        details_every: Of the recorded steps, every ``details_every``-th
            (the first, then one in ``details_every``) and every step with a
            non-finite gradient also gets each gradient's largest ``|g|``,
            mean and mean ``|g|``, and the update ratio; the others hold
            ``null`` for these (they cost more passes over the gradients and
            the weights than the norms). ``1``: all of them at every recorded step.
        optimizer: The optimizer whose ``step()`` ends a step; with it, the
            update-to-weight ratio is recorded (the parameters are copied
            before each recorded step for it). Without it, call `Watch.step`
            after each ``backward()``.
        path: Append the history to this file (JSON Lines, see
            `gradexport.backward.watch_file`); with ``ranks="each"`` a
            ``{rank}`` in it is replaced by the rank, otherwise ``.rankN``
            goes before the suffix.
        fsync: ``os.fsync`` after every line, so a machine that loses power
            keeps every step too (a killed process keeps them without it).
        trace: Trace the autograd graph at the first recorded step (and again
            after a structure change), for `WatchHistory.graph` and the viewer.
        ranks: Under ``torch.distributed``: ``"zero"`` writes only on rank 0,
            ``"each"`` writes one file per rank.
        tensorboard: Also write every step's values as TensorBoard scalars
            into this folder (the ``tensorboard`` extra).
        thresholds: Overrides of the vanishing and exploding thresholds of
            `WatchHistory.flags` (``layers``, ``own``, ``explode``, ``baseline_steps``).
        on_step: Called with the step's index after every step ends,
            recorded or not (the command line moves its progress bar so).
        bad_steps: A folder (or a `gradexport.tools.BadSteps` for the
            thresholds): the flight recorder writes a bundle into it for every
            step whose loss, output or gradients hold NaN or Inf, or whose
            gradient norm jumps (see `gradexport.backward.recorder`;
            `gradexport.load_bundle` reads one, ``gradexport view`` shows it).

    Examples:
        >>> import torch, gradexport
        >>> model = torch.nn.Linear(3, 1)
        >>> with gradexport.watch(model) as w:
        ...     model(torch.ones(2, 3)).sum().backward()
        ...     w.step()
        >>> w.history.param_table("max_abs").rows
        [[2.0, 2.0]]
    """
    return Watch(
        model,
        every=every,
        details_every=details_every,
        optimizer=optimizer,
        path=path,
        fsync=fsync,
        trace=trace,
        ranks=ranks,
        tensorboard=tensorboard,
        thresholds=thresholds,
        on_step=on_step,
        bad_steps=bad_steps,
    )


class Watch(AbstractContextManager["Watch"]):
    """A running `watch`: its hooks, its file, and what it recorded so far (`history`)."""

    def __init__(
        self,
        model: nn.Module,
        *,
        every: int = 1,
        details_every: int = DETAILS_EVERY,
        optimizer: torch.optim.Optimizer | None = None,
        path: str | os.PathLike[str] | None = None,
        fsync: bool = False,
        trace: bool = True,
        ranks: Literal["zero", "each"] = "zero",
        tensorboard: str | os.PathLike[str] | None = None,
        thresholds: dict[str, float] | None = None,
        on_step: Callable[[int], None] | None = None,
        bad_steps: str | os.PathLike[str] | BadSteps | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise ArgumentTypeError(f"watch() takes an nn.Module, not {type(model).__name__}")
        for name, value in (("every", every), ("details_every", details_every)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ArgumentValueError(f"watch(): {name} must be a positive integer, not {value!r}")
        if ranks not in ("zero", "each"):
            raise ArgumentValueError(f"ranks must be 'zero' or 'each', not {ranks!r}")
        unknown = set(thresholds or {}) - set(THRESHOLDS)
        if unknown:
            raise ArgumentValueError(f"unknown thresholds {sorted(unknown)}; there are {sorted(THRESHOLDS)}")
        self.model = model
        self.every = every
        self.details_every = details_every
        self.optimizer = optimizer
        self.fsync = fsync
        self.trace = trace
        self.ranks = ranks
        self.thresholds = {**THRESHOLDS, **(thresholds or {})}
        self._path = path
        self._on_step = on_step
        self._tensorboard = tensorboard
        self._params = list(model.named_parameters())
        self._modules = list(model.named_modules())
        self._module_index = {id(module): index for index, (_, module) in enumerate(self._modules)}
        layers = [name for name, module in self._modules if any(True for _ in module.parameters(recurse=False))]
        self.rank, self.world_size = _rank()
        self.header: dict[str, Any] = {
            "parameters": [name for name, _ in self._params],
            "modules": [name for name, _ in self._modules],
            "layers": layers,
            "every": every,
            "details_every": details_every,
            "rank": self.rank,
            "world_size": self.world_size,
            "recorded": RECORDED,
            "thresholds": self.thresholds,
        }
        #: The current step (counted from 0, recorded or not).
        self.step_index = 0
        self.records: list[dict[str, Any]] = []
        self.path: Path | None = None
        self._file: WatchFile | None = None
        self._board: Any = None
        self._handles: list[RemovableHandle] = []
        self._norms: list[tuple[list[int], torch.Tensor]] = []
        self._last_output: torch.Tensor | None = None
        self._last_output_modules: list[int] = []
        self._calls: list[int] = []
        self._traced_calls: tuple[int, ...] | None = None
        self._need_trace = trace
        self._tracing: AbstractContextManager[None] | None = None
        self._trace_step: int | None = None
        self._pending: dict[str, Any] | None = None
        self._pending_graph: dict[str, Any] | None = None
        self._buffers: dict[int, torch.Tensor] = {}
        self._statistics = GradientStatistics()
        self._started = False
        # `recording`, kept up to date where it changes (read by the module hooks at every module call).
        self._hooking = False
        #: The flight recorder of ``bad_steps``, else ``None``.
        self.recorder = (
            None if bad_steps is None else FlightRecorder(model, bad_steps if isinstance(bad_steps, BadSteps) else BadSteps(bad_steps), optimizer=optimizer)
        )

    # --- life cycle -----------------------------------------------------------------

    def start(self) -> Watch:
        """Place the hooks and open the file; returns the watch."""
        if self._started:
            return self
        self._started = True
        self._hooking = self.recording
        writes = self.ranks == "each" or self.rank == 0
        if self._path is not None and writes:
            self.path = _rank_path(Path(self._path), self.rank) if self.ranks == "each" and self.world_size > 1 else Path(self._path)
            self._file = WatchFile(self.path, self.header, fsync=self.fsync)
        if self._tensorboard is not None and writes:
            import_extra("tensorboard", "tensorboard", "gradexport.watch(tensorboard=...)")
            from torch.utils.tensorboard import SummaryWriter

            self._board = SummaryWriter(log_dir=str(self._tensorboard))
        for index, (_, module) in enumerate(self._modules):
            self._handles.append(module.register_forward_hook(partial(self._after_forward, index)))
        self._handles.append(self.model.register_forward_hook(self._after_model, always_call=True))
        if self.optimizer is not None:
            self._handles += register_step_hooks(self.optimizer, self._before_update, self._after_update)
        self._begin_tracing()
        if self.recorder is not None:
            self.recorder.start()
        return self

    def close(self) -> None:
        """Remove the hooks and close the file (a step begun but not ended is not recorded)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self.recorder is not None:
            self.recorder.close()
        self._buffers = {}
        self._statistics = GradientStatistics()
        self._end_tracing()
        if self._file is not None:
            self._file.close()
        if self._board is not None:
            self._board.close()
        self._started = False
        self._hooking = False

    def __enter__(self) -> Watch:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def recording(self) -> bool:
        """Whether the current step is recorded."""
        return self._started and self.step_index % self.every == 0

    @property
    def history(self) -> WatchHistory:
        """What was recorded so far, as `gradexport.records.load_watch` would read it from the file."""
        return WatchHistory(self.header, self.records)

    # --- forward: module outputs and the trace ----------------------------------------

    def _after_forward(self, index: int, module: nn.Module, args: Any, output: Any) -> None:
        if not self._hooking:
            return
        if output is self._last_output:
            # A container returning its last child's output (Sequential): that tensor's one hook and norm serve both.
            self._last_output_modules.append(index)
            self._calls.append(index)
            return
        tensors = grad_tensors(output)
        for tensor in tensors:
            modules = [index]
            node = tensor.grad_fn
            # The gradient at the tensor is its node's incoming gradient at output_nr: a hook on the node costs
            # less to place than Tensor.register_hook. A leaf (a module returning a parameter) has no node, and
            # under Dynamo's tracing grad_fn is no Node (Dynamo traces tensor hooks, not node hooks).
            if isinstance(node, Node):
                node.register_prehook(partial(self._on_node_grads, modules, tensor.output_nr))
            else:
                tensor.register_hook(partial(self._on_output_grad, modules))
            self._last_output, self._last_output_modules = tensor, modules
        if tensors:
            self._calls.append(index)

    def _on_node_grads(self, modules: list[int], position: int, grads: tuple[torch.Tensor | None, ...]) -> None:
        grad = grads[position]
        if grad is not None:
            # A gradient requires grad only under backward(create_graph=True): its norm is no part of that graph.
            self._norms.append((modules, torch.linalg.vector_norm(grad.detach() if grad.requires_grad else grad)))

    def _on_output_grad(self, modules: list[int], grad: torch.Tensor) -> None:
        self._on_node_grads(modules, 0, (grad,))

    def _begin_tracing(self) -> None:
        # Entered before the model's forward begins (at start(), or when the previous step ends), so that
        # capture_modules' global hooks see the model's own call too; left when the model's forward returns.
        if self.recording and self._need_trace and self._tracing is None:
            self._tracing = capture_modules()
            self._tracing.__enter__()

    def _after_model(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._tracing is None or not torch.is_grad_enabled():
            return
        self._end_tracing()
        roots = grad_tensors(output)
        if not roots:
            return
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # a model whose own forward holds every node names none
                graph = to_networkx(roots, module=self.model)
        except RootError:
            return
        self._need_trace = False
        self._trace_step = self.step_index
        self._pending_graph = nx.node_link_data(graph, **EDGES_KEYWORD)

    def _end_tracing(self) -> None:
        if self._tracing is not None:
            tracing, self._tracing = self._tracing, None
            tracing.__exit__(None, None, None)

    # --- the end of a step ----------------------------------------------------------------

    def step(self) -> None:
        """End the current step (after ``backward()``, before ``zero_grad()``): record it if it is recorded.

        With an ``optimizer`` given, ``optimizer.step()`` does this itself.
        """
        if self.optimizer is not None:
            raise ArgumentValueError("this watch ends its steps at optimizer.step(); do not call step() as well")
        self._before_update()
        self._after_update()

    def _before_update(self, *_: Any) -> None:
        grad_norms: list[torch.Tensor] | None = None
        if self.recording:
            self._pending, grad_norms = self._read_gradients()
        if self.recorder is not None:  # after the reading above: the recorder's re-run of the step leaves it untouched
            self.recorder.end_step(self.step_index, grad_norms)

    def _after_update(self, *_: Any) -> None:
        try:
            if self.recording and self._pending is not None:
                record = self._pending
                before = record.pop("_weight_norms")
                if self.optimizer is not None and before is not None:
                    record["param"]["update_ratio"] = self._update_ratios(before)
                self._write(record)
        finally:
            self._pending = None
            self._norms = []
            self._calls = []
            self._last_output, self._last_output_modules = None, []
            self.step_index += 1
            self._hooking = self.recording
            self._begin_tracing()
        if self._on_step is not None:
            self._on_step(self.step_index - 1)

    def _present(self) -> list[int]:
        """The parameters with a (non-empty) gradient, by index."""
        return [index for index, (_, param) in enumerate(self._params) if param.grad is not None and param.grad.numel()]

    def _read_gradients(self) -> tuple[dict[str, Any], list[torch.Tensor]]:
        """The step's record, and the gradients' 2-norms as tensors (for the flight recorder, which needs them too).

        Every recorded step: each gradient's 2-norm (one ``_foreach_norm``),
        its non-finite count (counted only where the norm is not finite: a
        finite norm has no NaN or Inf under it), and the module outputs'
        norms, in one conversion to Python numbers. A step with details
        (`details_every`, or a gradient that is not finite) adds the rest of
        `GradientStatistics` and copies the parameters into buffers kept
        between steps for the update ratio (``_foreach_copy_``, one call; a
        ``clone()`` per parameter allocates each time).
        """
        present = self._present()
        grads = [grad for index in present if (grad := self._params[index][1].grad) is not None]
        with torch.no_grad():
            grad_norms = foreach_norm(grads) if grads else []
            numbers = floats([*grad_norms, *(norm for _, norm in self._norms)])
        norms, module_values = numbers[: len(grads)], numbers[len(grads) :]
        width = len(self._params)
        columns: dict[str, list[Any]] = {stat: [None] * width for stat in ("norm", "nonfinite")}
        finite = True
        for index, grad, norm in zip(present, grads, norms):
            columns["norm"][index] = norm
            finite = finite and math.isfinite(norm)
            columns["nonfinite"][index] = 0 if math.isfinite(norm) else int((~torch.isfinite(grad)).sum())
        weight_norms = None
        if grads and (not finite or (self.step_index // self.every) % self.details_every == 0):
            columns.update(self._details(present, grads, grad_norms))
            weight_norms = self._copy_weights(present) if self.optimizer is not None else None
        received: list[list[float]] = [[] for _ in self._modules]
        for (modules, _), norm in zip(self._norms, module_values):
            for index in modules:
                received[index].append(norm)
        # A module called several times a step (shared weights) receives a gradient at each call: the norm is over all.
        module_norms = [None if not got else got[0] if len(got) == 1 else math.sqrt(sum(n * n for n in got)) for got in received]
        record: dict[str, Any] = {
            "kind": "step",
            "step": self.step_index,
            "param": {stat: columns.get(stat) for stat in ("norm", "max_abs", "mean", "mean_abs", "nonfinite", "update_ratio")},
            "module": {"norm": module_norms},
            "_weight_norms": weight_norms,
        }
        self._check_structure()
        return record, grad_norms

    def _details(self, present: list[int], grads: list[torch.Tensor], norms: list[torch.Tensor]) -> dict[str, list[Any]]:
        """The largest ``|g|``, mean and mean ``|g|`` of each gradient, as columns of the record (``None`` where there is no gradient)."""
        gradients = self._statistics.columns(grads, norms)
        width = len(self._params)
        columns: dict[str, list[Any]] = {stat: [None] * width for stat in ("max_abs", "mean", "mean_abs")}
        for position, (index, grad) in enumerate(zip(present, grads)):
            columns["max_abs"][index] = gradients.max_abs[position]
            columns["mean"][index] = gradients.sum[position] / grad.numel()
            columns["mean_abs"][index] = gradients.abs_sum[position] / grad.numel()
        return columns

    def _copy_weights(self, present: list[int]) -> tuple[list[int], list[float]]:
        """Copy the parameters with a gradient into the kept buffers, before the update; their indices and norms."""
        with torch.no_grad():
            weights = [self._params[index][1] for index in present]
            foreach_copy_([self._buffer(index, weight) for index, weight in zip(present, weights)], weights)
            return present, floats(foreach_norm(weights))

    def _buffer(self, index: int, weight: torch.Tensor) -> torch.Tensor:
        # The parameters before the update, kept between steps (one copy of the model's parameters).
        buffer = self._buffers.get(index)
        if buffer is None or buffer.shape != weight.shape or buffer.dtype != weight.dtype or buffer.device != weight.device:
            buffer = self._buffers[index] = torch.empty_like(weight, memory_format=torch.preserve_format)
        return buffer

    def _update_ratios(self, before: tuple[list[int], list[float]]) -> list[float | None]:
        present, sizes = before
        ratios: list[float | None] = [None] * len(self._params)
        if not present:
            return ratios
        with torch.no_grad():
            buffers = [self._buffers[index] for index in present]
            foreach_sub_(buffers, [self._params[index][1] for index in present])  # before - after
            changes = floats(foreach_norm(buffers))
        for index, change, size in zip(present, changes, sizes):
            ratios[index] = change / size if size else (math.inf if change else math.nan)  # as torch divides
        return ratios

    def _check_structure(self) -> None:
        calls = tuple(dict.fromkeys(self._calls))
        if self._trace_step == self.step_index or self._traced_calls is None:
            if calls:
                self._traced_calls = calls
            return
        if calls and calls != self._traced_calls:
            names = [module_label(self._modules[index][0]) for index in calls]
            before = [module_label(self._modules[index][0]) for index in self._traced_calls]
            reason = f"step {self.step_index} called {len(names)} modules {names[:8]}, the traced step {len(before)} {before[:8]}"
            warnings.warn(
                f"watch: the model's structure changed ({reason}); its graph is traced again at the next recorded step",
                StructureChangedWarning,
                stacklevel=2,
            )
            self._emit({"kind": "structure", "step": self.step_index, "reason": reason})
            self._traced_calls = calls
            self._need_trace = self.trace

    def _write(self, record: dict[str, Any]) -> None:
        graph = self._pending_graph
        if graph is not None:
            self._pending_graph = None
            order = [self._modules[index][0] for index in dict.fromkeys(self._calls)]
            reason = "the first recorded step" if not any(r.get("kind") == "graph" for r in self.records) else "the structure changed"
            self._emit({"kind": "graph", "step": record["step"], "reason": reason, "order": order, "graph": graph})
        self._emit(record)
        if self._board is not None:
            for tag, value in self.history.scalars(record):
                self._board.add_scalar(tag, value, record["step"])

    def _emit(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if self._file is not None:
            self._file.write(record)


def _rank() -> tuple[int, int]:
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized():
        return distributed.get_rank(), distributed.get_world_size()
    return 0, 1


def _rank_path(path: Path, rank: int) -> Path:
    if "{rank}" in str(path):
        return Path(str(path).format(rank=rank))
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")
