"""A replay's steps in a page: the data (against the record and torch), the ways to ask for it, and .grad kept."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from cases import CASES
from replay_cases import grad_outputs_for
from test_exec_order import ORDER_CASES
from torch_versions import needs_input_metadata

import gradexport
from gradexport.backward.steps import VALUES_UP_TO, replay_keeping_grads, step_data
from gradexport.frontends.cli import main

pytestmark = needs_input_metadata


def page_data(page: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="gradexport-data">(.*?)</script>', page, re.S)
    assert match
    return json.loads(match.group(1))


def decoded(data: dict[str, Any], index: int | None) -> Any:
    if index is None:
        return None
    row = data["tensors"][index]
    shape, dtype = data["metas"][row[0]]
    return (shape, dtype, row[1] if len(row) == 2 else tuple(row[1:]))


def test_step_data_holds_every_tensor_of_the_record() -> None:
    case = CASES["mlp_tied"]()
    record = gradexport.replay(case.roots, params=case.params, module=case.module)
    data = step_data(record)
    assert [row[0] for row in data["steps"]] == [int(step.node[1:]) for step in record.steps]
    for row, step in zip(data["steps"], record.steps, strict=True):
        for index, tensor in [*zip(row[1], step.inputs, strict=True), *zip(row[2], step.outputs, strict=True)]:
            if tensor is None:
                assert index is None
                continue
            shape, dtype, payload = decoded(data, index)
            assert shape == list(tensor.shape) and dtype == str(tensor.dtype).removeprefix("torch.")
            if tensor.numel() <= VALUES_UP_TO:
                assert payload == repr(tensor)
            else:
                norm, low, high, mean, nonfinite = payload
                assert norm == pytest.approx(float(tensor.norm()), rel=1e-4)
                assert (low, high) == (pytest.approx(float(tensor.min()), rel=1e-4, abs=1e-9), pytest.approx(float(tensor.max()), rel=1e-4, abs=1e-9))
                assert mean == pytest.approx(float(tensor.double().mean()), rel=1e-4, abs=1e-9) and nonfinite == 0


def test_leaf_steps_carry_the_grad_torch_leaves() -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    x.grad = torch.tensor([10.0, 10.0])
    record = gradexport.replay((x * 3).sum(), params={"x": x})
    data = step_data(record)
    (leaf_row,) = [row for row in data["steps"] if len(row) == 4]
    assert decoded(data, leaf_row[3])[2] == repr(x.grad) == "tensor([13., 13.])"
    assert decoded(data, leaf_row[1][0])[2] == "tensor([3., 3.])"  # what arrived, not what .grad became


def test_non_finite_statistics() -> None:
    x = torch.zeros(20, requires_grad=True)
    record = gradexport.replay(x.sqrt().sum() * 0 + (x.log() * 1).sum(), params={"x": x})
    data = step_data(record)
    counts = [row[5] for row in data["tensors"] if len(row) == 6]
    assert max(counts) == 20 and '"Infinity"' in json.dumps(data)


def test_to_html_of_a_record_and_write_embed_the_steps_only_in_html(tmp_path: Path) -> None:
    case = CASES["blog_multiply_then_sum"]()
    record = gradexport.replay(case.roots, params=case.params)
    assert page_data(gradexport.to_html(record))["steps"] == step_data(record)
    paths = gradexport.write(record, tmp_path, "html,json,dot")
    assert "steps" in page_data(paths["html"].read_text())
    assert paths["json"].read_text() == gradexport.to_json(record.graph)
    assert paths["dot"].read_text() == gradexport.to_dot(record.graph)
    assert "steps" not in page_data(gradexport.to_html(record.graph))


def test_steps_true_replays_and_leaves_grad_as_it_was() -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    w = torch.tensor([3.0, 4.0], requires_grad=True)
    before = torch.tensor([5.0, 6.0])
    w.grad = before
    loss = (x * w).sum()
    page = gradexport.to_html(loss, steps=True, params={"x": x, "w": w})
    data = page_data(page)["steps"]
    assert x.grad is None and w.grad is before and torch.equal(before, torch.tensor([5.0, 6.0]))
    grads = sorted(decoded(data, row[3])[2] for row in data["steps"] if len(row) == 4)
    assert grads == sorted([repr(w.detach()), repr(before + x.detach())])
    loss.backward()  # the replay left the saved tensors: the real backward still runs, and from the untouched state
    assert torch.equal(x.grad, w.detach()) and torch.equal(w.grad, torch.tensor([6.0, 8.0]))


def test_steps_refused_where_they_cannot_be_had() -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    x.register_post_accumulate_grad_hook(lambda tensor: None)
    with pytest.raises(gradexport.errors.StepsUnavailableError, match=r"a leaf \(\['x'\]\) of shape \[2\] has post-accumulate-grad hooks"):
        gradexport.to_html((x * 2).sum(), steps=True, params={"x": x})
    assert x.grad is None
    y = torch.ones(2, requires_grad=True)
    with pytest.raises(gradexport.errors.ArgumentTypeError, match="steps applies only while tracing roots"):
        gradexport.to_html(gradexport.to_networkx((y * 2).sum()), steps=True)
    with pytest.raises(gradexport.errors.ArgumentTypeError, match="steps applies only to html, not to dot"):
        gradexport.write((y * 2).sum(), "unused", "dot", steps=True)
    with pytest.raises(gradexport.errors.ArgumentTypeError, match="edge_metadata does not combine with steps=True"):
        gradexport.to_html((y * 2).sum(), steps=True, edge_metadata=True)
    assert issubclass(gradexport.errors.StepsUnavailableError, gradexport.GradexportError)


def test_replay_keeping_grads_restores_grad_when_the_replay_fails() -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    before = torch.tensor([7.0, 7.0])
    x.grad = before
    loss = x.exp().sum()
    loss.grad_fn.register_prehook(lambda grads: grads)
    with pytest.raises(gradexport.errors.ReplayError):
        replay_keeping_grads(loss, params={"x": x})
    assert x.grad is before and torch.equal(before, torch.tensor([7.0, 7.0]))


def test_show_of_a_record_steps_in_the_notebook() -> None:
    case = CASES["blog_unbind_then_add"]()
    record = gradexport.replay(case.roots, params=case.params)
    view = gradexport.show(record)
    assert "&quot;steps&quot;:" in view.html and "replay_steps" not in gradexport.to_json(view.graph)


def test_view_steps_on_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    target = tmp_path / "targets.py"
    source = "import torch\n\ndef loss():\n    x = torch.ones(3, requires_grad=True)\n    y = torch.ones(3, requires_grad=True)\n    return (x.exp() * y).sum(), {'x': x, 'y': y}\n"
    target.write_text(source)
    page = tmp_path / "page.html"
    assert main(["view", f"{target}:loss", "--steps", "-o", str(page), "--no-open", "-q"]) == 0
    data = page_data(page.read_text())
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    loss, params = namespace["loss"]()
    graph = gradexport.record_gradients(loss, params=params)  # the engine's own order
    expected = sorted((data_["exec_order"], node) for node, data_ in graph.nodes(data=True) if "exec_order" in data_)
    assert [f"n{row[0]}" for row in data["steps"]["steps"]] == [node for _, node in expected]
    assert [f"n{row[0]}" for row in data["steps"]["steps"]][2:4] == ["n4", "n3"]  # the ready leaf y goes before Exp


@pytest.mark.parametrize("name", sorted(ORDER_CASES))
def test_every_case_makes_a_page_with_its_steps(name: str) -> None:
    case = ORDER_CASES[name]()
    record = gradexport.replay(case.roots, grad_outputs_for(case.roots), params=case.params, module=case.module)
    data = page_data(gradexport.to_html(record))["steps"]
    assert len(data["steps"]) == len(record.steps)
    assert all(len(row[1]) == len(step.inputs) and len(row[2]) == len(step.outputs) for row, step in zip(data["steps"], record.steps, strict=True))
