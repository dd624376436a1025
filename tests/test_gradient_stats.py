"""gradient_summary and the finiteness test of find_nonfinite against torch's own reductions, bit for bit."""

from __future__ import annotations

import math
import struct
from functools import partial
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gradexport
from gradexport.backward.gradient_stats import gradient_summary
from gradexport.backward.nonfinite import _is_nonfinite
from gradexport.tracing import _torch
from gradexport.tracing.graph import trace

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -1e-40, 6e-8, 65504.0, 1e38, -3.5e38, 1e300]
SHAPES = [(), (1,), (1, 1), (1, 1, 1), (0,), (2, 0), (2,), (3,), (2, 3), (4, 4)]


def same(a: Any, b: Any) -> bool:
    """Equal as stored: floats by their bits (any NaN equals any NaN), lists element by element."""
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or struct.pack("<d", a) == struct.pack("<d", b)
    return type(a) is type(b) and a == b


def torch_summary(tensor: torch.Tensor, values_up_to: int) -> dict[str, Any]:
    """What the summary must hold, from torch's reductions on the tensor."""
    real = tensor.numel() > 0
    low, high = (float(value) for value in _torch.aminmax(tensor)) if real else (None, None)  # torch's min and max
    expected: dict[str, Any] = {
        "shape": list(tensor.shape),
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "norm": float(torch.linalg.vector_norm(tensor, dtype=torch.float64)),
        "min": low,
        "max": high,
        "has_nan": bool(tensor.isnan().any()),
        "has_inf": bool(tensor.isinf().any()),
    }
    if tensor.numel() <= values_up_to:
        expected["values"] = tensor.tolist()
    return expected


def assert_same_summary(tensor: torch.Tensor, values_up_to: int) -> None:
    summary = gradient_summary(tensor, values_up_to=values_up_to)
    expected = torch_summary(tensor, values_up_to)
    assert list(summary) == list(expected)
    different = {key: (summary[key], expected[key]) for key in expected if not same(summary[key], expected[key])}
    assert not different, (tensor, different)


@st.composite
def tensors(draw: st.DrawFn) -> torch.Tensor:
    dtype = draw(st.sampled_from(FLOATS))
    shape = draw(st.sampled_from(SHAPES))
    numel = math.prod(shape)
    values = draw(st.lists(st.sampled_from(SPECIAL) | st.floats(allow_nan=True), min_size=numel, max_size=numel))
    tensor = torch.tensor(values, dtype=torch.float64).to(dtype).reshape(shape)
    layout = draw(st.sampled_from(["contiguous", "transposed", "strided", "negated"]))
    if layout == "transposed" and tensor.dim() >= 2:
        tensor = tensor.mT.contiguous().mT  # same values, column-major
    elif layout == "strided":
        tensor = torch.stack([tensor, torch.full_like(tensor, 7.0)], dim=-1)[..., 0]  # every other element of a buffer
    elif layout == "negated":
        tensor = torch._neg_view(-tensor)  # the same values behind the lazy negation bit
    return tensor


@settings(max_examples=600)
@given(tensors(), st.sampled_from([0, 1, 16]))
def test_summary_is_torchs_reductions_bit_for_bit(tensor: torch.Tensor, values_up_to: int) -> None:
    assert_same_summary(tensor, values_up_to)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
@pytest.mark.parametrize("value", SPECIAL)
def test_one_element_summaries_are_torchs(dtype: torch.dtype, shape: tuple[int, ...], value: float) -> None:
    assert_same_summary(torch.tensor(value, dtype=torch.float64).to(dtype).reshape(shape), 16)


@settings(max_examples=300)
@given(tensors())
def test_nonfinite_is_torchs_isfinite(tensor: torch.Tensor) -> None:
    # find_nonfinite tests received gradients with _is_nonfinite and sent ones by the summary's flags.
    nonfinite = not bool(torch.isfinite(tensor).all())
    summary = gradient_summary(tensor, values_up_to=0)
    assert _is_nonfinite(tensor) == nonfinite == (summary["has_nan"] or summary["has_inf"])


@pytest.mark.parametrize(
    "tensor",
    [
        torch.tensor([1 + 2j, complex(math.inf, 0)]),
        torch.tensor([complex(0, math.nan)]),
        torch.tensor([1j, 2.0]),
        torch.tensor([[0.0, math.inf], [0.0, 0.0]]).to_sparse(),
        torch.tensor([[0.0, 1.0], [0.0, 0.0]]).to_sparse(),
        torch.tensor([math.nan, 1.0]).conj(),
    ],
)
def test_nonfinite_of_other_gradients_is_torchs_isfinite(tensor: torch.Tensor) -> None:
    nonfinite = not bool(torch.isfinite(tensor.to_dense()).all())
    summary = gradient_summary(tensor, values_up_to=0)
    assert _is_nonfinite(tensor) == nonfinite == (summary["has_nan"] or summary["has_inf"])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_recorded_one_element_gradients_are_what_the_engine_passed(dtype: torch.dtype) -> None:
    # A chain of one-element steps whose gradients overflow to Inf, then NaN at x * 0.0: every
    # edge must hold the summary of the tensor that a hook of torch's saw on it.
    scale = 2 * torch.finfo(dtype).max ** 0.5
    steps = [lambda t: t * 0.0, torch.sqrt, lambda t: t * 3, lambda t: t * scale, lambda t: t * scale, lambda t: t * -1.0, lambda t: t + 1, torch.exp]
    y = x = torch.zeros(1, dtype=dtype, requires_grad=True)
    for step in steps:
        y = step(y)
    seen: dict[Any, tuple[torch.Tensor | None, ...]] = {}

    def keep(node: Any, grads: tuple[torch.Tensor | None, ...], _: Any) -> None:
        seen[node] = tuple(None if grad is None else grad.clone() for grad in grads)

    result = trace(y)
    handles = [node.register_hook(partial(keep, node)) for node in result.ids]
    y.backward(retain_graph=True)
    for handle in handles:
        handle.remove()
    expected_leaf_grad = x.grad
    x.grad = None
    graph = gradexport.record_gradients(y, retain_graph=True)
    checked = []
    for node, node_id in result.ids.items():
        for _, _, index, data in graph.out_edges(node_id, keys=True, data=True):
            expected = torch_summary(seen[node][index], 16)
            assert all(same(data["grad"][key], expected[key]) for key in expected), (node_id, data["grad"], expected)
            checked.append(data["grad"])
    assert len(checked) == len(steps)
    assert [grad["has_inf"] for grad in checked[-4:]] == [True, True, True, False]  # the leaf's: NaN
    assert checked[-1]["has_nan"] and same(x.grad.tolist(), expected_leaf_grad.tolist())
