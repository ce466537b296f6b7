"""Reading the store for a release: the items in the chosen statuses as records with provenance, sorted by id."""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable

from sqlalchemy import func, select

from cftools.annotate.controls import MEASURING
from cftools.annotate.projects import REQUEUED
from cftools.annotate.separation import check_states
from cftools.annotate.verification import item_verification
from cftools.boundary import Boundary
from cftools.errors import CftoolsError
from cftools.images import data_image_shas
from cftools.ingest.readers import infer_answer_type
from cftools.kinds import get_kind
from cftools.models import (
    ACCEPTED, CHECKED, DRAFT, IN_REVIEW, AnnotationTask, CheckFlag, Generation, Image, ItemEvent, Item, Judgment,
    SourceQuestion,
)
from cftools.release.edited import with_released_edits
from cftools.release.image_metadata import ImageMetadataError, without_metadata
from cftools.release.layout import IMAGES_DIR, map_strings
from cftools.release.splits import choose_split
from cftools.store import Store, in_chunks

VERIFIED_STATUSES = (ACCEPTED,)
CHECK_STAGE = "check"  # cftools.checks.runner.STAGE, not imported: the runner loads the embedding stack
UNVERIFIED_STATUSES = (DRAFT, CHECKED)  # an in-review item is out unless asked for: its judgment is pending
IMAGE_EXTENSIONS = {"jpeg": "jpg", "jpg": "jpg", "mpo": "jpg", "png": "png", "gif": "gif", "webp": "webp",
                    "bmp": "bmp", "tiff": "tif", "tif": "tif"}


@dataclass
class ImageRef:
    sha256: str  # the stored file's (what the store and the items' data name it by)
    ext: str
    path: str  # where the store found the file
    released_sha256: str = ""  # the released file's: the stored one without its metadata (`image_metadata`)

    @property
    def rel(self) -> str:
        return f"{IMAGES_DIR}/{self.released_sha256 or self.sha256}.{self.ext}"


@dataclass
class ExportItem:
    record: dict[str, Any]
    images: list[ImageRef]  # the record's image first, then any in its data
    provenance: dict[str, Any]
    updated_at: str
    has_edit_candidates: bool = False  # the store holds edit candidates for it (released or not)


def image_extension(fmt: str | None) -> str:
    return IMAGE_EXTENSIONS.get((fmt or "").lower(), "img")


def split_options(data: dict[str, Any]) -> tuple[dict[str, list[str]] | None, dict[str, Any]]:
    """CFMM-style option pairs move from the item's data to the record's `options` field."""
    options = data.get("options")
    if isinstance(options, dict) and isinstance(options.get("original"), list) \
            and isinstance(options.get("counterfactual"), list):
        rest = {k: v for k, v in data.items() if k != "options"}
        return {"original": [str(o) for o in options["original"]],
                "counterfactual": [str(o) for o in options["counterfactual"]]}, rest
    return None, data


def record_answer_type(kind: str, group: str, source_type: str | None, answer: str | None) -> str:
    declared = get_kind(kind).hooks.check.answer_type(group, answer)
    if declared:
        return declared
    if source_type in ("number", "yes/no", "other"):
        return source_type
    return infer_answer_type(answer or "")


def _by_item(session, query_for, item_ids: list[int]) -> dict[int, list]:  # noqa: ANN001
    grouped: dict[int, list] = defaultdict(list)
    for part in in_chunks(item_ids):
        for row in session.execute(query_for(part)).all():
            grouped[row[0]].append(row)
    return grouped


def checks_passed(events: list, flagged: set[str]) -> dict[str, Any]:
    """Each check that ran on the item and holds no flag now -> the cftools version that last ran it (None for
    runs recorded before versions were)."""
    versions: dict[str, Any] = {}
    for _, detail in events:  # oldest first: the last run of a check wins
        for code in (detail or {}).get("checks", []):
            versions[code] = (detail or {}).get("cftools_version")
    return {code: version for code, version in sorted(versions.items()) if code not in flagged}


