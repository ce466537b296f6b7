"""Ingest of real inputs: official VQAv2 files, the C-VQA CSV as published, and a user's own table.

Every ingest validates the whole file first, then writes in one transaction: a bad record either
stops the ingest with the store unchanged, or (skip_bad) is left out and listed in a report file.
Records are keyed, so ingesting the same file twice adds nothing.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import ijson
from sqlalchemy import func, select

from cftools.errors import InputError
from cftools.images import FolderIndex, ImageFile, attach_images, image_ref_path, read_image_file, sha256_file
from cftools.models import (
    BOOLEAN, DRAFT, KIND_CVQA, NUMERICAL_DIRECT, NUMERICAL_INDIRECT, IngestRun, Item, ItemEvent,
    SourceQuestion, utcnow,
)
from cftools.store import Store

CVQA_COLUMNS = ("img_path", "query", "answer", "new query", "new answer", "type")
CVQA_TYPE_TO_GROUP = {"direct": NUMERICAL_DIRECT, "indirect": NUMERICAL_INDIRECT, "boolean": BOOLEAN}
GROUP_ANSWER_TYPE = {NUMERICAL_DIRECT: "number", NUMERICAL_INDIRECT: "number", BOOLEAN: "yes/no"}
COCO_SUBTYPES = ("val2014", "train2014", "test2015", "test-dev2015")
BATCH = 5000


@dataclass
class BadRecord:
    path: str
    record: str
    reason: str


@dataclass
class IngestReport:
    format: str
    path: str
    dataset: str
    n_records: int = 0
    sources_added: int = 0
    items_added: int = 0
    images_added: int = 0
    images_attached: int = 0
    missing_images: int = 0
    bad: list[BadRecord] = field(default_factory=list)
    report_path: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "bad"}
        out["skipped"] = len(self.bad)
        return out


class BadRecords:
    """Collects bad records when skipping; raises the first one otherwise."""

    def __init__(self, skip_bad: bool) -> None:
        self.skip_bad = skip_bad
        self.items: list[BadRecord] = []

    def add(self, error: InputError) -> None:
        if not self.skip_bad:
            raise error
        self.items.append(BadRecord(error.path, str(error.record), error.reason))


# ---------------------------------------------------------------- answers


def most_frequent_answer(answers: Iterable[str]) -> str | None:
    """The most frequent answer; ties go to the alphabetically first, so the choice never depends on order."""
    counts = Counter(answers)
    if not counts:
        return None
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def infer_answer_type(answer: str) -> str:
    text = answer.strip().lower()
    if text in ("yes", "no"):
        return "yes/no"
    if text.isdigit():
        return "number"
    return "other"


def stable_key(*parts: object) -> str:
    return hashlib.sha1("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()[:16]


# ---------------------------------------------------------------- VQAv2


def coco_file_names(image_id: int, subtype: str | None) -> list[str]:
    subtypes = [subtype] if subtype else []
    subtypes += [s for s in COCO_SUBTYPES if s != subtype]
    names = [f"COCO_{s}_{image_id:012d}.jpg" for s in subtypes]
    return names + [f"{image_id:012d}.jpg"]  # COCO 2017 naming


def _scalar_at(path: Path, key: str) -> str | None:
    """A top-level string field of a large JSON file, read without loading the file."""
    with open(path, "rb") as fh:
        for prefix, event, value in ijson.parse(fh):
            if prefix == key and event == "string":
                return value
    return None


def _stream(path: Path, prefix: str) -> Iterator[tuple[int, Any]]:
    try:
        with open(path, "rb") as fh:
            for index, obj in enumerate(ijson.items(fh, prefix, use_float=True)):
                yield index, obj
    except ijson.JSONError as exc:
        raise InputError(path, f"malformed JSON: {exc}") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def _require(obj: Any, fields: dict[str, type | tuple], path: Path, record: str) -> None:
    if not isinstance(obj, dict):
        raise InputError(path, f"expected an object, got {type(obj).__name__}", record)
    for name, kind in fields.items():
        if name not in obj:
            raise InputError(path, f"missing field '{name}'", record)
        if not isinstance(obj[name], kind) or isinstance(obj[name], bool):
            raise InputError(path, f"field '{name}' has the wrong type ({type(obj[name]).__name__})", record)


def read_vqav2(questions: Path, annotations: Path | None, bad: BadRecords) -> tuple[str, list[dict]]:
    """Parse the official VQAv2 pair into source-question rows (without store ids)."""
    subtype = _scalar_at(questions, "data_subtype")
    by_qid: dict[int, tuple[int, str]] = {}
    seen_any = False
    for index, q in _stream(questions, "questions.item"):
        seen_any = True
        record = f"questions[{index}]"
        try:
            _require(q, {"question_id": int, "image_id": int, "question": str}, questions, record)
        except InputError as err:
            bad.add(err)
            continue
        by_qid[q["question_id"]] = (q["image_id"], q["question"])
    if not seen_any and not by_qid:
        raise InputError(questions, "no 'questions' list found (is this a VQAv2 questions file?)")

    answered: dict[int, tuple[list[str], str | None, str | None]] = {}
    if annotations is not None:
        for index, a in _stream(annotations, "annotations.item"):
            record = f"annotations[{index}]"
            try:
                _require(a, {"question_id": int, "answers": list}, annotations, record)
                texts = []
                for j, ans in enumerate(a["answers"]):
                    if not isinstance(ans, dict) or not isinstance(ans.get("answer"), str):
                        raise InputError(annotations, f"answers[{j}] has no text 'answer'", record)
                    texts.append(ans["answer"])
                if a["question_id"] not in by_qid:
                    raise InputError(annotations, f"question_id {a['question_id']} is not in {questions.name}", record)
            except InputError as err:
                bad.add(err)
                continue
            answered[a["question_id"]] = (texts, a.get("answer_type"), a.get("multiple_choice_answer"))

    dataset = f"vqav2:{subtype or 'unknown'}"
    now = utcnow()
    rows = []
    for qid, (image_id, question) in by_qid.items():
        texts, answer_type, mc = answered.get(qid, (None, None, None))
        if annotations is not None and texts is None:
            bad.add(InputError(annotations, f"no annotation for question_id {qid}"))
            continue
        meta = {"image_id": image_id}
        if mc is not None:
            meta["multiple_choice_answer"] = mc
        rows.append({
            "dataset": dataset, "external_id": str(qid), "image_ref": coco_file_names(image_id, subtype)[0],
            "question": question, "answer": most_frequent_answer(texts) if texts else None,
            "answer_type": answer_type, "answers": texts, "meta": meta, "created_at": now,
        })
    return dataset, rows


# ---------------------------------------------------------------- CSV / JSONL tables


def _read_csv(path: Path, required: tuple[str, ...]) -> Iterator[tuple[str, dict]]:
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                raise InputError(path, f"missing column(s) {', '.join(repr(c) for c in missing)}; "
                                       f"header is {','.join(header)}", "line 1")
            for row in reader:
                line = f"line {reader.line_num}"
                if None in row or any(v is None for v in row.values()):
                    raise InputError(path, f"expected {len(header)} fields", line)
                yield line, row
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text ({exc.reason})") from None
    except csv.Error as exc:
        raise InputError(path, f"malformed CSV: {exc}") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def _read_jsonl(path: Path) -> Iterator[tuple[str, dict]]:
    try:
        with open(path, encoding="utf-8") as fh:
            for number, text in enumerate(fh, start=1):
                if not text.strip():
                    continue
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise InputError(path, f"malformed JSON: {exc.msg}", f"line {number}") from None
                if not isinstance(obj, dict):
                    raise InputError(path, "expected a JSON object", f"line {number}")
                yield f"line {number}", obj
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def _records(path: Path, required: tuple[str, ...], bad: BadRecords) -> Iterator[tuple[str, dict]]:
    """Rows of a CSV or JSONL file whose required fields are present and non-empty."""
    reader = _read_jsonl(path) if path.suffix.lower() in (".jsonl", ".ndjson") else _read_csv(path, required)
    iterator = iter(reader)
    while True:
        try:
            line, row = next(iterator)
        except StopIteration:
            return
        except InputError as err:
            if err.record is None or err.record == "line 1":
                raise  # a broken file, not a bad record
            bad.add(err)
            continue
        empty = [c for c in required if not str(row.get(c, "") if row.get(c) is not None else "").strip()]
        if empty:
            bad.add(InputError(path, f"empty or missing field(s) {', '.join(empty)}", line))
            continue
        yield line, row


def read_cvqa(path: Path, bad: BadRecords, dataset: str | None = None) -> tuple[str, list[dict], list[dict]]:
    """Parse the C-VQA CSV: the original question is a source, the counterfactual an item of its group."""
    dataset = dataset or f"cvqa:{path.stem}"
    now = utcnow()
    sources: dict[str, dict] = {}
    items: dict[str, dict] = {}
    for line, row in _records(path, CVQA_COLUMNS, bad):
        group = CVQA_TYPE_TO_GROUP.get(row["type"].strip(), row["type"].strip())
        source_key = stable_key(row["img_path"], row["query"], row["answer"])
        image_ref = image_ref_path(row["img_path"])  # relative path: same-named files in two folders differ
        sources.setdefault(source_key, {
            "dataset": dataset, "external_id": source_key, "image_ref": image_ref, "question": row["query"],
            "answer": row["answer"], "answer_type": GROUP_ANSWER_TYPE.get(group, "other"),
            "answers": None, "meta": {"img_path": row["img_path"], "line": line}, "created_at": now,
        })
        key = f"{dataset}:{stable_key(*(row[c] for c in CVQA_COLUMNS))}"
        items.setdefault(key, {
            "key": key, "kind": KIND_CVQA, "group": group, "source_external_id": source_key,
            "question": row["new query"], "answer": row["new answer"], "status": DRAFT, "origin": "ingested",
            "data": {"cvqa_type": row["type"], "line": line}, "created_at": now, "updated_at": now,
        })
    return dataset, list(sources.values()), list(items.values())


def read_table(path: Path, bad: BadRecords, dataset: str | None = None) -> tuple[str, list[dict]]:
    """A user's own `image, question, answer` records (CSV or JSONL; optional id and answer_type)."""
    dataset = dataset or f"table:{path.stem}"
    now = utcnow()
    rows: dict[str, dict] = {}
    for line, row in _records(path, ("image", "question", "answer"), bad):
        answer = str(row["answer"]).strip()
        external_id = str(row.get("id") or stable_key(row["image"], row["question"], answer))
        rows.setdefault(external_id, {
            "dataset": dataset, "external_id": external_id, "image_ref": image_ref_path(str(row["image"])),
            "question": str(row["question"]).strip(), "answer": answer,
            "answer_type": str(row.get("answer_type") or infer_answer_type(answer)),
            "answers": None, "meta": {"line": line}, "created_at": now,
        })
    return dataset, list(rows.values())


