"""`--format cvqa`: the C-VQA CSV as the peer publishes it.

A C-VQA CSV ingested and exported unchanged comes back byte-identical: the rows in the file's order (ingested
items by their file and line, items made here after them in id order), a row repeated in the file repeated
again, and `img_path` the name the input gave, with the image under that name in `images/` (an item made here
without an input name gets its content-addressed name).
"""

from __future__ import annotations

import csv
import os
import shutil
from pathlib import Path
from typing import Any, Optional

from cftools.kinds.cvqa.model import CSV_COLUMNS, GROUP_TO_TYPE


def csv_type(record: dict[str, Any]) -> str:
    return GROUP_TO_TYPE.get(record["group"]) or str((record.get("data") or {}).get("cvqa_type") or record["group"])


def given_name(entry: Any) -> Optional[str]:
    """The image name the input used, when it is a plain relative path (else None)."""
    source = entry.provenance.get("source") or {}
    name = str(source.get("image_ref") or "")
    if not name or os.path.isabs(name) or os.path.normpath(name).split(os.sep)[0] == os.pardir:
        return None
    return name


def csv_img_path(entry: Any) -> str:
    """The name the input used; else the image's content-addressed name in images/."""
    name = given_name(entry)
    if name:
        return name
    return entry.record["image"].split("/", 1)[1] if entry.record["image"] else ""


def file_order(entry: Any) -> tuple:
    """Ingested items by their file (dataset) and line, then the others in id order."""
    from cftools.release.selection import source_order

    return source_order(entry)


def name_images(rows: list, folder: Path) -> None:
    """Each row's image also under the name its CSV line gives (a hard link where the file system allows);
    content-addressed copies no line names are removed."""
    kept: set[Path] = set()
    for entry in rows:
        if not entry.record["image"]:
            continue
        stored = folder / entry.record["image"]
        target = folder / "images" / csv_img_path(entry)
        kept.add(target)
        if target == stored or target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(stored, target)
        except OSError:
            shutil.copyfile(stored, target)
    for entry in rows:
        stored = folder / entry.record["image"] if entry.record["image"] else None
        if stored is not None and stored not in kept and stored.exists():
            stored.unlink()


def csv_name(name: str, split: Optional[str] = None) -> str:
    """The CSV of a `--format cvqa` release, named like the peer's `C-VQA-Real_questions.csv`."""
    return f"{name}_questions.csv" if split is None else f"{name}_{split}_questions.csv"


def write_csv(release: Any) -> None:
    """The C-VQA CSV as the peer publishes it: its header, minimal quoting, LF line ends, its row order."""
    items, folder, name = release.items, release.folder, release.name
    names = list(release.splits) if len(release.splits) > 1 else [None]
    for split in names:
        rows = sorted((e for e in items if split is None or e.record["split"] == split), key=file_order)
        with open(folder / csv_name(name, split), "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
            writer.writerow(CSV_COLUMNS)
            for entry in rows:
                r = entry.record
                writer.writerow([csv_img_path(entry), r["original_question"], r["original_answer"] or "",
                                 r["question"], r["answer"] or "", csv_type(r)])
    name_images(items, folder)
