"""The blog's two examples as notebooks (examples/*.ipynb): each runs top to bottom on this venv's Python.

The notebooks assert their own results against torch (``backward()``'s
``.grad``), so a change in torch or gradexport that breaks them fails here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
KERNEL = "gradexport-test-venv"


@pytest.fixture(scope="module")
def venv_kernel(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A kernel spec that starts this interpreter, found first on JUPYTER_PATH: never a kernel of another Python."""
    data = tmp_path_factory.mktemp("jupyter")
    spec = data / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(data))
        yield KERNEL


def test_both_blog_examples_are_notebooks():
    assert [path.name for path in NOTEBOOKS] == ["multiply_then_sum.ipynb", "unbind_then_add.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_runs_on_the_venvs_python(path, venv_kernel, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), "commit notebooks without outputs"
    notebook.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.executable)"))
    client = nbclient.NotebookClient(notebook, kernel_name=venv_kernel, timeout=120, resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, when a cell fails
    printed = "".join(output.get("text", "") for output in notebook.cells[-1].outputs)
    assert printed.strip() == sys.executable
    text = "".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs)
    assert "dx =" in text and "AccumulateGrad" in text
