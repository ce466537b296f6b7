"""The VLMEvalKit folder's README names each file's own kind's scores."""

from __future__ import annotations

from cftools.kinds.registry import get_kind
from cftools.release.vlmevalkit import MCQ, OPEN, YES_NO, card_text, kind_scores


def test_each_file_names_its_own_kinds_scores():
    """Before: every _MCQ file said the kind's scores were CFMM acc+, MuCR's Cue file included."""
    datasets = {"CF_b_cfmm_MCQ": MCQ, "CF_b_mucr_MCQ": MCQ, "CF_b_cvqa_YN": YES_NO, "CF_b_cvqa_OpenEnded": OPEN}
    scores = {d: kind_scores(get_kind(d.split("_")[2])) for d in datasets}
    rows = {line.split("`")[1]: line for line in card_text("b", "1.0", datasets, scores).splitlines()
            if line.startswith("| `CF_")}
    assert "(CFMM: acc_b, acc_c, acc_plus" in rows["CF_b_cfmm_MCQ.tsv"]
    assert "(MuCR: c2e, e2c, cue" in rows["CF_b_mucr_MCQ.tsv"] and "CFMM" not in rows["CF_b_mucr_MCQ.tsv"]
    assert "(C-VQA: original, counterfactual, drop" in rows["CF_b_cvqa_YN.tsv"]
