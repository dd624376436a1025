"""`gradexport.watch`: every value it records is what torch gives, computed independently in the same loop.

The references are torch's own: each parameter's ``.grad`` after backward
(``torch.linalg.vector_norm``, ``mean``, ``abs().max()``, ``isfinite``), the
parameters before and after ``optimizer.step()``, and the gradient at each
module's output as a tensor hook placed by the test itself sees it.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import gradexport
from gradexport.backward.watch_file import WatchFile, load_watch


class Residual(nn.Module):
    """A block calling one shared Linear twice, so a module receives two output gradients a step."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.shared = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.shared(torch.tanh(self.shared(x))))


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), Residual(16), nn.Linear(16, 3))


def batches(steps: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 6, generator=generator), torch.randint(0, 3, (8,), generator=generator)) for _ in range(steps)]


def output_grad_norms(model: nn.Module) -> tuple[dict[str, list[torch.Tensor]], list[Any]]:
    """The test's own tensor hooks on every module output, placed by forward hooks: name -> gradients seen."""
    seen: dict[str, list[torch.Tensor]] = {}
    handles = []
    for name, module in model.named_modules():

        def hook(module: nn.Module, args: Any, output: Any, name: str = name) -> None:
            if isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(lambda grad: seen.setdefault(name, []).append(grad.clone()))

        handles.append(module.register_forward_hook(hook))
    return seen, handles


def test_every_recorded_value_equals_torch_computed_in_the_same_loop(tmp_path: Path) -> None:
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    seen, handles = output_grad_norms(model)
    expected: list[dict[str, Any]] = []
    path = tmp_path / "run.jsonl"
    with gradexport.watch(model, optimizer=optimizer, path=path, details_every=1):
        for x, y in batches(20):
            seen.clear()
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            grads = {name: p.grad.clone() for name, p in model.named_parameters()}
            before = {name: p.detach().clone() for name, p in model.named_parameters()}
            optimizer.step()
            expected.append(
                {
                    "norm": {n: float(torch.linalg.vector_norm(g)) for n, g in grads.items()},
                    "mean": {n: float(g.mean()) for n, g in grads.items()},
                    "mean_abs": {n: float(g.abs().mean()) for n, g in grads.items()},
                    "max_abs": {n: float(g.abs().max()) for n, g in grads.items()},
                    "nonfinite": {n: int((~torch.isfinite(g)).sum()) for n, g in grads.items()},
                    "update_ratio": {
                        n: float(torch.linalg.vector_norm(p.detach() - before[n]) / torch.linalg.vector_norm(before[n])) for n, p in model.named_parameters()
                    },
                    "module": {n: math.sqrt(sum(float(torch.linalg.vector_norm(g)) ** 2 for g in gs)) for n, gs in seen.items()},
                    "calls": {n: len(gs) for n, gs in seen.items()},
                }
            )
    for handle in handles:
        handle.remove()
    history = load_watch(path)
    assert history.steps == list(range(20))
    assert expected[0]["calls"]["2.shared"] == 2  # the shared Linear: its norm is over both calls
    for step, want in enumerate(expected):
        stats = history.param_stats(step)
        for stat in ("norm", "max_abs", "update_ratio"):
            for name, value in want[stat].items():
                assert stats[name][stat] == pytest.approx(value, rel=1e-6, abs=1e-12), (step, name, stat)
        for stat in ("mean", "mean_abs"):
            for name, value in want[stat].items():
                # A float32 sum in another order than torch's mean() differs by rounding, at most a few
                # float32 epsilons of the sum of |g| (a mean near zero is a sum that cancels).
                assert stats[name][stat] == pytest.approx(value, rel=1e-6, abs=1e-6 * want["mean_abs"][name]), (step, name, stat)
        assert {name: s["nonfinite"] for name, s in stats.items()} == want["nonfinite"]
        norms = history.module_norms(step)
        assert {name for name, value in norms.items() if value is not None} == set(want["module"])
        for name, value in want["module"].items():
            assert norms[name] == pytest.approx(value, rel=1e-6), (step, name)


