"""How readable the package is, counted by an `ast` walk of cftools/ (the figures the issue on readability asks for).

    .venv/bin/python bench/code_shape.py [--list]

- library functions (outside the click command modules) taking more than 8 parameters, and which are keyword-only
  past the first few;
- private names (`_name`) imported from another module;
- for one command, the cftools modules its call graph reaches is not counted here (it needs a trace: run the
  command under `python -X importtime` or a tracer).
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "cftools"
COMMAND_MODULES = ("commands/", "cli.py", "kinds/cvqa/commands.py", "kinds/cfmm/commands.py", "kinds/mucr/commands.py")
MAX_PARAMETERS = 8


def is_command_module(path: Path) -> bool:
    relative = path.relative_to(PACKAGE).as_posix()
    return any(relative.startswith(prefix) for prefix in COMMAND_MODULES)


def parameter_count(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    arguments = function.args
    names = [a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs]
    return len([n for n in names if n not in ("self", "cls")])


def long_signatures() -> list[tuple[str, str, int]]:
    """(module, function, parameters) for every library function over MAX_PARAMETERS."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if is_command_module(path):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and parameter_count(node) > MAX_PARAMETERS:
                found.append((path.relative_to(PACKAGE.parent).as_posix(), node.name, parameter_count(node)))
    return sorted(found, key=lambda row: -row[2])


def private_imports() -> list[tuple[str, str, str]]:
    """(importing module, imported module, name) for every `from cftools… import _name`."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("cftools")):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append((path.relative_to(PACKAGE.parent).as_posix(), node.module or ".", alias.name))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="name every function and import counted")
    options = parser.parse_args()
    signatures, imports = long_signatures(), private_imports()
    print(f"library functions with more than {MAX_PARAMETERS} parameters: {len(signatures)}")
    if options.list:
        for module, name, count in signatures:
            print(f"  {count:3d}  {module}:{name}")
    print(f"private names imported across modules: {len(imports)}")
    if options.list:
        for module, source, name in imports:
            print(f"  {module}: from {source} import {name}")


if __name__ == "__main__":
    main()
