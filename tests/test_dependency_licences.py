"""cftools is Apache-2.0: no installed dependency of any of its extras, direct or transitive, may be GPL or AGPL
(LGPL is fine to depend on). Read from the installed distributions' metadata: License-Expression, License and the
trove classifiers."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
# GPL or AGPL, but not LGPL ("Lesser"/"Library"); an SPDX "GPL-2.0-or-later WITH Classpath-exception" still counts.
COPYLEFT = re.compile(r"(?<![L\w])A?GPL|GNU (Affero )?General Public License", re.IGNORECASE)
LESSER = re.compile(r"LGPL|Lesser|Library General Public", re.IGNORECASE)


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        found += [Requirement(r) for r in extra if not r.startswith("cftools")]
    return found


def installed_closure() -> dict[str, metadata.Distribution]:
    """Every installed distribution the declared requirements reach (extras of a requirement followed too)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = declared()
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        try:
            dist = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            continue  # not installed here: nothing to check
        seen[name] = dist
        for text in dist.requires or []:
            child = Requirement(text)
            env = [{"extra": e} for e in requirement.extras] or [{"extra": ""}]
            if child.marker is None or any(child.marker.evaluate(e) for e in env):
                todo.append(child)
    return seen


def licence_texts(dist: metadata.Distribution) -> list[str]:
    meta = dist.metadata
    texts = [meta.get("License-Expression") or "", (meta.get("License") or "")[:300]]
    texts += [c for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    return [t for t in texts if t]


def copyleft(texts: list[str]) -> bool:
    return any(COPYLEFT.search(t) and not LESSER.search(t) for t in texts)


def test_the_licence_reader_tells_gpl_from_lgpl_and_permissive():
    assert copyleft(["GPL-3.0-or-later"]) and copyleft(["License :: OSI Approved :: GNU Affero General Public "
                                                        "License v3"])
    assert not copyleft(["LGPL-3.0-only"]) and not copyleft(["License :: OSI Approved :: GNU Lesser General "
                                                             "Public License v3 (LGPLv3)"])
    assert not copyleft(["Apache-2.0", "License :: OSI Approved :: MIT License"])


def test_no_installed_dependency_of_any_extra_is_gpl_or_agpl():
    closure = installed_closure()
    assert "nltk" in closure or "scikit-learn" in closure  # the agreement libraries are installed and reached
    offenders = {name: licence_texts(dist) for name, dist in closure.items() if copyleft(licence_texts(dist))}
    assert offenders == {}, offenders
