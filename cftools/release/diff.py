"""What changed between two native releases of a benchmark, item by item (`cftools release diff A B`, and the
"Changes since" section `cftools export --previous A` writes into the new release's card and croissant.json).

Items are matched by their stable key, the record's `id` (the store's item key, which ingest, generate and
`ingest release` keep). Each item of A or B is in exactly one category:

- added: its key is in B only; removed: in A only;
- new images: in both, but an image it shows differs (its `image`, or an image its data names, such as a MuCR
  pair's cause and effect images: compared by SHA-256, which the release's image paths carry);
- reworded: same images, but the question text the model is asked differs;
- relabelled: same images and question, but the answer or the exact option texts differ (what counts as a kind's
  question, answer and options is the kind's `diff_fields`: for MuCR the selected pair, the choice tasks' answers,
  the cue and the explanations);
- unchanged: none of these (a changed split, group or verified flag is listed beside, and changes no category).

The two records files are read line by line into dicts keyed by id, so the join is linear in the items.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from cftools.errors import CftoolsError, InputError
from cftools.release import layout
from cftools.release.layout import MANIFEST_NAME, RECORDS_NAME, hash_file, load_manifest, record_image_paths

ADDED, REMOVED, NEW_IMAGES, REWORDED, RELABELLED, UNCHANGED = (
    "added", "removed", "new_images", "reworded", "relabelled", "unchanged")
CATEGORIES = (ADDED, REMOVED, RELABELLED, NEW_IMAGES, REWORDED, UNCHANGED)
# Items in both releases whose stored predictions no longer answer B's question: not comparable.
STALE = (NEW_IMAGES, REWORDED)
CATEGORY_LABELS = {ADDED: "added", REMOVED: "removed", RELABELLED: "relabelled", NEW_IMAGES: "new images",
                   REWORDED: "reworded", UNCHANGED: "unchanged"}
OTHER_FIELDS = ("group", "split", "verified")  # listed when they change; they change no category
MARKDOWN_LIMIT = 20  # items listed per category in Markdown (JSON lists them all)


@dataclass
class ReleaseSide:
    """One of the two releases: where it is, what its manifest says, and its records by id."""

    path: Path
    name: str
    version: str
    manifest_sha256: str
    records: dict[str, dict[str, Any]] = field(repr=False, default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    def as_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "name": self.name, "version": self.version,
                "manifest_sha256": self.manifest_sha256, "items": len(self.records)}


@dataclass
class ItemChange:
    id: str
    kind: str
    type: str  # the record's group (CFMM's type, C-VQA's group, MuCR's category)
    category: str
    changed: list[str] = field(default_factory=list)  # "image", "question", "answer", "options", "group", ...
    before: dict[str, Any] = field(default_factory=dict)  # the changed question/answer/options fields, in A
    after: dict[str, Any] = field(default_factory=dict)  # and in B

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ReleaseDiff:
    a: ReleaseSide
    b: ReleaseSide
    items: list[ItemChange]  # every item of A and B, sorted by id

    def of(self, category: str) -> list[ItemChange]:
        return [c for c in self.items if c.category == category]

    def category_of(self) -> dict[str, str]:
        return {c.id: c.category for c in self.items}

    def counts(self) -> dict[str, int]:
        found = Counter(c.category for c in self.items)
        return {category: found.get(category, 0) for category in CATEGORIES}

    def by_kind_type(self) -> list[dict[str, Any]]:
        """Per kind and type: how many items of each category."""
        table: dict[tuple[str, str], Counter] = {}
        for change in self.items:
            table.setdefault((change.kind, change.type), Counter())[change.category] += 1
        return [{"kind": kind, "type": type_, **{c: n.get(c, 0) for c in CATEGORIES}}
                for (kind, type_), n in sorted(table.items())]

    def as_dict(self) -> dict[str, Any]:
        """Everything, every item listed (the unchanged ones by id only)."""
        return {"a": self.a.as_dict(), "b": self.b.as_dict(), "counts": self.counts(),
                "by_kind_type": self.by_kind_type(),
                "items": {category: ([c.id for c in self.of(category)] if category in (ADDED, REMOVED, UNCHANGED)
                                     else [c.as_dict() for c in self.of(category)])
                          for category in CATEGORIES}}


# -- reading the two releases -------------------------------------------------------------------------------------

def release_folder(text: str, store: Any = None) -> Path:
    """A release named on the command line: a release folder, or NAME@VERSION (the native release of that name
    and version this workspace's store recorded exporting)."""
    path = Path(text)
    if path.is_dir():
        return path
    name, at, version = text.rpartition("@")
    if not at or not name or not version:
        raise CftoolsError(f"{text}: no such release folder (give a folder or NAME@VERSION)")
    if store is None:
        raise CftoolsError(f"{text}: NAME@VERSION needs a workspace whose store recorded the release")
    from sqlalchemy import select

    from cftools.models import Release

    with store.session() as session:
        row = session.execute(select(Release.path).where(Release.name == name, Release.version == version,
                                                         Release.format == "native")).scalar_one_or_none()
    if row is None:
        raise CftoolsError(f"{text}: this workspace exported no native release {name} {version}")
    if not Path(row).is_dir():
        raise CftoolsError(f"{text}: the release folder {row} is gone")
    return Path(row)


def checked_records_file(folder: Path, manifest: dict[str, Any]) -> Path:
    """The release's records.jsonl, after checking it is the one its manifest lists (a cheap check: the images are
    not hashed; `cftools verify` checks every file)."""
    path = folder / RECORDS_NAME
    if not path.is_file():
        raise InputError(path, "missing: a release diff needs a native release (records.jsonl)")
    listed = next((e for e in manifest.get("files") or [] if isinstance(e, dict) and e.get("path") == RECORDS_NAME),
                  None)
    if listed is None:
        raise InputError(folder / MANIFEST_NAME, f"does not list {RECORDS_NAME}")
    if hash_file(path) != listed.get("sha256"):
        raise InputError(path, f"its SHA-256 differs from the one {MANIFEST_NAME} lists (the release was changed "
                               f"after export; `cftools verify {folder}` lists every file that differs)")
    return path


def stream_records(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    """(line number, record) of a records.jsonl, one line at a time; each with a string 'id' and a 'kind'."""
    for number, record in layout.stream_records(path):
        if not isinstance(record.get("id"), str) or not record.get("kind"):
            raise InputError(path, "expected a JSON object with an 'id' and a 'kind'", f"line {number}")
        yield number, record


def read_release(folder: Path | str) -> ReleaseSide:
    """A native release's name, version, manifest hash and records by id (refused, naming the file, when its
    records.jsonl is not the one its manifest lists, holds a malformed line or repeats an id)."""
    folder = Path(folder)
    manifest = load_manifest(folder)
    path = checked_records_file(folder, manifest)
    records: dict[str, dict[str, Any]] = {}
    for number, record in stream_records(path):
        if record["id"] in records:
            raise InputError(path, f"id {record['id']!r} appears twice", f"line {number}")
        records[record["id"]] = record
    return ReleaseSide(path=folder.resolve(), name=str(manifest.get("name") or folder.name),
                       version=str(manifest.get("version") or "?"), manifest_sha256=hash_file(folder / MANIFEST_NAME),
                       records=records)


# -- comparing ----------------------------------------------------------------------------------------------------

def compare_records(before: dict[str, Any], after: dict[str, Any]) -> ItemChange:
    """The change of one item present in both releases (same id and kind)."""
    from cftools.kinds import get_kind

    kind = get_kind(str(after["kind"]))
    fields_a, fields_b = kind.hooks.release.diff_fields(before), kind.hooks.release.diff_fields(after)
    changed = [name for name in ("question", "answer", "options") if fields_a.get(name) != fields_b.get(name)]
    if record_image_paths(before) != record_image_paths(after):
        changed.insert(0, "image")
    category = (NEW_IMAGES if "image" in changed else REWORDED if "question" in changed
                else RELABELLED if changed else UNCHANGED)
    shown = [name for name in changed if name != "image"]
    changed += [name for name in OTHER_FIELDS if before.get(name) != after.get(name)]
    return ItemChange(id=after["id"], kind=str(after["kind"]), type=str(after.get("group") or "-"), category=category,
                      changed=changed, before={n: fields_a.get(n) for n in shown},
                      after={n: fields_b.get(n) for n in shown})


def diff_sides(a: ReleaseSide, b: ReleaseSide) -> ReleaseDiff:
    """Every item of A and B in its category. An id whose kind differs counts as removed and added."""
    items: list[ItemChange] = []
    for key, before in a.records.items():
        after = b.records.get(key)
        if after is None or after["kind"] != before["kind"]:
            items.append(ItemChange(key, str(before["kind"]), str(before.get("group") or "-"), REMOVED))
        else:
            items.append(compare_records(before, after))
    for key, after in b.records.items():
        before = a.records.get(key)
        if before is None or after["kind"] != before["kind"]:
            items.append(ItemChange(key, str(after["kind"]), str(after.get("group") or "-"), ADDED))
    items.sort(key=lambda c: (c.id, c.category))
    return ReleaseDiff(a=a, b=b, items=items)


def diff_releases(a: Path | str, b: Path | str) -> ReleaseDiff:
    return diff_sides(read_release(a), read_release(b))


def diff_with_records(a: Path | str, name: str, version: str, records: Iterable[dict[str, Any]]) -> ReleaseDiff:
    """A's changes into the records of a release being written (`export --previous`): B is not on disk yet. Each
    record goes through the JSON records.jsonl will hold, so B compares as `release diff` will read it (a tuple
    in the store's data is the list A's file gives back)."""
    side = ReleaseSide(path=Path("."), name=name, version=version, manifest_sha256="",
                       records={str(r["id"]): json.loads(json.dumps(r, default=str)) for r in records})
    return diff_sides(read_release(a), side)


# -- the changelog ------------------------------------------------------------------------------------------------

def short(value: Any, width: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True) if not isinstance(value, str) else value
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= width else text[:width - 1] + "…"


def summary_line(diff: ReleaseDiff) -> str:
    """One sentence: the counts of each category."""
    counts = diff.counts()
    return (f"Since {diff.a.label}: " + ", ".join(f"{counts[c]} {CATEGORY_LABELS[c]}" for c in CATEGORIES)
            + f" ({len(diff.a.records)} items before, {len(diff.b.records)} now).")


def changelog_markdown(diff: ReleaseDiff, heading: str = "##", limit: Optional[int] = MARKDOWN_LIMIT) -> str:
    """The changelog as Markdown: the counts per kind and type, then the items of each category (the first LIMIT;
    None: all)."""
    lines = [f"{heading} Changes since {diff.a.label}", "", summary_line(diff),
             f"Items are matched by their id; {diff.a.label}'s manifest.json has SHA-256 `{diff.a.manifest_sha256}`.",
             "", "| kind | type | " + " | ".join(CATEGORY_LABELS[c] for c in CATEGORIES) + " |",
             "|---|---|" + "---:|" * len(CATEGORIES)]
    for row in diff.by_kind_type():
        lines.append(f"| {row['kind']} | {short(row['type'])} | " + " | ".join(str(row[c]) for c in CATEGORIES) + " |")
    for category in (ADDED, REMOVED, RELABELLED, NEW_IMAGES, REWORDED):
        changes = diff.of(category)
        if not changes:
            continue
        lines += ["", f"{heading}# {CATEGORY_LABELS[category].capitalize()} ({len(changes)})", ""]
        for change in changes[:limit]:
            lines.append(f"- `{change.id}` ({change.kind}, {short(change.type)})" + item_detail(change))
        if limit is not None and len(changes) > limit:
            lines.append(f"- … and {len(changes) - limit} more (`cftools release diff --json` lists them all)")
    return "\n".join(lines) + "\n"


def item_detail(change: ItemChange) -> str:
    if change.category in (ADDED, REMOVED):
        return ""
    parts = [f"{name}: {short(change.before.get(name), 60)} → {short(change.after.get(name), 60)}"
             for name in change.before]
    others = [name for name in change.changed if name not in change.before]
    if others:
        parts.append("changed: " + ", ".join(others))
    return ": " + "; ".join(parts) if parts else ""


def revision_entries(diff: ReleaseDiff) -> dict[str, Any]:
    """croissant.json's record of the previous version. Croissant 1.1 has no version-notes property (its
    versioning is `version` plus the files' checksums); it recommends PROV-O for provenance, whose
    `prov:wasRevisionOf` names the release this one revises; the activity that made the revision carries the
    changelog's counts (the card lists the items)."""
    previous = f"previous/{diff.a.name}-{diff.a.version}"
    per_kind = "; ".join(f"{row['kind']} {row['type']}: " + ", ".join(f"{row[c]} {CATEGORY_LABELS[c]}"
                                                                      for c in CATEGORIES if row[c])
                         for row in diff.by_kind_type())
    return {
        "prov:wasRevisionOf": {"@type": "prov:Entity", "@id": previous, "prov:label": diff.a.label,
                               "prov:value": f"{MANIFEST_NAME} SHA-256 {diff.a.manifest_sha256}"},
        "activity": {"@type": "prov:Activity", "@id": f"revision/{diff.a.name}-{diff.a.version}",
                     "prov:label": f"{summary_line(diff)} Per kind and type: {per_kind or 'no items'}. "
                                   "The data card's section 'Changes since' lists the items.",
                     "prov:used": {"@id": previous}},
    }
