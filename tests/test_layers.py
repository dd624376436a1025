"""The package's layering holds: no import circle, and no wing imports one its ``__init__`` does not allow.

Each wing (``gradexport/core``, ``tracing``, ``backward``...) says in its
``__init__`` docstring which wings it may import ("May import: core,
tracing."). Every import of every module is read with `ast` (at the top,
inside functions, under ``TYPE_CHECKING``, and ``importlib.import_module``
of a literal name), so a lazy import cannot hide a circle either.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gradexport"
#: Modules outside every wing: the package's public surface (the top tier and its named modules), ``python -m gradexport``
#: and the Sphinx extension's name.
TOP = {"gradexport", "gradexport.__main__", "gradexport.sphinx"} | {
    f"gradexport.{name}" for name in ("constants", "errors", "options", "records", "streams", "tools")
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported(module: str, path: Path) -> set[str]:
    """The gradexport modules ``module`` imports, resolved to module names (``from .x import name`` to ``x.name`` when that is a module)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def add(name: str, names: list[str] = ()) -> None:
        if not name.startswith("gradexport"):
            return
        submodules = [f"{name}.{item}" for item in names if f"{name}.{item}" in MODULES]
        found.update(submodules or [name])

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            add(base, [alias.name for alias in node.names])
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            add(node.args[0].value)
    found.discard(module)
    return found


IMPORTS = {module: imported(module, path) for module, path in MODULES.items()}


def wing_of(module: str) -> str | None:
    parts = module.split(".")
    return None if module in TOP or len(parts) < 2 else parts[1]


def allowed_wings() -> dict[str, set[str]]:
    """Each wing's "May import:" line, from its ``__init__`` docstring."""
    allowed = {}
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        match = re.search(r"^May import: (.+)\.$", docstring, re.MULTILINE)
        assert match, f"{init.relative_to(PACKAGE.parent)}: its docstring must say which wings it may import ('May import: core, tracing.')"
        text = match[1]
        allowed[init.parent.name] = set() if text == "nothing of gradexport" else {name.strip() for name in text.split(",")}
    return allowed


ALLOWED = allowed_wings()


def test_every_module_sits_in_a_wing_whose_docstring_names_what_it_may_import():
    wings = {wing_of(module) for module in MODULES} - {None}
    assert wings == set(ALLOWED)
    for wing, others in ALLOWED.items():
        assert others <= set(ALLOWED), f"{wing} names unknown wings: {others - set(ALLOWED)}"


def test_the_wings_themselves_form_layers():
    layers = nx.DiGraph((wing, other) for wing, others in ALLOWED.items() for other in others)
    layers.add_nodes_from(ALLOWED)
    assert nx.is_directed_acyclic_graph(layers), list(nx.simple_cycles(layers))
    # Allowing a wing allows what it may import too: the layers are closed downwards.
    for wing, others in ALLOWED.items():
        assert nx.descendants(layers, wing) == others, wing


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_wing_above_its_own(module):
    wing = wing_of(module)
    if wing is None:
        return
    upward = sorted(target for target in IMPORTS[module] if wing_of(target) != wing and (wing_of(target) is None or wing_of(target) not in ALLOWED[wing]))
    assert not upward, f"{module} ({wing}, may import {sorted(ALLOWED[wing]) or 'nothing'}) imports {upward}"


def test_no_import_circle():
    graph = nx.DiGraph((module, target) for module, targets in IMPORTS.items() for target in targets)
    circles = sorted(sorted(cycle) for cycle in nx.simple_cycles(graph))
    assert not circles, f"import circles: {circles}"


def test_the_reader_sees_the_imports():
    """The checks above see real imports: the walk module imports the fence, the CLI lazily imports the façade's diff."""
    assert "gradexport.tracing._torch" in IMPORTS["gradexport.tracing.graph"]
    assert "gradexport.api.diff" in IMPORTS["gradexport.frontends.cli.diff"]
    assert "gradexport.api.registry" in IMPORTS["gradexport.frontends.blocks.spec"]  # through importlib.import_module


def test_the_architecture_page_draws_the_layers_as_they_are():
    """docs/architecture.md's diagram: an arrow per wing to the highest ones it may import, so it cannot go stale."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    diagram = page[page.index("```mermaid") : page.index("```", page.index("```mermaid") + 3)]
    drawn = set(re.findall(r"^\s*(\w+) --> (\w+)$", diagram, re.MULTILINE))
    layers = nx.DiGraph((wing, other) for wing, others in ALLOWED.items() for other in others)
    assert drawn == set(nx.transitive_reduction(layers).edges)
