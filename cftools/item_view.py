"""What a check sees of an item: its question and answer, its source question's, and its image (below both the
checks stage and the kinds)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from cftools.answers import parse_count

OPTIONS_TAIL = re.compile(r"select the correct answer\s*:(.*)$", re.IGNORECASE | re.DOTALL)
OPTION = re.compile(r"\b([A-Z])\s*:\s*(\S+)")
DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class ItemView:
    id: int
    key: str
    kind: str
    group: str
    status: str
    question: str
    answer: Optional[str]
    source_question: Optional[str] = None
    source_answer: Optional[str] = None
    image_name: Optional[str] = None  # the file name the input refers to
    image_key: Optional[str] = None  # what "the same image" means: the stored image, else the file name
    data: Optional[dict] = None  # the item's shape-specific fields (a kind's checks read them)
    # How the answer is written: "count" (digits), "yes/no", "choice" (an option letter), or None. Its kind's rule
    # (`CheckHooks.answer_style`), filled in by the checks runner.
    answer_style: Optional[str] = None

    def new_count(self) -> Optional[Fraction]:
        """The counterfactual answer as a count (an option's value for multiple choice)."""
        return _count(self.answer, self.question, self.answer_style)

    def original_count(self) -> Optional[Fraction]:
        """The source question's answer as a count."""
        if self.source_question is None and self.source_answer is None:
            return None
        return _count(self.source_answer, self.source_question or "", self.answer_style)


def options(question: str) -> dict[str, str]:
    """The options of a multiple-choice question ("Select the correct answer:A:8  B:6" -> {A: 8, B: 6})."""
    tail = OPTIONS_TAIL.search(question or "")
    return dict(OPTION.findall(tail.group(1))) if tail else {}


def _count(answer: Optional[str], question: str, style: Optional[str]) -> Optional[Fraction]:
    if answer is None:
        return None
    if style == "choice":
        value = options(question).get(answer.strip().upper())
        return Fraction(value) if value is not None and DIGITS.fullmatch(value) else None
    count = parse_count(answer)
    return None if count is None else Fraction(count)
