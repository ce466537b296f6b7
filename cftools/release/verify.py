"""`cftools verify`: every file of a release against its manifest, the kinds' rules of each record,
croissant.json against the manifest, and (asked with a boundary) no personal data in any file
(`cftools.release.scan`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from cftools.boundary import Boundary
from cftools.errors import CftoolsError, Hint, InputError
from cftools.release.layout import MANIFEST_NAME, RECORDS_NAME, hash_file, load_manifest, load_records


@dataclass
class VerifyReport:
    release: Path
    checked: int = 0
    mismatched: list[str] = field(default_factory=list)  # "PATH: what differs"
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    annotation: dict[str, Any] | None = None  # annotation_analysis.json's summary: annotators, error rate
    personal: list[str] = field(default_factory=list)  # "FILE WHERE: what" (cftools.release.scan)

    @property
    def ok(self) -> bool:
        return not (self.mismatched or self.missing or self.extra or self.personal)

    def problems(self) -> list[str]:
        return ([f"changed: {m}" for m in self.mismatched] + [f"missing: {m}" for m in self.missing]
                + [f"extra: {m}" for m in self.extra] + [f"personal data: {p}" for p in self.personal])

    def as_dict(self) -> dict[str, Any]:
        return {"release": str(self.release), "ok": self.ok, "checked": self.checked,
                "mismatched": self.mismatched, "missing": self.missing, "extra": self.extra,
                "personal": self.personal, "annotation": self.annotation}

def _safe_relative(path: object) -> bool:
    if not isinstance(path, str) or not path or "\\" in path:
        return False
    pure = PurePosixPath(path)
    return not pure.is_absolute() and ".." not in pure.parts and pure.as_posix() == path

def verify_release(release_dir: Path | str, boundary: Boundary | None = None) -> VerifyReport:
    """Re-hash every file of a release against its manifest: changed, missing and extra files; with BOUNDARY (the
    workspace's, or `outside_boundary()` for a folder alone), also scan every file for personal data."""
    release_dir = Path(release_dir)
    manifest = load_manifest(release_dir)
    entries = manifest.get("files")
    if not isinstance(entries, list):
        raise InputError(release_dir / MANIFEST_NAME, "no 'files' list")
    report = VerifyReport(release=release_dir)
    listed = set()
    for index, entry in enumerate(entries):
        rel = entry.get("path") if isinstance(entry, dict) else None
        if not _safe_relative(rel):
            report.mismatched.append(f"files[{index}]: path {rel!r} is not a plain relative path")
            continue
        listed.add(rel)
        path = release_dir / rel
        report.checked += 1
        if not path.is_file():
            report.missing.append(rel)
            continue
        size = path.stat().st_size
        if size != entry.get("size"):
            report.mismatched.append(f"{rel}: size {size}, manifest says {entry.get('size')}")
        elif hash_file(path) != entry.get("sha256"):
            report.mismatched.append(f"{rel}: SHA-256 differs from the manifest")
    for path in sorted(release_dir.rglob("*")):
        rel = path.relative_to(release_dir).as_posix()
        if (path.is_file() or path.is_symlink()) and rel != MANIFEST_NAME and rel not in listed:
            report.extra.append(rel)
    records_intact = RECORDS_NAME in listed and not any(m.startswith(f"{RECORDS_NAME}:") for m in report.mismatched)
    if records_intact and (release_dir / RECORDS_NAME).is_file():  # the kinds' decision rules hold of each record
        from cftools.kinds import get_kind

        for record in load_records(release_dir):
            problem = (get_kind(record.get("kind") or "").hooks.release.record_problem(record) if record.get("kind")
                       else None)
            if problem:
                report.mismatched.append(f"{RECORDS_NAME}: item {record.get('id')}: {problem}")
    from cftools.release.croissant import check_croissant

    report.mismatched += check_croissant(release_dir)
    from cftools.release.annotator_analysis import verify_summary

    report.annotation = verify_summary(release_dir)
    if boundary is not None:
        from cftools.release.scan import scan_release

        report.personal = scan_release(release_dir, boundary)
    return report

def verification_failure(report: VerifyReport, limit: int = 3) -> str:
    """One line for a release that fails `cftools verify`: how many files differ (and how many hold personal data)
    and the first LIMIT of them."""
    problems = report.problems()
    shown = "; ".join(problems[:limit]) + ("; …" if len(problems) > limit else "")
    differ = len(problems) - len(report.personal)
    what = [f"{differ} files do not match the manifest"] if differ else []
    if report.personal:
        what.append(f"personal data found in {len({p.split(' ', 1)[0] for p in report.personal})} files")
    return f"{report.release}: {' and '.join(what)}" + (f" ({shown})" if limit else "")


def recorded_manifest_change(store: Any, release_dir: Path) -> str | None:
    """Why RELEASE_DIR is not the release the store recorded writing there, or None: its manifest differs from the
    one recorded at export (`doctor`'s release_manifest_changed; files and manifest rewritten together verify)."""
    from sqlalchemy import select

    from cftools.models import Release

    folder = Path(release_dir).resolve()
    with store.session() as session:
        recorded = session.execute(select(Release.name, Release.version, Release.manifest_sha256)
                                   .where(Release.path == str(folder))).all()
    recorded = [row for row in recorded if row.manifest_sha256]
    if not recorded or not (folder / MANIFEST_NAME).is_file():
        return None
    found = hash_file(folder / MANIFEST_NAME)
    if any(row.manifest_sha256 == found for row in recorded):
        return None
    row = recorded[-1]
    return (f"{release_dir}: its manifest is not the one exported as {row.name} {row.version} (the store recorded "
            f"SHA-256 {row.manifest_sha256[:12]}…, the file's is {found[:12]}…): its files were rewritten together "
            "with the manifest (release_manifest_changed)")


def refuse_unrecorded_manifest(store: Any, release_dir: Path, verify: bool = True,
                               unverified: str = "reads it as it is") -> str | None:
    """The one check of a release against the store's record, for every reader (eval, eval import, release diff,
    preflight): raise CftoolsError (its hint: what not verifying does, UNVERIFIED) when RELEASE_DIR's manifest is not
    the one the store recorded writing there; with not VERIFY, return the reason instead, for the caller to name.
    None when it is the store's (or the store recorded no release there, or there is no store)."""
    changed = recorded_manifest_change(store, release_dir) if store is not None else None
    if changed and verify:
        raise CftoolsError(changed, hint=Hint("{message}; {no_verify} " + unverified, no_verify="--no-verify"))
    return changed
