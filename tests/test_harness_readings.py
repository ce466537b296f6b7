"""`cftools eval import --reading vlmevalkit` / `--reading lmms-eval`: replies read as the harnesses' own scorers
read them, so their numbers can be put beside cftools' (issue 46).

SHAPES is the table of reply shapes: the reply, the question type, and how each harness reads it, stated by hand
from the harness's source (the line cited), not by calling cftools. VLMEvalKit at commit e8e78f0:
`vlmeval/dataset/utils/yorn.py` YOrN_Extraction (+ `vlmeval/smp/misc.py` process_punctuation) for yes/no,
`vlmeval/utils/matching_util.py` can_infer_option / can_infer_text for multiple choice (exact matching: no LLM
judge, an unread reply is "Z"). lmms-eval at commit 75571cf: `lmms_eval/tasks/mme/utils.py` parse_pred_ans for
yes/no, `lmms_eval/tasks/seedbench/utils.py` seed_process_result for a letter among images.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

from test_release_extras import VLMEVALKIT_FILES, export, stocked, stocked_booleans, tsv_rows  # noqa: F401

from cftools.evaluate.harness_readings import (lmms_eval_letter, lmms_eval_yes_no, vlmevalkit_choice,
                                               vlmevalkit_yes_no)
from cftools.evaluate.run import load_run

CHOICES = {"A": "red", "B": "blue"}
Z = "Z"  # VLMEvalKit's "no option"
SWAP = {"yes": "no", "no": "yes"}

# (reply, VLMEvalKit's reading, lmms-eval's reading, why), yes/no questions
YES_NO_SHAPES = [
    ("Yes", "yes", "yes", "both: the word itself (yorn.py: 'yes' in words; mme: pred_ans in ['yes', 'no'])"),
    ("Yes.", "yes", "yes", "misc.py periodStrip deletes a lone period; mme removes every '.'"),
    ("No, it is not.", "no", "no", "',' beside a space is deleted; mme: 'no' in the first four characters"),
    ("True", None, None, "neither reads true/false: no 'yes' or 'no' word; not in 'true'[:4]"),
    ("Yes:", None, "yes", "':' is not in process_punctuation's list, so the word is 'yes:'; mme: 'yes' in 'yes:'"),
    ("Nope", None, "no", "'nope' is not the word 'no'; mme: 'no' in 'nope'[:4]"),
    ("No doubt, yes.", None, "no", "yorn.py: both words, Unknown; mme: 'no d' holds 'no'"),
    ("Not necessarily, but yes", "yes", "no", "'not' is not 'no'; mme: 'not ' holds 'no'"),
    ("I think yes", "yes", None, "yorn.py: 'yes' anywhere; mme: only the first four characters ('i th')"),
    ("y", None, "yes", "mme: a single 'y' is yes"),
    ("Yes (probably)", "yes", "yes", "' (' is deleted, ')' spaced: 'yes probably'; mme: prefix 'yes '"),
    ("yes/no", None, "yes", "'/' with no space beside it becomes a space: both words; mme: prefix 'yes/'"),
    ("Is it? No.", "no", None, "yorn.py: the word 'no'; mme: 'is i' holds neither"),
    ("Maybe", None, None, "neither word"),
    ("", None, None, "nothing"),
]

# (reply, VLMEvalKit's letter among CHOICES, why), multiple-choice questions (A red, B blue)
CHOICE_SHAPES = [
    ("A", "A", "can_infer_option: the one letter among the words, in the last four"),
    ("Option A", "A", "the words 'Option', 'A': one letter, index 1 > 2 - 5"),
    ("(B)", "B", "'(' and ')' are spaced out"),
    ("**B**", "B", "'*' is spaced out"),
    ("a", Z, "letters are matched in upper case only; can_infer_text: 'red' and 'blue' are not in 'a'"),
    ("blue", "B", "can_infer_text: the one option text in the reply"),
    ("It is red.", "A", "can_infer_text: 'red' in 'it is red.' (10 characters <= 2 * 7)"),
    ("A dog is red", "A", "'A' is the one letter and word 0 > 4 - 5: the article is taken for option A"),
    ("The answer is B because the car looks painted in a way that shows blue", "B",
     "the letter is too early (index 3, not > 14 - 5), but _VERBOSE_ANSWER_RE 'answer is B' names it"),
    ("B is wrong, A is right", Z, "two letters; no 'answer is'; can_infer_text: 22 characters > 2 * 7"),
    ("red or blue", Z, "can_infer_text: two option texts"),
    ("Cannot determine the answer", Z, "a refusal phrase of can_infer_option: Z"),
    ("Z", Z, "no letter and the word Z: Z"),
]

# (reply, lmms-eval's letter, why): a choice among lettered images (gold B), as SEED-Bench reads it
LETTER_SHAPES = [
    ("B", "B", "the reply itself"),
    ("B) the second image", "B", "longer than one character: its first character"),
    ("(B)", "(", "its first character is '('"),
    ("b", "b", "no upper-casing: 'b' is not 'B'"),
    ("Image B", "I", "its first character"),
    ("", None, "nothing"),
]


@pytest.mark.parametrize(("reply", "vlmevalkit", "lmms_eval", "why"), YES_NO_SHAPES)
def test_yes_no_read_as_each_harness(reply, vlmevalkit, lmms_eval, why):
    assert vlmevalkit_yes_no(reply) == vlmevalkit, why
    assert lmms_eval_yes_no(reply) == lmms_eval, why


@pytest.mark.parametrize(("reply", "letter", "why"), CHOICE_SHAPES)
def test_multiple_choice_read_as_vlmevalkit(reply, letter, why):
    assert vlmevalkit_choice(reply, dict(CHOICES)) == letter, why


@pytest.mark.parametrize(("reply", "letter", "why"), LETTER_SHAPES)
def test_image_letters_read_as_lmms_eval(reply, letter, why):
    assert lmms_eval_letter(reply) == letter, why


def question(answer_type, gold, options=None, gold_option=None):
    from cftools.evaluate.questions import Question
    from cftools.evaluate.vlm import Prompt

    return Question("item-1", "original", "cvqa", "boolean", gold, answer_type, Prompt("Is it?", []), options,
                    gold_option)


@pytest.mark.parametrize(("reading", "q", "reply", "parsed", "correct", "strict"), [
    ("vlmevalkit", question("yes/no", "no"), "Nope", None, False, ("no", True)),
    ("vlmevalkit", question("yes/no", "yes"), "Yes (probably)", "yes", True, (None, False)),
    ("vlmevalkit", question("other", "red", ["red", "blue"], "red"), "Option A", "red", True, (None, False)),
    ("vlmevalkit", question("number", "3"), "3", "3", True, None),  # no VLMEvalKit scorer: cftools' reading
    ("lmms-eval", question("yes/no", "no"), "Not necessarily, but yes", "no", True, (None, False)),
    ("lmms-eval", question("letter", "B", ["A", "B", "C", "D"], "B"), "Both A and B", "B", True, (None, False)),
    ("lmms-eval", question("yes/no", "yes"), "yes", "yes", True, None),  # read alike: nothing kept beside it
])
def test_a_reply_read_the_harness_way_keeps_cftools_reading_beside_it(reading, q, reply, parsed, correct, strict):
    """`eval --reading vlmevalkit|lmms-eval` reads the questions the harness scores its way, keeps cftools' own
    reading on the line where the two differ, and leaves the rest to cftools."""
    from cftools.evaluate.run import generated_line

    line = generated_line(q, reply, reading)
    assert (line["parsed"], line["correct"]) == (parsed, correct)
    if strict is None:
        assert "strict_correct" not in line
    else:
        assert (line["strict_parsed"], line["strict_correct"]) == strict


# -- a VLMEvalKit prediction file scored as VLMEvalKit scores it ---------------------------------------------------

def yes_no_reply(gold: str, n: int) -> tuple[str, bool]:
    """(reply to a yes/no row whose answer is GOLD, whether VLMEvalKit scores it right): shape n of the table."""
    reply, read, _, _ = YES_NO_SHAPES[n % len(YES_NO_SHAPES)]
    if gold == "No":  # the shape with yes and no swapped
        reply = re.sub(r"\b(yes|no)\b", lambda m: SWAP[m.group(1).lower()].capitalize() if m.group(1)[0].isupper()
                       else SWAP[m.group(1).lower()], reply, flags=re.IGNORECASE)
        read = {"yes": "no", "no": "yes"}.get(read) if read else None
    return reply, read == gold.lower()


def choice_reply(row: dict, n: int) -> tuple[str, bool]:
    """(reply to a multiple-choice row, whether VLMEvalKit scores it right): shapes named by the gold letter."""
    gold, text = row["answer"], row[row["answer"]]
    other = next(letter for letter in "ABCD" if row.get(letter) and letter != gold)
    shapes = [(gold, True), (f"Option {gold}", True), (f"({gold})", True), (gold.lower(), False),
              ("Cannot determine the answer", False), (f"{gold} is right, {other} is wrong " * 3, False),
              (f"I would say the correct answer is **{gold}**, as the picture shows it", True), (text, True)]
    return shapes[n % len(shapes)]


def test_eval_import_reading_vlmevalkit_scores_as_vlmevalkit(stocked_booleans, tmp_path, run_cli):
    """The yes/no and multiple-choice files of the VLMEvalKit export, answered in the table's shapes: every row is
    right or wrong as VLMEvalKit's scorer has it, so each file's accuracy is VLMEvalKit's; the report puts
    cftools' own reading beside it."""
    workspace, _ = stocked_booleans
    release = export(workspace, tmp_path, "vlmevalkit").path
    expected, files = {}, []
    for name in VLMEVALKIT_FILES:
        rows = tsv_rows(release / name)
        for n, row in enumerate(rows):
            if name.endswith("_YN.tsv"):
                row["prediction"], right = yes_no_reply(row["answer"], n)
            elif name.endswith("_MCQ.tsv"):
                row["prediction"], right = choice_reply(row, n)
            else:
                row["prediction"], right = row["answer"], True  # no VLMEvalKit scorer: cftools reads these
            expected[(row["item_id"], row["l2-category"])] = right
        path = tmp_path / "predictions" / f"tiny_{name[:-4]}.xlsx"
        path.parent.mkdir(exist_ok=True)
        pd.DataFrame(rows).drop(columns=["image"]).to_excel(path, index=False)
        files.append(str(path))

    out = run_cli("eval", "import", str(release), *files, "--out", str(tmp_path / "vlmevalkit"), "--reading",
                  "vlmevalkit")
    assert out.exit_code == 0, out.output
    run = load_run(tmp_path / "vlmevalkit")
    got = {(p["id"], p["which"]): bool(p["correct"]) for p in run.predictions}
    assert got == expected
    for suffix in ("_YN.tsv", "_MCQ.tsv"):  # VLMEvalKit's accuracy of each file, from cftools' lines
        keys = [(r["item_id"], r["l2-category"]) for name in VLMEVALKIT_FILES if name.endswith(suffix)
                for r in tsv_rows(release / name)]
        assert sum(got[k] for k in keys) / len(keys) == sum(expected[k] for k in keys) / len(keys)
    assert run.predictions and any("strict_correct" in p for p in run.predictions)  # cftools reads some otherwise

    report = (tmp_path / "vlmevalkit" / "report.md").read_text(encoding="utf-8")
    assert "as VLMEvalKit's own scorers read them" in report
    assert "## VLMEvalKit's reading beside cftools' (--reading vlmevalkit)" in report
    assert "| section | group | metric | n | VLMEvalKit | cftools | difference |" in report
    assert "VLMEvalKit's reading beside cftools'" in out.output  # on the console too
    assert "…" not in out.output  # no number cut at the runner's width

    strict = run_cli("eval", "import", str(release), *files, "--out", str(tmp_path / "strict"))
    assert strict.exit_code == 0, strict.output
    ours = load_run(tmp_path / "strict").summary
    assert ours["cfmm"] == run.summary["strict_reading"]["cfmm"]  # the cftools column is cftools' own run
    assert ours["cvqa"] == run.summary["strict_reading"]["cvqa"]
    assert ours["cfmm"] != run.summary["cfmm"]  # and the two readings differ on these shapes


