"""Ingest of the C-VQA CSV as published (img_path, query, answer, new query, new answer, type): the original
question becomes a source question, the counterfactual an item of its group."""

from __future__ import annotations

import re
from pathlib import Path

from cftools.errors import InputError
from cftools.images import image_ref_path
from cftools.ingest.licences import LicenceChoice
from cftools.ingest.readers import BadRecords, IngestReport, finish, image_path_problem, records, stable_key
from cftools.kinds.cvqa.model import COUNT_GROUPS, CSV_COLUMNS, GROUP_ANSWER_TYPE, TYPE_TO_GROUP
from cftools.models import DRAFT, utcnow
from cftools.store import Store

# C-VQA-Synthetic's `type` column: six counting types, each its own group (answers are a letter of the choices).
SYNTHETIC_TYPES = tuple(f"abs_counting_{n}" for n in range(1, 7))
KNOWN_TYPES = (*TYPE_TO_GROUP, *SYNTHETIC_TYPES)
NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


def record_problem(row: dict, group: str, images_dir: Path | None) -> str | None:
    """Why a C-VQA row cannot be ingested: an image path that leaves --images, an unknown type, or an answer that
    is not a number in a counting group (checked as `ingest table` checks its rows)."""
    problem = image_path_problem(str(row["img_path"]).strip(), images_dir)
    if problem:
        return problem
    if row["type"].strip() not in KNOWN_TYPES:
        return f"unknown type {row['type'].strip()!r}; use one of {', '.join(KNOWN_TYPES)}"
    if group in COUNT_GROUPS:  # C-VQA-Synthetic answers a letter of its choices
        for column in ("answer", "new answer"):
            if not NUMBER.match(str(row[column]).strip()):
                return f"{column} {row[column]!r} is not a number, as a {group} answer must be"
    return None


def read_cvqa(path: Path, bad: BadRecords, dataset: str | None = None,
              images_dir: Path | None = None) -> tuple[str, list[dict], list[dict]]:
    """Parse the C-VQA CSV: the original question is a source, the counterfactual an item of its group."""
    dataset = dataset or f"cvqa:{path.stem}"
    now = utcnow()
    sources: dict[str, dict] = {}
    items: dict[str, dict] = {}
    repeats: dict[str, int] = {}
    for line, row in records(path, CSV_COLUMNS, bad):
        group = TYPE_TO_GROUP.get(row["type"].strip(), row["type"].strip())
        problem = record_problem(row, group, images_dir)
        if problem:
            bad.add(InputError(path, problem, line))
            continue
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
            "data": {"cvqa_type": row["type"], "line": line}, "created_at": now, "updated_at": now,
        })
    return dataset, list(sources.values()), list(items.values())


def ingest_cvqa(store: Store, path: Path, images_dir: Path | None = None, skip_bad: bool = False,
                report_path: Path | None = None, dataset: str | None = None,
                licence: LicenceChoice = None) -> IngestReport:
    bad = BadRecords(skip_bad)
    dataset, sources, items = read_cvqa(Path(path), bad, dataset, images_dir)
    return finish(store, "cvqa", Path(path), dataset, sources, items, images_dir, bad, report_path, len(items),
                  licence=licence)
