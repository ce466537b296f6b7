"""`ingest cfmm FILE.jsonl`: pairs written elsewhere, in the fields of `export --format cfmm`, as draft items.

Each record's basic question becomes a source question of the image (dataset `cfmm:FILE-STEM`), so the image is
found and attached like any other ingest's; the pair becomes a draft item of its type that then goes through
check and verification here. Bad records stop the ingest naming file and line (or, with --skip-bad, are listed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from cftools.answer_rules import read_count
from cftools.errors import InputError
from cftools.ingest.licences import LicenceChoice
from cftools.ingest.readers import BadRecords, IngestReport, ReadInput, checked_records, finish, stable_key
from cftools.kinds.cfmm.model import TYPES
from cftools.models import DRAFT, utcnow
from cftools.store import Store

REQUIRED = ("image", "type", "basic_question", "basic_options", "basic_answer", "cf_question", "cf_options",
            "cf_answer")


def two_options(row: dict[str, Any], field: str) -> Optional[str]:
    """Why ROW's FIELD is not a list of two texts (None when it is)."""
    value = row.get(field)
    if not isinstance(value, list) or len(value) != 2 or not all(isinstance(o, (str, int, float)) for o in value):
        return f"field '{field}' must be a list of two options"
    return None


def record_problem(row: dict[str, Any]) -> Optional[str]:
    if str(row["type"]).strip() not in TYPES:
        return f"unknown type {row['type']!r}; use one of {', '.join(TYPES)}"
    for field in ("basic_options", "cf_options"):
        problem = two_options(row, field)
        if problem:
            return problem
    if str(row["type"]).strip() == "count":
        return counts_problem(row)
    return None


COUNT_FIELDS = ("basic_options", "basic_answer", "cf_options", "cf_answer")


def counts_problem(row: dict[str, Any]) -> Optional[str]:
    """Why a count pair's options or answers are not counts (`cftools.answer_rules`: digits, or number words), or
    None; number words are converted in place, each recorded in ROW["converted_answers"] as [as given, as stored]."""
    converted: dict[str, list[Any]] = {}
    for field in COUNT_FIELDS:
        given = row[field]
        values = [str(v).strip() for v in (given if isinstance(given, list) else [given])]
        stored = []
        for value in values:
            count, problem = read_count(value)
            if problem:
                return f"field '{field}': {problem}, as a count pair's options and answers must be counts"
            stored.append(count)
        if stored != values:
            converted[field] = [given, stored if isinstance(given, list) else stored[0]]
            row[field] = stored if isinstance(given, list) else stored[0]
    if converted:
        row["converted_answers"] = converted
    return None


def read_cfmm(path: Path, bad: BadRecords, dataset: Optional[str] = None,
              images_dir: Optional[Path] = None) -> tuple[str, list[dict], list[dict]]:
    dataset = dataset or f"cfmm:{path.stem}"
    now = utcnow()
    sources: dict[str, dict] = {}
    items: dict[str, dict] = {}
    for line, row in checked_records(path, REQUIRED, bad, images_dir, ("image",)):
        problem = record_problem(row)
        if problem:
            bad.add(InputError(path, problem, line))
            continue
        image = str(row["image"]).strip()
        basic_question, basic_answer = str(row["basic_question"]).strip(), str(row["basic_answer"]).strip()
        source_key = str(row.get("id") or stable_key(image, basic_question, basic_answer))
        sources.setdefault(source_key, {
            "dataset": dataset, "external_id": source_key, "image_ref": Path(image).name, "question": basic_question,
            "answer": basic_answer, "answer_type": "other", "answers": None,
            "meta": {"line": line, "image": image}, "created_at": now,
        })
        pair_type = str(row["type"]).strip()
        key = f"{dataset}:{source_key}"
        items.setdefault(key, {
            "key": key, "kind": "cfmm", "group": pair_type, "source_external_id": source_key,
            "question": str(row["cf_question"]).strip(), "answer": str(row["cf_answer"]).strip(), "status": DRAFT,
            "origin": "ingested", "created_at": now, "updated_at": now,
            "data": {"type": pair_type, "basic_question": basic_question, "basic_answer": basic_answer,
                     "options": {"original": [str(o) for o in row["basic_options"]],
                                 "counterfactual": [str(o) for o in row["cf_options"]]},
                     "line": line, **({"release_id": str(row["id"])} if row.get("id") else {}),
                     **({"converted_answers": row["converted_answers"]} if row.get("converted_answers") else {})},
        })
    return dataset, list(sources.values()), list(items.values())


def ingest_cfmm(store: Store, path: Path, images_dir: Optional[Path] = None, skip_bad: bool = False,
                report_path: Optional[Path] = None, dataset: Optional[str] = None,
                licence: LicenceChoice = None, update: bool = False) -> IngestReport:
    bad = BadRecords(skip_bad)
    dataset, sources, items = read_cfmm(Path(path), bad, dataset, images_dir)
    read = ReadInput("cfmm", Path(path), dataset, sources, items, len(items), bad)
    return finish(store, read, images_dir=images_dir, report_path=report_path, licence=licence, update=update)
