"""VQA-style answer normalisation and the readers for counts and yes/no."""

from __future__ import annotations

import pytest

from cftools.answers import (answers_match, extract_answer, infer_answer_type, normalize_answer, parse_count,
                             parse_yes_no)

# The table: reply -> (reading as a count, reading as yes/no)
READINGS = [
    ("two", 2, None),
    ("No, 3.", 3, "no"),
    ("There are 3 birds", 3, None),
    ("yes.", None, "yes"),
    ("I think not", None, "no"),
    ("Three.", 3, None),
    ("twenty one", 21, None),
    ("There are no birds.", 0, "no"),
    ("Yes, there are two.", 2, "yes"),
    ("I'm not sure", None, None),
    ("It cannot be determined from the image", None, None),
    ("", None, None),
    ("blue", None, None),
]


@pytest.mark.parametrize(("reply", "count", "yes_no"), READINGS)
def test_reading_table(reply, count, yes_no):
    assert parse_count(reply) == count
    assert parse_yes_no(reply) == yes_no


@pytest.mark.parametrize(("reply", "normal"), [
    ("Two", "2"),
    ("The Dog!", "dog"),
    ("a red car.", "red car"),
    ("twenty-one", "21"),
    ("1,000", "1000"),
    ("2.5", "2.5"),
    ("  Yes.  ", "yes"),
    ("an apple and the pear", "apple and pear"),
])
def test_normalize_answer(reply, normal):
    assert normalize_answer(reply) == normal


def test_extract_answer_by_type():
    assert extract_answer("two", "number") == "2"
    assert extract_answer("No, 3.", "number") == "3"
    assert extract_answer("No, 3.", "yes/no") == "no"
    assert extract_answer("The Red car", "other") == "red car"
    assert extract_answer("hmm", "number") is None
    assert extract_answer("hmm", "yes/no") is None
    assert extract_answer("I don't know", "other") is None


def test_non_integer_is_not_a_count():
    assert parse_count("4.5") is None
    assert extract_answer("4.5", "number") == "4.5"


def test_answers_match_and_type():
    assert answers_match("There are two birds.", "2", "number")
    assert not answers_match("There are three birds.", "2", "number")
    assert answers_match("Nope", "no", None)
    assert not answers_match("maybe", "no", "yes/no")
    assert infer_answer_type("Yes") == "yes/no"
    assert infer_answer_type("three") == "number"
    assert infer_answer_type("red") == "other"