# ---------------------------------------------------------------- images and writing


def resolve_images(store: Store, dataset: str, refs: Iterable[str], images_dir: Path | None,
                   bad: BadRecords, candidates: dict[str, list[str]] | None = None) -> dict[str, ImageFile]:
    """Read every image the records (and the dataset's earlier records still without one) refer to."""
    if images_dir is None:
        return {}
    if not images_dir.is_dir():
        raise InputError(images_dir, "not a folder of images")
    on_disk = FolderIndex(images_dir)
    with store.session() as session:
        earlier = session.execute(select(SourceQuestion.image_ref).where(
            SourceQuestion.dataset == dataset, SourceQuestion.image_id.is_(None))).scalars().all()
    found: dict[str, ImageFile] = {}
    for ref in sorted(set(refs) | set(earlier)):
        for name in (candidates or {}).get(ref, [ref]):
            matches = on_disk.find(name)
            if len(matches) > 1:
                bad.add(InputError(images_dir, f"image reference {name!r} is ambiguous: "
                                               f"{' and '.join(matches[:2])} both match", f"image {ref}"))
                break
            if matches:
                try:
                    found[ref] = read_image_file(on_disk.by_rel[matches[0]], record=f"image {ref}")
                except InputError as err:
                    bad.add(err)
                break
    return found


