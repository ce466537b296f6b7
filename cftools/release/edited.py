"""The edited image of an item in its release: `data.edited_image`, the edit that travels with the item.

`generate edits` keeps every candidate under `data.edit_candidates` (k -> {"image", "provenance"}) and their
ranking under `data.edit_checks` (best first). The released edit is the one the verifiers chose
(`data.edit_selected`, a candidate number), else the best-ranked candidate; its path (images/<sha256>.png, like
`image`) goes into `data.edited_image`, so croissant.json describes it as a field of the kind's record set, and
`data.edited_image_verified` says which of the two it is. An item whose edits people judged without accepting
one (`data.edit_verification`, see `cftools.annotate.edit_task`) releases no edited image: their word wins over
the automatic ranking.

`data.edited_answer` is the answer to the original question about the edited image: the answer the two verifiers
(or the adjudicator) gave for a verified edit (`data.edit_answer`), else the counterfactual answer. An item without
candidates gets none of these fields.
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
    if data.get("edit_verification"):  # people judged its edits and accepted none (yet): their word wins
        return None
    ranked = [str(c.get("k")) for c in data.get("edit_checks") or [] if str(c.get("k")) in candidates]
    return ranked[0] if ranked else (min(candidates, key=int) if candidates else None)


def with_edited_image(record: dict[str, Any]) -> dict[str, Any]:
    """RECORD with `data.edited_image` (and `data.edited_image_verified`) when its item has edits."""
    data = record.get("data") or {}
    chosen = chosen_candidate(data)
    if chosen is None:
        return record
    edit = data["edit_candidates"][chosen]
    verified = data.get("edit_selected") is not None and str(data.get("edit_selected")) == chosen
    answer = data.get("edit_answer") if verified and data.get("edit_answer") is not None else record.get("answer")
    provenance = edit.get("provenance") or {}
    record["data"] = {**data, EDITED_IMAGE: edit.get("image"), "edited_image_verified": verified,
                      "edited_answer": None if answer is None else str(answer),
                      "edited_image_model": model_name(provenance.get("model")),
                      "edited_image_licence": provenance.get("licence")}
    return record


def edited_answer_of(record: dict[str, Any]) -> Optional[str]:
    """The gold answer of the original question about the edited image (see the module docstring)."""
    data = record.get("data") or {}
    answer = data.get("edited_answer") if data.get("edited_answer") is not None else record.get("answer")
    return None if answer is None else str(answer)


def edited_image_of(record: dict[str, Any]) -> Optional[str]:
    """The release path of a record's edited image, or None."""
    value = (record.get("data") or {}).get(EDITED_IMAGE)
    return str(value) if value else None


def model_name(model: Optional[str]) -> Optional[str]:
    """How a release names an edit model: its hub id as given, a local folder by its name only (no paths of the
    machine that made the release: `cftools.boundary.public_name`)."""
    from cftools.boundary import public_name

    return public_name(model)


def edit_models(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The edit models of the released edited images: model, licence, items, verified items and whether the licence
    is not for commercial use (the data card and croissant.json show them; a non-commercial one prominently)."""
    from collections import defaultdict

    from cftools.ingest.licences import is_non_commercial  # not through cftools.imagegen: export needs no images extra

    found: dict[tuple, dict[str, Any]] = defaultdict(lambda: {"n_items": 0, "verified": 0})
    for record in records:
        data = record.get("data") or {}
        if not data.get(EDITED_IMAGE):
            continue
        key = (str(data.get("edited_image_model") or "unknown"), str(data.get("edited_image_licence") or "unknown"))
        found[key]["n_items"] += 1
        found[key]["verified"] += bool(data.get("edited_image_verified"))
    return [{"model": model, "licence": licence, **counts, "non_commercial": is_non_commercial(licence)}
            for (model, licence), counts in sorted(found.items())]