def annotation_summary(tasks: list, judgments: list) -> dict[str, Any] | None:
    """Decision (adjudication wins over verification) and whether the annotators agreed."""
    if not tasks:
        return None
    decided = [t for t in tasks if t.decision]
    adjudicated = [t for t in decided if t.purpose == "adjudicate"]
    final = (adjudicated or decided or [None])[-1]
    verify_ids = {t.id for t in tasks if t.purpose != "adjudicate"}
    answers = [(j.related, j.answer_correct) for j in judgments if j.task_id in verify_ids]
    return {
        "decision": final.decision if final else None,
        "adjudicated": bool(adjudicated),
        "judgments": len(answers),
        "agreed": (len(set(answers)) == 1) if len(answers) >= 2 else None,
    }


ITEM_COLUMNS = ("id", "key", "kind", "group", "status", "question", "answer", "proposed_answer", "origin",
                "generation_id", "data", "dataset", "updated_at")
SOURCE_COLUMNS = ("dataset", "external_id", "image_ref", "question", "answer", "answer_type")
IMAGE_COLUMNS = ("sha256", "format", "path")


def read_item_rows(session, statuses: list[str]) -> list[tuple]:  # noqa: ANN001
    """(item, source or None, image or None) for the items in STATUSES, sorted by key; plain column rows,
    not ORM objects (several times faster for large releases)."""
    tables = {"item": Item.__table__, "source": SourceQuestion.__table__, "image": Image.__table__}
    wanted = {"item": ITEM_COLUMNS, "source": SOURCE_COLUMNS, "image": IMAGE_COLUMNS}
    columns = [tables[t].c[name].label(f"{t}_{name}") for t, names in wanted.items() for name in names]
    query = (select(*columns)
             .outerjoin(tables["source"], tables["source"].c.id == tables["item"].c.source_id)
             .outerjoin(tables["image"], tables["image"].c.id == tables["source"].c.image_id)
             .where(tables["item"].c.status.in_(statuses)).order_by(tables["item"].c.key))
    out = []
    for row in session.execute(query).mappings():
        parts = [SimpleNamespace(**{name: row[f"{t}_{name}"] for name in names}) for t, names in wanted.items()]
        item, source, image = parts
        out.append((item, source if source.dataset is not None else None,
                    image if image.sha256 is not None else None))
    return out


