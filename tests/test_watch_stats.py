"""`gradexport.backward.watch_stats.GradientStatistics`: each gradient's statistics are torch's own reductions of that gradient alone."""

from __future__ import annotations

import math

import pytest
import torch

from gradexport.backward.watch_stats import CHUNK, SMALL_GRADIENT, GradientStatistics, floats


def gradients() -> list[torch.Tensor]:
    """Small ones (padded into one matrix) and large ones (reduced one by one), of both signs, non-contiguous too."""
    generator = torch.Generator().manual_seed(0)
    return [
        torch.randn(7, generator=generator),
        torch.rand(3, 5, generator=generator) + 1.0,  # all positive: zero padding must not become the largest |g|
        -torch.rand(SMALL_GRADIENT, generator=generator),  # the largest small one, all negative
        torch.randn(SMALL_GRADIENT + 1, generator=generator) * 1e-6,
        torch.randn(80, 90, generator=generator).t(),  # not contiguous
        torch.randn(1, generator=generator),
    ]


def test_every_statistic_equals_torchs_reduction_of_that_gradient() -> None:
    grads = gradients()
    columns = GradientStatistics().columns(grads)
    for position, grad in enumerate(grads):
        assert columns.norm[position] == float(torch.linalg.vector_norm(grad))  # the same kernel, bit for bit
        assert columns.max_abs[position] == float(grad.abs().max())
        scale = float(grad.abs().sum())
        assert columns.sum[position] == pytest.approx(float(grad.sum()), rel=1e-6, abs=1e-6 * scale)
        assert columns.abs_sum[position] == pytest.approx(scale, rel=1e-6)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("where", [0, 3])
def test_a_nonfinite_element_shows_only_in_its_own_gradient(bad: float, where: int) -> None:
    grads = gradients()
    grads[where] = grads[where].clone()
    grads[where][0] = bad
    columns = GradientStatistics().columns(grads)
    for position, grad in enumerate(grads):
        for got, want in ((columns.max_abs[position], grad.abs().max()), (columns.norm[position], torch.linalg.vector_norm(grad))):
            assert got == pytest.approx(float(want), nan_ok=True), (position, bad)


def test_gradients_of_other_dtypes_keep_their_own_precision() -> None:
    grads = [torch.tensor([1.0, 1e-20], dtype=torch.float64), torch.tensor([3.0, -4.0]), torch.tensor([0.5], dtype=torch.float16)]
    columns = GradientStatistics().columns(grads)
    assert columns.sum == [float(torch.tensor([1.0, 1e-20], dtype=torch.float64).sum()), -1.0, 0.5]
    assert columns.max_abs == [1.0, 4.0, 0.5]
    assert GradientStatistics().columns([]) == ([], [], [], [])


def test_floats_reads_zero_and_one_dimensional_tensors_in_order() -> None:
    assert floats([torch.tensor(1.5), torch.tensor([2.0, 3.0], dtype=torch.float64), torch.tensor(4)]) == [1.5, 2.0, 3.0, 4.0]


def test_a_gradient_longer_than_the_buffer_is_read_a_piece_at_a_time_and_the_buffer_serves_the_next_call() -> None:
    generator = torch.Generator().manual_seed(1)
    long = torch.randn(CHUNK + 5, generator=generator)
    long[CHUNK + 2] = -40.0  # the largest |g| is in the last piece
    statistics = GradientStatistics()
    for grads in ([long], [torch.randn(SMALL_GRADIENT + 10, generator=generator), long * 2]):
        columns = statistics.columns(grads)
        for position, grad in enumerate(grads):
            assert columns.max_abs[position] == float(grad.abs().max())
            assert columns.abs_sum[position] == pytest.approx(float(grad.abs().sum(dtype=torch.float64)), rel=1e-6)
    poisoned = long.clone()
    poisoned[CHUNK + 1] = float("nan")
    assert math.isnan(statistics.columns([poisoned]).max_abs[0])
