"""The viewer with module names that are also the names of built-in object properties, clicked with a real mouse.

A module named ``constructor``, ``toString``, ``valueOf``, ``hasOwnProperty``
or ``__proto__`` must be looked up as data: a lookup through an object's
prototype would find ``Object.prototype.constructor`` and the like. The page
is a real ``gradexport diff before.json after.json -f html`` where only one
side has those modules, so they are missing from the merged graph's classes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from format_fixtures import REPO
from test_site_browser import browser  # noqa: F401  (a fixture)
from test_viewer_browser import PANEL_JS, click, drawing, drawn_after, open_page, press, reachable  # noqa: F401
from torch import nn

import gradexport

pytestmark = pytest.mark.browser

NAMES = ["constructor", "toString", "valueOf", "hasOwnProperty", "__proto__"]


def model_graph(names: list[str]) -> Any:
    torch.manual_seed(0)
    model = nn.Sequential()
    for name in names:
        model.add_module(name, nn.Linear(3, 3))
    with gradexport.capture_modules():
        out = model(torch.randn(2, 3))
    return gradexport.to_networkx(out.sum(), module=model)


@pytest.fixture(scope="module")
def diff_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("prototype-names")
    gradexport.formats.write_json(model_graph(["a", *NAMES]), folder / "before.json")
    gradexport.formats.write_json(model_graph(["a"]), folder / "after.json")  # the merged graph's classes are after's
    result = subprocess.run(
        [sys.executable, "-m", "gradexport", "diff", "before.json", "after.json", "-f", "html", "-o", "out"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 1, result.stderr  # they differ
    return folder / "out" / "diff.html"


BOX_TITLE_JS = """id => {
  const box = [...document.querySelectorAll('.gx-box')].find((b) => b.dataset.id === id);
  if (!box) return null;
  const r = box.querySelector('.gx-box-title rect').getBoundingClientRect();
  const x = r.left + 6, y = r.top + r.height / 2;
  const hit = document.elementFromPoint(x, y);  // null off screen; the minimap or bar where they cover it
  return { text: box.querySelector('.gx-box-title text').textContent, x, y, reachable: Boolean(hit && hit.closest('.gx-box-title')) };
}"""


def reachable_title(opened: Any, item: str) -> dict[str, Any] | None:
    """The title of ``item``'s box where a mouse can click it, panning down the drawing (Fit fits a long one across)."""
    for _ in range(80):
        title = opened.call(BOX_TITLE_JS, item)
        if title is None or title["reachable"]:
            return title
        press(opened, "ArrowDown")
    return opened.call(BOX_TITLE_JS, item)


def test_module_names_of_object_properties_are_data_in_a_diff_page(diff_page, open_page):
    opened = open_page(diff_page)
    for name in NAMES:
        item = f"module:{name}"
        press(opened, "f")
        title = reachable_title(opened, item)
        assert title is not None, f"{item} is not drawn as an open box"
        assert title["text"].removesuffix(" ▾") == name  # no class: not "constructor: function Object() { [native code] }"
        serial = drawing(opened)
        click(opened, title)  # a click on the title folds the box into one node
        folded = drawn_after(opened, serial)
        assert item in folded
        press(opened, "f")
        item, point = reachable(opened, [item])
        serial = drawing(opened)
        click(opened, point)  # and a click on the folded node opens it again and selects it
        drawn_after(opened, serial)
        shown = opened.call(PANEL_JS)
        assert shown["heading"] == name and shown["fields"]["id"] == item
        assert "native code" not in str(shown)
        assert opened.errors == []
