"""The layout: no import circle anywhere in cftools, the kinds' interface imports no stage, and every kind
package has the same shape (issue 22). Read from the source with `ast`, so lazy imports inside functions and
imports only for type checking count too."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

from cftools.kinds import all_kinds
from cftools.kinds.base import Kind

PACKAGE = Path(__file__).resolve().parent.parent / "cftools"
BUILT_IN_KINDS = ("cvqa", "cfmm", "mucr")
# What a kind package may hold: its Kind, its fields, and one module per stage or concern of a stage.
KIND_MODULES = {"__init__", "kind", "model", "ingest", "generate", "parse", "cues", "images", "checks", "annotate",
                "explanations", "release", "scores", "commands"}
EVERY_KIND_HAS = {"__init__", "kind", "model", "ingest", "generate", "checks", "commands"}
# The layer below the stages and the kinds: what kinds/base.py may import.
BELOW_KINDS = {"cftools.errors", "cftools.findings", "cftools.item_view", "cftools.judgments", "cftools.resources",
               "cftools.answers", "cftools.models", "cftools.personal_data", "cftools.progress"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported_modules(name: str) -> set[str]:
    """The cftools modules NAME imports anywhere in its source (`from pkg import submodule` names the
    submodule, not the package)."""
    path = MODULES[name]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_no_import_circle() -> None:
    graph = {name: imported_modules(name) for name in MODULES}
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        pytest.fail("import circle: " + " -> ".join(error.args[1]))


def test_the_kinds_interface_imports_no_stage() -> None:
    for name in ("cftools.kinds.base", "cftools.kinds.registry", "cftools.kinds"):
        stages = imported_modules(name) - BELOW_KINDS - {"cftools.kinds.base", "cftools.kinds.registry"}
        assert not stages, f"{name} imports {sorted(stages)}"
    for name in BELOW_KINDS:
        above = {m for m in imported_modules(name) if m not in BELOW_KINDS}
        assert not above, f"{name} (below the kinds) imports {sorted(above)}"


@pytest.mark.parametrize("kind", BUILT_IN_KINDS)
def test_each_kind_is_one_package_of_the_same_shape(kind: str) -> None:
    folder = PACKAGE / "kinds" / kind
    modules = {p.stem for p in folder.glob("*.py")}
    assert EVERY_KIND_HAS <= modules, f"{kind} lacks {sorted(EVERY_KIND_HAS - modules)}"
    assert modules <= KIND_MODULES, f"{kind} has modules named by no stage: {sorted(modules - KIND_MODULES)}"
    exported = [k for k in all_kinds().values() if type(k).__module__.startswith(f"cftools.kinds.{kind}.")]
    assert [k.name for k in exported] == [kind]
    package = __import__(f"cftools.kinds.{kind}", fromlist=["__all__"])
    assert [getattr(package, n) for n in package.__all__] == [type(exported[0])]
    assert issubclass(type(exported[0]), Kind)


def test_no_kind_module_left_flat() -> None:
    flat = sorted(p.name for p in (PACKAGE / "kinds").glob("*.py") if p.stem not in ("__init__", "base", "registry"))
    assert not flat, f"kind modules outside a kind package: {flat}"
