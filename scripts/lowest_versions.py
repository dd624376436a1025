"""Install the lowest versions pyproject.toml allows, beside the project's venv, to prove the stated range.

    python scripts/lowest_versions.py FOLDER

reads ``[project].dependencies``, installs each ``name>=X`` that applies to
this Python as ``name==X`` into FOLDER (``pip install --target``, no
dependencies: the venv has the rest), and checks that the torch in the venv
is the lowest one allowed (``make setup`` pins it). ``make test-lowest``
then runs the quick tests with FOLDER first on ``PYTHONPATH``.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
#: Installed by make setup from a pinned wheel, not from here: it must already be the lowest allowed.
PINNED_BY_SETUP = {"torch"}


def lowest_pins() -> dict[str, str]:
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


def main(folder: str) -> int:
    pins = lowest_pins()
    for name in PINNED_BY_SETUP & set(pins):
        installed = importlib.metadata.version(name).split("+")[0]
        if installed != pins[name] and not installed.startswith(pins[name] + "."):
            print(f"{name} {installed} is installed, but the lowest allowed is {pins[name]}: pin it in the Makefile", file=sys.stderr)
            return 1
    wanted = [f"{name}=={version}" for name, version in sorted(pins.items()) if name not in PINNED_BY_SETUP]
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade", "--target", folder, *wanted], check=True)
    print("lowest versions:", ", ".join(f"{name}=={version}" for name, version in sorted(pins.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
