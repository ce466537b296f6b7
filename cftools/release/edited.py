"""The edits of an item in its release: the relevant edit (`data.edited_image`: the counterfactual condition made
visible, the answer changes) and the irrelevant edit (`data.irrelevant_edited_image`: something the question does
not depend on changed, the answer stays).

`generate edits` keeps every candidate under `data.<prefix>_candidates` (k -> {"image", "provenance"}) and their
ranking under `data.<prefix>_checks` (best first), with prefix `edit` or `irrelevant_edit`. Nothing unverified is
released as an edit: a release carries a candidate only when two people accepted it (`data.<prefix>_selected`).
With `include_unverified` (`cftools export --include-unverified-edits`) an item that people have not judged also
releases its best-ranked candidate without an unwaived flag, marked `<field>_image_verified: false`; a flagged
candidate is never released, nor one of an item whose edits people judged without accepting one (their word wins).
The candidates themselves stay in the store: the released data holds only the released edit (no candidate images).

The released fields (field `edited` or `irrelevant_edited`): `<field>_image` (images/<sha256>.png, like `image`),
`<field>_image_verified`, `<field>_answer` (the gold answer of the original question about that image: the people's
answer for a verified edit, else the counterfactual answer for the relevant edit and the original answer for the
irrelevant one), `<field>_image_model`, `<field>_image_licence`, `<field>_image_source` (generated, or imported
with `cftools ingest edits`); the irrelevant edit adds `irrelevant_change` (the
irrelevant condition's text). An item whose edit is not released gets none of these and keeps its own answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

EDITED_IMAGE = "edited_image"


@dataclass(frozen=True)
class EditKind:
    """One kind of edit: where the store keeps it (PREFIX) and how the release names it (FIELD)."""

    prefix: str  # data.<prefix>_candidates, _checks, _selected, _answer, _verification
    field: str  # data.<field>_image, _image_verified, _answer, _image_model, _image_licence
    gold: str  # the record's field whose answer is the edited image's gold without the people's answer
    change: Optional[tuple[str, str]] = None  # (released field, key in data.edit) naming the change

    @property
    def image(self) -> str:
        return f"{self.field}_image"


RELEVANT = EditKind("edit", "edited", "answer")
IRRELEVANT = EditKind("irrelevant_edit", "irrelevant_edited", "original_answer",
                      ("irrelevant_change", "irrelevant_condition"))
EDIT_KINDS = (RELEVANT, IRRELEVANT)


def chosen_candidate(data: dict[str, Any], edit: EditKind = RELEVANT,
                     include_unverified: bool = False) -> Optional[str]:
    """The number (as a string) of the candidate of EDIT that is released, or None."""
    candidates = data.get(f"{edit.prefix}_candidates") or {}
    selected = data.get(f"{edit.prefix}_selected")
    if selected is not None and str(selected) in candidates:
        return str(selected)
    if not include_unverified or data.get(f"{edit.prefix}_verification"):  # people judged and accepted none
        return None
    return best_unflagged(data, edit)


def best_unflagged(data: dict[str, Any], edit: EditKind) -> Optional[str]:
    """The best-ranked candidate of EDIT without an unwaived flag, or None (an unchecked one is not ranked)."""
    candidates = data.get(f"{edit.prefix}_candidates") or {}
    waived = set(data.get("waived_flags") or {})
    for check in data.get(f"{edit.prefix}_checks") or []:
        k = str(check.get("k"))
        if k in candidates and all(flag.get("code") in waived for flag in check.get("flags") or []):
            return k
    return None


def with_released_edits(record: dict[str, Any], include_unverified: bool = False) -> dict[str, Any]:
    """RECORD with the released fields of each edit of its item (see the module docstring), and without the
    candidates that are not released."""
    data = dict(record.get("data") or {})
    for edit in EDIT_KINDS:
        chosen = chosen_candidate(data, edit, include_unverified)
        candidates = data.pop(f"{edit.prefix}_candidates", None) or {}
        if chosen is not None:
            verified = is_selected(data, edit, chosen)
            data.update(released_fields(record, data, edit, candidates[chosen], verified))
    record["data"] = data
    return record


def is_selected(data: dict[str, Any], edit: EditKind, k: str) -> bool:
    selected = data.get(f"{edit.prefix}_selected")
    return selected is not None and str(selected) == k


def released_fields(record: dict[str, Any], data: dict[str, Any], edit: EditKind, candidate: dict[str, Any],
                    verified: bool) -> dict[str, Any]:
    """The released fields of EDIT's chosen CANDIDATE."""
    people = data.get(f"{edit.prefix}_answer")
    answer = people if verified and people is not None else record.get(edit.gold)
    provenance = candidate.get("provenance") or {}
    fields = {edit.image: candidate.get("image"), f"{edit.image}_verified": verified,
              f"{edit.field}_answer": None if answer is None else str(answer),
              f"{edit.image}_model": model_name(provenance.get("model")),
              f"{edit.image}_licence": provenance.get("licence"),
              # made elsewhere and brought in with `cftools ingest edits`, or made by `generate edits`
              f"{edit.image}_source": "imported" if provenance.get("source") == "imported" else "generated"}
    if edit.change is not None:
        field, key = edit.change
        fields[field] = (data.get("edit") or {}).get(key)
    return fields


