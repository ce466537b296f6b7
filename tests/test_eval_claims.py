"""What `cftools eval` states about its numbers, checked on small worlds: replies read as the harness scripts read
them, and each report saying which definition its scores follow."""

from __future__ import annotations

from cftools.evaluate.harness_readings import vlmevalkit_yes_no


def test_vlmevalkit_deletes_the_first_32_periods_those_after_digits_included():
    # VLMEvalKit's periodStrip `(?!<=\d)(\.)(?!\d)` deletes "3." 's period as well, and stops after 32: a numbered
    # list of 32 steps uses them all up, so the final "no." keeps its period and is not the word "no" (Unknown)
    steps = " ".join(f"{n}." for n in range(1, 33))
    assert vlmevalkit_yes_no(f"{steps} no.") is None  # before: read as no (periods after digits were kept)
    assert vlmevalkit_yes_no(f"{steps} no") == "no"
    assert vlmevalkit_yes_no("Step 3. no.") == "no"


def test_the_cvqa_report_says_which_definition_its_scores_follow(tmp_path):
    from cftools.evaluate.run import EvalOptions, run_eval
    from fixtures_eval import cvqa_record, png_bytes, write_release

    records = [cvqa_record(1, "numerical-direct", "2", "3", "number"), cvqa_record(2, "boolean", "yes", "no", "yes/no")]
    release = write_release(tmp_path / "rel", records, {r["id"]: png_bytes(n) for n, r in enumerate(records)})
    result = run_eval(release, "openai:scripted", options=EvalOptions(out_dir=tmp_path / "run"), answerer=Replies())
    total = result.summary["cvqa"]["rows"][-1]
    # by hand: originals "2" right, "yes" right; counterfactuals "not 3" unknown (wrong), "no" right
    assert total["original"]["value"] == 1.0 and total["counterfactual"]["value"] == 0.5
    assert total["drop"]["value"] == 0.5 and total["unknown_counterfactual"] == 0.5
    report = (tmp_path / "run" / "report.md").read_text()
    assert "As C-VQA's Table 1" in report and "drop = original − counterfactual, in points" in report


class Replies:
    """A model that answers the originals right, and the counterfactuals with a denial and a right "No."."""

    needs_image = True

    def generate(self, prompts):  # noqa: ANN001, ANN201
        replies = {"How many birds are there": "2", "Is there a bird": "Yes.", "How many birds would": "not 3",
                   "Would there be a bird": "No."}
        return [next(reply for start, reply in replies.items() if start in p.text) for p in prompts]

    def close(self) -> None:
        pass


def test_a_reply_that_hedges_on_or_denies_an_option_picks_none():
    from cftools.evaluate.predictions import read_option

    cues = ["bloom", "bee", "flower", "sunshine"]
    # before: each read as the option it names, though it denies it or only guesses
    for reply in ("not bloom", "Not the bee.", "It is not the flower.", "maybe bloom", "Probably the flower",
                  "I am not sure, bloom?"):
        assert read_option(reply, cues) is None, reply
    for reply, option in (("bloom", "bloom"), ("Bloom.", "bloom"), ("The cue is bloom.", "bloom"),
                          ("The answer is the bee", "bee")):
        assert read_option(reply, cues) == option, reply
    assert read_option("Bloom or bee", cues) is None


def test_the_mucr_report_says_each_exp_part_takes_its_own_best_reference():
    from cftools.evaluate.report import ScoreFormat, pct, points, rate
    from cftools.kinds import get_kind
    from cftools.kinds.mucr.explanations import judge_result

    # three references, each best on another part: Exp's parts come from three different references
    exp = judge_result(["S1: 9, S2: 0, S3: 0", "S1: 0, S2: 9, S3: 0", "S1: 0, S2: 0, S3: 9"], "best-match")
    assert exp["parts"] == {"S1": 9, "S2": 9, "S3": 9} and exp["exp_score"] == 9.0
    evaluate = get_kind("mucr").hooks.evaluate
    section = evaluate.summarize([{"id": "m", "kind": "mucr", "group": "g", "exp": exp}])
    title = evaluate.report_table(section, ScoreFormat(pct=pct, rate=rate, points=points)).title
    # before: "Exp parts from the best-matching reference", as if one reference gave all three
    assert "each Exp part from its best-matching reference" in title


def test_a_tie_a_nan_or_no_score_ranks_no_option():
    """Before: the first option won a tie, a NaN loss (fp16 overflow) or a harness sample with no losses, so a
    model was credited whenever the gold option came first."""
    import math

    from cftools.evaluate.vlm import best_option

    def losses(*values):
        return [{"mean_loss": v, "sum_logprob": None if v is None else -v} for v in values]

    assert best_option(losses(1.0, 0.5), "mean-loss") == 1 and best_option(losses(1.0, 0.5), "sum-logprob") == 1
    assert best_option(losses(2.0, math.inf), "mean-loss") == 0  # an option of probability 0 loses
    for scores in (losses(0.5, 0.5), losses(math.nan, 0.5), losses(0.5, math.nan), losses(math.inf, math.inf),
                   losses(None, None)):
        assert best_option(scores, "mean-loss") is None, scores
        assert best_option(scores, "sum-logprob") is None, scores


def test_a_ranked_question_without_a_winner_is_unknown_and_wrong(tmp_path):
    from cftools.evaluate.run import EvalOptions, run_eval
    from fixtures_eval import cfmm_record, png_bytes, write_release

    records = [cfmm_record(1, "color"), cfmm_record(2, "color")]
    release = write_release(tmp_path / "rel", records, {r["id"]: png_bytes(n) for n, r in enumerate(records)})
    result = run_eval(release, "blind", options=EvalOptions(mode="rank", out_dir=tmp_path / "run"),
                      answerer=EqualLosses())
    lines = result.predictions
    assert lines and all(p["parsed"] is None and p["unknown"] and p["correct"] is False for p in lines)
    row = result.summary["cfmm"]["rows"][-1]
    assert row["acc_b"]["value"] == 0.0 and row["unknown_b"] == 1.0  # before: acc_b 1.0, the gold "red" came first


class EqualLosses:
    """A ranker that cannot tell the options apart: every option scores the same."""

    needs_image = False

    def score_options(self, prompts):  # noqa: ANN001, ANN201
        return [[{"sum_logprob": -2.0, "mean_loss": 1.0, "n_tokens": 1} for _ in p.options] for p in prompts]

    def close(self) -> None:
        pass


def test_a_judge_part_given_as_a_range_or_on_another_scale_is_not_read():
    """Before: "S1: 7-8" read as 7, "S3: 5/5" as 5 and "S1: 7/100" as 7 (its "/10" taken for the 0-10 scale)."""
    from cftools.kinds.mucr.explanations import judge_result, parse_judge_parts

    for reply in ("S1: 7-8, S2: 8, S3: 5", "S1: 7, S2: 8, S3: 5/5", "S1: 7/100, S2: 8, S3: 5",
                  "S1: 7 to 8, S2: 8, S3: 5", "S1: 1e1, S2: 2, S3: 3"):
        assert parse_judge_parts(reply) is None, reply
    assert judge_result(["S1: 7-8, S2: 8, S3: 5"])["exp_score"] is None  # not judged, never a guessed Exp
    for reply in ("S1: 7, S2: 8, S3: 5", "S1: 7 out of 10, S2: 8/10, S3: 5 / 10.", "S1=7; S2=8; S3=5."):
        assert parse_judge_parts(reply) == {"S1": 7, "S2": 8, "S3": 5}, reply
