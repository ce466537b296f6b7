"""Issue 32: an explanation that is a near copy of the model's draft or of another person's explanation is not a
person's own. The measure and its threshold (`cftools.kinds.mucr.annotate.NEAR_COPY`) are chosen on a labelled
table of copies and independent explanations of the same pairs (tests/data/explanation_pairs.csv)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from cftools.judgments import Answer
from cftools.kinds.mucr.annotate import NEAR_COPY, decide_explain, same_text, similarity
from cftools.models import ACCEPTED, IN_REVIEW

TABLE = Path(__file__).parent / "data" / "explanation_pairs.csv"
ROWS = list(csv.DictReader(TABLE.open(encoding="utf-8")))


def test_the_threshold_separates_the_labelled_table():
    copies = [similarity(r["first"], r["second"]) for r in ROWS if r["label"] == "copy"]
    independent = [similarity(r["first"], r["second"]) for r in ROWS if r["label"] == "independent"]
    assert len(copies) >= 8 and len(independent) >= 8
    assert {r["note"] for r in ROWS} >= {"draft plus Indeed", "one word changed"}
    assert min(copies) >= NEAR_COPY > max(independent), (sorted(copies), sorted(independent))


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['label']}-{r['note']}" for r in ROWS])
def test_each_labelled_pair_is_read_as_labelled(row):
    assert same_text(row["first"], row["second"]) == (row["label"] == "copy")


class Pair:
    def __init__(self, draft: str) -> None:
        self.data = {"explanation_draft": draft}


def explained(text: str, cue: str = "rain") -> Answer:
    return Answer(fields={"explanation": text, "cue": cue, "false_cues": ["bench", "blanket", "park"]})


def test_a_near_copy_of_the_draft_or_of_another_person_asks_one_more_person():
    copy = next(r for r in ROWS if r["note"] == "draft plus Indeed")
    changed = [r for r in ROWS if r["note"] == "one word changed"][1]  # another pair than the draft's
    others = [r["second"] for r in ROWS if r["label"] == "independent"]
    item = Pair(copy["first"])
    outcome = decide_explain(item, [("a", explained(copy["second"])),  # the draft plus " Indeed."
                                    ("b", explained(changed["first"])),
                                    ("c", explained(changed["second"]))])  # b's explanation, one word changed
    assert outcome.status == IN_REVIEW and outcome.wants == 5 and "a, c" in outcome.rule
    outcome = decide_explain(item, [("a", explained(copy["second"])), ("b", explained(changed["first"])),
                                    ("c", explained(changed["second"])), ("d", explained(others[2])),
                                    ("e", explained(others[4]))])
    assert outcome.status == ACCEPTED
    assert sorted(outcome.data["explanations_by_annotator"]) == ["b", "d", "e"]


# ---------------------------------------------------------------- cue sets (issue 43)

EXPLAIN_SHOWN = {"explanation_draft": "In the first image, rain. In the second image, a cold. The causal link is rain.",
                 "model_cue": "cue: rain", "model_false_cues": "false cues: bench; blanket; park"}
ADJUDICATION_SHOWN = {"cue": "rain", "false_cues": "bench\nblanket\npark",
                      "cue_set_choices": [{"value": "1"}, {"value": "2"}, {"value": "3"}]}
OWN = "In the first image a girl is soaked. In the second image she shivers under a quilt. The causal link is the wet."


@pytest.mark.parametrize("cue, false_cues", [("rain", ["bench", "blanket", "park"]),  # retyped
                                             ("Rain.", ["park", "blankets", "bench"])])  # reordered, one letter more
def test_a_cue_set_retyped_from_the_models_is_the_models_in_explain_and_in_adjudication(cue, false_cues):
    from cftools.judgments import InvalidResult
    from cftools.kinds.mucr.annotate import fit_adjudication, fit_explain

    with pytest.raises(InvalidResult, match="the cue set is the model's"):
        fit_explain(Answer(fields={"explanation": OWN, "cue": cue, "false_cues": false_cues}), EXPLAIN_SHOWN)
    own = Answer(decision="accept_corrected", corrected_answer=cue, fields={"own_false_cues": false_cues})
    with pytest.raises(InvalidResult, match="your own cue set is the model's"):
        fit_adjudication(own, ADJUDICATION_SHOWN)


def test_a_cue_set_of_ones_own_counts_even_with_the_models_cue_or_its_false_cues():
    from cftools.kinds.mucr.annotate import fit_adjudication, fit_explain

    for cue, false_cues in (("rain", ["umbrella", "puddle", "cloud"]), ("catch cold", ["bench", "blanket", "park"])):
        fit_explain(Answer(fields={"explanation": OWN, "cue": cue, "false_cues": false_cues}), EXPLAIN_SHOWN)
        own = Answer(decision="accept_corrected", corrected_answer=cue, fields={"own_false_cues": false_cues})
        fit_adjudication(own, ADJUDICATION_SHOWN)
        assert own.fields["chosen_from"] == "adjudicator" and own.fields["cue"] == cue