# -- report rows ------------------------------------------------------------------------------------------------

def test_report_says_why_a_native_mucr_release_asks_no_c2e_or_e2c():
    """A release without MuCR's choice sets (native) asks Cue only: the report says C2E and E2C were not asked and
    why, on the console and in report.md, instead of a bare "0 –"."""
    from rich.console import Console

    from cftools.evaluate.report import render_markdown, rich_tables
    from cftools.kinds import get_kind

    facets = {"category": "life", "style": "Photograph", "input": "split"}
    outcomes = [{"id": f"m{n}", "kind": "mucr", "group": "life", "facets": facets,
                 "cue": {"correct": n % 2 == 0, "unknown": False, "answer": "catch cold"}} for n in range(4)]
    summary = {"mucr": get_kind("mucr").hooks.evaluate.summarize(outcomes), "answered": 4, "skipped": {}}
    config = {"model": "blind", "mode": "generate", "release_name": "bench-1.0", "items": 4, "questions": 4,
              "template": "short_answer"}
    report = render_markdown(config, summary)
    assert "| C2E | 0 | not asked | – |" in report and "| E2C | 0 | not asked | – |" in report
    assert "C2E and E2C not asked: the release's MuCR records have no candidate images" in report
    assert "--format mucr" in report
    console = Console(width=100, record=True)
    for part in rich_tables(config, summary, width=100):
        console.print(part)
    text = " ".join(console.export_text().split())
    assert "not asked" in text and "C2E and E2C not asked" in text

    c2e = [{**o, "c2e": {"correct": True, "unknown": False, "answer": "A"}} for o in outcomes]
    report = render_markdown(config, {**summary, "mucr": get_kind("mucr").hooks.evaluate.summarize(c2e)})
    assert "| C2E | 4 | not asked" not in report and "E2C not asked: the release's MuCR records" in report
    both = [{**o, "e2c": {"correct": True, "unknown": False, "answer": "A"}} for o in c2e]
    summarize = get_kind("mucr").hooks.evaluate.summarize
    assert "not asked" not in render_markdown(config, {**summary, "mucr": summarize(both)})


