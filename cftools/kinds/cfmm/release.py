"""`--format cfmm`: the pairs as CFMM publishes them, one JSON object per pair."""

from __future__ import annotations

import json
from typing import Any, Optional

# -- the `--format cfmm` release -----------------------------------------------------------------------------

def export_row(record: dict[str, Any]) -> dict[str, Any]:
    options = record.get("options") or {}
    data = record.get("data") or {}
    # An ingested pair keeps the id it came with (`release_id`), so ids survive any number of round trips.
    return {"id": data.get("release_id") or record["id"], "image": record.get("image"), "type": data.get("type") or record["group"],
            "basic_question": record.get("original_question"), "basic_options": options.get("original"),
            "basic_answer": record.get("original_answer"), "cf_question": record.get("question"),
            "cf_options": options.get("counterfactual"), "cf_answer": record.get("answer")}


def jsonl_name(name: str, split: Optional[str] = None) -> str:
    return f"{name}.jsonl" if split is None else f"{name}_{split}.jsonl"


def write_jsonl(release: Any) -> None:
    """One JSON object per pair with exactly EXPORT_FIELDS; one file per split when there are several."""
    folder, name = release.folder, release.name
    names = list(release.splits) if len(release.splits) > 1 else [None]
    for split in names:
        with open(folder / jsonl_name(name, split), "w", encoding="utf-8") as fh:
            for entry in release.items:
                if split is None or entry.record["split"] == split:
                    fh.write(json.dumps(export_row(entry.record), ensure_ascii=False) + "\n")


def has_pair(record: dict[str, Any]) -> bool:
    options = record.get("options") or {}
    return bool(record.get("original_question") and options.get("original") and options.get("counterfactual"))


