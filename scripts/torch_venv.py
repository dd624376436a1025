"""Make a venv beside the project's with another torch, for the tests at the ends of the supported range.

    python scripts/torch_venv.py FOLDER oldest    # the lowest version of every dependency, torch included
    python scripts/torch_venv.py FOLDER newest    # requirements/torch-newest.txt

Run by ``.venv/bin/python``. The new venv sees the project venv's packages
after its own (one ``.pth`` line), so only torch and what must match it are
installed into it: the test tools, Graphviz bindings and the rest come from the
project venv. ``oldest`` installs ``name==X`` for each ``name>=X`` of
``[project].dependencies`` that applies to this Python, and ``numpy<2`` beside a
torch older than 2.3, which was built against NumPy 1. gradexport itself is
installed editable, with no dependencies. Writes ``FOLDER/.installed`` last,
for make.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def lowest_pins() -> dict[str, str]:
    """``{name: lowest version}`` for each dependency of ``pyproject.toml`` that applies here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = {}
    for text in project["dependencies"]:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        lowest = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        if len(lowest) != 1:
            raise SystemExit(f"pyproject.toml: {text!r} states no single lower bound (>=)")
        pins[requirement.name] = lowest[0]
    return pins


def requirements(end: str) -> list[str]:
    if end == "newest":
        return ["-r", str(ROOT / "requirements" / "torch-newest.txt")]
    if end != "oldest":
        raise SystemExit(f"torch_venv.py: END is oldest or newest, not {end!r}")
    pins = lowest_pins()
    wanted = [f"{name}=={version}" for name, version in sorted(pins.items())]
    if Version(pins["torch"]) < Version("2.3"):
        wanted.append("numpy<2")
    return wanted


def main(folder: str, end: str) -> int:
    target = Path(folder).resolve()
    wanted = requirements(end)
    venv.create(target, with_pip=True, clear=True)
    python = target / "bin" / "python"
    own_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], check=True, capture_output=True, text=True)
    (Path(own_site.stdout.strip()) / "zz-project-venv.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    subprocess.run([python, "-m", "pip", "install", "--quiet", *wanted], check=True)
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(ROOT)], check=True)
    shown = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], check=True, capture_output=True, text=True)
    print(f"{target.name}: torch {shown.stdout.strip()} ({' '.join(wanted)})")
    (target / ".installed").touch()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