def edited_answer_of(record: dict[str, Any], edit: EditKind = RELEVANT) -> Optional[str]:
    """The gold answer of the original question about EDIT's released image (see the module docstring)."""
    data = record.get("data") or {}
    answer = data.get(f"{edit.field}_answer")
    answer = answer if answer is not None else record.get(edit.gold)
    return None if answer is None else str(answer)


def edited_image_of(record: dict[str, Any], edit: EditKind = RELEVANT) -> Optional[str]:
    """The release path of a record's released image of EDIT, or None."""
    value = (record.get("data") or {}).get(edit.image)
    return str(value) if value else None


def model_name(model: Optional[str]) -> Optional[str]:
    """How a release names an edit model: its hub id as given, a local folder by its name only (no paths of the
    machine that made the release: `cftools.boundary.public_name`)."""
    from cftools.boundary import public_name

    return public_name(model)


def unverified_edits(records: list[dict[str, Any]]) -> int:
    """How many released edits (relevant and irrelevant) people did not verify."""
    return sum(1 for record in records for edit in EDIT_KINDS
               if (record.get("data") or {}).get(edit.image)
               and not (record.get("data") or {}).get(f"{edit.image}_verified"))


def edit_models(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The edit models of the released edited images: edit (relevant, irrelevant), model, licence, items, verified
    items and whether the licence is not for commercial use (the data card and croissant.json show them; a
    non-commercial one prominently)."""
    from collections import defaultdict

    from cftools.ingest.licences import is_non_commercial  # not through cftools.imagegen: export needs no images extra

    found: dict[tuple, dict[str, Any]] = defaultdict(lambda: {"n_items": 0, "verified": 0})
    for record in records:
        data = record.get("data") or {}
        for edit in EDIT_KINDS:
            if not data.get(edit.image):
                continue
            key = (edit.field, str(data.get(f"{edit.image}_model") or "unknown"),
                   str(data.get(f"{edit.image}_licence") or "unknown"))
            found[key]["n_items"] += 1
            found[key]["verified"] += bool(data.get(f"{edit.image}_verified"))
    return [{"edit": "relevant" if field == RELEVANT.field else "irrelevant", "model": model, "licence": licence,
             **counts, "non_commercial": is_non_commercial(licence)}
            for (field, model, licence), counts in sorted(found.items())]


def field_descriptions() -> dict[str, str]:
    """What each released edit field holds (croissant.json describes the fields with these)."""
    out = {}
    for edit, what in ((RELEVANT, "the relevant edit (the item's image edited to show the counterfactual condition: "
                                  "the answer to the original question changes)"),
                       (IRRELEVANT, "the irrelevant edit (a change the question does not depend on: the answer to the "
                                    "original question stays)")):
        out[edit.image] = f"Path of {what}; only when two people accepted it, unless {edit.image}_verified is false."
        out[f"{edit.image}_verified"] = (f"True when two people accepted {edit.image}; false only in a release "
                                         "exported with --include-unverified-edits (the best unflagged candidate).")
        out[f"{edit.field}_answer"] = f"Gold answer of the original question about {edit.image}."
        out[f"{edit.image}_model"] = f"The model or tool that made {edit.image}."
        out[f"{edit.image}_licence"] = f"The licence of {edit.image} (its model's terms)."
        out[f"{edit.image}_source"] = (f"How {edit.image} was made: generated (cftools generate edits) or imported "
                                       "(made elsewhere, by hand or another pipeline: cftools ingest edits).")
    out["irrelevant_change"] = ("The irrelevant change shown by irrelevant_edited_image (the answer must not depend "
                                "on it).")
    return out


def edit_counts(records: list[dict[str, Any]], with_candidates: int) -> dict[str, int]:
    """What a release did with the edits: items whose store has relevant edit candidates, items carrying an edited
    image, irrelevant edits released, and released edits (both kinds) people did not verify."""
    return {"items": len(records), "with_candidates": with_candidates,
            "released": sum(1 for r in records if edited_image_of(r)),
            "irrelevant_released": sum(1 for r in records if edited_image_of(r, IRRELEVANT)),
            "unverified": unverified_edits(records)}


def edits_line(counts: dict[str, int], include_unverified: bool) -> Optional[str]:
    """One line on the release's edits for the console: why candidates were not released, or, loudly, how many
    released edits are unverified; None when the items have no edit candidates."""
    if not counts.get("with_candidates") and not counts.get("released"):
        return None
    head = f"{counts['released']} of {counts['items']} items carry an edited image"
    if counts.get("irrelevant_released"):
        head += f" ({counts['irrelevant_released']} an irrelevant edit)"
    if include_unverified and counts["unverified"]:
        return (f"{head}: {counts['unverified']} released edits are NOT verified by people "
                "(--include-unverified-edits: the best-ranked unflagged candidate; the card and browse.html say so).")
    left = counts["with_candidates"] - counts["released"]
    if left <= 0:
        return f"{head}: every one accepted by two people."
    others = f"{left} more" if counts["released"] else f"all {left}"
    if include_unverified:
        return (f"{head}: the candidates of {others} are flagged by the edit checks or were rejected by people "
                "(a flagged candidate is never released as an edit; cftools flags list).")
    why = "no edit was" if not counts["released"] else f"the edits of {left} more were not"
    return (f"{head}: {why} accepted by two people (cftools annotate push --task edit; or "
            "--include-unverified-edits).")
