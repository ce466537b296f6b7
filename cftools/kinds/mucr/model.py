"""MuCR's fields: categories, the eval tasks and the typed `item.data`."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from cftools.kinds.base import ItemData

CATEGORIES = ("human", "animal", "plant", "character", "mixture")
CHOICE_TASKS = (("c2e", "cause_image"), ("e2c", "effect_image"))
TASKS = ("c2e", "e2c", "cue")
INPUT_FORMS = ("split", "composite")  # MuCR's input forms 3 and 1
FACETS = ("category", "style")


class MucrData(ItemData):
    cause_image: Optional[str] = None
    effect_image: Optional[str] = None
    cause_caption: Optional[str] = None
    effect_caption: Optional[str] = None
    c2e_choices: Optional[list[str]] = None
    c2e_answer: Optional[int] = None
    e2c_choices: Optional[list[str]] = None
    e2c_answer: Optional[int] = None
    cue: Optional[str] = None
    false_cues: Optional[list[str]] = None
    explanations: Optional[list[str]] = None
    style: Optional[str] = None
    category: Optional[str] = None
    link_id: Optional[str] = None
    context: Optional[dict[str, Any]] = None
    candidates: Optional[dict[str, dict[str, dict[str, Any]]]] = None
    cue_choices: Optional[list[str]] = None
    explanation_draft: Optional[str] = None
    explanations_by_annotator: Optional[dict[str, str]] = None
    pair_key: Optional[str] = None


def exp_score(parts: Any) -> float:
    """MuCR Exp = 0.25·S1 + 0.25·S2 + 0.5·S3 from the three PART scores (see `cftools.kinds.mucr.explanations`)."""
    from cftools.kinds.mucr.explanations import exp_score as score

    return score(parts)


def lines(values: Optional[Sequence[Any]]) -> str:
    return "\n".join(str(v) for v in values) if values else "none"


def cue_options(data: dict[str, Any], item_id: str) -> list[str]:
    """The cue and its false cues in the order a release recorded (its seed), else an order fixed by the item id."""
    from cftools.evaluate.questions import shuffled

    if data.get("cue_choices"):
        return [str(c) for c in data["cue_choices"]]
    return shuffled([str(data["cue"])] + [str(c) for c in data.get("false_cues") or []], item_id)