def existing_item_keys(session, keys: list[str], chunk: int = 900) -> dict[str, int]:  # noqa: ANN001
    """Item key -> id for those of KEYS already in the store (queried in chunks to respect SQL limits)."""
    found: dict[str, int] = {}
    for start in range(0, len(keys), chunk):
        part = keys[start:start + chunk]
        found.update(session.execute(select(Item.key, Item.id).where(Item.key.in_(part))).all())
    return found


def write_records(store: Store, fmt: str, path: Path, dataset: str, sources: list[dict], items: list[dict],
                  images: dict[str, ImageFile], report: IngestReport) -> None:
    """Write sources, items and images in one transaction; existing keys are left as they are."""
    source_table = SourceQuestion.__table__
    with store.write() as session:
        count_sources = select(func.count()).select_from(source_table).where(source_table.c.dataset == dataset)
        before = session.execute(count_sources).scalar_one()
        for start in range(0, len(sources), BATCH):
            store.insert_ignore(session, source_table, sources[start:start + BATCH])
        report.sources_added = session.execute(count_sources).scalar_one() - before

        if items:
            ids = dict(session.execute(select(source_table.c.external_id, source_table.c.id)
                                       .where(source_table.c.dataset == dataset)).all())
            existing = existing_item_keys(session, [i["key"] for i in items])
            new_items = [{**{k: v for k, v in i.items() if k != "source_external_id"},
                          "source_id": ids[i["source_external_id"]]} for i in items if i["key"] not in existing]
            for start in range(0, len(new_items), BATCH):
                store.insert_ignore(session, Item.__table__, new_items[start:start + BATCH])
            new_ids = [item_id for _, item_id in existing_item_keys(session, [i["key"] for i in new_items]).items()]
            if new_ids:
                session.execute(ItemEvent.__table__.insert(), [
                    {"item_id": item_id, "stage": "ingest", "to_status": DRAFT,
                     "detail": {"file": str(path)}, "created_at": utcnow()} for item_id in new_ids])
            report.items_added = len(new_items)

        report.images_added, report.images_attached = attach_images(store, session, dataset, images)
        report.missing_images = session.execute(
            select(func.count()).select_from(source_table)
            .where(source_table.c.dataset == dataset, source_table.c.image_id.is_(None))).scalar_one()
        session.add(IngestRun(format=fmt, path=str(path), file_sha256=sha256_file(path), n_records=report.n_records,
                              n_sources_added=report.sources_added, n_items_added=report.items_added,
                              n_images_added=report.images_added, n_skipped=len(report.bad)))