def stored_image_bytes(sha256: str, path: str) -> bytes:
    """The stored image file's bytes, checked against the hash the store knows it by."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CftoolsError(f"image {sha256[:12]}… cannot be read from {path}: {exc.strerror or exc}") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise CftoolsError(f"image file {path} has changed since it was ingested (its SHA-256 is no longer "
                           f"{sha256[:12]}…); re-ingest it")
    return data


def released_image_bytes(ref: ImageRef) -> bytes:
    """The image as a release holds it: the stored file without its metadata (an author, GPS, a path)."""
    try:
        return without_metadata(stored_image_bytes(ref.sha256, ref.path))[0]
    except ImageMetadataError as exc:
        raise CftoolsError(f"image file {ref.path}: its metadata cannot be cut ({exc}); convert it to PNG and "
                           "re-ingest it") from None


def image_ref(sha256: str, fmt: str | None, path: str, released: dict[str, str]) -> ImageRef:
    """The reference to a stored image, with the SHA-256 of its released bytes (RELEASED: those found so far)."""
    ref = ImageRef(sha256, image_extension(fmt), path)
    if sha256 not in released:
        released[sha256] = hashlib.sha256(released_image_bytes(ref)).hexdigest()
    ref.released_sha256 = released[sha256]
    return ref


def data_image_refs(key: str, data: dict[str, Any], extra_images: dict[str, Any],
                    refs: list[ImageRef], released: dict[str, str]) -> list[ImageRef]:
    """The further images DATA names (`sha256:<hex>`) that are not among REFS, refused when not in the store."""
    found = []
    for sha in data_image_shas(data):
        extra = extra_images.get(sha)
        if extra is None:
            raise CftoolsError(f"item {key}: its data names image {sha[:12]}… which is not in the store")
        if all(r.sha256 != sha for r in [*refs, *found]):
            found.append(image_ref(sha, extra.format, extra.path, released))
    return found


def collect_items(store: Store, statuses: Iterable[str], splits: dict[str, float],
                  boundary: Boundary, include_unverified_edits: bool = False) -> list[ExportItem]:
    """The items in STATUSES as records with provenance, sorted by id, splits assigned; both as they may leave the
    workspace (BOUNDARY: people as pseudonyms, no local paths), so every writer of the release writes them so.
    Their edits are released as `cftools.release.edited` says (people-accepted only, unless
    INCLUDE_UNVERIFIED_EDITS)."""
    statuses = list(statuses)
    with store.session() as session:
        rows = read_item_rows(session, statuses)
        item_ids = [item.id for item, _, _ in rows]
        generation_ids = sorted({item.generation_id for item, _, _ in rows if item.generation_id})
        generations = {}
        for part in in_chunks(generation_ids):
            for gen in session.execute(select(Generation).where(Generation.id.in_(part))).scalars():
                generations[gen.id] = gen
        flags = _by_item(session,
                         lambda part: select(CheckFlag.item_id, CheckFlag.code).where(CheckFlag.item_id.in_(part)),
                         item_ids)
        tasks = _by_item(session,
                         lambda part: select(AnnotationTask.item_id, AnnotationTask)
                         .where(AnnotationTask.item_id.in_(part), AnnotationTask.purpose.not_in(MEASURING))
                         .order_by(AnnotationTask.id), item_ids)
        check_events = _by_item(session, lambda part: select(ItemEvent.item_id, ItemEvent.detail).where(
            ItemEvent.item_id.in_(part), ItemEvent.stage == CHECK_STAGE).order_by(ItemEvent.id), item_ids)
        task_ids = [row[1].id for rows_ in tasks.values() for row in rows_]
        judgments: dict[int, list] = defaultdict(list)
        for part in in_chunks(task_ids):
            for judgment in session.execute(select(Judgment).where(Judgment.task_id.in_(part))
                                            .order_by(Judgment.id)).scalars():
                judgments[judgment.task_id].append(judgment)
        checks = check_states(session, (j.separation_check_id for found in judgments.values() for j in found))
        extra_shas = sorted({sha for item, _, _ in rows for sha in data_image_shas(item.data or {})})
        extra_images = {}
        for part in in_chunks(extra_shas):
            for image in session.execute(select(Image).where(Image.sha256.in_(part))).scalars():
                extra_images[image.sha256] = image

    items, released = [], {}
    for item, source, image in rows:
        data = dict(item.data or {})
        options, data = split_options(data)
        refs = [image_ref(image.sha256, image.format, image.path, released)] if image is not None else []
        item_tasks = [row[1] for row in tasks.get(item.id, [])]
        item_judgments = [j for t in item_tasks for j in judgments.get(t.id, [])]
        verification = item_verification([(t.server, t.assignee, j.annotator, checks.get(j.separation_check_id))
                                          for t in item_tasks
                                          if t.state not in ("deleted", REQUEUED) for j in judgments.get(t.id, [])],
                                         pseudonym=boundary.pseudonym, server_id=boundary.server_id)
        gen = generations.get(item.generation_id)
        record = {
            "id": item.key,
            "kind": item.kind,
            "group": item.group,
            "split": None,
            "verified": item.status in VERIFIED_STATUSES,
            "status": item.status,
            "image": refs[0].rel if image is not None else None,
            "image_sha256": refs[0].released_sha256 if image is not None else None,
            "original_question": source.question if source else None,
            "original_answer": source.answer if source else None,
            "answer_type": record_answer_type(item.kind, item.group, source.answer_type if source else None, item.answer),
            "question": item.question,
            "answer": item.answer,
            "options": options,
            "data": data,
            "verification": {k: verification[k] for k in ("people", "annotators", "separate_servers", "how", "blind",
                                                          "why_not_blind")},
        }
        # the edits first (only the released one's image stays in the data), then the images the data names
        record = with_released_edits(get_kind(item.kind).hooks.release.export_record(record), include_unverified_edits)
        refs += data_image_refs(item.key, record["data"], extra_images, refs, released)
        if len(refs) > (image is not None):
            paths = {f"sha256:{r.sha256}": r.rel for r in refs}
            record["data"] = map_strings(record["data"], lambda text: paths.get(text, text))
        record = boundary.released(record)
        provenance = {
            "origin": item.origin,
            # the dataset the item came from (its licence is in the manifest's source_licences); none for
            # items made without a source
            "dataset": source.dataset if source else item.dataset,
            "source": ({"dataset": source.dataset, "external_id": source.external_id, "image_ref": source.image_ref}
                       if source else None),
            "generation": ({"generator": gen.generator, "backend": gen.backend, "model": gen.model,
                            "template_name": gen.template_name, "template_hash": gen.template_hash}
                           if gen else None),
            "check_flags": sorted({row[1] for row in flags.get(item.id, [])}),
            "waived_flags": sorted(((item.data or {}).get("waived_flags") or {})),  # overruled by a person
            "checks_passed": checks_passed(check_events.get(item.id, []), {row[1] for row in flags.get(item.id, [])}),
            "annotation": annotation_summary(item_tasks, item_judgments),
            "verification": verification,
            "corrected_from": item.proposed_answer if item.proposed_answer not in (None, item.answer) else None,
        }
        items.append(ExportItem(record, refs, boundary.released(provenance), _iso(item.updated_at),
                                has_edit_candidates=bool((item.data or {}).get("edit_candidates"))))
    assign_splits(items, splits)
    return items


def source_order(entry: ExportItem) -> tuple:
    """The release's own order: ingested items as their source files list them (by dataset and line), then the
    items made here in id order (ids of ingested C-VQA rows are hashes: their id order means nothing to a reader)."""
    line = re.search(r"\d+", str((entry.record.get("data") or {}).get("line") or ""))
    if line is None or entry.provenance.get("origin") != "ingested":
        return (1, "", 0, entry.record["id"])
    return (0, str(entry.provenance.get("dataset") or ""), int(line.group(0)), entry.record["id"])


def _iso(value: Any) -> str:
    return value.isoformat() if value is not None else ""


def statuses_for(include_unverified: bool, include_in_review: bool = False) -> tuple[str, ...]:
    return (VERIFIED_STATUSES + (UNVERIFIED_STATUSES if include_unverified else ())
            + ((IN_REVIEW,) if include_in_review else ()))


def count_exportable(store: Store, include_unverified: bool) -> int:
    with store.session() as session:
        return session.execute(select(func.count()).select_from(Item)
                               .where(Item.status.in_(statuses_for(include_unverified)))).scalar_one()


def assign_splits(items: list[ExportItem], splits: dict[str, float]) -> None:
    """Items sharing an image form one group; a group's split comes from the hash of its smallest image."""
    parent: dict[str, str] = {}

    def find(node: str) -> str:
        while parent.setdefault(node, node) != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for entry in items:
        nodes = [f"image:{ref.sha256}" for ref in entry.images] or [f"item:{entry.record['id']}"]
        for node in nodes[1:]:
            a, b = find(nodes[0]), find(node)
            if a != b:
                parent[max(a, b)] = min(a, b)  # the root is the smallest name: independent of order
    for entry in items:
        nodes = [f"image:{ref.sha256}" for ref in entry.images] or [f"item:{entry.record['id']}"]
        root = find(nodes[0])
        entry.record["split"] = choose_split(splits, root.split(":", 1)[1])
