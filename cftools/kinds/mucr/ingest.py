"""Caption pairs, the core of a MuCR item: a cause caption and an effect caption written concretely enough to be
drawn, in groups of pairs that share a causality with different subjects (four per group in MuCR).

A CSV or JSONL record has `cause`, `effect`, `category` (human, animal, plant, character, mixture) and `group`;
optional `style` and `id`. Each becomes a draft item of the mucr kind, keyed on the file's dataset and the id
(or the captions), so ingesting a file twice adds nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from cftools.errors import InputError
from cftools.ingest.licences import LicenceChoice
from cftools.ingest.readers import BadRecords, IngestReport, ReadInput, checked_records, finish, stable_key
from cftools.kinds.mucr.model import CATEGORIES
from cftools.models import DRAFT, utcnow
from cftools.store import Store

REQUIRED = ("cause", "effect", "category", "group")
STYLES = ("photograph", "comic")


def pair_item(dataset: str, line: str, row: dict[str, Any], origin: str = "ingested",
              generation_id: Optional[int] = None) -> dict[str, Any]:
    """The draft item of one caption pair."""
    cause, effect = str(row["cause"]).strip(), str(row["effect"]).strip()
    external = str(row.get("id") or stable_key(cause, effect))
    now = utcnow()
    data = {"cause_caption": cause, "effect_caption": effect, "category": str(row["category"]).strip().lower(),
            "link_id": str(row["group"]).strip(), "line": line}
    if row.get("style"):
        data["style"] = str(row["style"]).strip().lower()
    return {"key": f"{dataset}:{external}", "kind": "mucr", "group": str(row["group"]).strip(),
            "question": f"{cause} -> {effect}", "answer": None, "status": DRAFT, "origin": origin,
            "generation_id": generation_id, "data": data, "created_at": now, "updated_at": now}


def record_problem(row: dict[str, Any]) -> Optional[str]:
    category = str(row["category"]).strip().lower()
    if category not in CATEGORIES:
        return f"category {row['category']!r} is not one of {', '.join(CATEGORIES)}"
    style = str(row.get("style") or "").strip().lower()
    if style and style not in STYLES:
        return f"style {row['style']!r} is not one of {', '.join(STYLES)}"
    if str(row["cause"]).strip().lower() == str(row["effect"]).strip().lower():
        return "the cause and the effect caption are the same"
    return None


def read_captions(path: Path, bad: BadRecords, dataset: Optional[str] = None) -> tuple[str, list[dict]]:
    dataset = dataset or f"captions:{path.stem}"
    items: dict[str, dict] = {}
    for line, row in checked_records(path, REQUIRED, bad):
        problem = record_problem(row)
        if problem:
            bad.add(InputError(path, problem, line))
            continue
        item = pair_item(dataset, line, row)
        items.setdefault(item["key"], item)
    return dataset, list(items.values())


def ingest_captions(store: Store, path: Path, skip_bad: bool = False, report_path: Optional[Path] = None,
                    dataset: Optional[str] = None, licence: LicenceChoice = None, update: bool = False) -> IngestReport:
    bad = BadRecords(skip_bad)
    dataset, items = read_captions(Path(path), bad, dataset)
    read = ReadInput("captions", Path(path), dataset, [], items, len(items), bad)
    return finish(store, read, report_path=report_path, licence=licence, update=update)


# -- MuCR records as published -----------------------------------------------------------------------------------

PUBLISHED_REQUIRED = ("id", "cue", "false_cue", "style", "label", "causal_reason")
CAPTION_FIELDS = (("caption_0", "caption_1"), ("cause", "effect"))  # the README's names, the cause-effect variant


def published_problem(row: dict[str, Any]) -> Optional[str]:
    """Why a MuCR record cannot be read (None when it can)."""
    if not any(all(str(row.get(f) or "").strip() for f in pair) for pair in CAPTION_FIELDS):
        return "needs the captions: caption_0 and caption_1 (or cause and effect)"
    for field in ("false_cue", "causal_reason"):
        value = row.get(field)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
            return f"field '{field}' must be a list of texts"
    style = str(row["style"]).strip().lower()
    if style not in STYLES:
        return f"style {row['style']!r} is not one of {', '.join(STYLES)}"
    for field in ("image_0", "image_1"):
        if row.get(field) is not None and not isinstance(row.get(field), str):
            return f"field '{field}' must be an image path"
    return None


def captions_of(row: dict[str, Any]) -> tuple[str, str]:
    for cause, effect in CAPTION_FIELDS:
        if str(row.get(cause) or "").strip() and str(row.get(effect) or "").strip():
            return str(row[cause]).strip(), str(row[effect]).strip()
    raise AssertionError("published_problem checks the captions first")


def published_item(dataset: str, line: str, row: dict[str, Any], images: dict[str, str]) -> dict[str, Any]:
    """The item of one MuCR record: its pair, cue, false cues and explanations; its images when they were read.
    The group is named by the smallest id among the record and its link_id, so the four pairs of a group meet."""
    from cftools.kinds.mucr.release import read_link_id

    record_id = str(row["id"]).strip()
    cause, effect = captions_of(row)
    label = str(row["label"]).strip()
    group = "mucr:" + min([record_id, *read_link_id(row.get("link_id"))])
    data: dict[str, Any] = {
        "mucr_id": record_id, "cause_caption": cause, "effect_caption": effect, "cue": str(row["cue"]).strip(),
        "false_cues": [str(c).strip() for c in row["false_cue"]], "style": str(row["style"]).strip().lower(),
        "label": label, "explanations": [str(e) for e in row["causal_reason"]], "link_id": group, "line": line}
    if label.lower() in CATEGORIES:
        data["category"] = label.lower()
    for field, side in (("image_0", "cause_image"), ("image_1", "effect_image")):
        if row.get(field):
            data.setdefault("image_names", {})[side] = str(row[field])
            if str(row[field]) in images:
                data[side] = images[str(row[field])]
    now = utcnow()
    return {"key": f"{dataset}:{record_id}", "kind": "mucr", "group": group, "question": f"{cause} -> {effect}",
            "answer": None, "status": DRAFT, "origin": "ingested", "data": data, "created_at": now,
            "updated_at": now}


def read_published_images(path: Path, rows: list[tuple[str, dict]], images_dir: Optional[Path],
                          bad: BadRecords) -> dict[str, Any]:
    """image_0/image_1 of every record, read under IMAGES_DIR: name -> ImageFile (none without a folder)."""
    from cftools.images import read_image_file
    from cftools.ingest.readers import image_path_problem, ingest_progress

    found: dict[str, Any] = {}
    if images_dir is None:
        return found
    progress = ingest_progress.get()
    for done, (line, row) in enumerate(rows):
        progress("images", done, len(rows))  # counted by record: two images each
        for field in ("image_0", "image_1"):
            name = row.get(field)
            if not name or name in found:
                continue
            problem = image_path_problem(str(name), images_dir)
            if problem is None and not (images_dir / str(name)).is_file():
                problem = f"image {name!r} is not in {images_dir}"
            if problem:
                bad.add(InputError(path, problem, line))
                continue
            try:
                found[str(name)] = read_image_file(images_dir / str(name), record=line)
            except InputError as err:
                bad.add(InputError(path, err.reason, line))
    progress("images", len(rows), len(rows))
    return found


def ingest_mucr(store: Store, path: Path, images_dir: Optional[Path] = None, skip_bad: bool = False,
                report_path: Optional[Path] = None, dataset: Optional[str] = None,
                licence: LicenceChoice = None, update: bool = False) -> IngestReport:
    """MuCR records in the published field list (README "Dataset Form": id, caption_0, caption_1, link_id, cue,
    false_cue, style, label, causal_reason, and image_0/image_1 when given) as draft items; their images are read
    from IMAGES_DIR when given (optional)."""
    from cftools.images import register_image

    path = Path(path)
    bad = BadRecords(skip_bad)
    dataset = dataset or f"mucr:{path.stem}"
    rows = []
    images = Path(images_dir) if images_dir else None
    for line, row in checked_records(path, PUBLISHED_REQUIRED, bad, images, ("image_0", "image_1")):
        problem = published_problem(row)
        if problem:
            bad.add(InputError(path, problem, line))
            continue
        rows.append((line, row))
    read = read_published_images(path, rows, images, bad)
    bad_lines = {str(getattr(b, "record", "")) for b in bad.items}
    rows = [(line, row) for line, row in rows if line not in bad_lines]
    if read and rows:
        # the images first: a kill before the items leaves unused images, never items naming missing ones
        with store.write() as session:
            for name, image in read.items():
                register_image(store, session, image, Path(name).name)
    refs = {name: f"sha256:{image.sha256}" for name, image in read.items()}
    items: dict[str, dict] = {}
    for line, row in rows:
        item = published_item(dataset, line, row, refs)
        items.setdefault(item["key"], item)
    published = ReadInput("mucr", path, dataset, [], list(items.values()), len(items), bad)
    report = finish(store, published, report_path=report_path, licence=licence, update=update)
    report.images_added = len(read) if rows else 0
    # a MuCR record's images ride in its item (not in a source question): count them there
    report.images_attached = sum(1 for item in items.values() if has_both_images(item))
    report.missing_images = sum(1 for item in items.values() if not has_both_images(item))
    return report


def has_both_images(item: dict[str, Any]) -> bool:
    return bool(item["data"].get("cause_image") and item["data"].get("effect_image"))
