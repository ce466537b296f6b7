"""The checks that look at one item at a time. Each returns a Flag, a Note (it could not decide), or None.

Which items a check applies to is declared by each kind (`CheckHooks.checks`, see `cftools kinds`):
`arithmetic`, `not_flipped`, `no_presupposition`, `answer_type`, `leakage`, `two_questions`,
`unchanged_answer`. `duplicate` compares items with each other and lives in `cftools.checks.duplicates`.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Optional

from cftools.answer_rules import NEGATIVE
from cftools.answers import normalize_answer, parse_yes_no
from cftools.findings import Flag, Note, Result
from cftools.item_view import DIGITS, ItemView, options
from cftools.checks.presupposition import (
    ADD_VERBS, LESS_WORDS, MORE_WORDS, MULTIPLIERS, REMOVE_VERBS, SET_TO, TIMES, CLAUSE_SPLIT, find_condition,
    numbers_in, parse_change, strip_options,
)


def _fmt(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"


# ---------------------------------------------------------------- arithmetic


def check_arithmetic(item: ItemView) -> Result:
    condition = find_condition(item.question)
    if condition is None:
        return Note("arithmetic", "no presupposition to read")
    original, new = item.original_count(), item.new_count()
    if original is None:
        return Note("arithmetic", f"the original answer {item.source_answer!r} is not a count")
    if new is None:
        return Note("arithmetic", f"the new answer {item.answer!r} is not a count")
    change = parse_change(condition.text)
    if change.unreadable:
        return Note("arithmetic", f"cannot read the change: {change.unreadable}")
    result = change.apply(original)
    steps = f"{_fmt(original)} {change.describe()} gives {_fmt(result)}"
    if result.denominator != 1:
        return Flag("arithmetic", f"{steps}, not a whole number (the new answer says {_fmt(new)})")
    if result < 0:
        return Flag("arithmetic", f"{steps}, a negative count (the new answer says {_fmt(new)})")
    if result != new:
        return Flag("arithmetic", f"{steps}, but the new answer is {_fmt(new)}")
    return None


# ---------------------------------------------------------------- boolean


def check_not_flipped(item: ItemView) -> Result:
    original, new = parse_yes_no(item.source_answer), _strict_yes_no(item.answer)
    if original is None or new is None:
        return None  # answer_type reports an answer that is not yes/no
    if original == new:
        return Flag("not_flipped", f"the new answer '{new}' is the same as the original answer '{original}'; "
                                   "a boolean counterfactual must flip it")
    return None


def _strict_yes_no(answer: Optional[str]) -> Optional[str]:
    normal = normalize_answer(answer)
    return normal if normal in ("yes", "no") else None


# ---------------------------------------------------------------- the question's form


def check_no_presupposition(item: ItemView) -> Result:
    if find_condition(item.question) is None:
        return Flag("no_presupposition", "the question has no counterfactual condition "
                                         "(no if-clause, suppose, assuming, were ... to, had ...)")
    return None


ASK = r"(?:how\s+many|how\s+much|what|which|where|who|whom|whose|why|how)"
# "..., and how many ...", "... or what ...", "..., how many ..." ("..., which was brown, ..." is a relative clause)
SECOND_QUESTION = re.compile(rf"(?:(?:\band\b|\bor\b)\s+(?:also\s+)?{ASK}|[,;]\s+(?:and\s+|also\s+)?"
                             r"(?:how\s+many|how\s+much|what|how))\b", re.IGNORECASE)
ASKS = re.compile(rf"\b{ASK}\b", re.IGNORECASE)
QUESTION_MARKS = re.compile(r"\?\s*\S")


def check_two_questions(item: ItemView) -> Result:
    text = strip_options(item.question)
    second = SECOND_QUESTION.search(text)
    if second and ASKS.search(text[:second.start()]):  # "If there were no cats, how many ..." asks one thing
        return Flag("two_questions", f"asks two things at once ('...{second.group(0).strip()}...') "
                                     "but has one answer")
    if QUESTION_MARKS.search(text):
        return Flag("two_questions", "holds more than one question (several question marks)")
    return None


# ---------------------------------------------------------------- answers




def check_answer_type(item: ItemView) -> Result:
    """The answer-type rules the readers apply (`cftools.answer_rules`), on items after ingest: nothing converts
    number words here, so a count not in digits is flagged."""
    answer = (item.answer or "").strip()
    style = item.answer_style
    original = (item.source_answer or "").strip()
    if style == "count" and original and not DIGITS.fullmatch(original):  # a count item built on a non-count
        return Flag("answer_type", f"the original answer {item.source_answer!r} is not a count written in digits "
                                   "(a whole number >= 0), so the counterfactual count cannot follow from it")
    if style == "count" and NEGATIVE.fullmatch(answer):
        return Flag("answer_type", f"the answer {item.answer!r} is a negative count; a count is a whole number >= 0")
    if style == "count" and not DIGITS.fullmatch(answer):
        return Flag("answer_type", f"the answer {item.answer!r} is not a count written in digits "
                                   "(a whole number >= 0, e.g. 3)")
    if style == "yes/no" and _strict_yes_no(answer) is None:
        return Flag("answer_type", f"the answer {item.answer!r} is not yes or no")
    if style == "choice":
        offered = options(item.question)
        if answer.upper() not in offered:
            return Flag("answer_type", f"the answer {item.answer!r} is not one of the options "
                                       f"{', '.join(sorted(offered))}")
    return None


TOTAL_WORDS = re.compile(r"\b(?:in\s+total|total(?:\s+of)?|altogether|in\s+all|overall|making|leaving|"
                         r"so\s+that\s+there|resulting\s+in|ending\s+up\s+with)\b")


def check_leakage(item: ItemView) -> Result:
    condition = find_condition(item.question)
    new = item.new_count()
    if condition is None or new is None:
        return None
    presupposition = condition.text.lower()
    changes = _changes(presupposition)
    for clause in CLAUSE_SPLIT.split(presupposition):
        for words, value in numbers_in(clause):
            if value != new:
                continue
            # a total ("5 dogs in total", "increased to 5"), or a number that no change goes with
            if TOTAL_WORDS.search(clause) or SET_TO.search(clause) or not changes:
                return Flag("leakage", f"the presupposition ('{clause.strip()}') states the answer {_fmt(new)}")
    return None


def _changes(clause: str) -> bool:
    return bool(ADD_VERBS.search(clause) or REMOVE_VERBS.search(clause) or MORE_WORDS.search(clause)
                or LESS_WORDS.search(clause) or TIMES.search(clause)
                or any(pattern.search(clause) for pattern, _ in MULTIPLIERS))


def _nets_to_zero(question: str, original: Fraction) -> bool:
    """Whether the presupposition reads as changes that cancel out ("one dog left and one arrived")."""
    condition = find_condition(question)
    if condition is None:
        return False
    change = parse_change(condition.text)
    return not change.unreadable and len(change.ops) > 1 and change.apply(original) == original


def check_unchanged_answer(item: ItemView) -> Result:
    original, new = item.original_count(), item.new_count()
    if original is None or new is None:
        return None
    if original == new and not _nets_to_zero(item.question, original):
        return Flag("unchanged_answer", f"the new answer {_fmt(new)} equals the original answer; "
                                        "the presupposition changes nothing that is counted")
    return None


# ---------------------------------------------------------------- a model's second opinion

REDERIVED_SCOPE = "drafts whose answer the configured model re-derived ([llm] rederive)"


def rederived(item: ItemView) -> bool:
    return bool((item.data or {}).get("rederived"))


def check_answer_disputed(item: ItemView) -> Result:
    """The model that re-derived the answer (cftools.generate.rederive) disagrees with the draft's answer. A
    re-derivation of an earlier answer (the item was edited since) says nothing about this one."""
    rederived = (item.data or {}).get("rederived") or {}
    if rederived.get("answer") is None:
        return None
    if rederived.get("for_answer") != item.answer:
        return Note("answer_disputed", f"could not decide: the model re-derived the earlier answer "
                                       f"{rederived.get('for_answer')!r}, not {item.answer!r} (the next generate "
                                       "run with the re-derivation on re-derives it)")
    theirs, ours = str(rederived["answer"]), str(item.answer or "")
    if normalize_answer(theirs) == normalize_answer(ours):
        return None
    reasoning = " ".join(str(rederived.get("reasoning") or "").split())
    return Flag("answer_disputed", f"the model re-derived {theirs!r} where the draft says {ours!r}: "
                                   f"{reasoning[:300]}")
