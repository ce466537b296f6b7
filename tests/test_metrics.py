"""Metric functions on hand-computed examples."""

from __future__ import annotations

import pytest

from cftools.evaluate.metrics import accuracy, bootstrap_ci, summarize
from cftools.kinds import get_kind
from cftools.kinds.mucr.model import exp_score

cvqa_metrics = get_kind("cvqa").hooks.evaluate.summarize
cfmm_metrics = get_kind("cfmm").hooks.evaluate.summarize
mucr_metrics = get_kind("mucr").hooks.evaluate.summarize


def q(correct, unknown=False):
    return {"correct": correct, "unknown": unknown}


def item(i, group, orig, cf, kind="cvqa", unknown_cf=False):
    return {"id": str(i), "kind": kind, "group": group, "original": q(orig), "counterfactual": q(cf, unknown_cf)}


def test_accuracy_and_interval():
    score = accuracy([True, True, False, True])
    assert score.value == pytest.approx(0.75)
    assert score.n == 4
    assert 0.0 <= score.low <= 0.75 <= score.high <= 1.0
    assert accuracy([]).value is None


def test_bootstrap_is_deterministic_and_degenerate_for_constant_data():
    values = [1, 0, 1, 1, 0, 1, 0, 1]
    assert bootstrap_ci(values) == bootstrap_ci(values)
    assert bootstrap_ci([1.0] * 10) == (1.0, 1.0)


def test_cvqa_table_per_group_and_drop():
    outcomes = [
        item(1, "boolean", True, False),
        item(2, "boolean", True, True),
        item(3, "numerical-direct", True, False, unknown_cf=True),
        item(4, "numerical-direct", False, False),
        item(5, "numerical-direct", True, True),
    ]
    rows = {r["group"]: r for r in cvqa_metrics(outcomes)["rows"]}
    assert list(rows) == ["boolean", "numerical-direct", "total"]
    assert rows["boolean"]["original"]["value"] == pytest.approx(1.0)
    assert rows["boolean"]["counterfactual"]["value"] == pytest.approx(0.5)
    assert rows["boolean"]["drop"]["value"] == pytest.approx(0.5)
    assert rows["numerical-direct"]["original"]["value"] == pytest.approx(2 / 3)
    assert rows["numerical-direct"]["counterfactual"]["value"] == pytest.approx(1 / 3)
    assert rows["numerical-direct"]["unknown_counterfactual"] == pytest.approx(1 / 3)
    assert rows["total"]["n"] == 5
    assert rows["total"]["original"]["value"] == pytest.approx(0.8)
    assert rows["total"]["counterfactual"]["value"] == pytest.approx(0.4)
    assert rows["total"]["drop"]["value"] == pytest.approx(0.4)


def test_cfmm_acc_plus_needs_both_questions_right():
    outcomes = [
        item(1, "count", True, True, "cfmm"),
        item(2, "count", True, False, "cfmm"),
        item(3, "count", False, True, "cfmm"),
        item(4, "color", True, True, "cfmm"),
    ]
    rows = {r["type"]: r for r in cfmm_metrics(outcomes)["rows"]}
    assert rows["count"]["acc_b"]["value"] == pytest.approx(2 / 3)
    assert rows["count"]["acc_c"]["value"] == pytest.approx(2 / 3)
    assert rows["count"]["acc_plus"]["value"] == pytest.approx(1 / 3)
    assert rows["color"]["acc_plus"]["value"] == pytest.approx(1.0)
    assert rows["total"]["acc_plus"]["value"] == pytest.approx(0.5)
    assert rows["total"]["acc_b"]["value"] == pytest.approx(0.75)


def test_exp_weighting():
    assert exp_score([10, 10, 10]) == pytest.approx(10.0)
    assert exp_score([8, 4, 6]) == pytest.approx(0.25 * 8 + 0.25 * 4 + 0.5 * 6)  # 6.0
    assert exp_score([0, 0, 10]) == pytest.approx(5.0)
    assert exp_score([10, 0, 0]) == pytest.approx(2.5)
    with pytest.raises(ValueError):
        exp_score([1, 2])
    with pytest.raises(ValueError):
        exp_score([1, 2, 11])


def test_mucr_metrics():
    outcomes = [
        {"id": "a", "kind": "mucr", "c2e": q(True), "e2c": q(False), "cue": q(True),
         "exp": {"similarities": [8, 4, 6]}},
        {"id": "b", "kind": "mucr", "c2e": q(True), "e2c": q(True), "cue": q(False, unknown=True),
         "exp": {"similarities": [0, 0, 10]}},
        {"id": "c", "kind": "mucr", "c2e": q(False), "e2c": q(True), "cue": q(True), "exp": {"similarities": None}},
    ]
    m = mucr_metrics(outcomes)
    assert m["c2e"]["value"] == pytest.approx(2 / 3)
    assert m["e2c"]["value"] == pytest.approx(2 / 3)
    assert m["cue"]["value"] == pytest.approx(2 / 3)
    assert m["unknown_cue"] == pytest.approx(1 / 3)
    assert m["exp"]["value"] == pytest.approx((6.0 + 5.0) / 2)
    assert m["exp"]["n"] == 2
    assert m["exp_not_judged"] == 1


def test_summarize_splits_by_kind():
    s = summarize([item(1, "boolean", True, False), item(2, "count", True, True, "cfmm")])
    assert set(s) == {"cvqa", "cfmm"}
