"""VQA-style answer normalisation and the readers for counts and yes/no."""

from __future__ import annotations

import pytest

from cftools.answers import (answers_match, extract_answer, extract_option_letter, format_number, infer_answer_type,
                             normalize_answer, parse_count, parse_number, parse_yes_no)

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


# -- replies in the shapes real models give (issue 15) ------------------------------------------------------
# Each row: reply -> what a careful grader reads as a number. None: unknown (never credited).
NUMBER_REPLIES = [
    # short
    ("7", 7), ("7.", 7), ("Seven", 7), ("seven.", 7), ("**4**", 4), ("twenty-one", 21), ("None.", 0), ("zero", 0),
    # sentence
    ("There are 3 birds on the wire.", 3), ("I count four dogs.", 4), ("There are no cats in the picture.", 0),
    ("There are 3 birds, 3 in total.", 3), ("The one on the left has 3 spots.", 3),
    # explicit markers win over the other numbers
    ("If 3 more birds landed, there would be 7 birds.", 7),
    ("If 2 of the 5 apples were eaten, there would be three apples.", 3),
    ("The answer is four.", 4), ("**Answer:** 4", 4), ("Answer: 7 (3 + 4)", 7),
    ("Answer: 2\nExplanation: one of the 3 cats left.", 2),
    # chain of thought
    ("Let's think step by step. There are 3 birds. 4 more land. 3 + 4 = 7.\nNew answer: 7", 7),
    ("Originally there were 5 cups. Removing 2 leaves 3.\nFinal answer: 3", 3),
    ("Step 1: count 2 dogs.\nStep 2: add 3.\n5", 5),
    ("There are 3 birds. 4 more land, so 7.", None),           # several numbers, no marker
    ("There are 3 birds and 2 cats.", None),
    # decimals and separators
    ("0.250", 0.25), ("2.50", 2.5), ("1,000", 1000), ("It is 0.5 meters long.", 0.5),
    # hedges, two candidates, guesses
    ("Roughly 5 or 6.", None), ("5 or 6", None), ("5-6", None), ("About 5.", None), ("Between 3 and 4.", None),
    ("I guess 4.", None), ("It's hard to say, maybe 4.", None), ("I'd estimate around 12.", None),
    ("Probably 3.", None), ("At least 10 people.", None), ("I cannot determine the number from the image.", None),
]

YES_NO_REPLIES = [
    ("yes", "yes"), ("Yes.", "yes"), ("No.", "no"), ("no", "no"), ("Nope", "no"), ("Yeah, it would.", "yes"),
    ("Correct.", "yes"), ("Incorrect.", "no"), ("That's right.", "yes"), ("That is not correct.", "no"),
    ("Of course.", "yes"), ("Of course not.", "no"), ("Absolutely!", "yes"), ("Absolutely not.", "no"),
    # negation scope: agreement words are not yes when negated; "no doubt" affirms
    ("Sure not.", "no"), ("Certainly, it would not.", "no"), ("No doubt, yes.", "yes"), ("No doubt.", "yes"),
    ("I think not", "no"), ("It would not change.", "no"), ("It doesn't.", "no"), ("There are no birds.", "no"),
    ("Yes, there would be no birds.", "yes"), ("No, there would be 3 birds.", "no"),
    # both, hedged, unsure, no reading
    ("Yes and no.", None), ("Yes! Actually, no.", None), ("Probably yes.", None), ("Maybe.", None),
    ("I'm not sure.", None), ("It would.", None), ("The bird on the right is red.", None),
    # hedging between yes and no: says both, or takes the answer back
    ("Not necessarily, but yes.", None), ("Not necessarily.", None), ("Not necessarily, but it could be.", None),
    ("Yes, but it would not.", None), ("Yes, although it might not.", None), ("No, but it could be.", None),
    ("It depends on the light.", None), ("Yes, but only on the left.", "yes"), ("No, but there is a cat.", "no"),
    # chain of thought
    ("Let me think. The cat is not there.\nAnswer: No", "no"), ("The lamp is off, so the room is dark.\nAnswer: yes", "yes"),
    ("Yes\nThe bird is not on the left.", "yes"),
]

OPTION_REPLIES = [
    ("A", "A"), ("A.", "A"), ("(B)", "B"), ("Answer: C", "C"), ("I choose D.", "D"), ("A is the effect.", "A"),
    ("Option A", "A"), ("B) the second image", "B"), ("The answer is B because A shows a dog.", "B"),
    ("A dog is on the left.", None), ("A man rides a bike.", None), ("A or B", None), ("Maybe C.", None),
]


@pytest.mark.parametrize(("reply", "number"), NUMBER_REPLIES)
def test_number_replies(reply, number):
    assert parse_number(reply) == number
    assert extract_answer(reply, "number") == (None if number is None else format_number(number))


@pytest.mark.parametrize(("reply", "answer"), YES_NO_REPLIES)
def test_yes_no_replies(reply, answer):
    assert parse_yes_no(reply) == answer
    assert extract_answer(reply, "yes/no") == answer


@pytest.mark.parametrize(("reply", "letter"), OPTION_REPLIES)
def test_option_letter_replies(reply, letter):
    assert extract_option_letter(reply, ["A", "B", "C", "D"]) == letter


