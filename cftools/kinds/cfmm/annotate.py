"""The CFMM `author` task read back: one Label Studio submission -> the fields of a new draft pair.

The annotator picks a type (or "none": the image suits no type and nothing is made), writes the basic and the
counterfactual question, two options each, and marks the correct ones. A submission that misses a part, or whose
two options are the same, is an `InvalidResult` (reported by the pull, nothing stored).
"""

from __future__ import annotations

from typing import Any, Optional

from cftools.judgments import InvalidResult
from cftools.answers import normalize_answer
from cftools.kinds.cfmm.model import NO_TYPE

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
    """The draft pair an author wrote, from the ANSWERS of one authoring result (see `Kind.read_result`)."""
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
