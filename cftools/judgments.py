"""What a judgment means, below both the annotate stage and the kinds: the verification vocabulary, validating
a pulled result against the label config it was made with, one annotator's answers and the decision rules.

Label Studio's API accepts any result (unknown control names, choices not in the config, missing required
answers), so every result is checked here against the config cftools rendered.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional

from cftools.answers import normalize_answer
from cftools.models import ACCEPTED, NEEDS_ADJUDICATION, REJECTED

VERIFY = "verify"
ADJUDICATE = "adjudicate"
CONTROL, AUDIT = "control", "audit"  # purposes of tasks that measure a person and never count toward their item
MEASURE = "measure"  # a flagged draft shown to a person to measure the checks (`annotate push --flagged-sample`)
MEASURING = (CONTROL, AUDIT, MEASURE)
PURPOSES = (VERIFY, ADJUDICATE)

YES, NO = "yes", "no"
# (code, what the annotator reads): the code is the stored answer (the choice's alias), the label is shown.
FLAG_CHOICES = (
    ("ambiguous", "Ambiguous: two readings or answers are possible"),
    ("ungrammatical", "Ungrammatical"),
    ("not_counterfactual", "Not counterfactual: it supposes nothing contrary to the image"),
)
FLAG_CODES = tuple(code for code, _ in FLAG_CHOICES)
ACCEPT, ACCEPT_CORRECTED, REJECT = "accept", "accept_corrected", "reject"
DECISION_CHOICES = (
    (ACCEPT, "Accept the proposed answer"),
    (ACCEPT_CORRECTED, "Accept with the corrected answer below"),
    (REJECT, "Reject the item"),
)
# Control names of the two configs.
CONTROLS = {"related": "related", "answer_correct": "answer_correct", "corrected_answer": "corrected_answer",
            "flags": "flags", "comment": "comment", "decision": "decision"}

# ---------------------------------------------------------------- other people, as a screen shows them

def shown_person(number: int) -> str:
    """How one judge of an item appears on another person's screen: by their place in that task alone ("Person
    2"), never by email or an id that recurs across tasks; the store keeps who each number is."""
    return f"Person {number}"


def without_emails(text: str, instead: str = "(an email address)") -> str:
    """TEXT with every email address in it replaced by INSTEAD, for a screen that shows what someone else wrote
    (what a person typed may hold one: theirs or another's); the pattern a release refuses too (`cftools.personal_data`)."""
    from cftools.personal_data import EMAIL

    return EMAIL.sub(instead, text)


class InvalidResult(ValueError):
    """A pulled annotation whose result does not fit the project's label config."""


@dataclass(frozen=True)
class Control:
    name: str
    tag: str  # Choices | TextArea
    values: frozenset[str] = frozenset()
    single: bool = True
    required: bool = False
    dynamic: bool = False  # choices built from the task's own data (`value="$field"`): checked by the kind at pull
    # Shown only while another control's choice is not ticked (a View's visibleWhen="choice-unselected"): required
    # only then. (control name, the choice as stored)
    unless: Optional[tuple[str, str]] = None



@lru_cache(maxsize=None)
def controls_of(label_config: str) -> dict[str, Control]:
    """The answerable controls of a rendered label config, read back from its XML."""
    root = ET.fromstring(label_config)
    stored = {(choices.get("name"), c.get("value")): c.get("alias") or c.get("value")
              for choices in root.iter("Choices") for c in choices.iter("Choice")}
    controls: dict[str, Control] = {}

    def visit(element: ET.Element, unless: Optional[tuple[str, str]]) -> None:
        if element.get("visibleWhen") == "choice-unselected" and element.get("whenTagName"):
            name, value = element.get("whenTagName"), element.get("whenChoiceValue")
            unless = (name, stored.get((name, value), value))
        if element.tag == "Choices":
            # A choice's alias, where it has one, is what the result holds (the value is the label people read).
            controls[element.get("name")] = Control(
                name=element.get("name"), tag="Choices",
                values=frozenset(c.get("alias") or c.get("value") for c in element.iter("Choice")),
                single=element.get("choice", "single") != "multiple", required=element.get("required") == "true",
                dynamic=(element.get("value") or "").startswith("$"), unless=unless)
        elif element.tag == "TextArea":
            controls[element.get("name")] = Control(name=element.get("name"), tag="TextArea",
                                                    required=element.get("required") == "true", unless=unless)
        for child in element:
            visit(child, unless)

    visit(root, None)
    return controls


