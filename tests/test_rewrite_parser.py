"""The rewrite parser on what models really write."""

from __future__ import annotations

import pytest

from cftools.kinds.cvqa.model import BOOLEAN, NUMERICAL_DIRECT, NUMERICAL_INDIRECT
from cftools.kinds.cvqa.parse import RewriteParseError, parse_rewrite

Q = "How many dogs would there be if two more dogs came?"

NUMERICAL_CASES = [
    # (model output, question, answer, candidates)
    (f"New question: {Q}\nNew answer: 4", Q, "4", ["4"]),
    (f"New question:{Q}\nNew answer:4", Q, "4", ["4"]),
    (f"new question : {Q}\nNEW ANSWER :   4 .", Q, "4", ["4"]),
    (f"**New question:** {Q}\n**New answer:** 4", Q, "4", ["4"]),
    (f"New question: \"{Q}\"\nNew answer: four.", Q, "4", ["4"]),
    (f"New question: {Q} New answer: 4", Q, "4", ["4"]),  # both on one line
    (f"New question:\n{Q}\nNew answer:\n4", Q, "4", ["4"]),  # values on the next line
    (f"Sure! Here it is.\nStep 3. 2 + 2 = 4\nNew question: {Q}\nNew answer: 4\nHope this helps.", Q, "4", ["4"]),
    (f"New question: {Q}\nNew answer: 2 + 2 = 4", Q, "4", ["4"]),  # the value after the last "="
    (f"New question: {Q}\nNew answer: There would be twenty-one dogs.", Q, "21", ["21"]),
    (f"New question: {Q}\nNew answer: none", Q, "0", ["0"]),
    (f"New question: {Q}\nNew answer: 4 or 5", Q, "4", ["4", "5"]),  # several: the first, all kept
    (f"New question: {Q}\nNew answer: 4\n\nQuestion: How many cats?\nAnswer: 1\nNew question: How many cats if one "
     "left?\nNew answer: 0", Q, "4", ["4"]),  # a made-up example after the answer is ignored
    (f"Counterfactual question - {Q}\nFinal answer = 4", Q, "4", ["4"]),
    (f"New question: {Q}\nNew answer: 2.5", Q, "2.5", ["2.5"]),  # kept; the checks flag non-integers
    (f"New question: {Q}\nNew answer: 4.0", Q, "4", ["4"]),
    (f"{Q} Answer: 4", Q, "4", ["4"]),  # no labels: the if-question and the answer after it
    ("How many of the dogs would be black and how many would be brown if one left?\nNew answer: 3",
     "How many of the dogs would be black and how many would be brown if one left?", "3", ["3"]),
]


@pytest.mark.parametrize("text,question,answer,candidates", NUMERICAL_CASES)
def test_numerical_outputs(text, question, answer, candidates):
    parsed = parse_rewrite(text, NUMERICAL_DIRECT)
    assert (parsed.question, parsed.answer, parsed.candidates) == (question, answer, candidates)


def test_two_questions_on_the_question_line_stay_visible():
    parsed = parse_rewrite("New question: How many are black? And how many brown if one left?\nNew answer: 3",
                           NUMERICAL_INDIRECT)
    assert parsed.question == "How many are black? And how many brown if one left?"


BOOLEAN_CASES = [
    ("Step 1. Flipped answer: no\nNew question: Would he wear glasses if he took them off?\nNew answer: No.",
     "no", "no"),
    ("New question: Would the street be wet if it rained?\nNew answer: Yes, it would.", "yes", None),
    ("New question: Would the street be wet if it rained?\nNew answer:YES", "yes", None),
    ("New question: Would the lights be on if the power went out?\nNew answer: false", "no", None),
    ("The steps:\n1. Flip answer: no\n2. The street is dry.\nNew question: Would it be wet if it were dry?\n"
     "New answer: no", "no", "no"),
]


@pytest.mark.parametrize("text,answer,flipped", BOOLEAN_CASES)
def test_boolean_outputs(text, answer, flipped):
    parsed = parse_rewrite(text, BOOLEAN)
    assert parsed.answer == answer and parsed.flipped_answer == flipped and parsed.question.endswith("?")


FAILURES = [
    ("", NUMERICAL_DIRECT, "empty output"),
    ("I cannot help with that.", NUMERICAL_DIRECT, "no new question found"),
    (f"New question: {Q}", NUMERICAL_DIRECT, "no new answer found"),
    (f"New question: {Q}\nNew answer: many", NUMERICAL_DIRECT, "the new answer has no number"),
    ("New question: Would it be wet if it rained?\nNew answer: maybe", BOOLEAN, "the new answer is not yes or no"),
]


@pytest.mark.parametrize("text,group,reason", FAILURES)
def test_unparseable_outputs_give_a_reason(text, group, reason):
    with pytest.raises(RewriteParseError, match=reason):
        parse_rewrite(text, group)
