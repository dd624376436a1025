"""The README's Python snippets run as written, one after the other, as a reader would paste them."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import torch
from format_fixtures import needs_dot

REPO = Path(__file__).resolve().parent.parent


@needs_dot  # the second snippet writes SVG
def test_readme_python_snippets_run_in_order(tmp_path, monkeypatch):
    snippets = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.DOTALL)
    assert len(snippets) >= 2
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        for snippet in snippets:
            exec(compile(snippet, "README.md", "exec"), namespace)
    graph_snippet = next(snippet for snippet in snippets if "# n0 " in snippet)
    first_output = [line.removeprefix("# ") for line in graph_snippet.splitlines() if line.startswith("# n")]
    assert first_output
    assert printed.getvalue().splitlines()[: len(first_output)] == first_output
    # What the README says of replay: it writes the leaves' .grad, as backward() does; record_gradients'
    # real backward then adds the same again: twice d(x*y)/dx.
    x, y = namespace["x"], namespace["y"]
    assert torch.equal(x.grad, 2 * y.detach()) and torch.equal(y.grad, 2 * x.detach())
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["graph.dot", "graph.json", "graph.mmd", "graph.svg"]
    assert (tmp_path / "model.svg").read_text().count('class="node') == namespace["view"].graph.number_of_nodes()
    assert namespace["small"].graph["collapsed_depth"] == 1
