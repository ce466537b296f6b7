"""Reading a native release back into a workspace: images, source questions, items with their status.

The release is verified against its manifest first (a changed release is refused). Items keep their
ids as keys, so ingesting the same release twice adds nothing, and an item already in the store is left
as it is. Source questions go back under the dataset and id the manifest's provenance names; items
without that provenance get a source in `release:<NAME>-<VERSION>`. Generation provenance (backend,
model, template) is kept as a generation record, so a re-export's card names the same generators. The
source datasets' licences come back from the manifest's `source_licences`; `release:<NAME>-<VERSION>` is under
the release's own licence (or the one given), so a re-export lists the same licences.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from cftools.errors import CftoolsError, InputError
from cftools.images import ImageFile, read_image_file, register_image, strings_in
from cftools.ingest.licences import UNKNOWN, clean_licence, record_licence, same_licence
from cftools.ingest.readers import BATCH, IngestReport, existing_item_keys
from cftools.models import (
    STATUSES,
    Generation,
    IngestRun,
    Item,
    ItemEvent,
    SourceQuestion,
    utcnow,
)
from cftools.release.layout import (MANIFEST_NAME, RECORDS_NAME, hash_file, is_release_image_path, load_manifest,
                                    load_records, map_strings, resolve_image)
from cftools.release.verify import verify_release
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


def item_dataset(provenance: dict[str, Any], fallback: str) -> str:
    """The dataset an item of a release came from: its provenance's, else the release itself."""
    return provenance.get("dataset") or (provenance.get("source") or {}).get("dataset") or fallback


def stated_licences(manifest: dict[str, Any], datasets: set[str], fallback: str,
                    licence: str | None) -> dict[str, str | None]:
    """Dataset -> the licence the manifest states for it (None: unknown, keep what the store has)."""
    stated = dict(manifest.get("source_licences") or {})
    stated[fallback] = licence or manifest.get("license")
    out = {}
    for dataset in sorted(datasets):
        value = clean_licence(stated.get(dataset))
        out[dataset] = None if value is None or same_licence(value, UNKNOWN) else value
    return out


def ingest_release(store: Store, release_dir: Path, licence: str | None = None) -> IngestReport:
    """LICENCE: the licence of the release's items that name no source dataset (default: the manifest's)."""
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
        new = [r for r in records if r["id"] not in existing]
        source_ids = add_sources(store, session, new, provenance, fallback, image_ids, now, report)
        generation_ids = add_generations(session, new, provenance, fallback, now)
        datasets = {r["id"]: item_dataset(provenance.get(r["id"]) or {}, fallback) for r in new}
        for dataset, stated in stated_licences(manifest, set(datasets.values()), fallback,
                                               clean_licence(licence)).items():
            record_licence(session, dataset, stated)
        rows = [{"key": r["id"], "kind": r["kind"], "group": r["group"], "source_id": source_ids.get(r["id"]),
                 "dataset": datasets[r["id"]],
                 "question": r["question"], "answer": r.get("answer"), "status": r["status"], "origin": "release",
                 "generation_id": generation_ids.get(r["id"]), "data": item_data(r), "created_at": now,
                 "updated_at": now} for r in new]
        for start in range(0, len(rows), BATCH):
            store.insert_ignore(session, Item.__table__, rows[start:start + BATCH])
        added = existing_item_keys(session, [r["id"] for r in new])
        status_of = {r["id"]: r["status"] for r in new}
        events = [{"item_id": item_id, "stage": "ingest", "to_status": status_of[key],
                   "detail": {"release": str(release)}, "created_at": now} for key, item_id in sorted(added.items())]
        for start in range(0, len(events), BATCH):
            session.execute(ItemEvent.__table__.insert(), events[start:start + BATCH])
        report.items_added = len(added)
        session.add(IngestRun(format="release", path=str(release), file_sha256=hash_file(release / MANIFEST_NAME),
                              n_records=len(records), n_sources_added=report.sources_added,
                              n_items_added=report.items_added, n_images_added=report.images_added))
    report.missing_images = sum(1 for r in records if not r.get("image"))
    return report


def add_sources(store: Store, session, records: list[dict], provenance: dict, fallback: str,  # noqa: ANN001
                image_ids: dict[str, int], now, report: IngestReport) -> dict[str, int]:  # noqa: ANN001
    """Source questions of RECORDS (existing ones reused, given their image if they had none);
    returns record id -> source id."""
    table = SourceQuestion.__table__
    wanted: dict[tuple[str, str], dict] = {}
    record_source: dict[str, tuple[str, str]] = {}
    for record in records:
        row = source_row(record, provenance.get(record["id"]) or {}, fallback, now)
        if row is None:
            continue
        key = (row["dataset"], row["external_id"])
        wanted.setdefault(key, {**row, "image_id": image_ids.get(record.get("image_sha256") or "")})
        record_source[record["id"]] = key
    ids: dict[tuple[str, str], tuple[int, int | None]] = {}
    for dataset in sorted({d for d, _ in wanted}):
        for external_id, source_id, image_id in session.execute(
                select(table.c.external_id, table.c.id, table.c.image_id).where(table.c.dataset == dataset)):
            ids[(dataset, external_id)] = (source_id, image_id)
    new = [row for key, row in wanted.items() if key not in ids]
    for start in range(0, len(new), BATCH):
        store.insert_ignore(session, table, new[start:start + BATCH])
    report.sources_added = len(new)
    report.images_attached = sum(row["image_id"] is not None for row in new)
    for key, row in wanted.items():
        if key in ids and ids[key][1] is None and row["image_id"] is not None:
            session.execute(table.update().where(table.c.id == ids[key][0]).values(image_id=row["image_id"]))
            report.images_attached += 1
    for dataset in sorted({row["dataset"] for row in new}):
        for external_id, source_id, image_id in session.execute(
                select(table.c.external_id, table.c.id, table.c.image_id).where(table.c.dataset == dataset)):
            ids[(dataset, external_id)] = (source_id, image_id)
    return {record_id: ids[key][0] for record_id, key in record_source.items()}


def add_generations(session, records: list[dict], provenance: dict, fallback: str, now) -> dict[str, int]:  # noqa: ANN001
    """One generation record per distinct generator, model, template and group named in the provenance
    (a summary of how the items were made, not the original calls); returns record id -> its id."""
    by_key: dict[tuple, int] = {}
    out = {}
    for record in records:
        gen = (provenance.get(record["id"]) or {}).get("generation") or {}
        if not gen.get("backend") or not gen.get("model"):
            continue
        key = (gen.get("generator") or "rewrite", gen["backend"], gen["model"], gen.get("template_name"),
               gen.get("template_hash"), record["group"])
        if key not in by_key:
            row = Generation(generator=key[0], backend=key[1], model=key[2], template_name=key[3],
                             template_hash=key[4], group=key[5], params={"from_release": fallback}, created_at=now)
            session.add(row)
            session.flush()
            by_key[key] = row.id
        out[record["id"]] = by_key[key]
    return out