class SaysYes:
    """A generate-only model: "yes" to everything."""

    needs_image = False

    def generate(self, prompts):
        return ["yes"] * len(prompts)

    def score_options(self, prompts):
        raise AssertionError("generate mode only")

    def close(self):
        pass


def test_a_mixed_release_without_mode_says_why_cfmm_is_not_ranked(mixed_release, tmp_path):
    """C-VQA (generated) and CFMM (ranked) in one release, no --mode: the run generates for both, and says so and
    why at once (stderr) and in the report's CFMM settings line, naming --mode; a one-kind release is not told."""
    from cftools.evaluate.run import EvalOptions, run_eval

    notes = []
    result = run_eval(mixed_release, "blind", options=EvalOptions(out_dir=tmp_path / "run"), answerer=SaysYes(),
                      notify=notes.append)
    assert result.config["mode"] == "generate"
    assert any("mixes kinds whose papers answer differently (cfmm rank, cvqa generate)" in n and "--mode" in n
               for n in notes), notes
    report = (tmp_path / "run" / "report.md").read_text(encoding="utf-8")
    cfmm = next(line for line in report.splitlines() if "cfmm settings" in line)
    assert "not the paper's: one run has one mode and this release mixes kinds" in cfmm
    assert "evaluate a release of cfmm alone to rank as its paper does" in cfmm
    cvqa = next(line for line in report.splitlines() if "cvqa settings" in line)
    assert "(as in the paper)" in cvqa and "mixes" not in cvqa