def test_at_least_sixty_replies():
    assert len(NUMBER_REPLIES) + len(YES_NO_REPLIES) + len(OPTION_REPLIES) >= 60


def test_decimal_gold_matches_its_trailing_zero_form():
    assert answers_match("0.250", "0.25", "number")
    assert not answers_match("0.250", "250", "number")


@pytest.mark.parametrize(("reply", "normal"), [
    ("Dont", "don't"), ("It isnt.", "it isn't"), ("none", "0"), ("x-ray", "x ray"), ("'red'", "red"),
    ("The cat's bowl", "cat's bowl"),
])
def test_vqa_normalisation_contractions_and_none(reply, normal):
    assert normalize_answer(reply) == normal


def test_other_answers_read_after_the_marker_and_hedges_are_unknown():
    assert extract_answer("The car looks red.\nAnswer: Red", "other") == "red"
    assert extract_answer("Maybe red", "other") is None
    assert answers_match("Answer: blue", "Blue", "other")


def test_judge_score_out_of_ten():
    from cftools.evaluate.answerers import parse_judge_score

    assert parse_judge_score("7/10") == 7.0
    assert parse_judge_score("Score: 8 out of 10") == 8.0
    assert parse_judge_score("11") is None


# -- adversarial replies: a reply that states no answer is unknown, never a guess ------------------------------

@pytest.mark.parametrize("reply", ["not 2", "Not three.", "It is not 3.", "There are not 3 birds.", "There aren't 3.",
                                   "Answer: not 2", "Yes and no.", "Yes. No.", "yes or no"])
def test_a_denied_number_or_a_yes_and_no_is_no_count(reply):
    # before: "not 2" read as 2 and "Yes and no." as 0 (its "no" taken for "none")
    assert parse_number(reply) is None
    assert not answers_match(reply, "2", "number") and not answers_match(reply, "0", "number")


@pytest.mark.parametrize("reply", ["Not yes.", "I would not say yes.", "not no"])
def test_a_denied_yes_or_no_word_is_unknown(reply):
    # before: "Not yes." and "I would not say yes." read as yes, "not no" as no
    assert parse_yes_no(reply) is None


@pytest.mark.parametrize("reply", ["not A", "The answer is not B.", "Answer: not A", "isn't C", "It is not option D."])
def test_a_denied_option_letter_is_not_picked(reply):
    # before: each read as the very letter it denies
    assert extract_option_letter(reply, ["A", "B", "C", "D"]) is None


@pytest.mark.parametrize(("reply", "number", "yes_no"), [
    ("No, 3.", 3, "no"), ("No.", 0, "no"), ("There are no birds.", 0, "no"), ("Nope.", None, "no"),
    ("Absolutely not.", None, "no"), ("Of course not.", None, "no"), ("I do not think so, no.", 0, "no"),
])
def test_plain_denials_still_read(reply, number, yes_no):
    assert parse_number(reply) == number
    assert parse_yes_no(reply) == yes_no


@pytest.mark.parametrize("reply", ["If 3 more flew in.", "How many birds would there be if 3 more flew in?",
                                   "There would be 3 more birds.", "Answer: 2 fewer"])
def test_the_premise_echoed_back_or_a_change_is_no_count(reply):
    # before: the question's own number ("if 3 more flew in") or the change ("3 more") was read as the count
    assert parse_number(reply) is None


@pytest.mark.parametrize(("reply", "number"), [
    ("If 3 more flew in, 5.", 5), ("5 if 3 more flew in", 5), ("If there are 3 birds and 2 leave, 1 remains.", 1),
    ("If 3 more birds landed, there would be 7 birds.", 7), ("There are 3 birds, no more.", 3),
])
def test_the_count_beside_an_if_clause_is_read(reply, number):
    assert parse_number(reply) == number


@pytest.mark.parametrize(("reply", "letter"), [("The answer is A, not B", "A"), ("A, not B", "A"),
                                                ("Not A but B", "B"), ("Not C. The answer is D.", "D")])
def test_the_letter_left_after_the_denied_ones_is_picked(reply, letter):
    assert extract_option_letter(reply, ["A", "B", "C", "D"]) == letter


@pytest.mark.parametrize("reply", ["~3", "≈ 3", ">3", "≥3", "<5", "3+", "3+ birds"])
def test_an_approximate_or_bounded_number_is_no_count(reply):
    # before: each read as the plain number (the sign was punctuation); "about 3" and "at least 3" were already unknown
    assert parse_number(reply) is None


@pytest.mark.parametrize(("reply", "number"), [("Answer: 7 (3 + 4)", 7), ("New answer: 5 (2+3)", 5)])
def test_a_sum_beside_the_marked_answer_is_no_bound(reply, number):
    assert parse_number(reply) == number


@pytest.mark.parametrize("reply", ["3 or more", "There are 3 or more birds.", "3 or fewer", "3 at least", "3 at most",
                                   "3-ish", "3 plus"])
def test_a_bound_after_the_number_is_no_count(reply):
    # before: read as 3 ("at least 3" before the number was already unknown)
    assert parse_number(reply) is None
