"""The edited image of an item in its release: `data.edited_image`, the edit that travels with the item.

`generate edits` keeps every candidate under `data.edit_candidates` (k -> {"image", "provenance"}) and their
ranking under `data.edit_checks` (best first). The released edit is the one the verifiers chose
(`data.edit_selected`, a candidate number), else the best-ranked candidate; its path (images/<sha256>.png, like
`image`) goes into `data.edited_image`, so croissant.json describes it as a field of the kind's record set, and
`data.edited_image_verified` says which of the two it is. An item without candidates gets neither field.
"""

from __future__ import annotations

from typing import Any, Optional

EDITED_IMAGE = "edited_image"


def chosen_candidate(data: dict[str, Any]) -> Optional[str]:
    """The number (as a string) of the edit that is released, or None."""
    candidates = data.get("edit_candidates") or {}
    selected = data.get("edit_selected")
    if selected is not None and str(selected) in candidates:
        return str(selected)
    ranked = [str(c.get("k")) for c in data.get("edit_checks") or [] if str(c.get("k")) in candidates]
    return ranked[0] if ranked else (min(candidates, key=int) if candidates else None)


def with_edited_image(record: dict[str, Any]) -> dict[str, Any]:
    """RECORD with `data.edited_image` (and `data.edited_image_verified`) when its item has edits."""
    data = record.get("data") or {}
    chosen = chosen_candidate(data)
    if chosen is None:
        return record
    edit = data["edit_candidates"][chosen]
    record["data"] = {**data, EDITED_IMAGE: edit.get("image"), "edited_image_verified":
                      data.get("edit_selected") is not None and str(data.get("edit_selected")) == chosen,
                      "edited_image_licence": (edit.get("provenance") or {}).get("licence")}
    return record


def edited_image_of(record: dict[str, Any]) -> Optional[str]:
    """The release path of a record's edited image, or None."""
    value = (record.get("data") or {}).get(EDITED_IMAGE)
    return str(value) if value else None
