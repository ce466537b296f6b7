"""C-VQA's fields: its groups, the published CSV's columns and the typed `item.data`."""

from __future__ import annotations

from typing import Optional

from cftools.kinds.base import ItemData

NUMERICAL_DIRECT = "numerical-direct"
NUMERICAL_INDIRECT = "numerical-indirect"
BOOLEAN = "boolean"
GROUPS = (NUMERICAL_DIRECT, NUMERICAL_INDIRECT, BOOLEAN)
GROUP_ANSWER_TYPE = {NUMERICAL_DIRECT: "number", NUMERICAL_INDIRECT: "number", BOOLEAN: "yes/no"}
# The `type` column of the published CSV.
TYPE_TO_GROUP = {"direct": NUMERICAL_DIRECT, "indirect": NUMERICAL_INDIRECT, "boolean": BOOLEAN}
GROUP_TO_TYPE = {group: cvqa_type for cvqa_type, group in TYPE_TO_GROUP.items()}
CSV_COLUMNS = ("img_path", "query", "answer", "new query", "new answer", "type")
# Groups whose presupposition adds, removes or multiplies the counted things by name, so the new count follows
# from the old one: numerical-direct and two C-VQA-Synthetic types (abs_counting_2: "if we removed 5 flowers
# in yellow polygons"; abs_counting_4: "if 14 dots were removed from the circles"). The other abs_counting
# types change the count indirectly.
DIRECT_GROUPS = frozenset({NUMERICAL_DIRECT, "abs_counting_2", "abs_counting_4"})
COUNT_GROUPS = frozenset({NUMERICAL_DIRECT, NUMERICAL_INDIRECT})


class CvqaData(ItemData):
    cvqa_type: Optional[str] = None  # the published CSV's `type`
    line: Optional[int] = None  # where an ingested item was read
    original_question: Optional[str] = None
    original_answer: Optional[str] = None
    candidates: Optional[list[str]] = None  # answers the rewrite named besides the chosen one
    flipped_answer: Optional[str] = None
    attempt: Optional[int] = None


