"""The answer-type rules every reader and the `answer_type` check share: what a count is.

A count is a whole number >= 0 written in digits. A reader (table, C-VQA, controls) converts an answer written
wholly in number words ("zero" -> "0", "twenty-one" -> "21") and records the conversion with the record; a
negative number, a decimal ("3.0") or any other text ("a few") is refused naming the value. The check that runs on
items after ingest (`checks.rules.check_answer_type`) flags what is not digits, since nothing converts there.
"""

from __future__ import annotations

import re
from typing import Optional

DIGITS = re.compile(r"[0-9]+")  # ASCII digits only: "٣" is no count a parser downstream reads
NEGATIVE = re.compile(r"[-\u2212]\s*[0-9]+(?:[.,][0-9]+)?")
DECIMAL = re.compile(r"[-+\u2212]?[0-9]*[.,][0-9]+")
COUNT_TYPES = ("number", "count")  # VQA's answer type of counts, and the kinds' answer style


def number_word_value(text: str) -> Optional[str]:
    """Digits for an answer written wholly in number words ("zero" -> "0", "twenty-one" -> "21"), else None."""
    from cftools.answers import NUMBER_JOINERS, NUMBER_WORDS, parse_count

    words = text.lower().replace("-", " ").split()
    if not words or not all(w in NUMBER_WORDS or w in NUMBER_JOINERS for w in words) or words[0] in NUMBER_JOINERS:
        return None
    value = parse_count(text)
    return None if value is None else str(value)


def count_problem(given: str) -> Optional[str]:
    """Why GIVEN, as it stands, is not a count in digits (None when it is)."""
    text = given.strip()
    if DIGITS.fullmatch(text):
        return None
    if NEGATIVE.fullmatch(text):
        return f"{given!r} is a negative number; a count is a whole number >= 0"
    if DECIMAL.fullmatch(text):
        return f"{given!r} is not a whole number; a count is a whole number >= 0 written in digits (e.g. 3)"
    return f"{given!r} is not a number (digits, or number words)"


def read_count(given: str) -> tuple[Optional[str], Optional[str]]:
    """(the count to store, why GIVEN cannot be one): digits as given, number words converted to digits; a
    negative number, a decimal or other text is refused."""
    text = given.strip()
    if DIGITS.fullmatch(text):
        return text, None
    converted = number_word_value(text)
    if converted is not None:
        return converted, None
    return None, count_problem(given)
