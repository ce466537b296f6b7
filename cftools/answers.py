"""Reading short free-text answers the way the standard VQA evaluation does.

`normalize_answer` lowercases, removes punctuation (keeping decimal points inside numbers), turns
number words into digits ("two" -> "2", "twenty one" -> "21"), drops the articles a/an/the and
collapses white space.

`parse_yes_no` and `parse_count` read a model's reply as a yes/no or a count, and
`extract_answer(text, answer_type)` picks the right reader for a VQA answer type ("number",
"yes/no", "other"). Every reader returns None when the reply cannot be read: the evaluation counts
such a reply as wrong and reports the unknown rate next to the score.

| reply               | number | yes/no |
|---------------------|--------|--------|
| "two"               | 2      | None   |
| "No, 3."            | 3      | no     |
| "There are 3 birds" | 3      | None   |
| "yes."              | None   | yes    |
| "I think not"       | None   | no     |
"""

from __future__ import annotations

import re
from typing import Optional, Union

from word2number import w2n

ANSWER_TYPES = ("number", "yes/no", "other")
Number = Union[int, float]

ARTICLES = frozenset({"a", "an", "the"})
# Words word2number understands; a run of them is read as one number ("twenty one" -> 21).
NUMBER_WORDS = frozenset({
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty", "thirty",
    "forty", "fifty", "sixty", "seventy", "eighty", "ninety", "hundred", "thousand", "million", "billion",
})
NUMBER_JOINERS = frozenset({"and"})
ZERO_WORDS = frozenset({"no", "none", "nothing", "nobody", "zero", "neither"})
YES_WORDS = frozenset({"yes", "yeah", "yep", "yup", "true", "correct", "right", "affirmative", "certainly", "sure"})
NO_WORDS = frozenset({"no", "not", "nope", "false", "incorrect", "never", "nah", "negative", "cannot", "cant",
                      "isnt", "arent", "dont", "doesnt", "wont", "wouldnt", "wasnt", "werent", "none", "nothing"})
# Phrases that say the model does not know; a reply holding one is unreadable, not "no".
UNSURE_PATTERNS = (
    r"\bnot sure\b", r"\bunsure\b", r"\bdo ?n[o']?t know\b", r"\bdont know\b", r"\bunknown\b", r"\bunclear\b",
    r"\bcannot (?:be )?(?:determine|tell|say|answer)", r"\bcant (?:determine|tell|say|answer)",
    r"\bimpossible to (?:tell|say|determine)\b", r"\bnot possible to (?:tell|say|determine)\b",
)

_DECIMAL = re.compile(r"(?<=\d)[.,](?=\d{3}\b)")      # thousands separator: 1,000 -> 1000
_PUNCT = re.compile(r"[^\w\s.]|_")
_STRAY_DOT = re.compile(r"(?<!\d)\.|\.(?!\d)")          # a dot that is not a decimal point
_NUMBER_TOKEN = re.compile(r"^-?\d+(?:\.\d+)?$")
_UNSURE = re.compile("|".join(UNSURE_PATTERNS))


def _tokens(text: str) -> list[str]:
    text = str(text).lower().strip()
    text = text.replace("’", "'").replace("n't", "nt").replace("'", "")
    text = _DECIMAL.sub("", text)
    text = _PUNCT.sub(" ", text)
    text = _STRAY_DOT.sub(" ", text)
    return text.split()


def _number_runs(tokens: list[str]) -> list[tuple[int, int, Number]]:
    """(start, end, value) of every number in the tokens: digits, or a run of number words."""
    found: list[tuple[int, int, Number]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if _NUMBER_TOKEN.match(token):
            found.append((i, i + 1, _to_number(token)))
            i += 1
            continue
        if token in NUMBER_WORDS:
            j = i + 1
            while j < len(tokens) and (tokens[j] in NUMBER_WORDS
                                       or (tokens[j] in NUMBER_JOINERS and j + 1 < len(tokens)
                                           and tokens[j + 1] in NUMBER_WORDS)):
                j += 1
            try:
                found.append((i, j, w2n.word_to_num(" ".join(tokens[i:j]))))
            except ValueError:
                pass
            i = j
            continue
        i += 1
    return found


def _to_number(token: str) -> Number:
    value = float(token)
    return int(value) if value.is_integer() and "." not in token else value


def format_number(value: Number) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def normalize_answer(text: Optional[str]) -> str:
    """VQA-style normal form: lowercase, no punctuation or articles, number words as digits."""
    if text is None:
        return ""
    tokens = _tokens(text)
    runs = {start: (end, value) for start, end, value in _number_runs(tokens)}
    out: list[str] = []
    i = 0
    while i < len(tokens):
        if i in runs:
            end, value = runs[i]
            out.append(format_number(value))
            i = end
            continue
        if tokens[i] not in ARTICLES:
            out.append(tokens[i])
        i += 1
    return " ".join(out)


def is_unsure(text: Optional[str]) -> bool:
    return bool(text) and bool(_UNSURE.search(" ".join(_tokens(text))))


def parse_yes_no(text: Optional[str]) -> Optional[str]:
    """'yes' or 'no' from a reply ("yes." -> yes, "I think not" -> no, "No, 3." -> no), else None."""
    if not text or is_unsure(text):
        return None
    for token in _tokens(text):
        if token in YES_WORDS:
            return "yes"
        if token in NO_WORDS:
            return "no"
    return None


def parse_number(text: Optional[str]) -> Optional[Number]:
    """The first number in a reply ("No, 3." -> 3, "twenty one" -> 21); "none"/"no birds" -> 0; else None."""
    if not text or is_unsure(text):
        return None
    tokens = _tokens(text)
    runs = _number_runs(tokens)
    if runs:
        return runs[0][2]
    if any(token in ZERO_WORDS for token in tokens):
        return 0
    return None


def parse_count(text: Optional[str]) -> Optional[int]:
    """A count (a whole number >= 0) from a reply ("two" -> 2, "There are 3 birds" -> 3), else None."""
    value = parse_number(text)
    if value is None or value < 0 or (isinstance(value, float) and not value.is_integer()):
        return None
    return int(value)


def extract_answer(text: Optional[str], answer_type: Optional[str]) -> Optional[str]:
    """The reply read for its answer type, as a string: "3", "yes", or the normal form; None when unreadable."""
    if answer_type == "number":
        value = parse_number(text)
        return None if value is None else format_number(value)
    if answer_type == "yes/no":
        return parse_yes_no(text)
    if not text or is_unsure(text):
        return None
    return normalize_answer(text) or None


def infer_answer_type(answer: Optional[str]) -> str:
    """The VQA answer type of a gold answer: yes/no, number or other."""
    normal = normalize_answer(answer)
    if normal in ("yes", "no"):
        return "yes/no"
    if _NUMBER_TOKEN.match(normal):
        return "number"
    return "other"


def answers_match(predicted: Optional[str], gold: Optional[str], answer_type: Optional[str]) -> bool:
    """Whether a reply reads as the gold answer; an unreadable reply is wrong."""
    answer_type = answer_type or infer_answer_type(gold)
    parsed = extract_answer(predicted, answer_type)
    if parsed is None:
        return False
    expected = extract_answer(gold, answer_type)
    if expected is None:
        expected = normalize_answer(gold)
    return parsed == expected
