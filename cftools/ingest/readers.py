"""Ingest of real inputs: official VQAv2 files, the C-VQA CSV as published, and a user's own table.

Every ingest validates the whole file first, then writes in one transaction: a bad record either
stops the ingest with the store unchanged, or (skip_bad) is left out and listed in a report file.
Records are keyed, so ingesting the same file twice adds nothing.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

import ijson
from sqlalchemy import func, select

from cftools.answer_rules import COUNT_TYPES, read_count
from cftools.errors import Hint, InputError, naming_the_file, NoRecordsError
from cftools.images import FolderIndex, ImageFile, attach_images, image_ref_path, read_image_file, sha256_file
from cftools.ingest.licences import LicenceChoice, chosen_licence, record_licence
from cftools.models import (
    DRAFT, IngestRun, Item, ItemEvent,
    SourceQuestion, utcnow,
)
from cftools.progress import ProgressCallback, no_progress
from cftools.store import Store, in_chunks

# Where every ingest's images and store write report their progress (`cftools.commands.ingest.showing_progress`
# sets it): a context variable, since all the readers, the kinds' too, end in `finish` and none takes a callback.
ingest_progress: ContextVar[ProgressCallback] = ContextVar("ingest_progress", default=no_progress)

COCO_SUBTYPES = ("val2014", "train2014", "test2015", "test-dev2015")
BATCH = 5000
UNCLOSED_QUOTE = "malformed CSV: a quote opened in this record is never closed"


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
    licence: str | None = None  # the dataset's licence in the store after this ingest
    updated: int = 0  # records already in the store whose text this file changed (replaced with --update)
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
    first_at: dict[int, str] = {}
    seen_any = False
    for index, q in _stream(questions, "questions.item"):
        seen_any = True
        record = f"questions[{index}]"
        try:
            _require(q, {"question_id": int, "image_id": int, "question": str}, questions, record)
            if q["question_id"] in first_at:  # the second would silently replace the first
                raise InputError(questions, f"question_id {q['question_id']} is given twice in this file (first at "
                                            f"{first_at[q['question_id']]})", record)
        except InputError as err:
            bad.add(err)
            if isinstance(q, dict) and isinstance(q.get("question_id"), int):
                first_at.setdefault(q["question_id"], record)
                by_qid.pop(q["question_id"], None)  # whichever copy was bad, the id is refused
            continue
        first_at[q["question_id"]] = record
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


class NotUTF8(Exception):
    def __init__(self, line: int, reason: str) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason


class NumberedLines:
    """A file's lines decoded one at a time as UTF-8, counting them: a bad byte is then known by its line
    (decoding the file as one stream tells only an offset in some buffer). Iteration goes on after one."""

    def __init__(self, fh: BinaryIO) -> None:
        self._chunks = iter(fh)
        self._pending: list[bytes] = []
        self.number = 0  # lines handed out so far

    def __iter__(self) -> "NumberedLines":
        return self

    def __next__(self) -> str:
        if not self._pending:
            # Lines end at \n, \r\n or a lone \r (universal newlines, as text mode would split them).
            self._pending = next(self._chunks).splitlines(keepends=True)[::-1]
        raw = self._pending.pop()
        self.number += 1
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NotUTF8(self.number, f"{exc.reason}: byte 0x{raw[exc.start]:02x}") from None
        return text.removeprefix("\ufeff") if self.number == 1 else text


def _not_utf8(path: Path, error: NotUTF8, start: int) -> InputError:
    where = "" if error.line == start else f" in its line {error.line}"
    return InputError(path, f"not UTF-8 text ({error.reason}{where})", f"line {start}")


def _read_csv(path: Path, required: tuple[str, ...]) -> Iterator[tuple[str, dict | InputError]]:
    """(line, row) for each record, the line being where the record starts; a bad record comes as
    (line, InputError) and reading goes on after it. A broken header is raised."""
    try:
        with open(path, "rb") as fh:
            lines = NumberedLines(fh)
            reader = csv.reader(lines, strict=True)  # strict: an unclosed quote is an error, not the rest of the file
            try:
                header = next(reader, None)
            except NotUTF8 as err:
                raise _not_utf8(path, err, 1) from None
            except csv.Error as exc:
                raise InputError(path, f"malformed CSV header: {exc}", "line 1") from None
            if header is None:
                return  # an empty file: no records
            missing = [c for c in required if c not in header]
            if missing:
                raise InputError(path, f"missing column(s) {', '.join(repr(c) for c in missing)}; "
                                       f"header is {','.join(header)}", "line 1")
            while True:
                start = lines.number + 1
                try:
                    fields = next(reader)
                except StopIteration:
                    return
                except NotUTF8 as err:
                    yield f"line {start}", _not_utf8(path, err, start)
                    continue
                except csv.Error as exc:
                    reason = UNCLOSED_QUOTE if str(exc) == "unexpected end of data" else f"malformed CSV: {exc}"
                    yield f"line {start}", InputError(path, reason, f"line {start}")
                    continue
                if not fields:
                    continue  # a blank line
                if len(fields) != len(header):
                    yield f"line {start}", InputError(path, f"expected {len(header)} fields, got {len(fields)}",
                                                      f"line {start}")
                    continue
                yield f"line {start}", dict(zip(header, fields))
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def _read_jsonl(path: Path) -> Iterator[tuple[str, dict | InputError]]:
    """(line, object) for each record; a bad one comes as (line, InputError) and reading goes on."""
    try:
        with open(path, "rb") as fh:
            lines = NumberedLines(fh)
            while True:
                number = lines.number + 1
                try:
                    text = next(lines)
                except StopIteration:
                    return
                except NotUTF8 as err:
                    yield f"line {number}", _not_utf8(path, err, number)
                    continue
                if not text.strip():
                    continue
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as exc:
                    yield f"line {number}", InputError(path, f"malformed JSON: {exc.msg}", f"line {number}")
                    continue
                if not isinstance(obj, dict):
                    yield f"line {number}", InputError(path, "expected a JSON object", f"line {number}")
                    continue
                yield f"line {number}", obj
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def records(path: Path, required: tuple[str, ...], bad: BadRecords) -> Iterator[tuple[str, dict]]:
    """Rows of a CSV or JSONL file whose required fields are present and non-empty."""
    reader = _read_jsonl(path) if path.suffix.lower() in (".jsonl", ".ndjson") else _read_csv(path, required)
    for line, row in reader:
        if isinstance(row, InputError):
            bad.add(row)
            continue
        empty = [c for c in required if not str(row.get(c, "") if row.get(c) is not None else "").strip()]
        if empty:
            bad.add(InputError(path, f"empty or missing field(s) {', '.join(empty)}", line))
            continue
        yield line, row


def image_path_problem(given: str, images_dir: Path | None) -> str | None:
    """Why a record's image path cannot be used, or None. It is taken relative to --images and must stay
    inside it ('..' or an absolute path elsewhere would let a table read any file) and name a file there."""
    if os.path.isabs(given):
        if images_dir is not None and not Path(os.path.normpath(given)).is_relative_to(os.path.abspath(images_dir)):
            return f"image path {given!r} is outside the --images folder {images_dir}"
    elif os.path.normpath(given).split(os.sep)[0] == os.pardir:
        return f"image path {given!r} leaves the --images folder"
    if images_dir is not None:
        target = images_dir / given
        real = outside_images(target, images_dir) if os.path.lexists(target) else None
        if real is not None:  # a link (to a file, or a folder on the way) would store a file from elsewhere
            return f"image path {given!r} is a link to {real}, outside the --images folder {images_dir}"
        if target.exists() and not target.is_file():
            return f"image path {given!r} is {'a folder' if target.is_dir() else 'not a regular file'}, not an image"
    return None


def repeated_id(seen: dict[str, str], row: dict, line: str, field: str = "id") -> str | None:
    """Why ROW repeats an `id` an earlier record of the same file gave (naming the line), or None. A repeated id
    would silently keep only the first of the two records."""
    given = row.get(field)
    if given is None or not str(given).strip():
        return None
    key = str(given).strip()
    if key in seen:
        return f"{field} {key!r} is given twice in this file (first on {seen[key]})"
    seen[key] = line
    return None


def checked_records(path: Path, required: tuple[str, ...], bad: BadRecords, images_dir: Path | None = None,
                    image_fields: tuple[str, ...] = (), id_field: str | None = "id") -> Iterator[tuple[str, dict]]:
    """The records every reader reads: those of `records` whose image paths (IMAGE_FIELDS) stay inside
    IMAGES_DIR (no '..', no absolute path elsewhere, no link out of it) and whose ID_FIELD no earlier record
    gave; the others are bad records naming their line (and, for a repeated id, the first one's). Every reader
    goes through here, so a new one cannot forget either check."""
    seen: dict[str, str] = {}
    for line, row in records(path, required, bad):
        # the id first: a record skipped for another reason (--skip-bad) still holds its id, so a later record
        # giving the same id is refused whichever of the two was skipped
        problem = repeated_id(seen, row, line, id_field) if id_field is not None else None
        if problem is None:
            problem = next((p for f in image_fields if row.get(f) is not None and str(row[f]).strip()
                            for p in [image_path_problem(str(row[f]).strip(), images_dir)] if p), None)
        if problem:
            bad.add(InputError(path, problem, line))
            continue
        yield line, row


def outside_images(file: Path, images_dir: Path) -> Path | None:
    """Where FILE really is when a link takes it outside IMAGES_DIR (its target would be read and stored), else None."""
    real = file.resolve()
    return None if real.is_relative_to(images_dir.resolve()) else real


def read_table(path: Path, bad: BadRecords, dataset: str | None = None,
               images_dir: Path | None = None) -> tuple[str, list[dict]]:
    """A user's own `image, question, answer` records (CSV or JSONL; optional id and answer_type). An answer of
    answer_type `number` (or `count`) follows `cftools.answer_rules`: digits, or number words converted (recorded in
    the source's meta as `converted_answer`); a negative, a decimal or other text is a bad record."""
    dataset = dataset or f"table:{path.stem}"
    now = utcnow()
    rows: dict[str, dict] = {}
    for line, row in checked_records(path, ("image", "question", "answer"), bad, images_dir, ("image",)):
        image = str(row["image"]).strip()
        given = str(row["answer"]).strip()
        answer_type = str(row.get("answer_type") or infer_answer_type(given))
        answer, problem = read_count(given) if answer_type in COUNT_TYPES else (given, None)
        if problem:
            bad.add(InputError(path, f"answer {problem}, as an answer_type {answer_type} answer must be a count",
                               line))
            continue
        converted = {"converted_answer": [given, answer]} if answer != given else {}
        external_id = str(row.get("id") or stable_key(row["image"], row["question"], given))
        rows.setdefault(external_id, {
            "dataset": dataset, "external_id": external_id, "image_ref": image_ref_path(image),
            "question": str(row["question"]).strip(), "answer": answer, "answer_type": answer_type,
            "answers": None, "meta": {"line": line, "image": image, **converted}, "created_at": now,
        })
    return dataset, list(rows.values())


# ---------------------------------------------------------------- images and writing


def record_of(source: dict) -> str:
    """How errors name the input record a source question came from: its line, else its question id."""
    return source["meta"].get("line") or f"question_id {source['external_id']}"


def given_image_file(images_dir: Path, source: dict | None) -> Path | None:
    """The file a record's own image path names under IMAGES_DIR, when it is one (checked at reading)."""
    given = (source or {}).get("meta", {}).get("image")
    if not given:
        return None
    path = images_dir / given
    return path if path.is_file() else None


def resolve_images(store: Store, dataset: str, sources: list[dict], images_dir: Path | None, bad: BadRecords,
                   candidates: dict[str, list[str]] | None = None, input_path: Path | None = None,
                   ) -> tuple[dict[str, ImageFile], set[str]]:
    """Read every image the records (and the dataset's earlier records still without one) refer to: the images
    found by reference, and the references whose image is broken (ambiguous, a link out, unreadable).

    A record's image path names its file under IMAGES_DIR; otherwise the image is found by file name
    anywhere under it. A broken image is a bad record, named by the first record that uses it.
    """
    broken: set[str] = set()
    if images_dir is None:
        return {}, broken
    if not images_dir.is_dir():
        raise InputError(images_dir, "not a folder of images")
    on_disk = FolderIndex(images_dir)
    first_source: dict[str, dict] = {}
    for source in sources:
        first_source.setdefault(source["image_ref"], source)
    with store.session() as session:
        earlier = dict(session.execute(select(SourceQuestion.image_ref, SourceQuestion.external_id).where(
            SourceQuestion.dataset == dataset, SourceQuestion.image_id.is_(None))).all())
    found: dict[str, ImageFile] = {}
    refs = sorted(set(first_source) | set(earlier))

    def blamed(ref: str, source: dict | None, reason: str) -> InputError:
        """The bad record a broken image REF makes: the first record of this file that uses it, else the record
        stored earlier without an image that it was to complete."""
        if input_path is not None and source is not None:
            return InputError(input_path, reason, record_of(source))
        if input_path is not None and ref in earlier:
            return InputError(input_path, reason,
                              f"id {earlier[ref]!r} of {dataset} (stored earlier without an image)")
        return InputError(images_dir, reason, f"image {ref}")

    progress = ingest_progress.get()
    for done, ref in enumerate(refs):
        progress("images", done, len(refs))
        source = first_source.get(ref)
        file = given_image_file(images_dir, source)
        for name in ([] if file else (candidates or {}).get(ref, [ref])):
            matches = on_disk.find(name)
            if len(matches) > 1:
                bad.add(blamed(ref, source, f"image reference {name!r} is ambiguous: "
                                            f"{' and '.join(matches[:2])} both match"))
                broken.add(ref)
                break
            if matches:
                file = on_disk.by_rel[matches[0]]
                break
        if file is None:
            continue
        real = outside_images(file, images_dir)
        if real is not None:
            bad.add(blamed(ref, source,
                           f"image {file} is a link to {real}, outside the --images folder {images_dir}"))
            broken.add(ref)
            continue
        try:
            found[ref] = read_image_file(file, record=f"image {ref}")
        except InputError as err:
            bad.add(blamed(ref, source, f"image {file}: {err.reason}") if input_path is not None else err)
            broken.add(ref)
    progress("images", len(refs), len(refs))
    return found, broken


def without_broken_images(read: "ReadInput", broken: set[str]) -> "ReadInput":
    """READ less the records whose image is broken (skipped with --skip-bad: none of them is stored, neither its
    source nor its items); each record beyond the first that uses such an image is listed as bad too."""
    first: dict[str, str] = {}
    kept, dropped = [], set()
    for source in read.sources:
        ref = source["image_ref"]
        if ref not in broken:
            kept.append(source)
            continue
        dropped.add(source["external_id"])
        if ref in first:
            read.bad.add(InputError(read.path, f"its image is the broken one of {first[ref]}", record_of(source)))
        else:
            first[ref] = record_of(source)
    items = [i for i in read.items if i.get("source_external_id") not in dropped]
    return replace(read, sources=kept, items=items)


def existing_item_keys(session, keys: list[str]) -> dict[str, int]:  # noqa: ANN001
    """Item key -> id for those of KEYS already in the store (queried in chunks to respect SQL limits)."""
    found: dict[str, int] = {}
    for part in in_chunks(keys):
        found.update(session.execute(select(Item.key, Item.id).where(Item.key.in_(part))).all())
    return found


TEXT_FIELDS = ("question", "answer")  # what a re-ingest may not change silently under the same id


@dataclass
class TextChange:
    """A record already in the store whose question or answer this file gives differently, under the same id."""

    record: str
    what: str
    fields: dict[str, list[Any]]
    item_id: int | None = None
    status: str | None = None

    def describe(self) -> str:
        said = "; ".join(f"{name} {old!r} -> {new!r}" for name, (old, new) in self.fields.items())
        return f"{self.what} is in the store with another text ({said})"


def text_changes(session, dataset: str, sources: list[dict], items: list[dict]) -> list[TextChange]:  # noqa: ANN001
    """The records of this file already stored (same dataset and id, or same item key) whose text differs."""
    table = SourceQuestion.__table__
    changes = []
    given = {s["external_id"]: s for s in sources}
    for part in in_chunks(list(given)):
        for row in session.execute(select(table.c.external_id, table.c.question, table.c.answer).where(
                table.c.dataset == dataset, table.c.external_id.in_(part))).all():
            source = given[row.external_id]
            fields = {f: [getattr(row, f), source.get(f)] for f in TEXT_FIELDS if getattr(row, f) != source.get(f)}
            if fields:
                changes.append(TextChange(record_of(source), f"id {row.external_id!r}", fields))
    by_key = {i["key"]: i for i in items}
    for part in in_chunks(list(by_key)):
        for row in session.execute(select(Item.id, Item.key, Item.question, Item.answer, Item.proposed_answer,
                                          Item.status).where(Item.key.in_(part))).all():
            item = by_key[row.key]
            # the answer the item came in with: a person's correction (pull) keeps it as proposed_answer
            stored = {"question": row.question,
                      "answer": row.proposed_answer if row.proposed_answer is not None else row.answer}
            fields = {f: [stored[f], item.get(f)] for f in TEXT_FIELDS if stored[f] != item.get(f)}
            if fields:
                line = (item.get("data") or {}).get("line")
                changes.append(TextChange(str(line or f"item {row.key}"), f"item {row.key}", fields, row.id,
                                          row.status))
    return changes


def apply_text_changes(session, path: Path, dataset: str,  # noqa: ANN001
                       changes: list[TextChange], sources: list[dict], update: bool) -> int:
    """Refuse the changes (none is written) unless UPDATE; then replace the stored text of each source and each
    draft item (an event records what it was). An item past draft is refused even so: its checks and reviews were
    of the stored text."""
    if not changes:
        return 0
    first = changes[0]
    if not update:
        raise InputError(path, f"{first.describe()}; {len(changes)} records of this file change the stored text "
                               "under the same id: nothing was written", first.record,
                         hint=Hint("{message}; pass {update} to replace it", update="--update"))
    settled = next((c for c in changes if c.item_id is not None and c.status != DRAFT), None)
    if settled is not None:
        raise InputError(path, f"{settled.describe()}, and it is {settled.status}, not draft: its checks and reviews "
                               "were of the stored text", settled.record,
                         hint=Hint("{message}, so {update} does not replace it; nothing was written",
                                   update="--update"))
    table = SourceQuestion.__table__
    by_record = {record_of(s): s for s in sources}
    now = utcnow()
    for change in changes:
        if change.item_id is None:
            source = by_record[change.record]
            session.execute(table.update().where(table.c.dataset == dataset,
                                                 table.c.external_id == source["external_id"]).values(
                question=source["question"], answer=source["answer"], answer_type=source.get("answer_type"),
                answers=source.get("answers")))
        else:
            session.execute(Item.__table__.update().where(Item.id == change.item_id).values(
                **{f: new for f, (_, new) in change.fields.items()}, updated_at=now))
            session.execute(ItemEvent.__table__.insert(), [{
                "item_id": change.item_id, "stage": "ingest", "from_status": DRAFT, "to_status": DRAFT,
                "detail": {"file": str(path), "updated": change.fields}, "created_at": now}])
    return len(changes)


@dataclass(frozen=True)
class ReadInput:
    """What a reader made of one input: its rows to store, from which file, in which format and dataset."""

    fmt: str
    path: Path
    dataset: str
    sources: list[dict]
    items: list[dict]
    n_records: int
    bad: BadRecords
    candidates: dict[str, list[str]] | None = None  # the file names an image_ref may have under the images folder


def write_records(store: Store, read: ReadInput, images: dict[str, ImageFile], report: IngestReport,
                  licence: str | None = None, update: bool = False) -> None:
    """Write sources, items, images and the dataset's licence in one transaction; existing keys are left as
    they are, unless the file changes their text: then nothing is written, or with UPDATE the text is replaced
    (`apply_text_changes`)."""
    fmt, path, dataset, sources, items = read.fmt, read.path, read.dataset, read.sources, read.items
    source_table = SourceQuestion.__table__
    with store.write() as session:
        report.updated = apply_text_changes(session, path, dataset, text_changes(session, dataset, sources, items),
                                            sources, update)
        count_sources = select(func.count()).select_from(source_table).where(source_table.c.dataset == dataset)
        before = session.execute(count_sources).scalar_one()
        for start in range(0, len(sources), BATCH):
            store.insert_ignore(session, source_table, sources[start:start + BATCH])
        report.sources_added = session.execute(count_sources).scalar_one() - before

        if items:
            ids = dict(session.execute(select(source_table.c.external_id, source_table.c.id)
                                       .where(source_table.c.dataset == dataset)).all())
            existing = existing_item_keys(session, [i["key"] for i in items])
            new_items = [{**{k: v for k, v in i.items() if k != "source_external_id"}, "dataset": dataset,
                          "source_id": ids[i["source_external_id"]] if i.get("source_external_id") else None} for i in items if i["key"] not in existing]
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
        report.licence = record_licence(session, dataset, licence)
        # a Hub id or a folder (ingest hf) has no one file to hash
        file_sha256 = sha256_file(path) if path.is_file() else None
        session.add(IngestRun(format=fmt, path=str(path), file_sha256=file_sha256, n_records=report.n_records,
                              n_sources_added=report.sources_added, n_items_added=report.items_added,
                              n_images_added=report.images_added, n_skipped=len(report.bad), dataset=dataset,
                              licence=report.licence))


def write_bad_report(report: IngestReport, report_path: Path) -> None:
    report_path.parent.mkdir(parents=True, exist_ok=True)
    with naming_the_file(report_path), open(report_path, "w", encoding="utf-8") as fh:
        for bad in report.bad:
            fh.write(json.dumps(bad.__dict__, ensure_ascii=False) + "\n")
    report.report_path = str(report_path)


def finish(store: Store, read: ReadInput, *, images_dir: Path | None = None, report_path: Path | None = None,
           licence: LicenceChoice = None, update: bool = False) -> IngestReport:
    """Store what READ holds (all or nothing), its images found under IMAGES_DIR; the bad records go to
    REPORT_PATH first."""
    if read.n_records == 0 and not read.bad.items:
        raise NoRecordsError(read.path)
    report = IngestReport(format=read.fmt, path=str(read.path), dataset=read.dataset, n_records=read.n_records)
    images, broken = resolve_images(store, read.dataset, read.sources, images_dir, read.bad, read.candidates,
                                    read.path)
    if broken:  # only when skipping bad records: otherwise the first broken image stopped the ingest
        read = without_broken_images(read, broken)
    report.bad = read.bad.items
    if report.bad and report_path is not None:
        # before the store write: a report that cannot be written stops the ingest with the store unchanged
        write_bad_report(report, report_path)
    progress = ingest_progress.get()
    progress("store", 0, 1)
    write_records(store, read, images, report, chosen_licence(licence, read.dataset), update)
    progress("store", 1, 1)
    return report


def ingest_vqav2(store: Store, questions: Path, annotations: Path | None, images_dir: Path | None = None,
                 skip_bad: bool = False, report_path: Path | None = None,
                 licence: LicenceChoice = None, update: bool = False) -> IngestReport:
    bad = BadRecords(skip_bad)
    dataset, sources = read_vqav2(Path(questions), Path(annotations) if annotations else None, bad)
    subtype = dataset.split(":", 1)[1]
    candidates = None
    if images_dir is not None:
        candidates = {s["image_ref"]: coco_file_names(s["meta"]["image_id"], subtype) for s in sources}
    read = ReadInput("vqav2", Path(questions), dataset, sources, [], len(sources), bad, candidates)
    return finish(store, read, images_dir=images_dir, report_path=report_path, licence=licence, update=update)


def ingest_table(store: Store, path: Path, images_dir: Path | None = None, skip_bad: bool = False,
                 report_path: Path | None = None, dataset: str | None = None,
                 licence: LicenceChoice = None, update: bool = False) -> IngestReport:
    bad = BadRecords(skip_bad)
    images_dir = Path(images_dir) if images_dir is not None else None
    dataset, sources = read_table(Path(path), bad, dataset, images_dir)
    read = ReadInput("table", Path(path), dataset, sources, [], len(sources), bad)
    return finish(store, read, images_dir=images_dir, report_path=report_path, licence=licence, update=update)
