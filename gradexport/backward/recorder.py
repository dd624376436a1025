"""The flight recorder of `gradexport.watch`: with ``bad_steps=FOLDER``, one bundle per training step that goes bad.

What it keeps at every step, so that the step can be run again: the model's
inputs of each call (references, not copies), the random number generators'
state before each call (CPU, and the CUDA devices the parameters are on), the
gradient that reached each of the model's outputs in the real backward (a
tensor hook clones it), and the loss that ``loss.backward()`` was called on.
Its checks cost two device-to-host transfers per step: at ``loss.backward()``
whether the loss and the model's outputs are finite (so that a step whose
forward went bad is known before its backward, and its loss part is
recorded: `gradexport.backward.recorder_loss`), and at the step's end the
2-norm over every ``.grad``.

A step goes bad when the loss or the model's output holds a NaN or Inf, when
a gradient does (the norm over all is not finite), or when the gradient norm
is more than ``jump`` times the mean of the last `BASELINE_STEPS` healthy
steps (from the third healthy step on). At the end of the step (at
``optimizer.step()`` before the update, or `gradexport.records.Watch.step`) the
recorder runs the step again: the model's forward on the kept inputs with the
generators set back, under `gradexport.tools.capture_source` and
`gradexport.capture_modules`, then a recorded backward
(`gradexport.record_gradients`) from the outputs with the gradients they got.
The parameters still hold the weights the step used, so this is the step
itself: the recorder checks that every parameter's re-run gradient equals
the training step's ``.grad`` bit for bit (``reproduced`` in the bundle).
Around the re-run it sets aside and restores each ``.grad``, the module
buffers (BatchNorm's running statistics) and the generators' state, so that
training goes on exactly as without the recorder.

A healthy step is kept without a re-run: its calls (as above) stay held, and
the weights it ran with (parameters and buffers) are copied, with one
``_foreach_copy_``, into tensors kept between steps. Only when a bad step
comes is the kept step re-run, the same way, on those weights
(`torch.func.functional_call`, so the model's own parameters are not
touched), and its gradient norm is checked against the one measured at that
step. By default the first healthy step is kept and then one every 10
(``healthy_every=10``, so that the copy is paid once in 10 steps), so the
bundle's healthy step is at most 10 steps before the bad one;
``healthy_every=1`` keeps the step just before it.

With ``optimizer.step(closure)`` (``torch.optim.LBFGS``), each evaluation
of the closure is judged as it returns, and a bad one is run again through
the closure itself, forward, loss and backward, under the same captures: the
loss function's ops get their lines and the forward origin is exact there too.

Under torch.distributed with more than one rank, a DistributedDataParallel
model (or a plain one) is recorded on every rank: the recorder hooks the
module DDP wraps, re-runs a bad step on a copy of the weights (no all-reduce
hook fires, no collective starts on one rank) and writes
``bad-step-000017.rank1.json``; a sharded model (FSDP) is refused.

Memory held: one copy of the model's parameters and buffers; the current
step's and the kept step's references (their inputs, one copy of their
outputs' gradients, one generator state of 5 kB per device). A bundle adds
nothing that stays: it is written and dropped. At most ``max_bundles``
bundles are written (default `MAX_BUNDLES`); later bad steps are counted in
`FlightRecorder.bad_steps`.

Examples:
    >>> import os, tempfile, torch, gradexport
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> folder = tempfile.mkdtemp()
    >>> with gradexport.watch(model, optimizer=optimizer, bad_steps=folder):
    ...     for step in range(4):
    ...         optimizer.zero_grad()
    ...         batch = torch.ones(2, 3) * (float("nan") if step == 3 else 1.0)
    ...         model(batch).sum().backward()
    ...         optimizer.step()
    >>> os.listdir(folder)
    ['bad-step-000003.json']
    >>> bundle = gradexport.load_bundle(os.path.join(folder, "bad-step-000003.json"))
    >>> bundle.bad.reasons[0], bundle.healthy.step, bundle.bad.reproduced
    ('the loss is nan', 0, True)
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.autograd.graph import Node

from ..core.errors import ArgumentTypeError, ArgumentValueError, RootError, StartGradientError, UnreproducedStepWarning
from ..tracing._torch import foreach_copy_, foreach_norm, grad_tensors, leaf_variable, observe_backward_calls, wrap_step_closure
from ..tracing.forward_values import ForwardOrigin, check_of
from ..tracing.graph import Trace, trace
from ..tracing.lines import CallSite, call_from, capture_source, user_call_site
from ..tracing.modules import capture_modules
from .bundle_file import bundle_name, graph_data, write_bundle
from .nonfinite import _named_origin
from .record_gradients import record_flow
from .recorder_loss import Edge, LossPart, copies
from .replay_record import Replay, ReplayStart, ReplayStep
from .start_gradients import Start, start_gradients
from .steps import step_data
from .watch_stats import floats

__all__ = ["BASELINE_STEPS", "HEALTHY_EVERY", "JUMP", "MAX_BUNDLES", "BadSteps", "FlightRecorder"]

#: Default factor of the gradient-norm jump that makes a step bad.
JUMP = 10.0
#: Default: keep a healthy step every this many steps (each keep copies the weights).
HEALTHY_EVERY = 10
#: Default most bundles one watch writes.
MAX_BUNDLES = 10
#: How many recent healthy steps' gradient norms the jump is judged against.
BASELINE_STEPS = 20
#: How many values of a gradient a bundle keeps (a gradient with more keeps its summary only).
VALUES_UP_TO = 16
#: The graph attribute holding the steps of the recorded backward, as the stepping viewer reads them (`step_data`).
STEPS_ATTRIBUTE = "replay_steps"


@dataclass(frozen=True)
class BadSteps:
    """Where and how `gradexport.watch` records bad steps: pass it as ``bad_steps=`` (a folder alone takes the defaults).

    Attributes:
        folder: The folder the bundles are written into (made if missing).
        jump: A step whose gradient norm is more than ``jump`` times the mean
            of the last `BASELINE_STEPS` healthy steps is bad.
        healthy_every: Keep the first healthy step, then one every
            ``healthy_every`` steps, for the bundles to compare with (each
            keep copies the model's parameters and buffers into one copy held).
        max_bundles: Write at most this many bundles.

    Examples:
        >>> BadSteps("runs/bad").jump, BadSteps("runs/bad", healthy_every=5).healthy_every
        (10.0, 5)
    """

    folder: str | os.PathLike[str]
    jump: float = JUMP
    healthy_every: int = HEALTHY_EVERY
    max_bundles: int = MAX_BUNDLES

    def __post_init__(self) -> None:
        if not isinstance(self.folder, (str, os.PathLike)):
            raise ArgumentTypeError(f"bad_steps takes a folder or a BadSteps, not {type(self.folder).__name__}")
        if not (isinstance(self.jump, (int, float)) and self.jump > 1):
            raise ArgumentValueError(f"BadSteps: jump must be a number above 1, not {self.jump!r}")
        for name in ("healthy_every", "max_bundles"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ArgumentValueError(f"BadSteps: {name} must be a positive integer, not {value!r}")


@dataclass
class _Call:
    """One call of the model in the current step: what it takes to run it again."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    generators: list[torch.Tensor]
    #: The user's line that called the model, for the run again to be named by it (`call_from`).
    site: CallSite | None
    output_grads: dict[int, torch.Tensor] = field(default_factory=dict)
    outputs: list[torch.Tensor] | None = None
    sums: list[torch.Tensor] = field(default_factory=list)
    #: The sums of ``outputs`` read at ``loss.backward()`` (`FlightRecorder._check_forward`), which then empties ``sums``.
    read: list[float] = field(default_factory=list)


@dataclass
class _Kept:
    """The last healthy step kept: its calls, its figures, and a copy of the weights it ran with."""

    step: int
    calls: list[_Call]
    loss: float | None
    grad_norm: float | None


class FlightRecorder:
    """Hooks on a model that keep what reproduces its current step, and write a bundle when the step goes bad.

    `gradexport.watch` makes one for ``bad_steps=`` and calls `end_step` where
    a step ends, before the optimizer's update.
    """

    def __init__(self, model: nn.Module, settings: BadSteps, optimizer: torch.optim.Optimizer | None = None) -> None:
        distributed = torch.distributed
        world = distributed.get_world_size() if distributed.is_available() and distributed.is_initialized() else 1
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module  # its own forward's collectives (the buffers' broadcast, the reducer's preparation) stay out of the re-runs
        if world > 1 and not all(type(param) in (torch.Tensor, nn.Parameter) for param in model.parameters()):
            # FSDP's forward gathers each layer's weights from every rank: a re-run on one rank would wait for the others.
            raise ArgumentValueError(
                "watch(bad_steps=...) under torch.distributed records a DistributedDataParallel model or a plain one, not a sharded"
                " one (FSDP: its parameters are not plain tensors): its re-run would gather weights from every rank; record it on a single process"
            )
        #: This process's rank and how many ranks there are (0 and 1 without torch.distributed).
        self.rank, self.world_size = (distributed.get_rank(), world) if world > 1 else (0, 1)
        self.model = model
        self.settings = settings
        self.folder = Path(settings.folder)
        #: The bad steps seen so far, with or without a bundle.
        self.bad_steps: list[int] = []
        #: The bundles written so far.
        self.bundles: list[Path] = []
        self._params = [(name, param) for name, param in model.named_parameters() if param.requires_grad]
        # What a kept step's weights are copied from: every parameter and buffer, listed once (as watch lists its parameters).
        self._state = [*model.named_parameters(), *model.named_buffers()]
        self._cuda = sorted({param.device.index or 0 for _, param in self._params if param.device.type == "cuda"})
        self._calls: list[_Call] = []
        # The value of each loss backward() was called on in this step, read at that call (`_check_forward`).
        self._losses: list[float] = []
        # The loss part of this step, hooked at a backward() whose loss or model output was already not finite.
        self._loss_part: LossPart | None = None
        # The node of the last loss backward() was called on in this step, for the loss part's structure should the step go bad.
        self._loss_node: Node | None = None
        # This step's calls with the outputs that need a gradient, as the model returned them: their nodes bound the loss
        # part. Held here, not on the calls: an output's hook holds its call, and the call would hold the output back.
        self._results: list[tuple[_Call, list[torch.Tensor]]] = []
        self._baseline: deque[float] = deque(maxlen=BASELINE_STEPS)
        self._healthy: _Kept | None = None
        # The weights (parameters and buffers) of the healthy step kept, copied into tensors kept between steps.
        self._weights: dict[str, torch.Tensor] = {}
        self._replaying = False
        self._handles: list[Any] = []
        self._optimizer = optimizer
        # Inside optimizer.step(closure): the closure given, and the step that the watch's end_step named.
        self._closure: Callable[[], Any] | None = None
        self._closure_step: int | None = None

    def start(self) -> None:
        """Place the hooks (on the model, and on ``Tensor.backward`` to see the loss)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self._handles = [
            self.model.register_forward_pre_hook(self._before_model, with_kwargs=True),
            self.model.register_forward_hook(self._after_model),
            observe_backward_calls(self._on_backward),
        ]
        if self._optimizer is not None and self.world_size == 1:  # a closure re-run would run DDP's own forward and backward
            self._handles.append(wrap_step_closure(self._optimizer, self._closure_evaluations))

    def close(self) -> None:
        """Remove the hooks and drop what the current step kept."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._take_loss_part(self._calls)
        self._calls, self._losses = [], []

    # --- what every step keeps --------------------------------------------------------

    def _before_model(self, _: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._replaying or not torch.is_grad_enabled():
            return
        self._calls.append(_Call(args, dict(kwargs), self._generators(), user_call_site()))

    def _after_model(self, _: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if self._replaying or not self._calls or self._calls[-1].outputs is not None or not torch.is_grad_enabled():
            return
        call = self._calls[-1]
        tensors = grad_tensors(output)
        for position, tensor in enumerate(tensors):
            tensor.register_hook(partial(self._keep_grad, call, position))
        # One sum per output: a finite sum has no NaN or Inf in it (a non-finite one is looked at element by element).
        call.outputs = [tensor.detach() for tensor in tensors if tensor.is_floating_point()]
        call.sums = [tensor.sum() for tensor in call.outputs]
        self._results.append((call, tensors))

    @staticmethod
    def _keep_grad(call: _Call, position: int, grad: torch.Tensor) -> None:
        # A copy: the engine may add into the tensor it handed to the hook later in the pass.
        call.output_grads[position] = grad.detach().clone()

    def _on_backward(self, tensor: torch.Tensor) -> None:
        if not self._replaying and self._calls and tensor.grad_fn is not None:
            self._check_forward(tensor)

    def _check_forward(self, loss: torch.Tensor) -> None:
        """At ``loss.backward()``: read whether the loss and the model's outputs so far are finite; if not, hook the loss part (`LossPart`).

        The step's one read of its forward (the loss, the outputs' sums),
        taken here rather than at the step's end, so that a step whose
        forward went bad is known before its backward runs.
        """
        calls = [call for call in self._calls if call.sums]
        values = [loss if loss.dim() == 0 else loss.detach().sum()]
        for call in calls:
            values += call.sums
        numbers = floats(values)
        self._losses.append(numbers[0])
        self._loss_node = loss.grad_fn
        start = 1
        for call in calls:
            call.read, call.sums = numbers[start : start + len(call.sums)], []
            start += len(call.read)
        if all(math.isfinite(number) for number in numbers) or self._loss_part is not None:
            return
        outputs = {key: (edge, bool(torch.isfinite(tensor.detach()).all())) for key, (edge, tensor) in _output_edges(self._results).items()}
        if all(finite for _, finite in outputs.values()) and bool(torch.isfinite(loss).all()):
            return  # a sum overflowed; every element is finite
        try:
            self._loss_part = LossPart(loss, outputs, named=self._params, values_up_to=VALUES_UP_TO)
        except (RootError, StartGradientError):
            self._loss_part = None  # a non-scalar loss whose gradient backward() is given: no loss part

    def _take_loss_part(self, calls: list[_Call]) -> LossPart | Callable[[], LossPart] | None:
        """At the step's end: the loss part hooked in this step (its hooks removed), else one that traces its structure when called."""
        part: LossPart | Callable[[], LossPart] | None
        part, self._loss_part = self._loss_part, None
        results, self._results = self._results, []
        if part is not None:
            part.finish()
        elif self._loss_node is not None:
            part = partial(self._loss_structure, self._loss_node, results)
        self._loss_node = None
        return part

    def _loss_structure(self, node: Node, results: list[tuple[_Call, list[torch.Tensor]]]) -> LossPart:
        """The loss part's structure, traced after the backward from the loss's node down to the calls' outputs."""
        return LossPart(node, {key: (edge, True) for key, (edge, _) in _output_edges(results).items()}, named=self._params)

    # --- the end of a step -------------------------------------------------------------

    def end_step(self, step: int, grad_norms: list[torch.Tensor] | None = None) -> Path | None:
        """Judge the step that ends; keep it if it is a healthy step to keep; write its bundle if it is bad.

        ``grad_norms``: the 2-norm of every parameter's ``.grad`` (those
        present, in ``named_parameters()`` order), as `foreach_norm` gave them
        to a watch that recorded this step, so that they are not computed twice.
        Inside ``optimizer.step(closure)`` the step's forward and backward
        have not run yet: each evaluation of the closure is judged as it
        returns (`_closure_evaluations`). Returns the bundle written, else ``None``.
        """
        if self._closure is not None:
            self._closure_step = step
            return None
        return self._judge(step, grad_norms=grad_norms)

    @contextmanager
    def _closure_evaluations(self, closure: Callable[[], Any]) -> Iterator[Callable[[], Any]]:
        """Around ``optimizer.step(closure)``: the closure to give the step, which judges each evaluation as it returns."""
        self._closure, self._closure_step = closure, None

        def evaluation() -> Any:
            generators = self._generators()
            loss = closure()
            if self._closure_step is not None and not self._replaying:
                self._judge(self._closure_step, rerun=(closure, generators))
            return loss

        try:
            yield evaluation
        finally:
            self._closure = self._closure_step = None

    def _generators(self) -> list[torch.Tensor]:
        return [torch.get_rng_state()] + [torch.cuda.get_rng_state(index) for index in self._cuda]

    def _judge(self, step: int, rerun: tuple[Callable[[], Any], list[torch.Tensor]] | None = None, grad_norms: list[torch.Tensor] | None = None) -> Path | None:
        """`end_step`'s work; ``rerun``, a closure and the generators' state before it ran, runs a bad step again whole."""
        calls, losses = self._calls, self._losses
        self._calls, self._losses = [], []
        loss_part = self._take_loss_part(calls)
        grad_norm, loss, output_finite = self._measure(calls, losses, grad_norms=grad_norms)
        reasons = self._reasons(grad_norm, loss, output_finite)
        if not reasons:
            if grad_norm is not None:
                self._baseline.append(grad_norm)
            if calls and (self._healthy is None or step - self._healthy.step >= self.settings.healthy_every):
                self._keep_weights()
                self._healthy = _Kept(step, calls, loss, grad_norm)
            return None
        if rerun is not None and self.bad_steps and self.bad_steps[-1] == step:
            return None  # a later evaluation of the closure in a step already bad
        self.bad_steps.append(step)
        if len(self.bundles) >= self.settings.max_bundles:
            return None
        if rerun is not None:
            record = self._record_closure(step, *rerun, reasons, loss, grad_norm)
        else:
            record = self._record(step, calls, reasons, loss, grad_norm, loss_part=loss_part)
        kept = self._healthy
        healthy = None if kept is None else self._record(kept.step, kept.calls, (), kept.loss, kept.grad_norm, weights=self._weights)
        if record is None:
            warnings.warn(
                f"watch(bad_steps=...): step {step} went bad ({'; '.join(reasons)}) but the model was not called with gradients"
                " in it: no bundle; call the model inside the step, between zero_grad() and backward()",
                UnreproducedStepWarning,
                stacklevel=3,
            )
            return None
        path = self.folder / bundle_name(step, self.rank if self.world_size > 1 else None)
        write_bundle(path, bad=record, healthy=healthy, jump=float(self.settings.jump), healthy_every=self.settings.healthy_every)
        self.bundles.append(path)
        return path

    def _keep_weights(self) -> None:
        """Copy the model's parameters and buffers, as the step that ends used them, into `_weights`."""
        if not self._weights:
            self._weights = {name: torch.empty_like(value, memory_format=torch.preserve_format) for name, value in self._state}
        with torch.no_grad():
            foreach_copy_(list(self._weights.values()), [value.detach() for _, value in self._state])

    def _measure(
        self,
        calls: list[_Call],
        losses: list[float],
        leaves: list[torch.Tensor] | None = None,
        *,
        grad_norms: list[torch.Tensor] | None = None,
    ) -> tuple[float | None, float | None, bool]:
        """The gradient norm over every ``.grad`` (of the model's parameters, or of ``leaves``), the last loss, and whether the outputs were finite.

        The norm over all is the norm of the per-gradient norms (``grad_norms``
        when they were computed already, one per gradient). One device-to-host
        transfer (the loss and the outputs that a ``backward()`` followed were
        read then, by `_check_forward`).
        """
        tensors = [param for _, param in self._params] if leaves is None else leaves
        grads = [tensor.grad for tensor in tensors if tensor.grad is not None and tensor.grad.numel()]
        with torch.no_grad():
            values: list[torch.Tensor] = []
            if grads:
                # The watch's gradients are every parameter's, these the trainable ones', in the same order: as
                # many means the same ones.
                norms = foreach_norm(grads) if grad_norms is None or len(grad_norms) != len(grads) else grad_norms
                # One dtype (the common case) stacks as it is; mixed ones (a float16 part) are made float32 first.
                same = all(norm.dtype == norms[0].dtype for norm in norms)
                values.append(torch.linalg.vector_norm(torch.stack(norms if same else [norm.float() for norm in norms]).float()))
            values += [total.float() for call in calls for total in call.sums]
            numbers = floats(values)
        grad_norm = numbers.pop(0) if grads else None
        loss = losses[-1] if losses else None
        numbers += [total for call in calls for total in call.read]
        finite = all(math.isfinite(total) for total in numbers) or all(bool(torch.isfinite(output).all()) for call in calls for output in call.outputs or ())
        return grad_norm, loss, finite

    def _reasons(self, grad_norm: float | None, loss: float | None, output_finite: bool) -> tuple[str, ...]:
        reasons = []
        if loss is not None and not math.isfinite(loss):
            reasons.append(f"the loss is {loss}")
        if not output_finite:
            reasons.append("the model's output holds NaN or Inf")
        if grad_norm is not None and not math.isfinite(grad_norm):
            reasons.append(f"a gradient holds NaN or Inf (the norm over all is {grad_norm})")
        elif grad_norm is not None and len(self._baseline) >= 3:
            mean = sum(self._baseline) / len(self._baseline)
            if mean > 0 and grad_norm > self.settings.jump * mean:
                reasons.append(
                    f"the gradient norm {grad_norm:.4g} is {grad_norm / mean:.3g} times the mean {mean:.4g} of the last"
                    f" {len(self._baseline)} healthy steps (jump={self.settings.jump:g})"
                )
        return tuple(reasons)

    # --- running a step again ------------------------------------------------------------

    def _record(
        self,
        step: int,
        calls: list[_Call],
        reasons: tuple[str, ...],
        loss: float | None,
        grad_norm: float | None,
        *,
        weights: dict[str, torch.Tensor] | None = None,
        loss_part: LossPart | Callable[[], LossPart] | None = None,
    ) -> dict[str, Any] | None:
        """Run the step's calls again with a recorded backward; its record as a bundle holds it (``None`` if nothing to run).

        With ``weights`` (a step kept earlier), the model runs on those
        parameters and buffers (`torch.func.functional_call`), whose gradients
        go to the copies; without, on its own, whose ``.grad`` is set aside.
        With ``loss_part`` (hooked in the training step's backward, or made
        now from the graph's nodes after it), the graph starts at the loss:
        the loss part joined to the re-run at the model's outputs (`LossPart.join`).
        """
        calls = [call for call in calls if call.output_grads]
        if not calls:
            return None
        if weights is None and self.world_size > 1:
            # Under DDP the re-run runs on a copy of the weights: their own gradient accumulators, without DDP's all-reduce hooks.
            weights = {name: value.detach().clone() for name, value in self._state}
        leaves = dict(self._params) if weights is None else {name: weights[name].requires_grad_(True) for name, _ in self._params}
        outputs: list[tuple[torch.Tensor, torch.Tensor]] = []  # the re-run's output and the training step's, for a check under DDP
        with self._set_aside() as trained:
            roots: list[torch.Tensor] = []
            grads: list[torch.Tensor] = []
            keys: list[tuple[int, int]] = []  # (call, position) of each root, to join the loss part at
            with capture_modules(), capture_source():
                for call in calls:
                    self._set_generators(call.generators)
                    if weights is None:
                        output = call_from(call.site, self.model, *call.args, **call.kwargs)
                    else:
                        output = call_from(call.site, torch.func.functional_call, self.model, weights, call.args, call.kwargs)
                    tensors = grad_tensors(output)
                    outputs += zip((tensor.detach() for tensor in tensors if tensor.is_floating_point()), call.outputs or ())
                    for position, tensor in enumerate(tensors):
                        if position in call.output_grads:
                            roots.append(tensor)
                            grads.append(call.output_grads[position])
                            keys.append((id(call), position))
            try:
                result = trace(roots, params=leaves, module=self.model, caller="watch(bad_steps=...)")
            except RootError:
                return None
            starts = start_gradients(result.roots, grads, caller="watch(bad_steps=...)")
            received: dict[str, tuple[torch.Tensor | None, ...]] = {}
            sent: dict[str, tuple[torch.Tensor | None, ...]] = {}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                order = record_flow(
                    result,
                    starts,
                    values_up_to=VALUES_UP_TO,
                    pre=lambda node_id, grads_in: received.__setitem__(node_id, copies(grads_in)),
                    post=lambda node_id, grads_out, _: sent.__setitem__(node_id, copies(grads_out)),
                )
            replay = _as_replay(result, starts, order, received, sent)
            origin = self._captured_origin(result, list(leaves.items()))
            if callable(loss_part):
                loss_part = loss_part()
            if loss_part is not None:
                replay = loss_part.join(result, replay, keys)
            result.graph.graph[STEPS_ATTRIBUTE] = step_data(replay, values_up_to=VALUES_UP_TO)
            if origin is None and loss_part is not None:
                origin = loss_part.origin
            if self.world_size > 1:  # .grad is every rank's average: this rank's outputs are what the re-run can match
                reproduced = all(_same(again, trained_output) for again, trained_output in outputs)
            elif weights is None:
                reproduced = all(_same(param.grad, trained[index]) for index, (_, param) in enumerate(self._params))
            if weights is not None:
                if self.world_size == 1:  # the step's own gradients were not kept (a copy per step): their norm was, computed the same way
                    reproduced = self._measure([], [], list(leaves.values()))[0] == grad_norm
                for tensor in leaves.values():
                    tensor.grad = None
                    tensor.requires_grad_(False)
            graph = graph_data(result.graph)
        return _step_record(step, reasons, loss, grad_norm, reproduced, origin, graph)

    def _record_closure(
        self, step: int, closure: Callable[[], Any], generators: list[torch.Tensor], reasons: tuple[str, ...], loss: float | None, grad_norm: float | None
    ) -> dict[str, Any] | None:
        """Run the step again through its closure (forward, loss and backward), recorded whole; its record as a bundle holds it.

        The closure's ``backward()`` is hooked as it is called (`LossPart` with
        no model outputs: the whole graph, from the loss), under
        `capture_source` and `capture_modules`, so the loss function's ops
        have their lines and the forward origin is the op that made the value,
        wherever it is.
        """
        parts: list[LossPart] = []
        outputs: list[torch.Tensor] = []
        model_ids: dict[Node, str] = {}

        def hook(tensor: torch.Tensor) -> None:
            if tensor.grad_fn is not None and not parts:
                parts.append(LossPart(tensor, {}, named=self._params, module=self.model, values_up_to=VALUES_UP_TO))
                with contextlib.suppress(RootError):  # the model's nodes numbered as a re-run from its outputs numbers them
                    model_ids.update(trace(outputs, caller="watch(bad_steps=...)").ids)

        def keep_outputs(_: nn.Module, __: Any, output: Any) -> None:
            outputs.extend(grad_tensors(output))

        with self._set_aside() as trained:
            handles: list[Any] = [observe_backward_calls(hook), self.model.register_forward_hook(keep_outputs)]
            try:
                with capture_modules(), capture_source(), warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    self._set_generators(generators)
                    closure()
            finally:
                for handle in handles:
                    handle.remove()
                for part in parts:
                    part.finish()
            if not parts:
                return None
            parts[0].renumber(model_ids)
            result = parts[0].result
            replay = _as_replay(result, parts[0].starts, parts[0].order, parts[0].received, parts[0].sent)
            result.graph.graph[STEPS_ATTRIBUTE] = step_data(replay, values_up_to=VALUES_UP_TO)
            origin = self._captured_origin(result, list(self._params))
            reproduced = all(_same(param.grad, trained[index]) for index, (_, param) in enumerate(self._params))
            graph = graph_data(result.graph)
        return _step_record(step, reasons, loss, grad_norm, reproduced, origin, graph)

    def _captured_origin(self, result: Trace, leaves: list[tuple[str, torch.Tensor]]) -> dict[str, Any] | None:
        """The forward origin that the re-run's `capture_source` found in ``result``'s graph, as a bundle holds it, else ``None``."""
        check = check_of([*(root.node for root in result.roots), *result.ids])
        if check is None or check.origin is None:
            return None
        return _origin_data(_named_origin(check.origin, result, leaves, self.model))

    @contextmanager
    def _set_aside(self) -> Iterator[list[torch.Tensor | None]]:
        """Around a re-run: every ``.grad`` set aside (yielded) and put back, the buffers and generators restored."""
        trained = [param.grad for _, param in self._params]
        buffers = [(buffer, buffer.detach().clone()) for buffer in self.model.buffers()]
        generators = self._generators()
        self._replaying = True
        try:
            for _, param in self._params:
                param.grad = None
            yield trained
        finally:
            for (_, param), grad in zip(self._params, trained):
                param.grad = grad
            with torch.no_grad():
                for buffer, saved in buffers:
                    buffer.copy_(saved)
            self._set_generators(generators)
            self._replaying = False

    def _set_generators(self, states: list[torch.Tensor]) -> None:
        torch.set_rng_state(states[0])
        for index, state in zip(self._cuda, states[1:]):
            torch.cuda.set_rng_state(state, index)


def _as_replay(
    result: Trace,
    starts: list[Start],
    order: list[str],
    received: dict[str, tuple[torch.Tensor | None, ...]],
    sent: dict[str, tuple[torch.Tensor | None, ...]],
) -> Replay:
    """The recorded backward as the record of `gradexport.replay`, for the stepping viewer (`step_data`)."""
    ids = result.ids
    nodes = {node_id: node for node, node_id in ids.items()}
    steps = []
    for node_id in order:
        node = nodes[node_id]
        targets = tuple(None if child is None else (ids[child], slot) for child, slot in node.next_functions)
        steps.append(ReplayStep(node_id, type(node).__name__, received.get(node_id, ()), sent.get(node_id, ()), targets))
    leaves = {node_id: data.get("names") for node_id, data in result.graph.nodes(data=True) if data.get("op") == "AccumulateGrad"}
    grads = {name: leaf_variable(nodes[node_id]).grad for node_id, names in leaves.items() for name in (names or [node_id])}
    return Replay(
        graph=result.graph,
        starts=[ReplayStart(start.root.name, ids[start.root.node], start.input_nr, start.grad) for start in starts],
        steps=steps,
        grads=grads,
    )


def _same(replayed: torch.Tensor | None, trained: torch.Tensor | None) -> bool:
    """Whether two gradients are equal element for element, a NaN equal to a NaN."""
    if replayed is None or trained is None:
        return replayed is None and trained is None
    if replayed.shape != trained.shape or replayed.dtype != trained.dtype:
        return False
    return bool(torch.equal(replayed, trained) or ((replayed == trained) | (replayed.isnan() & trained.isnan())).all())


def _output_edges(results: list[tuple[_Call, list[torch.Tensor]]]) -> dict[tuple[int, int], tuple[Edge, torch.Tensor]]:
    """Each floating-point output that a node made, by (call, position): its `Edge` in the graph, and the output."""
    return {
        (id(call), position): ((tensor.grad_fn, tensor.output_nr), tensor)
        for call, tensors in results
        for position, tensor in enumerate(tensors)
        if tensor.grad_fn is not None and tensor.is_floating_point()
    }


def _step_record(
    step: int, reasons: tuple[str, ...], loss: float | None, grad_norm: float | None, reproduced: bool, origin: dict[str, Any] | None, graph: dict[str, Any]
) -> dict[str, Any]:
    """One step of a bundle, as `write_bundle` takes it."""
    return {"step": step, "reasons": list(reasons), "loss": loss, "grad_norm": grad_norm, "reproduced": reproduced, "forward_origin": origin, "graph": graph}


def _origin_data(origin: ForwardOrigin) -> dict[str, Any]:
    """A forward origin as the JSON object a bundle holds."""
    return {
        "op": origin.op,
        "cause": origin.cause,
        "source": origin.source,
        "source_code": origin.source_code,
        "module": origin.module,
        "module_class": origin.module_class,
        "node": origin.node,
        "output": origin.output.describe(),
        "inputs": [{"position": item.position, "text": item.describe(), "finite": item.finite} for item in origin.inputs],
    }
