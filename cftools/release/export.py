"""Export: the store's items as a versioned, verifiable release folder (see `cftools.release.layout` for the layout).

Guarantees:
- Deterministic: records are sorted by id, every time written comes from the store, JSON is written
  with sorted keys, Parquet and PNG files carry no clock time. The same store exports the same bytes.
- Safe: the release's own file names come from content hashes; names found in input data (image file
  names, paths) are never used as paths. NAME, VERSION and split names are checked to be plain names.
  The release is written to a hidden temporary folder beside the target and renamed into place only
  when complete (`cftools.release.swap`), so a failed or killed export leaves no partial release; an
  existing release is replaced only with `force`.
- Splits are decided by a hash, so they are stable under re-export (`cftools.release.splits`).
- Nothing personal: the records and provenance every writer uses come through the workspace's boundary
  (`cftools.boundary`: people as keyed pseudonyms, no local paths), and the finished folder is scanned
  (`cftools.release.scan`) before it is published: one that still holds an email or a local path is refused.

The parts: `selection` reads the store, `splits` assigns splits, `records` writes the files, `manifest` the
manifest, `licensing` the licences, `swap` the folder; this module builds the `release.Release` every writer takes,
runs them in order and records the release.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from cftools.errors import CftoolsError, Hint
from cftools.kinds import all_kinds, get_kind
from cftools.boundary import workspace_boundary
from cftools.models import Release as ReleaseRow, utcnow
from cftools.release.layout import (DEFAULT_OUT_DIR, FORMAT_NATIVE, MANIFEST_NAME, hash_file, release_dir_name,
                                    stage)
from cftools.release.edited import edit_counts
from cftools.release.extras import shared_formats, write_release_extras
from cftools.release.licensing import release_licensing
from cftools.release.annotator_analysis import release_analysis, write_analysis
from cftools.release.manifest import counts_of, write_manifest
from cftools.release.records import Progress, copy_images, write_native
from cftools.release.release import Release
from cftools.release.scan import refuse_personal_data
from cftools.release.selection import collect_items, statuses_for
from cftools.release.splits import DEFAULT_SPLITS, check_plain_name
from cftools.release.swap import FORCE_HINT, atomic_release
from cftools.store import Store
from cftools.workspace import Workspace


@dataclass
class ExportResult:
    path: Path
    format: str
    n_items: int
    n_verified: int
    n_unverified: int
    n_images: int
    by_split: dict[str, int] = field(default_factory=dict)
    skipped: int = 0
    manifest_sha256: str = ""
    warnings: list[str] = field(default_factory=list)  # what the exporter should fix (empty RAI texts, ...)
    cleared: list[str] = field(default_factory=list)  # what clearing a killed export's temporaries did
    changes: dict[str, int] = field(default_factory=dict)  # with a previous release: items per category of change
    edits: dict[str, int] = field(default_factory=dict)  # what became of the edits (`cftools.release.edited`)
    include_unverified_edits: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "path": str(self.path)}


def export_formats() -> dict[str, Any]:
    """`native`, then every kind's peer formats: name -> (kind, ExportFormat), None for native."""
    formats: dict[str, Any] = {FORMAT_NATIVE: None}
    for name, kind in sorted(all_kinds().items()):
        for spec in kind.hooks.release.export_formats:
            formats.setdefault(spec.name, (name, spec))
    formats.update({spec.name: (None, spec) for spec in shared_formats()})  # lmms-eval, vlmevalkit: every kind
    return formats


def refuse_invalid_records(records: list[dict[str, Any]]) -> None:
    """The last guard of the decision rules: a release never holds a record its kind calls invalid."""
    problems = [f"item {r['id']}: {problem}" for r in records
                if (problem := get_kind(r["kind"]).hooks.release.record_problem(r)) is not None]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CftoolsError(f"export refused: {problems[0]}{more}; reject or re-verify the item")


@dataclass(frozen=True)
class ExportOptions:
    """What an export asks beyond the release's name and version: `cftools export`'s options."""

    fmt: str = FORMAT_NATIVE
    include_unverified: bool = False  # also drafts and checked items, marked unverified
    include_in_review: bool = False  # also items under review, marked unverified
    include_unverified_edits: bool = False  # also the best-ranked unflagged edit candidate of unjudged items
    splits: dict[str, float] | None = None  # name -> fraction (default: everything in test)
    force: bool = False  # replace a release this workspace wrote
    licence: str | None = None  # else the workspace's `[release] license`
    previous: Path | None = None  # an earlier native release's folder
    kind_options: dict[str, Any] = field(default_factory=dict)  # the formats' own (--mucr-schema, ...)


