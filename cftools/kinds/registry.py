"""The registered kinds: every entry point of the `cftools.kinds` group (the built-in three included).

A research group ships its own shape as a package that declares, in its pyproject.toml,

    [project.entry-points."cftools.kinds"]
    mykind = "mypackage.kind:MyKind"

where `MyKind` is a `cftools.kinds.base.Kind` subclass (or an instance of one). `register()` adds one
at run time (tests, notebooks).
"""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import entry_points

from cftools.errors import CftoolsError
from cftools.kinds.base import Kind

GROUP = "cftools.kinds"
_registered: dict[str, Kind] = {}


def _instance(obj: object, source: str) -> Kind:
    kind = obj() if isinstance(obj, type) else obj
    if not isinstance(kind, Kind) or not kind.name:
        raise CftoolsError(f"{source} is not a cftools kind (a Kind subclass with a name)")
    if "hooks" not in vars(kind):  # written before Kind had an __init__: its own does not call Kind's
        Kind.__init__(kind)
    return kind


@lru_cache(maxsize=1)
def _from_entry_points() -> dict[str, Kind]:
    found: dict[str, Kind] = {}
    for point in entry_points(group=GROUP):
        kind = _instance(point.load(), f"entry point {point.name} = {point.value}")
        if kind.name != point.name:
            raise CftoolsError(f"entry point {point.name} = {point.value} registers a kind named {kind.name!r}")
        found.setdefault(kind.name, kind)
    return found


def all_kinds() -> dict[str, Kind]:
    """Every kind by name: entry points, then those registered at run time."""
    return {**_from_entry_points(), **_registered}


def register(kind: Kind | type[Kind]) -> Kind:
    """Register KIND for this process (a package does it through the entry point group instead)."""
    instance = _instance(kind, repr(kind))
    _registered[instance.name] = instance
    return instance


def unregister(name: str) -> None:
    _registered.pop(name, None)


def get_kind(name: str) -> Kind:
    kinds = all_kinds()
    try:
        return kinds[name]
    except KeyError:
        raise CftoolsError(f"unknown kind {name!r}; registered: {', '.join(sorted(kinds)) or 'none'} "
                           f"(a kind is registered through the {GROUP!r} entry point group)") from None


def kind_names() -> list[str]:
    return sorted(all_kinds())