def poisoned_training(model: nn.Module, optimizer: torch.optim.Optimizer, count: int, poisoned: int) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
    """Yield each step and its gradients after ``optimizer.step()``; step ``poisoned``'s loss is NaN, and its NaN weights are zeroed after."""
    for step, (x, y) in enumerate(batches(count)):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        (loss * float("nan") if step == poisoned else loss).backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters()}
        optimizer.step()
        yield step, grads
        if step == poisoned:
            with torch.no_grad():
                for param in model.parameters():
                    param.copy_(torch.nan_to_num(param))


def with_details(history: gradexport.records.WatchHistory) -> list[int]:
    return [step for step in history.steps if history.param_stats(step)["0.weight"]["max_abs"] is not None]


def test_details_come_every_details_every_recorded_steps_and_at_a_nonfinite_gradient() -> None:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    poisoned = 7  # not a step with details by the count: the NaN alone brings them
    with gradexport.watch(model, optimizer=optimizer, every=2, details_every=3) as watched:
        for _ in poisoned_training(model, optimizer, 16, poisoned):
            pass
    assert watched.history.steps == list(range(0, 16, 2)) and watched.history.header["details_every"] == 3
    assert with_details(watched.history) == [0, 6, 12]  # recorded steps 0, 3 and 6 of the eight: every third
    with gradexport.watch(model, optimizer=optimizer, every=1, details_every=100) as watched:
        for step, grads in poisoned_training(model, optimizer, 9, poisoned):
            # every recorded step has the norms and the non-finite counts, equal to torch's
            stats = watched.history.param_stats(step)
            want = {n: float(torch.linalg.vector_norm(g)) for n, g in grads.items()}
            assert all(stats[n]["norm"] == value or math.isnan(stats[n]["norm"]) and math.isnan(value) for n, value in want.items()), (step, stats)
            assert {n: stats[n]["nonfinite"] for n in grads} == {n: int((~torch.isfinite(g)).sum()) for n, g in grads.items()}
    history = watched.history
    assert with_details(history) == [0, poisoned]
    stats = history.param_stats(poisoned)
    assert all(values["max_abs"] is not None and values["update_ratio"] is not None for values in stats.values())
    assert all(math.isnan(values["max_abs"]) for values in stats.values() if values["nonfinite"])
    assert any(values["nonfinite"] for values in stats.values())
    assert all(values["mean"] is None and values["update_ratio"] is None for values in history.param_stats(1).values())


