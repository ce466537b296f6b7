"""The VLMEvalKit folder's README names each file's own kind's scores."""

from __future__ import annotations

from cftools.release.vlmevalkit import MCQ, OPEN, YES_NO, card_text


def test_each_file_names_its_own_kinds_scores():
    """Before: every _MCQ file said the kind's scores were CFMM acc+, MuCR's Cue file included."""
    datasets = {"CF_b_cfmm_MCQ": MCQ, "CF_b_mucr_MCQ": MCQ, "CF_b_cvqa_YN": YES_NO, "CF_b_cvqa_OpenEnded": OPEN}
    kinds = {d: d.split("_")[2] for d in datasets}
    rows = {line.split("`")[1]: line for line in card_text("b", "1.0", datasets, kinds).splitlines()
            if line.startswith("| `CF_")}
    assert "(CFMM acc+)" in rows["CF_b_cfmm_MCQ.tsv"]
    assert "(MuCR Cue)" in rows["CF_b_mucr_MCQ.tsv"] and "CFMM" not in rows["CF_b_mucr_MCQ.tsv"]
    assert "(C-VQA per group)" in rows["CF_b_cvqa_YN.tsv"]