def read_result(controls: dict[str, Control], result: Any) -> dict[str, Any]:
    """Control name -> answer (a list of choices, or the text) for one annotation; InvalidResult if it doesn't fit
    the CONTROLS of the config it was made with."""
    if not isinstance(result, list):
        raise InvalidResult("result is not a list")
    answers: dict[str, Any] = {}
    for region in result:
        if not isinstance(region, dict):
            raise InvalidResult("a result entry is not an object")
        name = region.get("from_name")
        control = controls.get(name)
        if control is None:
            raise InvalidResult(f"unknown from_name {name!r}")
        if name in answers:
            raise InvalidResult(f"{name!r} answered twice")
        value = region.get("value") or {}
        if control.tag == "Choices":
            choices = value.get("choices")
            if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
                raise InvalidResult(f"{name!r} has no list of choices")
            unknown = [] if control.dynamic else sorted(set(choices) - control.values)
            if unknown:
                raise InvalidResult(f"choice {unknown[0]!r} is not in the config of {name!r}")
            if control.single and len(choices) != 1:
                raise InvalidResult(f"{name!r} takes exactly one choice, got {len(choices)}")
            answers[name] = choices
        else:
            text = value.get("text")
            if isinstance(text, str):
                text = [text]
            if not isinstance(text, list) or not all(isinstance(t, str) for t in text):
                raise InvalidResult(f"{name!r} has no text")
            answers[name] = "\n".join(t.strip() for t in text).strip() or None
    missing = [c.name for c in controls.values() if c.required and c.name not in answers
               and not (c.unless and c.unless[1] in (answers.get(c.unless[0]) or []))]
    if missing:
        what = "choice" if controls[missing[0]].tag == "Choices" else "answer"
        raise InvalidResult(f"required {what} {missing[0]!r} is missing")
    return answers


@dataclass
class Answer:
    """One annotator's answers to the verification (or adjudication) questions."""

    related: Optional[bool] = None
    answer_correct: Optional[bool] = None
    corrected_answer: Optional[str] = None
    flags: list[str] = field(default_factory=list)
    comment: Optional[str] = None
    decision: Optional[str] = None
    fields: dict[str, Any] = field(default_factory=dict)  # a kind's own task answers (MuCR: picks, explanations)


def parse_answer(purpose: str, answers: dict[str, Any]) -> Answer:
    """The ANSWERS of one verification or adjudication annotation (see `read_result`) as a judgment."""
    if purpose == ADJUDICATE:
        decision = answers["decision"][0]
        corrected = answers.get("corrected_answer")
        if decision == ACCEPT_CORRECTED and not corrected:
            raise InvalidResult(f"decision {ACCEPT_CORRECTED!r} without a corrected answer")
        return Answer(decision=decision, corrected_answer=corrected if decision == ACCEPT_CORRECTED else None,
                      comment=answers.get("comment"))
    return Answer(related=answers["related"] == [YES], answer_correct=answers["answer_correct"] == [YES],
                  corrected_answer=answers.get("corrected_answer"), flags=sorted(answers.get("flags", [])),
                  comment=answers.get("comment"))


@dataclass(frozen=True)
class Decision:
    status: str
    corrected_answer: Optional[str] = None  # set when accepted with a corrected answer
    rule: str = ""
    data: dict[str, Any] = field(default_factory=dict)  # keys merged into the item's data (a kind's adjudication)


# Flags that say the item cannot be used as it is: both annotators raising one rejects it.
UNUSABLE_FLAGS = frozenset({"ambiguous", "not_counterfactual"})


def normal_correction(text: Optional[str]) -> Optional[str]:
    """An annotator's typed correction in the normal form model answers are read in ("Three", " 3 \n" -> "3"),
    so that two corrections compare, and the gold answer reads, the same way as a model's reply."""
    if text is None:
        return None
    return normalize_answer(text) or None


def same_answer(a: Optional[str], b: Optional[str]) -> bool:
    return bool(normal_correction(a)) and normal_correction(a) == normal_correction(b)


def decide(first: Answer, second: Answer) -> Decision:
    """The item's fate from two judgments by different annotators (the issue's rules, in order)."""
    if UNUSABLE_FLAGS & set(first.flags) and UNUSABLE_FLAGS & set(second.flags):
        return Decision(REJECTED, rule="both flagged ambiguous or not counterfactual")
    if first.related and second.related and first.answer_correct and second.answer_correct:
        return Decision(ACCEPTED, rule="both related and correct")
    if first.related is False and second.related is False:
        return Decision(REJECTED, rule="both not related")
    if first.related and second.related and first.answer_correct is False and second.answer_correct is False:
        if not first.corrected_answer and not second.corrected_answer:
            return Decision(REJECTED, rule="both incorrect without a correction")
        if same_answer(first.corrected_answer, second.corrected_answer):
            return Decision(ACCEPTED, corrected_answer=normal_correction(first.corrected_answer),
                            rule="same corrected answer")
    return Decision(NEEDS_ADJUDICATION, rule="judgments disagree")


def adjudicated(answer: Answer) -> Decision:
    if answer.decision == ACCEPT:
        return Decision(ACCEPTED, rule="adjudicated: accept")
    if answer.decision == ACCEPT_CORRECTED:
        return Decision(ACCEPTED, corrected_answer=normal_correction(answer.corrected_answer),
                        rule="adjudicated: accept corrected")
    return Decision(REJECTED, rule="adjudicated: reject")