def test_eval_import_reading_lmms_eval_reads_yes_no_as_mme(stocked_booleans, tmp_path, run_cli):
    """lmms-eval's --log_samples files of the lmms-eval export, the C-VQA yes/no questions answered in the table's
    shapes: under --reading lmms-eval each is right or wrong as lmms-eval's MME task reads it."""
    import json

    from cftools.evaluate.harness_import import release_questions

    workspace, _ = stocked_booleans
    release = export(workspace, tmp_path, "lmms-eval").path
    booleans = sorted(q.key for q in release_questions(release).values() if q.answer_type == "yes/no")
    gold = {q.key: q.gold for q in release_questions(release).values()}
    assert booleans
    samples, expected = [], {}
    for n, key in enumerate(booleans):
        reply, _, read, _ = YES_NO_SHAPES[n % len(YES_NO_SHAPES)]
        samples.append({"doc_id": n, "doc": {"item_id": key[0], "which": key[1]}, "filtered_resps": [reply]})
        expected[key] = read == gold[key]
    path = tmp_path / "model_samples_bench_cvqa.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
    out = run_cli("eval", "import", str(release), str(path), "--out", str(tmp_path / "lmms"), "--reading",
                  "lmms-eval")
    assert out.exit_code == 0, out.output
    got = {(p["id"], p["which"]): bool(p["correct"]) for p in load_run(tmp_path / "lmms").predictions}
    assert got == expected
    assert "lmms-eval's reading beside cftools' (--reading lmms-eval)" in out.output
