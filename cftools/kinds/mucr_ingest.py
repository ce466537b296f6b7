"""Caption pairs, the core of a MuCR item: a cause caption and an effect caption written concretely enough to be
drawn, in groups of pairs that share a causality with different subjects (four per group in MuCR).

A CSV or JSONL record has `cause`, `effect`, `category` (human, animal, plant, character, mixture) and `group`;
optional `style` and `id`. Each becomes a draft item of the mucr kind, keyed on the file's dataset and the id
(or the captions), so ingesting a file twice adds nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from cftools.errors import InputError
from cftools.ingest.licences import LicenceChoice
from cftools.ingest.readers import BadRecords, IngestReport, finish, records, repeated_id, stable_key
from cftools.kinds.mucr import CATEGORIES
from cftools.models import DRAFT, utcnow
from cftools.store import Store

REQUIRED = ("cause", "effect", "category", "group")
STYLES = ("photograph", "comic")


def pair_item(dataset: str, line: str, row: dict[str, Any], origin: str = "ingested",
              generation_id: Optional[int] = None) -> dict[str, Any]:
    """The draft item of one caption pair."""
    cause, effect = str(row["cause"]).strip(), str(row["effect"]).strip()
    external = str(row.get("id") or stable_key(cause, effect))
    now = utcnow()
    data = {"cause_caption": cause, "effect_caption": effect, "category": str(row["category"]).strip().lower(),
            "link_id": str(row["group"]).strip(), "line": line}
    if row.get("style"):
        data["style"] = str(row["style"]).strip().lower()
    return {"key": f"{dataset}:{external}", "kind": "mucr", "group": str(row["group"]).strip(),
            "question": f"{cause} -> {effect}", "answer": None, "status": DRAFT, "origin": origin,
            "generation_id": generation_id, "data": data, "created_at": now, "updated_at": now}


def record_problem(row: dict[str, Any]) -> Optional[str]:
    category = str(row["category"]).strip().lower()
    if category not in CATEGORIES:
        return f"category {row['category']!r} is not one of {', '.join(CATEGORIES)}"
    style = str(row.get("style") or "").strip().lower()
    if style and style not in STYLES:
        return f"style {row['style']!r} is not one of {', '.join(STYLES)}"
    if str(row["cause"]).strip().lower() == str(row["effect"]).strip().lower():
        return "the cause and the effect caption are the same"
    return None


def read_captions(path: Path, bad: BadRecords, dataset: Optional[str] = None) -> tuple[str, list[dict]]:
    dataset = dataset or f"captions:{path.stem}"
    items: dict[str, dict] = {}
    ids: dict[str, str] = {}
    for line, row in records(path, REQUIRED, bad):
        problem = record_problem(row) or repeated_id(ids, row, line)
        if problem:
            bad.add(InputError(path, problem, line))
            continue
        item = pair_item(dataset, line, row)
        items.setdefault(item["key"], item)
    return dataset, list(items.values())


def ingest_captions(store: Store, path: Path, skip_bad: bool = False, report_path: Optional[Path] = None,
                    dataset: Optional[str] = None, licence: LicenceChoice = None) -> IngestReport:
    bad = BadRecords(skip_bad)
    dataset, items = read_captions(Path(path), bad, dataset)
    return finish(store, "captions", Path(path), dataset, [], items, None, bad, report_path, len(items),
                  licence=licence)
