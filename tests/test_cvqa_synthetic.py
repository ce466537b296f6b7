"""C-VQA-Synthetic's multiple-choice questions ("Select the correct answer:A:8  B:6  C:10  D:7", gold "C"): the
reader credits a letter, "(A)", "A.", "Answer: A", "The answer is A" and the option's text, nothing else; the
published rows, eval'd end to end with a scripted model (the loopback chat server) that answers every question
right, score 100 on every group."""

from __future__ import annotations

import csv
import re

import pytest

from cftools.answers import answers_match, extract_answer, extract_choice, infer_answer_type
from conftest import CVQA_SYNTHETIC
from fixtures_eval import png_bytes
from llm_replies import SYNTHETIC_FORMS

OPTIONS = {"A": "8", "B": "6", "C": "10", "D": "7"}


def synthetic_rows() -> list[dict]:
    if not CVQA_SYNTHETIC.exists():
        pytest.fail(f"peer data not found at {CVQA_SYNTHETIC} (set CFTOOLS_SHARED)")
    with open(CVQA_SYNTHETIC, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def options_of(question: str) -> dict[str, str]:
    return dict(re.findall(r"\b([A-Z])\s*:\s*(\S+)", question.split("answer:", 1)[1]))


@pytest.mark.parametrize("reply, letter", [
    ("A", "A"), ("(A)", "A"), ("A.", "A"), ("A)", "A"), ("Answer: A", "A"), ("The answer is A", "A"),
    ("The answer is (C).", "C"), ("**B**", "B"), ("10", "C"), ("ten", "C"), ("A: 8", "A"), ("(B) 6", "B"),
    ("I counted.\nAnswer: D", "D"), ("Count them: 10.\nC", "C"),
    # nothing else: the article, a hedge, two letters, a letter with another option's text, a non-option
    ("A dog", None), ("Maybe A", None), ("A or B", None), ("I think A", None), ("A: 6", None), ("B 10", None),
    ("9", None), ("E", None), ("Answer: the correct one", None), ("", None),
])
def test_choice_replies(reply, letter):
    assert extract_choice(reply, OPTIONS) == letter
    assert extract_answer(reply, "choice", OPTIONS) == letter


def test_letter_gold_is_a_choice_and_letter_replies_are_not_read_as_words():
    assert infer_answer_type("C", OPTIONS) == "choice" and infer_answer_type("C") == "other"
    assert answers_match("Answer: A", "A", None, OPTIONS) and answers_match("8", "A", "other", OPTIONS)
    assert not answers_match("A", "B", None, OPTIONS)
    # without options a letter is no answer: "Answer: A" is not the word "answer", "The answer is A" not "answer is"
    assert extract_answer("Answer: A", "other") is None and extract_answer("The answer is A", "other") is None


def test_every_published_row_credits_its_gold_in_every_form_and_nothing_else():
    rows = synthetic_rows()
    assert len(rows) == 300
    for row in rows:
        for which in ("", "new "):
            question, gold = row[f"{which}query"], row[f"{which}answer"]
            options = options_of(question)
            for form in SYNTHETIC_FORMS:
                for letter, text in options.items():
                    reply = form.format(letter=letter, text=text)
                    expected = letter == gold or (text == options[gold])  # two options may share a text
                    assert answers_match(reply, gold, None, options) == expected, (row["img_path"], reply)


def test_a_scripted_model_that_is_always_right_scores_100_on_every_group(workspace, tmp_path, run_cli, monkeypatch,
                                                                        llm_server):
    from cftools.evaluate.run import EvalOptions, run_eval

    rows = synthetic_rows()
    images = tmp_path / "images"
    images.mkdir()
    for n, row in enumerate(rows):  # one drawn image per row: the scripted model recognises the row by it
        (images / row["img_path"]).write_bytes(png_bytes(n))
    assert run_cli("ingest", "cvqa", CVQA_SYNTHETIC, "--images", images).exit_code == 0
    result = run_cli("export", "synthetic", "--version", "1.0.0", "--include-unverified", "--licence", "unknown",
                     "--out", tmp_path / "releases")
    assert result.exit_code == 0, result.output
    release = tmp_path / "releases" / "synthetic-1.0.0"
    monkeypatch.setenv("TEST_KEY", "sk-test-000000")
    workspace.config["llm"] = {"base_url": llm_server.base_url, "api_key_env": "TEST_KEY"}
    llm_server.use_reply("llm_replies:cvqa_synthetic_right")
    run = run_eval(release, "openai:scripted", options=EvalOptions(out_dir=tmp_path / "run", concurrency=8),
                   workspace=workspace)
    assert len(run.predictions) == 600
    assert {p["raw"] for p in run.predictions} >= {"A", "(B)", "C.", "Answer: D"}  # the forms were all used
    rows_by_group = {r["group"]: r for r in run.summary["cvqa"]["rows"]}
    assert set(rows_by_group) == {f"abs_counting_{n}" for n in range(1, 7)} | {"total"}
    for group, row in rows_by_group.items():
        assert row["n"] == (300 if group == "total" else 50)
        assert row["original"]["value"] == 1.0 and row["counterfactual"]["value"] == 1.0, group
        assert row["unknown_original"] == 0 and row["unknown_counterfactual"] == 0
    # the report states the paper's setting and prints its Table 1 layout: groups as columns
    report = (tmp_path / "run" / "report.md").read_text()
    assert "cvqa settings: mode generate in the paper, generate in this run (as in the paper)" in report
    assert "## C-VQA accuracy (%) in the paper's Table 1 layout" in report
    assert "|  | abs_counting_1 | abs_counting_2 | abs_counting_3 | abs_counting_4 | abs_counting_5 | abs_counting_6 " \
           "| total |" in report
    assert "| original | 100.0 [100.0, 100.0] |" in report and "| drop | 0.0 [0.0, 0.0] |" in report
