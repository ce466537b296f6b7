"""Reading a native release back into a workspace: images, source questions, items with their status.

The release is verified against its manifest first (a changed release is refused). Items keep their
ids as keys, so ingesting the same release twice adds nothing, and an item already in the store is left
as it is. Source questions go back under the dataset and id the manifest's provenance names; items
without that provenance get a source in `release:<NAME>-<VERSION>`. Generation provenance (backend,
model, template) is kept as a generation record, so a re-export's card names the same generators.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from cftools.errors import CftoolsError, InputError
from cftools.images import ImageFile, read_image_file, register_image
from cftools.ingest import IngestReport, existing_item_keys
from cftools.models import STATUSES, Generation, IngestRun, Item, ItemEvent, SourceQuestion, utcnow
from cftools.release import (
    MANIFEST_NAME, RECORDS_NAME, hash_file, is_release_image_path, load_manifest, load_records, map_strings,
    resolve_image, strings_in, verify_release,
)
from cftools.store import Store

REQUIRED = {"id": str, "kind": str, "group": str, "status": str, "question": str}


def check_record(path: Path, record: dict[str, Any]) -> None:
    where = f"id {record.get('id')!r}"
    for name, kind in REQUIRED.items():
        if not isinstance(record.get(name), kind) or not record[name]:
            raise InputError(path, f"field {name!r} is missing or not a non-empty {kind.__name__}", where)
    if record["status"] not in STATUSES:
        raise InputError(path, f"unknown status {record['status']!r}", where)
    if record.get("data") is not None and not isinstance(record["data"], dict):
        raise InputError(path, "field 'data' is not an object", where)


def release_images(release: Path, records: list[dict]) -> dict[str, ImageFile]:
    """sha256 -> image file for every image the records use, each checked against its name."""
    found: dict[str, ImageFile] = {}
    for record in records:
        paths = [resolve_image(release, record)]
        for text in strings_in(record.get("data") or {}):
            if is_release_image_path(text):
                paths.append(resolve_image(release, {"id": record["id"], "image": text}))
        for path in paths:
            if path is None or path.stem in found:
                continue
            image = read_image_file(path, record=f"id {record['id']!r}")
            if image.sha256 != path.stem:
                raise InputError(path, "the file's SHA-256 does not match its name", f"id {record['id']!r}")
            found[image.sha256] = image
    return found


def source_row(record: dict[str, Any], prov: dict[str, Any], fallback_dataset: str, now: Any) -> dict | None:
    if not record.get("original_question"):
        return None
    source = prov.get("source") or {}
    return {
        "dataset": source.get("dataset") or fallback_dataset,
        "external_id": source.get("external_id") or record["id"],
        "image_ref": source.get("image_ref") or (Path(record["image"]).name if record.get("image") else ""),
        "question": record["original_question"], "answer": record.get("original_answer"),
        "answer_type": record.get("answer_type"), "answers": None,
        "meta": {"release": fallback_dataset}, "created_at": now,
    }


def item_data(record: dict[str, Any]) -> dict[str, Any]:
    data = dict(record.get("data") or {})
    if record.get("options") is not None and "options" not in data:
        data["options"] = record["options"]
    # Image paths are the release's; the store names images by hash.
    return map_strings(data, lambda text: f"sha256:{Path(text).stem}" if is_release_image_path(text) else text)


def ingest_release(store: Store, release_dir: Path) -> IngestReport:
    release = Path(release_dir)
    problems = verify_release(release).problems()
    if problems:
        raise CftoolsError(f"{release} does not match its manifest ({len(problems)} problems, first: {problems[0]}); "
                           f"run 'cftools verify {release}'")
    manifest = load_manifest(release)
    records = load_records(release)
    records_path = release / RECORDS_NAME
    for record in records:
        check_record(records_path, record)
    provenance = manifest.get("provenance") or {}
    fallback = f"release:{manifest.get('name', release.name)}-{manifest.get('version', '')}".rstrip("-")
    images = release_images(release, records)
    now = utcnow()
    report = IngestReport(format="release", path=str(release), dataset=fallback, n_records=len(records))

    with store.write() as session:
        image_ids = {}
        for sha, image in sorted(images.items()):
            image_ids[sha], added = register_image(store, session, image)
            report.images_added += added
        existing = existing_item_keys(session, [r["id"] for r in records])
        for record in records:
            if record["id"] in existing:
                continue
            prov = provenance.get(record["id"]) or {}
            source_id = add_source(store, session, source_row(record, prov, fallback, now),
                                   image_ids.get(record.get("image_sha256") or ""), report)
            generation_id = add_generation(session, prov.get("generation"), record, source_id, now)
            item = Item(key=record["id"], kind=record["kind"], group=record["group"], source_id=source_id,
                        question=record["question"], answer=record.get("answer"), status=record["status"],
                        origin="release", generation_id=generation_id, data=item_data(record),
                        created_at=now, updated_at=now)
            session.add(item)
            session.flush()
            session.add(ItemEvent(item_id=item.id, stage="ingest", to_status=record["status"],
                                  detail={"release": str(release)}, created_at=now))
            report.items_added += 1
        session.add(IngestRun(format="release", path=str(release), file_sha256=hash_file(release / MANIFEST_NAME),
                              n_records=len(records), n_sources_added=report.sources_added,
                              n_items_added=report.items_added, n_images_added=report.images_added))
    report.missing_images = sum(1 for r in records if not r.get("image"))
    return report


def add_source(store: Store, session, row: dict | None, image_id: int | None, report: IngestReport) -> int | None:  # noqa: ANN001
    if row is None:
        return None
    table = SourceQuestion.__table__
    key = (table.c.dataset == row["dataset"]) & (table.c.external_id == row["external_id"])
    found = session.execute(select(table.c.id, table.c.image_id).where(key)).first()
    if found is None:
        session.execute(table.insert().values(**row, image_id=image_id))
        report.sources_added += 1
        report.images_attached += image_id is not None
        return session.execute(select(table.c.id).where(key)).scalar_one()
    if found.image_id is None and image_id is not None:
        session.execute(table.update().where(table.c.id == found.id).values(image_id=image_id))
        report.images_attached += 1
    return found.id


def add_generation(session, gen: dict | None, record: dict, source_id: int | None, now) -> int | None:  # noqa: ANN001
    if not gen or not gen.get("backend") or not gen.get("model"):
        return None
    row = Generation(source_id=source_id, generator=gen.get("generator") or "rewrite", group=record["group"],
                     backend=gen["backend"], model=gen["model"], template_name=gen.get("template_name"),
                     template_hash=gen.get("template_hash"), params={"from_release_item": record["id"]},
                     created_at=now)
    session.add(row)
    session.flush()
    return row.id