class Gain(nn.Module):
    """A module whose output is its own parameter: a leaf, with no autograd node to hook."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 2.0, 4))

    def forward(self) -> torch.Tensor:
        return self.weight


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gain = Gain()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.gain()


@pytest.mark.filterwarnings(r"ignore:Using backward\(\) with create_graph=True:UserWarning")
@pytest.mark.parametrize("create_graph", [False, True])
def test_a_leaf_output_and_a_double_backward_get_torchs_norms(create_graph: bool) -> None:
    torch.manual_seed(0)
    model = Scaled()
    seen, handles = output_grad_norms(model)
    with gradexport.watch(model) as watched:
        model(torch.randn(3, 4)).pow(2).sum().backward(create_graph=create_graph)
        watched.step()
    for handle in handles:
        handle.remove()
    norms = watched.history.module_norms(0)
    # The gain's output is its weight: the gradient there is the weight's .grad, as torch's own tensor hook saw it.
    assert norms["gain"] == float(torch.linalg.vector_norm(seen["gain"][0].detach())) == float(torch.linalg.vector_norm(model.gain.weight.grad.detach()))
    assert norms["linear"] == float(torch.linalg.vector_norm(seen["linear"][0].detach()))
    assert all(type(value) is float for value in norms.values())


def test_details_every_must_be_a_positive_integer() -> None:
    for wrong in (0, -1, 2.0, True):
        with pytest.raises(gradexport.errors.ArgumentValueError, match="details_every must be a positive integer"):
            gradexport.watch(nn.Linear(1, 1), details_every=wrong)  # type: ignore[arg-type]


def test_norms_of_single_gradients_are_torchs_bit_for_bit() -> None:
    model = make_model()
    seen, handles = output_grad_norms(model)
    with gradexport.watch(model) as watched:
        x, y = batches(1)[0]
        nn.functional.cross_entropy(model(x), y).backward()
        watched.step()
    for handle in handles:
        handle.remove()
    stats = watched.history.param_stats(0)
    for name, param in model.named_parameters():
        assert stats[name]["norm"] == float(torch.linalg.vector_norm(param.grad))
        assert stats[name]["max_abs"] == float(param.grad.abs().max())
    norms = watched.history.module_norms(0)
    assert norms["0"] == float(torch.linalg.vector_norm(seen["0"][0]))


def train(model: nn.Module, steps: int, watch: bool, tmp_path: Path) -> list[list[torch.Tensor]]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    states = []
    watcher = gradexport.watch(model, optimizer=optimizer, path=tmp_path / "bits.jsonl").start() if watch else None
    for x, y in batches(steps):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        states.append([p.grad.clone() for p in model.parameters()])
        optimizer.step()
        states.append([p.detach().clone() for p in model.parameters()])
    if watcher is not None:
        watcher.close()
    return states


def test_training_under_watch_is_bit_identical_to_training_without(tmp_path: Path) -> None:
    plain = train(make_model(), 20, False, tmp_path)
    watched = train(make_model(), 20, True, tmp_path)
    assert len(load_watch(tmp_path / "bits.jsonl").steps) == 20
    for a, b in zip(plain, watched):
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def deep(activation: type[nn.Module], depth: int, width: int = 32) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), activation()]
    return nn.Sequential(*layers, nn.Linear(width, 1))


def watch_training(model: nn.Module, steps: int = 10) -> gradexport.records.WatchHistory:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(3)
    with gradexport.watch(model, optimizer=optimizer) as watched:
        for _ in range(steps):
            optimizer.zero_grad()
            x = torch.randn(64, 32, generator=generator)
            (model(x) - x[:, :1]).pow(2).mean().backward()
            optimizer.step()
    return watched.history


def test_a_deep_sigmoid_mlp_is_flagged_vanishing_and_a_healthy_one_is_not() -> None:
    sigmoid = watch_training(deep(nn.Sigmoid, 20))
    flagged = sigmoid.flags()
    assert "0" in flagged and any(reason.startswith("vanishing") for reason in flagged["0"])
    assert set(sigmoid.flagged("vanishing")) >= {"0", "2", "4"}
    assert "40" not in flagged  # the last layer is where the gradient is largest
    # torch agrees: the first layer's gradient is a vanishing share of the last one's
    norms = sigmoid.module_norms(sigmoid.steps[-1])
    assert norms["0"] < 1e-3 * norms["40"]  # type: ignore[operator]
    assert flagged["0"][0].startswith(f"vanishing: {norms['0']:.3g} is ")  # the last step's value, not an early one
    healthy = watch_training(nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1)))
    assert healthy.flagged("vanishing") == {} and healthy.flagged("exploding") == {}


def test_a_nonfinite_gradient_is_counted_and_flagged_exploding() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    with gradexport.watch(model) as watched:
        out = model(torch.tensor([[1.0, 0.0]]))
        (out * torch.tensor(float("inf"))).sum().backward()
        watched.step()
    stats = watched.history.param_stats(0)
    expected = {name: int((~torch.isfinite(p.grad)).sum()) for name, p in model.named_parameters()}
    assert {name: s["nonfinite"] for name, s in stats.items()} == expected and expected["1.weight"] > 0
    assert any(reason.startswith("exploding") for reason in watched.history.flags()["1"])


def test_every_records_every_kth_step_and_the_graph_once() -> None:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradexport.watch(model, optimizer=optimizer, every=3) as watched:
        for x, y in batches(10):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    history = watched.history
    assert history.steps == [0, 3, 6, 9]
    assert len(history.graphs) == 1 and history.structure_changes == []
    graph = history.graph(6)
    # the traced graph is torch's: one AccumulateGrad per parameter, named by it
    names = sorted(name for _, data in graph.nodes(data=True) for name in data.get("names", []))
    assert names == sorted(name for name, _ in model.named_parameters())
    assert history.order[:3] == ["0", "1", "2.shared"]


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, use_b: bool = False) -> torch.Tensor:
        return self.b(self.a(x)) if use_b else self.a(x)


def test_a_structure_change_is_reported_and_traced_again() -> None:
    model = Branchy()
    with gradexport.watch(model) as watched:
        for step in range(4):
            model(torch.randn(2, 4), use_b=step >= 2).sum().backward()
            if step == 2:
                with pytest.warns(gradexport.errors.StructureChangedWarning, match="structure changed"):
                    watched.step()
            else:
                watched.step()
    history = watched.history
    assert [change["step"] for change in history.structure_changes] == [2]
    assert [(g["step"], g["reason"]) for g in history.graphs] == [(0, "the first recorded step"), (3, "the structure changed")]
    assert "b" in {data.get("module") for _, data in history.graph(3).nodes(data=True)}
    assert "b" not in {data.get("module") for _, data in history.graph(1).nodes(data=True)}


def test_the_reader_ignores_a_torn_last_line_but_not_a_broken_one(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    with WatchFile(path, {"parameters": ["w"], "modules": [""], "layers": [""]}) as out:
        for step in range(3):
            out.write({"kind": "step", "step": step, "param": {"norm": [float(step)]}, "module": {"norm": [1.0]}})
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"kind": "step", "step": 3, "par')
    assert load_watch(path).steps == [0, 1, 2]
    lines = whole.split(b"\n")
    path.write_bytes(b"\n".join([*lines[:2], b"{broken", *lines[2:]]))
    with pytest.raises(gradexport.errors.GraphFormatError, match="line 3"):
        load_watch(path)
    path.write_bytes(b'{"kind": "step"}\n')
    with pytest.raises(gradexport.errors.GraphFormatError, match="header"):
        load_watch(path)


CHILD = textwrap.dedent(
    """
    import sys, torch, gradexport
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    with gradexport.watch(model, optimizer=optimizer, path=sys.argv[1]):
        step = 0
        while True:
            optimizer.zero_grad()
            model(torch.randn(32, 64)).pow(2).mean().backward()
            optimizer.step()
            sys.stdout.write(f"{step}\\n")
            sys.stdout.flush()
            step += 1
    """
)


@pytest.mark.slow  # ten fresh interpreters, each importing torch
def test_killed_at_random_moments_the_file_keeps_every_completed_step(tmp_path: Path) -> None:
    rng = random.Random(25)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for trial in range(10):
        path = tmp_path / f"killed{trial}.jsonl"
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, env=env)
        assert child.stdout is not None
        first = child.stdout.readline()  # step 0 is complete: training runs
        assert first == b"0\n"
        time.sleep(rng.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        rest = child.stdout.read()
        child.wait()
        assert child.returncode == -signal.SIGKILL
        completed = [int(line) for line in (first + rest).split()]
        history = load_watch(path)
        # every step that finished is there, in order, with nothing missing before the last one written
        assert history.steps[: len(completed)] == completed
        assert history.steps == list(range(len(history.steps)))
        assert len(history.steps) - len(completed) <= 1  # at most the step killed between its write and its print
        lines = path.read_bytes().split(b"\n")
        assert all(json.loads(line) for line in lines[:-1])
