"""The stepping viewer of a replay in headless Chromium, against torch: node hooks on the real backward give the
gradients every step must show, node pre-hooks give the order (test_exec_order.engine_order)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from cases import CASES, Case
from replay_cases import grad_outputs_for
from test_exec_order import engine_order
from test_site_browser import browser  # noqa: F401  (a fixture: Debian's Chromium through Playwright)
from torch.autograd.graph import Node
from torch_versions import needs_input_metadata

import gradexport
from gradexport.tracing.graph import trace

pytestmark = [pytest.mark.browser, needs_input_metadata]


@pytest.fixture
def open_steps(browser: Any, tmp_path: Path) -> Iterator[Callable[[Any], Any]]:  # noqa: F811
    pages: list[Any] = []
    errors: list[str] = []

    def open_(record: Any) -> Any:
        path = tmp_path / f"steps{len(pages)}.html"
        gradexport.write(record, tmp_path, "html", stem=path.stem)
        page = browser.new_page()
        page.set_viewport_size({"width": 1280, "height": 860})
        page.route("**/*", lambda route: route.continue_() if route.request.url == path.as_uri() else route.abort())
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_function("window.gradexportViewer !== undefined")
        page.evaluate("window.gradexportViewer.ready")
        pages.append(page)
        return page

    yield open_
    for page in pages:
        page.close()
    assert errors == []


def torch_calls(case: Case) -> dict[str, tuple[list[torch.Tensor | None], list[torch.Tensor | None]]]:
    """Per graph id, what the engine called each node with and what it returned (node hooks on the real backward)."""
    ids = trace(case.roots).ids
    seen: dict[str, tuple[list[torch.Tensor | None], list[torch.Tensor | None]]] = {}

    def hook(node: Node) -> Any:
        return lambda grad_inputs, grad_outputs: seen.__setitem__(ids[node], (list(grad_outputs), list(grad_inputs)))

    handles = [node.register_hook(hook(node)) for node in ids if type(node).__name__ != "AccumulateGrad"]
    torch.autograd.backward(case.roots)
    for handle in handles:
        handle.remove()
    return seen


def steps_of(page: Any) -> list[dict[str, Any]]:
    return page.evaluate("() => { const v = window.gradexportViewer; return [...Array(v.steps()).keys()].map((k) => v.step(k)); }")


def test_multiply_then_sum_dz_arrives_at_mul_and_dx_dy_leave_along_positions_0_and_1(open_steps: Any) -> None:
    called = torch_calls(CASES["blog_multiply_then_sum"]())
    case = CASES["blog_multiply_then_sum"]()
    record = gradexport.replay(case.roots, params=case.params)
    page = open_steps(record)
    steps = steps_of(page)
    (mul,) = [step for step in steps if step["op"] == "MulBackward0"]
    received, returned = called[mul["node"]]
    (dz,) = mul["inputs"]
    assert (dz["slot"], dz["shape"], dz["dtype"], dz["values"]) == (0, [4, 4], "float32", repr(received[0]))
    assert [arrival["from"] for arrival in dz["edges"]] == [steps[0]["node"]] and steps[0]["op"] == "SumBackward0"
    names = {node: data.get("names") for node, data in record.graph.nodes(data=True)}
    assert [(o["position"], names[o["to"]], o["input_nr"]) for o in mul["outputs"]] == [(0, ["x"], 0), (1, ["y"], 0)]
    assert [output["values"] for output in mul["outputs"]] == [repr(grad) for grad in returned]
    # dx is y and dy is x (the blog's point): the page shows x's .grad, after its step, as torch prints y.
    x_leaf = mul["outputs"][0]["to"]
    page.evaluate(f"window.gradexportViewer.step({[s['node'] for s in steps].index(x_leaf) - 1})")
    assert page.evaluate(f"window.gradexportViewer.leafGrad({x_leaf!r})") is None
    page.evaluate(f"window.gradexportViewer.step({[s['node'] for s in steps].index(x_leaf)})")
    grad = page.evaluate(f"window.gradexportViewer.leafGrad({x_leaf!r})")
    assert grad["values"] == repr(case.params["y"].detach())


def test_small_values_are_torchs_own_printing(open_steps: Any) -> None:
    called = torch_calls(CASES["blog_unbind_then_add"]())
    case = CASES["blog_unbind_then_add"]()
    page = open_steps(gradexport.replay(case.roots, params=case.params))
    for step in steps_of(page):
        if step["op"] == "AccumulateGrad":
            continue
        received, returned = called[step["node"]]
        assert [i["values"] for i in step["inputs"]] == [None if t is None else repr(t) for t in received]
        assert [o["values"] for o in step["outputs"]] == [None if t is None else repr(t) for t in returned]


def test_unbind_then_add_two_outputs_reach_unbind_slots_0_and_1(open_steps: Any) -> None:
    case = CASES["blog_unbind_then_add"]()
    page = open_steps(gradexport.replay(case.roots, params=case.params))
    steps = steps_of(page)
    (add,) = [step for step in steps if step["op"] == "AddBackward0"]
    (unbind,) = [step for step in steps if step["op"] == "UnbindBackward0"]
    assert [(o["position"], o["to"], o["input_nr"]) for o in add["outputs"]] == [(0, unbind["node"], 0), (1, unbind["node"], 1)]
    assert [[(a["from"], a["position"]) for a in i["edges"]] for i in unbind["inputs"]] == [[(add["node"], 0)], [(add["node"], 1)]]
    assert [i["values"] for i in unbind["inputs"]] == [o["values"] for o in add["outputs"]]


def shared() -> Case:
    x = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    a = x.exp()
    return Case((a * 2).sum() + (a.sin() * a).sum(), {"x": x})


def test_a_shared_node_waits_for_its_last_input_and_gets_the_engines_sum(open_steps: Any) -> None:
    case = shared()
    ids = trace(case.roots).ids
    (exp_node,) = [node for node in ids if type(node).__name__ == "ExpBackward0"]
    arrived: list[torch.Tensor] = []
    handle = exp_node.register_prehook(lambda grad_outputs: arrived.append(grad_outputs[0]))
    torch.autograd.backward(case.roots)
    handle.remove()
    exp_id = ids[exp_node]
    case = shared()
    record = gradexport.replay(case.roots, params=case.params)
    page = open_steps(record)
    order = [step.node for step in record.steps]
    at = order.index(exp_id)
    feeders = [k for k, step in enumerate(record.steps) if any(t is not None and t[0] == exp_id for t in step.targets)]
    assert len(feeders) == 3  # MulBackward0, SinBackward0 and the second MulBackward0
    states = [page.evaluate(f"(window.gradexportViewer.step({k}), window.gradexportViewer.state({exp_id!r}))") for k in range(len(order))]
    expected = ["pending" if k < feeders[0] else "waiting" if k < at else "done" for k in range(len(order))]
    assert states == expected
    step = page.evaluate(f"window.gradexportViewer.step({at})")
    (slot,) = step["inputs"]
    assert len(slot["edges"]) == 3 and slot["values"] == repr(arrived[0])
    reason = page.evaluate("window.gradexportViewer.reason()")
    assert "inputs have arrived" in reason


@pytest.mark.parametrize("name", ["blog_multiply_then_sum", "blog_unbind_then_add", "add_to_itself", "shared_subgraph_roots", "mlp_tied", "multi_output"])
def test_every_step_is_the_records_and_the_engines(open_steps: Any, name: str) -> None:
    case = CASES[name]()
    expected = engine_order(case, grad_outputs_for(case.roots))
    case = CASES[name]()
    record = gradexport.replay(case.roots, grad_outputs_for(case.roots), params=case.params, module=case.module)
    page = open_steps(record)
    steps = steps_of(page)
    assert [step["node"] for step in steps] == [step.node for step in record.steps] == expected
    assert [step["index"] for step in steps] == list(range(len(steps)))
    assert [step["op"] for step in steps] == [step.op for step in record.steps]
    exec_order = {node: data["exec_order"] for node, data in record.graph.nodes(data=True) if "exec_order" in data}
    assert [exec_order[step["node"]] for step in steps] == list(range(1, len(steps) + 1))


def test_step_bar_with_real_clicks_and_keys(open_steps: Any) -> None:
    case = CASES["blog_multiply_then_sum"]()
    record = gradexport.replay(case.roots, params=case.params)
    page = open_steps(record)
    label = page.locator(".gx-step-label")
    assert label.text_content() == "step 1 / 4"
    page.click("[data-step=next]")
    assert label.text_content() == "step 2 / 4"
    assert page.locator(".gx-step-panel h2").text_content() == "Step 2 of 4: MulBackward0"
    current = page.locator(".gx-node.gx-step-current")
    assert current.get_attribute("data-id") == record.steps[1].node
    page.keyboard.press("ArrowRight")
    assert label.text_content() == "step 3 / 4"
    page.keyboard.press("End")
    assert label.text_content() == "step 4 / 4"
    page.keyboard.press("Home")
    assert label.text_content() == "step 1 / 4"
    page.keyboard.press("ArrowLeft")
    assert label.text_content() == "step 1 / 4"
    page.click("[data-step=last]")
    page.click("[data-step=prev]")
    assert label.text_content() == "step 3 / 4"
    page.locator(".gx-speed").select_option("30")
    page.keyboard.press("Home")
    page.keyboard.press(" ")
    page.wait_for_function("document.querySelector('.gx-step-label').textContent === 'step 4 / 4'", timeout=5000)
    page.wait_for_function("!document.querySelector('.gx').dataset.playing", timeout=5000)
    # The states as the legend names them: leaves done after their step, pending before.
    assert page.locator("[data-legend=step-waiting]").count() == 1
    assert page.locator(".gx-node.gx-step-done").count() >= 4
    page.keyboard.press("Home")
    # At step 1 SumBackward0 has run: MulBackward0 has its input (waiting, ready), the two leaves nothing yet.
    assert page.locator(".gx-node.gx-step-pending").count() == 2
    assert page.locator(".gx-node.gx-step-waiting.gx-step-ready").get_attribute("data-id") == record.steps[1].node
    # Edge labels: the gradient arriving at the current node's slot.
    assert page.locator(".gx-step-in-text").first.text_content() == "1."


def test_hostile_names_are_literal_in_the_step_panel(open_steps: Any) -> None:
    names = {"<img src=x onerror=window.__pwned=1>": torch.ones(2, requires_grad=True), "</script><b>": torch.ones(2, requires_grad=True)}
    first, second = names.values()
    record = gradexport.replay((first * second).sum(), params=names)
    page = open_steps(record)
    texts = []
    for k, step in enumerate(record.steps):
        if step.op == "AccumulateGrad":
            page.evaluate(f"window.gradexportViewer.step({k})")
            texts.append(page.locator(".gx-step-panel [data-fact=leaf]").text_content())
    assert sorted(texts) == sorted(names)
    assert page.evaluate("window.__pwned") is None
    assert page.locator(".gx-step-panel img, .gx-step-panel b").count() == 0


def test_a_node_inside_a_folded_group_marks_the_group(open_steps: Any) -> None:
    from benchmarks.viewer import encoder_loss

    loss, model = encoder_loss(2)
    record = gradexport.replay(loss, module=model)
    page = open_steps(record)
    visible = set(page.evaluate("window.gradexportViewer.visible()"))
    hidden = [k for k, step in enumerate(record.steps) if step.node not in visible]
    assert hidden, "the page opens with every node shown: nothing folded to test"
    for k in hidden[:: max(1, len(hidden) // 8)]:
        step = page.evaluate(f"window.gradexportViewer.step({k})")
        marked = page.evaluate("[...document.querySelectorAll('.gx-step-current')].map((e) => [e.dataset.id, e.dataset.running])")
        assert len(marked) == 1
        group, running = marked[0]
        assert group.split(":")[0] in ("module", "chain", "fan", "part") and running == f"running inside: {step['node']} {step['op']}"
        inside = page.evaluate("""() => {
          const canvas = document.querySelector('.gx-canvas').getBoundingClientRect();
          const box = document.querySelector('.gx-step-current').getBoundingClientRect();
          return box.left >= canvas.left && box.right <= canvas.right && box.top >= canvas.top && box.bottom <= canvas.bottom;
        }""")
        assert inside, f"step {k}: the group running it is not scrolled into view"
        # The node's state, and the next one's, agree with the record.
        assert page.evaluate(f"window.gradexportViewer.state({step['node']!r})") == "done"
        if k + 1 < len(record.steps):  # the next node to run has all its inputs by now
            assert page.evaluate(f"window.gradexportViewer.state({record.steps[k + 1].node!r})") == "waiting"


def test_a_leaf_shows_the_grad_it_held_then_what_it_accumulated(open_steps: Any) -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    x.grad = torch.tensor([10.0, 20.0])
    before = x.grad.clone()
    record = gradexport.replay((x * 3).sum(), params={"x": x})
    page = open_steps(record)
    (leaf,) = [k for k, step in enumerate(record.steps) if step.op == "AccumulateGrad"]
    node = record.steps[leaf].node
    page.evaluate(f"window.gradexportViewer.step({leaf - 1})")
    assert page.evaluate(f"window.gradexportViewer.leafGrad({node!r})")["values"] == repr(before)
    assert page.locator(".gx-step-grad").text_content() == ".grad [10., 20.]"
    page.evaluate(f"window.gradexportViewer.step({leaf})")
    assert page.evaluate(f"window.gradexportViewer.leafGrad({node!r})")["values"] == repr(x.grad) == "tensor([13., 23.])"
