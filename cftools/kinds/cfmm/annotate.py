"""CFMM's Label Studio tasks read back.

author — one submission -> the fields of a new draft pair. The annotator picks a type (or "none": the image suits
no type and nothing is made), writes the basic and the counterfactual question, two options each, and marks the
correct ones. A submission that misses a part, or whose two options are the same, is an `InvalidResult`: the pull
reports it and sends the image back to its author with the reason.

verify — the basic and the counterfactual answer are judged apart: "is the marked basic answer correct?" and "the
correct counterfactual answer" picked among the pair's own options (choices built from the task's data) or
"cannot be determined". A pick that is not one of the options is an `InvalidResult` (the API takes any result).
"""

from __future__ import annotations

from typing import Any, Optional

from cftools.judgments import YES, Answer, InvalidResult
from cftools.answers import normalize_answer
from cftools.kinds.cfmm.model import CANNOT_DETERMINE, NO_TYPE

LETTERS = ("A", "B")


def _text(answers: dict[str, Any], name: str) -> str:
    value = answers.get(name)
    if not value:
        raise InvalidResult(f"{name!r} is empty")
    return str(value).strip()


def _question(answers: dict[str, Any], prefix: str, what: str) -> tuple[str, list[str], str]:
    question = _text(answers, f"{prefix}_question")
    options = [_text(answers, f"{prefix}_option_a"), _text(answers, f"{prefix}_option_b")]
    if normalize_answer(options[0]) == normalize_answer(options[1]):
        raise InvalidResult(f"the two {what} options are the same ({options[0]!r})")
    correct = answers.get(f"{prefix}_correct")
    if not correct:
        raise InvalidResult(f"the correct {what} option is not marked")
    return question, options, options[LETTERS.index(correct[0])]


def authored_pair(answers: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The draft pair an author wrote, from the ANSWERS of one authoring result (see `AnnotateHooks.read_result`)."""
    pair_type = answers["type"][0]
    if pair_type == NO_TYPE:
        return None
    basic_question, basic_options, basic_answer = _question(answers, "basic", "basic")
    cf_question, cf_options, cf_answer = _question(answers, "cf", "counterfactual")
    data: dict[str, Any] = {"type": pair_type, "basic_question": basic_question, "basic_answer": basic_answer,
                            "options": {"original": basic_options, "counterfactual": cf_options}}
    if answers.get("comment"):
        data["author_comment"] = answers["comment"]
    return {"group": pair_type, "question": cf_question, "answer": cf_answer, "data": data}


# ---------------------------------------------------------------- verify and adjudicate


def option_choices(options: Optional[list[str]], with_cannot: bool) -> list[dict[str, str]]:
    """Label Studio's dynamic choices (`value="$cf_choices"`): the counterfactual options, then "cannot be
    determined" where the annotator may say so."""
    values = [str(o) for o in options or []] + ([CANNOT_DETERMINE] if with_cannot else [])
    return [{"value": v} for v in values]


def task_options(task_data: dict[str, Any]) -> list[str]:
    return [c["value"] for c in task_data.get("cf_option_choices") or [] if isinstance(c, dict)]


def read_verify(answers: dict[str, Any]) -> Answer:
    """One verification: related, the basic answer's verdict and the counterfactual pick (checked against the task's
    options by `fit_verify`)."""
    pick = (answers.get("cf_answer") or [None])[0]
    if pick is None:
        raise InvalidResult("the counterfactual answer is missing: pick one of its options or 'cannot be determined'")
    return Answer(related=answers["related"] == [YES], answer_correct=None, flags=sorted(answers.get("flags", [])),
                  comment=answers.get("comment"),
                  fields={"basic_correct": answers["basic_correct"] == [YES], "cf_answer": pick})


def fit_verify(answer: Answer, task_data: dict[str, Any]) -> None:
    """The counterfactual pick is one of the item's options, by its exact text (or "cannot be determined"); the
    judgment then reads as the shared rules want it: answer_correct when the basic verdict is yes and the pick is
    the proposed answer, the pick (the option's exact text) as the correction otherwise."""
    options = task_options(task_data)
    pick = answer.fields.get("cf_answer")
    if pick != CANNOT_DETERMINE and pick not in options:
        raise InvalidResult(f"the counterfactual answer {pick!r} is not one of the item's options "
                            f"({' / '.join(options) or 'none'})")
    proposed = str(task_data.get("proposed_answer") or "")
    same = str(pick) == proposed
    answer.answer_correct = bool(answer.fields.get("basic_correct")) and same
    answer.corrected_answer = (str(pick) if answer.fields.get("basic_correct") and not same
                               and pick != CANNOT_DETERMINE else None)


def fit_adjudication(answer: Answer, task_data: dict[str, Any]) -> None:
    options = task_options(task_data)
    if answer.corrected_answer is not None and answer.corrected_answer not in options:
        raise InvalidResult(f"the corrected answer {answer.corrected_answer!r} is not one of the item's options "
                            f"({' / '.join(options) or 'none'})")


def cannot_determine(answer: Answer) -> bool:
    return (answer.fields or {}).get("cf_answer") == CANNOT_DETERMINE


def exact_option(answer: Optional[str], options: list[str]) -> Optional[str]:
    """The option whose exact text ANSWER is; None when it is none of them (an answer picked from the options is
    stored and released as the option reads, "the blue one", never a normal form such as "blue 1")."""
    return answer if answer is not None and answer in options else None


def record_problem(record: dict[str, Any]) -> Optional[str]:
    """A CFMM release record whose answers are not among its options by their exact text (an answer the verifiers
    could not give, or one rewritten into a normal form)."""
    options = record.get("options") or (record.get("data") or {}).get("options") or {}
    for which, answer in (("counterfactual", record.get("answer")), ("original", record.get("original_answer"))):
        choices = options.get(which)
        if choices and answer is not None and exact_option(str(answer), [str(o) for o in choices]) is None:
            return f"the {which} answer {answer!r} is not one of its options ({' / '.join(map(str, choices))})"
    return None
