"""What a judgment means: label configs, validating pulled results, decisions and agreement.

Label Studio's API accepts any result (unknown control names, choices not in the config, missing
required answers) and does not enforce two annotators per task, so all of that is checked here,
against the config cftools rendered from its template in `annotation/`.
"""

from __future__ import annotations

import math
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional


from jinja2 import Undefined

from cftools.answers import normalize_answer
from cftools.resources import template_env
from cftools.models import ACCEPTED, NEEDS_ADJUDICATION, REJECTED

VERIFY = "verify"
ADJUDICATE = "adjudicate"
PURPOSES = (VERIFY, ADJUDICATE)

YES, NO = "yes", "no"
FLAG_CHOICES = (
    ("ambiguous", "the question or its answer is ambiguous"),
    ("ungrammatical", "the question is not grammatical"),
    ("not_counterfactual", "the presupposition is not counterfactual"),
)
FLAG_CODES = tuple(code for code, _ in FLAG_CHOICES)
ACCEPT, ACCEPT_CORRECTED, REJECT = "accept", "accept_corrected", "reject"
DECISION_CHOICES = (
    (ACCEPT, "accept the proposed answer"),
    (ACCEPT_CORRECTED, "accept with the corrected answer below"),
    (REJECT, "reject the item"),
)
# Control names of the two configs.
CONTROLS = {"related": "related", "answer_correct": "answer_correct", "corrected_answer": "corrected_answer",
            "flags": "flags", "comment": "comment", "decision": "decision"}
# Questions whose inter-annotator agreement is reported (flags: one yes/no question per flag).
AGREEMENT_QUESTIONS = ("related", "answer_correct", *FLAG_CODES)


class InvalidResult(ValueError):
    """A pulled annotation whose result does not fit the project's label config."""


def render_label_config(kind: str, purpose: str, workspace_root: Optional[str] = None) -> str:
    """The kind's label config for PURPOSE (annotation/<kind>/<purpose>.xml.j2; a workspace's copy wins)."""
    from cftools.kinds import get_kind

    spec = get_kind(kind)
    template = spec.task_template(purpose)
    env = template_env("annotation", Path(workspace_root) if workspace_root else None, spec.template_root,
                       keep_trailing_newline=True, autoescape=True, undefined=Undefined)
    return env.get_template(template).render(
        yes_no=(YES, NO), flag_choices=FLAG_CHOICES, decision_choices=DECISION_CHOICES, groups=spec.groups, **CONTROLS)


@dataclass(frozen=True)
class Control:
    name: str
    tag: str  # Choices | TextArea
    values: frozenset[str] = frozenset()
    single: bool = True
    required: bool = False


@lru_cache(maxsize=None)
def config_controls(kind: str, purpose: str, workspace_root: Optional[str] = None) -> dict[str, Control]:
    """The answerable controls of a rendered config, read back from its XML."""
    controls: dict[str, Control] = {}
    for element in ET.fromstring(render_label_config(kind, purpose, workspace_root)).iter():
        if element.tag == "Choices":
            controls[element.get("name")] = Control(
                name=element.get("name"), tag="Choices",
                values=frozenset(c.get("value") for c in element.iter("Choice")),
                single=element.get("choice", "single") != "multiple", required=element.get("required") == "true")
        elif element.tag == "TextArea":
            controls[element.get("name")] = Control(name=element.get("name"), tag="TextArea")
    return controls


def read_result(kind: str, purpose: str, result: Any, workspace_root: Optional[str] = None) -> dict[str, Any]:
    """Control name -> answer (a list of choices, or the text) for one annotation; InvalidResult if it doesn't fit
    the kind's config."""
    controls = config_controls(kind, purpose, workspace_root)
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
            unknown = sorted(set(choices) - control.values)
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
    missing = [c.name for c in controls.values() if c.required and c.name not in answers]
    if missing:
        raise InvalidResult(f"required choice {missing[0]!r} is missing")
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


def parse_answer(kind: str, purpose: str, result: Any, workspace_root: Optional[str] = None) -> Answer:
    """One annotation of a task of KIND read back into a judgment (`Kind.read_judgment` calls this by default)."""
    answers = read_result(kind, purpose, result, workspace_root)
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


