"""CFMM's fields: its question types, the paper's counts per type and the typed `item.data`."""

from __future__ import annotations

from typing import Optional

from pydantic import field_validator

from cftools.kinds.base import ItemData

TYPES = ("count", "color", "size", "shape", "direction", "common")
# Items per type in the published release (about 1,200 pairs): the default drafting quota.
PAPER_COUNTS = {"count": 348, "color": 221, "size": 195, "shape": 111, "direction": 158, "common": 165}
CORRECT_MARK = "✓ correct"
NO_TYPE = "none"
PROMPT_VARIANTS = ("icl1", "cot1")
# The exact fields of a `--format cfmm` record (issue 14).
EXPORT_FIELDS = ("id", "image", "type", "basic_question", "basic_options", "basic_answer", "cf_question",
                 "cf_options", "cf_answer")
AMBIGUOUS = "ambiguous"
# The verifier's own answer when the image does not settle the counterfactual question: kept as such (never
# relabelled "ambiguous") through adjudication and agreement.
CANNOT_DETERMINE = "cannot be determined"


class CfmmData(ItemData):
    """`options` = {"original": [a, b], "counterfactual": [a, b]}; the gold answers are the item's answers."""

    options: Optional[dict[str, list[str]]] = None
    type: Optional[str] = None
    basic_question: Optional[str] = None
    basic_answer: Optional[str] = None
    needs_image_check: Optional[bool] = None

    @field_validator("options")
    @classmethod
    def _two_lists(cls, value: Optional[dict[str, list[str]]]) -> Optional[dict[str, list[str]]]:
        if value is not None and not {"original", "counterfactual"} <= set(value):
            raise ValueError("needs the options of both questions: 'original' and 'counterfactual'")
        return value

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and value not in TYPES:
            raise ValueError(f"unknown type {value!r}; use one of {', '.join(TYPES)}")
        return value


def options_text(options: Optional[list[str]], correct: Optional[str]) -> str:
    """One option per line, the correct one marked, for annotators."""
    if not options:
        return "none"
    letters = "ABCDEFGH"
    return "\n".join(f"{letters[i]}. {option}" + (f"  {CORRECT_MARK}" if option == correct else "")
                     for i, option in enumerate(options))