def write_bad_report(report: IngestReport, report_path: Path) -> None:
    report_path.parent.mkdir(parents=True, exist_ok=True)
    with open(report_path, "w", encoding="utf-8") as fh:
        for bad in report.bad:
            fh.write(json.dumps(bad.__dict__, ensure_ascii=False) + "\n")
    report.report_path = str(report_path)


def _finish(store: Store, fmt: str, path: Path, dataset: str, sources: list[dict], items: list[dict],
            images_dir: Path | None, bad: BadRecords, report_path: Path | None, n_records: int,
            candidates: dict[str, list[str]] | None = None) -> IngestReport:
    report = IngestReport(format=fmt, path=str(path), dataset=dataset, n_records=n_records)
    refs = {s["image_ref"] for s in sources}
    images = resolve_images(store, dataset, refs, images_dir, bad, candidates)
    report.bad = bad.items
    if bad.items:
        bad_refs = {b.record.removeprefix("image ") for b in bad.items if b.record.startswith("image ")}
        images = {ref: img for ref, img in images.items() if ref not in bad_refs}
    write_records(store, fmt, path, dataset, sources, items, images, report)
    if report.bad and report_path is not None:
        write_bad_report(report, report_path)
    return report


def ingest_vqav2(store: Store, questions: Path, annotations: Path | None, images_dir: Path | None = None,
                 skip_bad: bool = False, report_path: Path | None = None) -> IngestReport:
    bad = BadRecords(skip_bad)
    dataset, sources = read_vqav2(Path(questions), Path(annotations) if annotations else None, bad)
    subtype = dataset.split(":", 1)[1]
    candidates = None
    if images_dir is not None:
        candidates = {s["image_ref"]: coco_file_names(s["meta"]["image_id"], subtype) for s in sources}
    return _finish(store, "vqav2", Path(questions), dataset, sources, [], images_dir, bad, report_path,
                   len(sources), candidates)


def ingest_cvqa(store: Store, path: Path, images_dir: Path | None = None, skip_bad: bool = False,
                report_path: Path | None = None, dataset: str | None = None) -> IngestReport:
    bad = BadRecords(skip_bad)
    dataset, sources, items = read_cvqa(Path(path), bad, dataset)
    return _finish(store, "cvqa", Path(path), dataset, sources, items, images_dir, bad, report_path, len(items))


def ingest_table(store: Store, path: Path, images_dir: Path | None = None, skip_bad: bool = False,
                 report_path: Path | None = None, dataset: str | None = None) -> IngestReport:
    bad = BadRecords(skip_bad)
    dataset, sources = read_table(Path(path), bad, dataset)
    return _finish(store, "table", Path(path), dataset, sources, [], images_dir, bad, report_path, len(sources))
