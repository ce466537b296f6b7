"""constraints/lowest.txt pins the lowest version pyproject.toml allows for every bounded dependency that
`make test-lowest` installs, so the suite run there tests the bounds as written (a bound raised in one
file and not the other fails here)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
TESTED_EXTRAS = ("local", "embed", "export", "eval", "postgres", "test")  # as the Makefile's test-lowest


def lowest_pins() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints" / "lowest.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def lower_bounds() -> dict[str, Version]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in TESTED_EXTRAS:
        declared += [d for d in project["optional-dependencies"][extra] if not d.startswith("cftools")]
    bounds: dict[str, Version] = {}
    for text in declared:
        requirement = Requirement(text)
        for spec in requirement.specifier:
            if spec.operator == ">=":
                name = canonicalize_name(requirement.name)
                bounds[name] = max(bounds.get(name, Version(spec.version)), Version(spec.version))
    return bounds


def test_every_lower_bound_is_pinned_at_its_lowest_release():
    pins, bounds = lowest_pins(), lower_bounds()
    assert "torch" in bounds and "torch" not in pins  # torch stays the CPU build of constraints/cpu.txt
    for name, bound in bounds.items():
        if name == "torch":
            continue
        assert name in pins, f"{name}>={bound} is not pinned in constraints/lowest.txt"
        # the pin is the bound itself, or its first release where the bound names none (ijson 3.2 -> 3.2.0.post0)
        assert pins[name].release[:len(bound.release)] == bound.release or pins[name] == bound, (name, pins[name])
        assert pins[name] >= bound, (name, pins[name], bound)