def export_release(workspace: Workspace, name: str, version: str, out_dir: Path | None = None, *,
                   options: ExportOptions = ExportOptions(), progress: Progress | None = None) -> ExportResult:
    """Write the release NAME-VERSION (the accepted items; with include_unverified also drafts and checked
    items, with include_in_review also items under review, marked unverified) and record it in the store.

    The release's licence is the options' LICENCE, else the workspace's `[release] license`; the latter is refused
    over source datasets under another or an unknown licence (an explicit LICENCE is the exporter's decision).

    With PREVIOUS (an earlier native release's folder), the changes since it (`cftools.release.diff`) go into the
    card's "Changes since" section and croissant.json's `prov:wasRevisionOf`, before the manifest is written.

    An edited image is released only when two people accepted it; with include_unverified_edits also an item's
    best-ranked candidate without an unwaived flag, said so in the card, croissant.json and browse.html
    (`cftools.release.edited`)."""
    fmt, force, include_unverified = options.fmt, options.force, options.include_unverified
    include_unverified_edits = options.include_unverified_edits
    check_plain_name(name, "release name")
    check_plain_name(version, "version")
    formats = export_formats()
    if fmt not in formats:
        raise CftoolsError(f"unknown format {fmt!r}; choose one of {', '.join(formats)}")
    splits = options.splits or dict(DEFAULT_SPLITS)
    for split in splits:
        check_plain_name(split, "split name")
    out_dir = Path(out_dir) if out_dir else workspace.path(DEFAULT_OUT_DIR)
    dir_name = release_dir_name(name, version) + ("" if fmt == FORMAT_NATIVE else f"-{fmt}")
    target = out_dir / dir_name
    if target.exists() and not force:
        raise CftoolsError(f"{target} already exists", hint=FORCE_HINT)
    store = workspace.store
    if force:
        check_replaceable(store, target)

    boundary = workspace_boundary(workspace)
    with stage(progress, "items"):
        items = collect_items(store, statuses_for(include_unverified, options.include_in_review), splits, boundary,
                              include_unverified_edits)
    refuse_invalid_records([e.record for e in items])
    result = ExportResult(path=target.resolve(), format=fmt, n_items=0, n_verified=0, n_unverified=0, n_images=0,
                          include_unverified_edits=include_unverified_edits)
    kept = items
    peer = formats[fmt]
    if peer is not None:
        kind, spec = peer
        kept = [e for e in items if kind in (None, e.record["kind"]) and spec.keeps(e.record)]
        result.skipped = len(items) - len(kept)
    licensing = release_licensing(workspace, kept, options.licence)
    changes, revision = "", None
    if options.previous is not None:
        from cftools.release.diff import changelog_markdown, diff_with_records, revision_entries

        diff = diff_with_records(options.previous, name, version, [e.record for e in kept])
        changes, revision = changelog_markdown(diff), revision_entries(diff)
        result.changes = diff.counts()

    def write(folder: Path) -> None:
        result.n_images = copy_images(kept, folder, progress)
        with stage(progress, "analysis"):
            analysis = release_analysis(workspace, [e.record for e in kept], boundary)
        if analysis is not None:  # each person's figures under pseudonymous ids, the release's error rate
            write_analysis(folder, analysis)
        release = Release(folder, kept, name, version, fmt, splits, licensing, workspace, revision=revision,
                          changes=changes, analysis=analysis, options=dict(options.kind_options),
                          include_unverified=include_unverified, n_images=result.n_images, progress=progress)
        write_format(release)
        with stage(progress, "extras"):  # browse.html, croissant.json
            result.warnings = write_release_extras(release)
        with stage(progress, "manifest"):
            write_manifest(release)
        with stage(progress, "personal data"):
            refuse_personal_data(folder, boundary)  # before it is recorded or renamed into place: all or nothing
        result.n_items = len(kept)
        result.n_verified = sum(e.record["verified"] for e in kept)
        result.n_unverified = result.n_items - result.n_verified
        result.by_split = counts_of(kept, result.n_images)["by_split"]
        result.edits = edit_counts([e.record for e in kept], sum(e.has_edit_candidates for e in kept))
        # Recorded before the rename: a kill between the two leaves a record without a folder (the rerun writes
        # the folder and records it again), never a finished folder the store does not know, which the rerun
        # would refuse to replace.
        result.manifest_sha256 = hash_file(folder / MANIFEST_NAME)
        record_release(store, name, version, fmt, target, result)

    result.cleared = atomic_release(target, force, write, recorded_manifests(store, target))
    return result


def write_format(release: Release) -> None:
    """The format's own files: native records, Parquet and card; or a peer format's writer."""
    if release.format == FORMAT_NATIVE:
        write_native(release)  # reports its own stages
        return
    _, spec = export_formats()[release.format]
    with stage(release.progress, "format"):
        spec.write(release)


def recorded_manifests(store: Store, folder: Path) -> set[str]:
    """The manifest SHA-256s the store recorded for releases written to FOLDER (what a copy left there must match
    to be trusted)."""
    with store.session() as session:
        return {sha for sha in session.execute(select(ReleaseRow.manifest_sha256).where(
            ReleaseRow.path == str(folder.resolve()))).scalars() if sha}


def is_own_release(store: Store, folder: Path) -> bool:
    """FOLDER holds a release this workspace's store recorded writing there (by path), with its manifest."""
    with store.session() as session:
        recorded = session.execute(select(ReleaseRow.id).where(ReleaseRow.path == str(folder.resolve()))).first()
    return recorded is not None and (folder / MANIFEST_NAME).is_file()


def check_replaceable(store: Store, target: Path) -> None:
    """`--force` replaces only a release this workspace wrote (or an empty folder): never a user's own files."""
    if not target.exists() or (target.is_dir() and not any(target.iterdir())) or is_own_release(store, target):
        return
    raise CftoolsError(f"{target} is not a release this workspace wrote", hint=Hint(
        "{message}, so {force} will not replace it (it would delete what is there); move it away or export under "
        "another name or {out}", force="--force", out="--out"))


def record_release(store: Store, name: str, version: str, fmt: str, path: Path, result: ExportResult) -> None:
    with store.write() as session:
        row = session.execute(select(ReleaseRow).where(ReleaseRow.name == name, ReleaseRow.version == version,
                                                    ReleaseRow.format == fmt)).scalar_one_or_none()
        if row is None:
            row = ReleaseRow(name=name, version=version, format=fmt, path=str(path))
        row.path = str(path.resolve())
        row.n_items = result.n_items
        row.manifest_sha256 = result.manifest_sha256
        row.created_at = utcnow()
        session.add(row)
