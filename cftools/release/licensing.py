"""The release's licence and the licences of the sources its items come from."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from cftools.errors import CftoolsError, Hint
from cftools.ingest.licences import clean_licence, licence_conflicts, licences_of
from cftools.release.selection import ExportItem
from cftools.workspace import Workspace


@dataclass
class Licensing:
    """The release's licence, whether the exporter gave it (--licence), and its sources' licences."""

    licence: str | None
    given: bool
    sources: dict[str, str]  # dataset -> licence
    items_per_source: dict[str, int]

    def card_rows(self) -> list[dict[str, Any]]:
        return [{"dataset": d, "licence": lic, "n_items": self.items_per_source[d]} for d, lic in self.sources.items()]


def release_licensing(workspace: Workspace, items: list[ExportItem], licence: str | None) -> Licensing:
    """The licences of the sources ITEMS come from, and the release licence; refuses (before anything is
    written) to stamp the workspace's licence over sources under another or an unknown licence."""
    given = clean_licence(licence)
    section = workspace.section("release")
    stamped = given or clean_licence(section.get("license") or section.get("licence"))
    per_source = Counter(e.provenance["dataset"] for e in items if e.provenance.get("dataset"))
    with workspace.store.session() as session:
        sources = licences_of(session, per_source)
    conflicts = licence_conflicts(stamped, sources) if stamped and not given else {}
    if conflicts:
        listed = ", ".join(f"{dataset} ({lic})" for dataset, lic in sorted(conflicts.items()))
        raise CftoolsError(
            f"will not stamp the licence {stamped} ([release] license in cftools.toml) over sources under other "
            f"or unknown licences: {listed}", hint=Hint(
                "{message}; state a source's licence with `cftools ingest ... {licence}`, or give the release's "
                "licence explicitly with `cftools export {licence} LICENCE`", licence="--licence"))
    return Licensing(stamped, given is not None, sources, dict(per_source))


# What a source's licence lets a release stamp over it. Creative Commons licences carry restrictions (NC: no
# commercial use, ND: no derivatives, SA: share alike under the same licence); a release keeps every restriction of
# its sources or it is incompatible. Public-domain dedications and permissive licences restrict nothing a release
# could drop (their attribution is the card's source table). Anything else cannot be judged here.
PERMISSIVE = {"cc0-1.0", "pddl-1.0", "cc-pdm-1.0", "mit", "apache-2.0", "bsd-2-clause", "bsd-3-clause", "isc",
              "unlicense", "odc-by-1.0"}
COMPATIBLE, INCOMPATIBLE, UNKNOWN_COMPATIBILITY = "compatible", "incompatible", "unknown"


def cc_restrictions(licence: str) -> set[str] | None:
    """{"nc", "nd", "sa"} ∩ the elements of a Creative Commons licence id (CC-BY-NC-SA-4.0); None if not one."""
    parts = licence.strip().lower().split("-")
    if parts[:2] != ["cc", "by"]:
        return None
    return {part for part in parts[2:] if part in ("nc", "nd", "sa")}


def licence_compatibility(release: str | None, source: str | None) -> str:
    """Whether a release under RELEASE may hold material of a source under SOURCE: compatible, incompatible, or
    unknown (either licence not stated, or not one this rule knows)."""
    from cftools.ingest.licences import UNKNOWN, same_licence

    if not release or not source or UNKNOWN in (release.strip().lower(), source.strip().lower()):
        return UNKNOWN_COMPATIBILITY
    if same_licence(release, source) or source.strip().lower() in PERMISSIVE:
        return COMPATIBLE
    kept, needed = cc_restrictions(release), cc_restrictions(source)
    if needed is None:
        return UNKNOWN_COMPATIBILITY
    if kept is None or not needed <= kept or ("sa" in needed and not same_licence(release, source)):
        return INCOMPATIBLE
    return COMPATIBLE
