"""A bundle of the flight recorder in headless Chromium: ``gradexport view BUNDLE`` opens on the divergent node.

The page is written by the command line from a bundle of a training loop whose
step 17 goes bad (`test_recorder.NormalisedNet`: a row of zeros makes the
backward of a square root send NaN) and opened from ``file://`` with every
request off the machine blocked. What it shows is checked against torch: the
node that runs at the step each pane opens on is the node whose gradients the
test's own hooks saw turn NaN.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from test_recorder import BAD_STEP, NormalisedNet, batches, train
from test_site_browser import browser  # noqa: F401  (a fixture: Debian's Chromium through Playwright)
from test_viewer_browser import open_page  # noqa: F401  (a fixture: a page opened from file:// with the network blocked)

import gradexport
from gradexport.frontends.cli import main

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def bundle_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    torch.manual_seed(0)
    model = NormalisedNet()
    folder = tmp_path_factory.mktemp("bad")
    kept: dict[str, Any] = {}
    train(model, batches(BAD_STEP + 1), folder, kept=kept, healthy_every=5)
    page = folder / "page.html"
    assert main(["view", str(folder / "bad-step-000017.json"), "--no-open", "-o", str(page)]) == 0
    return page, kept


def test_the_bundle_opens_on_the_divergent_node_beside_the_healthy_step(open_page: Any, bundle_page: tuple[Path, dict[str, Any]]) -> None:  # noqa: F811
    path, kept = bundle_page
    bundle = gradexport.load_bundle(path.with_name("bad-step-000017.json"))
    opened = open_page(path, in_frame=True)  # checks, as it closes the page, that nothing left it and nothing failed
    page = opened.page
    page.wait_for_function("window.gradexportBundle !== undefined")
    page.evaluate("window.gradexportBundle.ready")
    head = page.inner_text(".gx-bundle-head")
    assert f"bad step {BAD_STEP}: a gradient holds NaN or Inf" in head
    assert "SqrtBackward0" in head and "scale = torch.sqrt((h * h).sum(dim=1, keepdim=True))" in head
    assert "healthy step 15, the last the recorder kept" in head
    panes = {frame.evaluate("document.title"): frame for frame in page.frames[1:]}
    assert set(panes) == {f"bad step {BAD_STEP}", "healthy step 15"}
    divergence = bundle.divergence
    for title, frame in panes.items():
        step = frame.evaluate("window.gradexportViewer.step()")
        assert step["node"] == divergence and step["op"] == "SqrtBackward0", title
    bad_step = panes[f"bad step {BAD_STEP}"].evaluate("window.gradexportViewer.step()")
    healthy_step = panes["healthy step 15"].evaluate("window.gradexportViewer.step()")
    # What the square root's backward sent: NaN in the bad step where the row was zero, finite in the healthy step.
    assert "nan" in bad_step["outputs"][0]["values"] and "nan" not in healthy_step["outputs"][0]["values"]
    selected = panes[f"bad step {BAD_STEP}"].evaluate(f"window.gradexportViewer.select({divergence!r})")
    assert selected["nonfinite"] == "origin" and selected["source_code"] == "scale = torch.sqrt((h * h).sum(dim=1, keepdim=True))"
    # At the bad pane's last step, each leaf holds the .grad torch itself gave in the training step, as torch prints it.
    bad_pane = panes[f"bad step {BAD_STEP}"]
    bad_pane.evaluate("window.gradexportViewer.step(window.gradexportViewer.steps() - 1)")
    for name in ("fc1.weight", "fc2.weight", "fc2.bias"):
        node = next(node for node, data in bundle.bad.graph.nodes(data=True) if name in (data.get("names") or []))
        assert bad_pane.evaluate(f"window.gradexportViewer.leafGrad({node!r})")["values"] == repr(kept[name]), name
    assert kept["fc1.weight"].isnan().any()
    page.screenshot(path=str(path.with_suffix(".png")))


def test_a_nan_made_in_the_loss_function_opens_on_its_loss_node(open_page: Any, tmp_path: Path) -> None:  # noqa: F811
    """``torch.log(-out).sum()``: the bad pane opens on the loss's own node, the header names the ops that may have made the NaN."""
    from test_recorder_loss import BAD
    from test_recorder_loss import train as train_loss

    bundle, seen = train_loss(tmp_path, lambda out, step: torch.log(-out.abs() + (-1.0 if step == BAD else 10.0)).sum())
    page_path = tmp_path / "page.html"
    assert main(["view", bundle.path, "--no-open", "-o", str(page_path)]) == 0
    opened = open_page(page_path, in_frame=True)
    page = opened.page
    page.wait_for_function("window.gradexportBundle !== undefined")
    page.evaluate("window.gradexportBundle.ready")
    head = page.inner_text(".gx-bundle-head")
    assert "made in the loss function by one of LogBackward0, SumBackward0" in head and seen["first"] == "LogBackward0"
    panes = {frame.evaluate("document.title"): frame for frame in page.frames[1:]}
    step = panes[f"bad step {BAD}"].evaluate("window.gradexportViewer.step()")
    # torch's own loss node (the sum whose result is the NaN loss) is the first node run, and the pane opens on it.
    assert step["node"] == bundle.divergence and step["op"] == "SumBackward0" and step["index"] == 0
