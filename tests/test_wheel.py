"""The built package, as a user gets it: the wheel in a clean environment holding only torch, run from another folder.

The environment has torch (the version the suite runs on, which pip takes from
wherever it finds it), the wheel and what the wheel asks for, and nothing of
the checkout: the README's Python snippets and command lines must work there.
"""

from __future__ import annotations

import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
import torch
from format_fixtures import needs_dot

import gradexport

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(folder), str(REPO)], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (built,) = folder.glob("gradexport-*.whl")
    return built


@pytest.fixture(scope="module")
def clean_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("clean")
    venv.create(home / "env", with_pip=False)
    python = home / "env" / "bin" / "python"
    torch_pin = f"torch=={torch.__version__}"
    # This venv's pip drives the install into the clean one; nothing of this venv is visible there.
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", torch_pin, str(wheel)], capture_output=True, text=True
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    return python


def test_the_wheel_carries_the_viewer_the_examples_and_the_licences(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"gradexport/viewer/viewer.bundle.js", "gradexport/py.typed", "gradexport/examples/blog.py"} <= names
    licences = {name.rsplit("/", 1)[-1] for name in names if "/licenses/" in name}
    assert {"LICENSE", "LICENSE.dagre.txt", "LICENSE.graphlib.txt"} <= licences, licences
    metadata = zipfile.ZipFile(wheel).read(next(name for name in names if name.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in metadata
    assert f"Version: {gradexport.__version__}" in metadata


def test_the_clean_environment_holds_only_torch_and_what_the_wheel_asks_for(clean_python: Path) -> None:
    listed = subprocess.run([clean_python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True)
    if listed.returncode != 0:  # created without pip: ask importlib.metadata instead
        listed = subprocess.run(
            [clean_python, "-c", "import importlib.metadata as m; print('\\n'.join(d.metadata['Name'] for d in m.distributions()))"],
            check=True,
            capture_output=True,
            text=True,
        )
    names = {line.split("==")[0].lower() for line in listed.stdout.split()}
    assert "gradexport" in names and "torch" in names
    assert not names & {"pytest", "hypothesis", "numpy", "mkdocs", "matplotlib"}, names


@needs_dot
def test_the_readme_runs_from_another_folder_against_the_installed_wheel(clean_python: Path, tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    snippets = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    script = tmp_path / "readme.py"
    script.write_text("\n".join(snippets), encoding="utf-8")
    ran = subprocess.run([clean_python, script.name], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr
    assert "AccumulateGrad" in ran.stdout
    located = subprocess.run([clean_python, "-c", "import gradexport; print(gradexport.__file__)"], cwd=tmp_path, capture_output=True, text=True)
    assert located.returncode == 0 and str(REPO) not in located.stdout

    command_block = readme[readme.index("The command line runs a function") :]
    command_block = command_block[command_block.index("```sh\n") + 6 : command_block.index("```", command_block.index("```sh\n") + 6)]
    gradexport_command = clean_python.parent / "gradexport"
    elsewhere = tmp_path / "cli"
    elsewhere.mkdir()
    first = command_block.splitlines()[0].split("#")[0].split()
    assert first[0] == "gradexport" and first[1].startswith("gradexport.examples."), "the README's first command should need no checkout"
    exported = subprocess.run([gradexport_command, *first[1:]], cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0, exported.stderr
    assert "Failed to initialize NumPy" not in exported.stderr  # torch's warning without NumPy, quieted by the command line
    assert sorted(path.suffix for path in (elsewhere / "out").iterdir()) == [".dot", ".json", ".mmd", ".svg"]
    checked = [line.split("#")[0].split() for line in command_block.splitlines() if line.startswith(("gradexport check", "gradexport diff"))]
    assert len(checked) == 2
    for words in checked:
        result = subprocess.run([gradexport_command, *words[1:]], cwd=elsewhere, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, (words, result.stdout, result.stderr)
