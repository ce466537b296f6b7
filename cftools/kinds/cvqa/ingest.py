"""Ingest of the C-VQA CSV as published (img_path, query, answer, new query, new answer, type): the original
question becomes a source question, the counterfactual an item of its group."""

from __future__ import annotations

from pathlib import Path

from cftools.answer_rules import read_count
from cftools.errors import InputError
from cftools.images import image_ref_path
from cftools.ingest.licences import LicenceChoice
from cftools.ingest.readers import BadRecords, IngestReport, ReadInput, checked_records, finish, stable_key
from cftools.kinds.cvqa.model import COUNT_GROUPS, CSV_COLUMNS, GROUP_ANSWER_TYPE, TYPE_TO_GROUP
from cftools.models import DRAFT, utcnow
from cftools.store import Store

# C-VQA-Synthetic's `type` column: six counting types, each its own group (answers are a letter of the choices).
SYNTHETIC_TYPES = tuple(f"abs_counting_{n}" for n in range(1, 7))
KNOWN_TYPES = (*TYPE_TO_GROUP, *SYNTHETIC_TYPES)
# The question each answer column answers (a multiple-choice answer is a letter of that question's options).
ANSWERED = {"answer": "query", "new answer": "new query"}


def counting_group(group: str) -> bool:
    """A group whose answers are counts: the numerical C-VQA groups and C-VQA-Synthetic's abs_counting_* types."""
    return group in COUNT_GROUPS or group in SYNTHETIC_TYPES


def count_answer(row: dict, column: str, group: str) -> tuple[str | None, str | None]:
    """(the answer to store, why it cannot be) for a counting group's COLUMN: digits as given, a letter of the
    question's offered options as given, or number words converted to digits."""
    from cftools.item_view import options

    given = str(row[column]).strip()
    offered = options(str(row[ANSWERED[column]]))
    if offered:
        if given.upper() in offered:
            return given, None
        return None, (f"{column} {row[column]!r} is not one of the options {', '.join(sorted(offered))} "
                      f"its question offers, as a {group} answer must be")
    stored, problem = read_count(str(row[column]))
    return stored, None if problem is None else f"{column} {problem}, as a {group} answer must be a count"


def converted_answers(row: dict, group: str) -> dict[str, list[str]]:
    """Counting answers written in number words, converted to digits in place: column -> [as given, as stored]
    (recorded with the item, so the conversion is never silent)."""
    converted = {}
    if counting_group(group):
        for column in ANSWERED:
            stored, _ = count_answer(row, column, group)
            if stored is not None and stored != str(row[column]).strip():
                converted[column] = [str(row[column]), stored]
                row[column] = stored
    return converted


def record_problem(row: dict, group: str) -> str | None:
    """Why a C-VQA row cannot be ingested: an unknown type, or an answer that is not a count in a counting group
    (digits, number words, or a letter of the options its question offers). The image path is checked by
    `checked_records`."""
    if row["type"].strip() not in KNOWN_TYPES:
        return f"unknown type {row['type'].strip()!r}; use one of {', '.join(KNOWN_TYPES)}"
    if counting_group(group):
        for column in ANSWERED:
            _, problem = count_answer(row, column, group)
            if problem:
                return problem
    return None


def read_cvqa(path: Path, bad: BadRecords, dataset: str | None = None,
              images_dir: Path | None = None) -> tuple[str, list[dict], list[dict]]:
    """Parse the C-VQA CSV: the original question is a source, the counterfactual an item of its group."""
    dataset = dataset or f"cvqa:{path.stem}"
    now = utcnow()
    sources: dict[str, dict] = {}
    items: dict[str, dict] = {}
    repeats: dict[str, int] = {}
    # no id column; a row repeated exactly is kept (below)
    for line, row in checked_records(path, CSV_COLUMNS, bad, images_dir, ("img_path",), id_field=None):
        group = TYPE_TO_GROUP.get(row["type"].strip(), row["type"].strip())
        problem = record_problem(row, group)
        if problem:
            bad.add(InputError(path, problem, line))
            continue
        converted = converted_answers(row, group)
        source_key = stable_key(row["img_path"], row["query"], row["answer"])
        image_ref = image_ref_path(row["img_path"])  # relative path: same-named files in two folders differ
        sources.setdefault(source_key, {
            "dataset": dataset, "external_id": source_key, "image_ref": image_ref, "question": row["query"],
            "answer": row["answer"], "answer_type": GROUP_ANSWER_TYPE.get(group, "other"),
            "answers": None, "meta": {"img_path": row["img_path"], "line": line}, "created_at": now,
        })
        # A row repeated exactly is kept as often as the file has it (the published Real file has one such pair),
        # so that an export gives the file back; its n-th repeat gets ":n" (stable on re-ingest).
        key = f"{dataset}:{stable_key(*(row[c] for c in CSV_COLUMNS))}"
        repeat = repeats[key] = repeats.get(key, -1) + 1
        if repeat:
            key = f"{key}:{repeat}"
        items.setdefault(key, {
            "key": key, "kind": "cvqa", "group": group, "source_external_id": source_key,
            "question": row["new query"], "answer": row["new answer"], "status": DRAFT, "origin": "ingested",
            "data": {"cvqa_type": row["type"], "line": line,
                     **({"converted_answers": converted} if converted else {})},
            "created_at": now, "updated_at": now,
        })
    return dataset, list(sources.values()), list(items.values())


def ingest_cvqa(store: Store, path: Path, images_dir: Path | None = None, skip_bad: bool = False,
                report_path: Path | None = None, dataset: str | None = None,
                licence: LicenceChoice = None, update: bool = False) -> IngestReport:
    bad = BadRecords(skip_bad)
    dataset, sources, items = read_cvqa(Path(path), bad, dataset, images_dir)
    read = ReadInput("cvqa", Path(path), dataset, sources, items, len(items), bad)
    return finish(store, read, images_dir=images_dir, report_path=report_path, licence=licence, update=update)
