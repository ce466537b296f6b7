"""`--format cvqa`: the C-VQA CSV as the peer publishes it."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Optional

from cftools.kinds.cvqa.model import CSV_COLUMNS, GROUP_TO_TYPE

def csv_type(record: dict[str, Any]) -> str:
    return GROUP_TO_TYPE.get(record["group"]) or str((record.get("data") or {}).get("cvqa_type") or record["group"])


def csv_img_path(entry: Any) -> str:
    """The image's content-addressed name in images/ when there is one; else the name the input used."""
    if entry.record["image"]:
        return entry.record["image"].split("/", 1)[1]
    source = entry.provenance.get("source") or {}
    return str(source.get("image_ref") or "")


def csv_name(name: str, split: Optional[str] = None) -> str:
    """The CSV of a `--format cvqa` release, named like the peer's `C-VQA-Real_questions.csv`."""
    return f"{name}_questions.csv" if split is None else f"{name}_{split}_questions.csv"


def write_csv(items: list, folder: Path, name: str, splits: dict[str, float]) -> None:
    """The C-VQA CSV as the peer publishes it: its header, minimal quoting, LF line ends."""
    names = list(splits) if len(splits) > 1 else [None]
    for split in names:
        rows = [e for e in items if split is None or e.record["split"] == split]
        with open(folder / csv_name(name, split), "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
            writer.writerow(CSV_COLUMNS)
            for entry in rows:
                r = entry.record
                writer.writerow([csv_img_path(entry), r["original_question"], r["original_answer"] or "",
                                 r["question"], r["answer"] or "", csv_type(r)])


