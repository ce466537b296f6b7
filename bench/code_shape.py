"""How readable the package is, counted by an `ast` walk of cftools/ (the figures the issue on readability asks for).

    .venv/bin/python bench/code_shape.py [--list]

- library functions (outside the click command modules) taking more than 8 parameters, and which are keyword-only
  past the first few;
- private names (`_name`) imported from another module;
- command-line options (those the click commands declare) named in a library error's text: a `raise` outside the
  command modules says what went wrong, and its `Hint(...)` carries the option, which the CLI puts in;
- for one command, the cftools modules its call graph reaches is not counted here (it needs a trace: run the
  command under `python -X importtime` or a tracer).
"""

from __future__ import annotations

import argparse
import ast
import re
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


FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def declared_options() -> set[str]:
    """Every `--option` a click command declares: the names given to a call of `click.option`, `click.Option` or
    a helper named `..._option` in a command module."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if not is_command_module(path):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = getattr(node, "func", None)
            name = getattr(name, "attr", getattr(name, "id", ""))
            if isinstance(node, ast.Call) and name.lower().endswith("option"):
                names = [a for arg in node.args for a in (arg.elts if isinstance(arg, ast.List) else [arg])]
                found |= {a.value for a in names if isinstance(a, ast.Constant) and isinstance(a.value, str)
                          and a.value.startswith("--")}
    return found


def strings_outside_hints(node: ast.AST) -> list[ast.Constant]:
    """The string constants of NODE, except inside a `Hint(...)` call (the option's rightful place)."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Hint":
        return []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node]
    return [found for child in ast.iter_child_nodes(node) for found in strings_outside_hints(child)]


def options_in_errors() -> list[tuple[str, int, str]]:
    """(module, line, option) for every command-line option named in the text a library `raise` builds."""
    options, found = declared_options(), []
    for path in sorted(PACKAGE.rglob("*.py")):
        if is_command_module(path):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                found += [(path.relative_to(PACKAGE.parent).as_posix(), text.lineno, flag)
                          for text in strings_outside_hints(node.exc) for flag in FLAG.findall(text.value)
                          if flag in options]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="name every function and import counted")
    options = parser.parse_args()
    signatures, imports, flags = long_signatures(), private_imports(), options_in_errors()
    print(f"library functions with more than {MAX_PARAMETERS} parameters: {len(signatures)}")
    if options.list:
        for module, name, count in signatures:
            print(f"  {count:3d}  {module}:{name}")
    print(f"private names imported across modules: {len(imports)}")
    if options.list:
        for module, source, name in imports:
            print(f"  {module}: from {source} import {name}")
    print(f"command-line options named in library errors' text: {len(flags)}")
    if options.list:
        for module, line, flag in flags:
            print(f"  {module}:{line}: {flag}")


if __name__ == "__main__":
    main()