def question_labels(answer: Answer) -> dict[str, str]:
    """The yes/no label of each agreement question for one judgment."""
    labels = {"related": YES if answer.related else NO, "answer_correct": YES if answer.answer_correct else NO}
    for code in FLAG_CODES:
        labels[code] = YES if code in answer.flags else NO
    return labels


def label_agreement(pairs: list[tuple[dict[str, str], dict[str, str]]]) -> dict[str, dict[str, Any]]:
    """Per question of a kind's own task: pairs, percent agreement (0-100) and Cohen's kappa over its labels
    (each pair: the first two annotators' question -> label)."""
    from sklearn.metrics import cohen_kappa_score

    questions = sorted({q for a, b in pairs for q in a if q in b})
    stats: dict[str, dict[str, Any]] = {}
    for question in questions:
        rows = [(a[question], b[question]) for a, b in pairs if question in a and question in b]
        labels = sorted({x for row in rows for x in row})
        agree = sum(x == y for x, y in rows)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # one label only: kappa is undefined (nan)
            kappa = float(cohen_kappa_score([x for x, _ in rows], [y for _, y in rows], labels=labels))
        stats[question] = {"n_pairs": len(rows), "percent_agreement": 100.0 * agree / len(rows),
                           "cohen_kappa": None if math.isnan(kappa) else kappa}
    return stats


def preload_agreement_library() -> None:
    """Import scikit-learn ahead of `agreement`: it takes a second or more, which a pull can spend waiting."""
    try:
        import sklearn.metrics  # noqa: F401
    except ImportError:
        pass  # `agreement` raises the error where it is needed


def _percent_agreement(labels_per_unit: list[list[str]]) -> Optional[float]:
    """Share of agreeing pairs of annotators over every pair within every item (0-100)."""
    agree = total = 0
    for labels in labels_per_unit:
        for i in range(len(labels)):
            for j in range(i + 1, len(labels)):
                total += 1
                agree += labels[i] == labels[j]
    return 100.0 * agree / total if total else None


def _krippendorff_alpha(units: list[dict[str, str]], annotators: list[str]) -> Optional[float]:
    """Nominal Krippendorff's alpha over every annotator (missing ratings allowed); None where undefined
    (one label only, or fewer than two ratings per item)."""
    import krippendorff
    import numpy as np

    if not units:
        return None
    data = np.array([[(1.0 if unit[a] == YES else 0.0) if a in unit else np.nan for unit in units]
                     for a in annotators])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = float(krippendorff.alpha(reliability_data=data, level_of_measurement="nominal"))
    except (ValueError, ZeroDivisionError):
        return None
    return None if math.isnan(value) else value


def _cohen_kappa(units: list[dict[str, str]]) -> Optional[float]:
    """Cohen's kappa where the same two people rated every item; None otherwise or where undefined."""
    from sklearn.metrics import cohen_kappa_score

    raters = {tuple(sorted(unit)) for unit in units}
    if len(raters) != 1 or len(next(iter(raters))) != 2:
        return None
    first, second = next(iter(raters))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one label only: kappa is undefined (nan)
        kappa = float(cohen_kappa_score([u[first] for u in units], [u[second] for u in units], labels=[YES, NO]))
    return None if math.isnan(kappa) else kappa


def agreement(ratings: dict[Any, dict[str, Answer]]) -> dict[str, dict[str, Any]]:
    """Per question, over the items rated by two or more annotators (RATINGS: item -> annotator -> Answer):
    n_items, n_pairs (pairs of annotators within an item), percent agreement (0-100), Krippendorff's alpha
    (nominal, all annotators) and Cohen's kappa (only where the same two people rated every item)."""
    rated = {unit: by_annotator for unit, by_annotator in ratings.items() if len(by_annotator) >= 2}
    annotators = sorted({a for by_annotator in rated.values() for a in by_annotator})
    n_pairs = sum(len(b) * (len(b) - 1) // 2 for b in rated.values())
    stats: dict[str, dict[str, Any]] = {}
    for question in AGREEMENT_QUESTIONS:
        units = [{a: question_labels(answer)[question] for a, answer in by_annotator.items()}
                 for by_annotator in rated.values()]
        stats[question] = {"n_items": len(units), "n_pairs": n_pairs,
                           "percent_agreement": _percent_agreement([list(u.values()) for u in units]),
                           "krippendorff_alpha": _krippendorff_alpha(units, annotators),
                           "cohen_kappa": _cohen_kappa(units) if units else None}
    return stats
