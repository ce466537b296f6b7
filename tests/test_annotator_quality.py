"""Annotator quality (issue 33): the Wilson interval against published figures, the naming rule, the release error
rate (PPI with an audit, the audit alone, the model without one), the store readers (kappa per pair, overturn
rates, lead times) on a small real SQLite store, the renderers, and the scripted annotators."""

from __future__ import annotations

import random

import pytest

from cftools.annotate.quality import (
    DEFAULT_CONTROL_RATE, DEFAULT_MIN_ACCURACY, DEFAULT_MIN_CONTROLS, ControlScore, Decider, ItemEvidence,
    analysis_croissant, analysis_markdown, annotation_analysis, item_evidence, lead_times, named_below,
    overturn_rates, pair_kappas, predicted_error, release_error_rate, wilson_interval,
)
from cftools.boundary import workspace_boundary
from cftools.models import ACCEPTED, IN_REVIEW, AnnotationTask, Item, Judgment
from simulated_annotators import always_agrees, careful, hurried, random_clicker

# ---------------------------------------------------------------- intervals and naming


@pytest.mark.parametrize("correct, n, low, high", [
    # Newcombe RG (1998), "Two-sided confidence intervals for the single proportion: comparison of seven methods",
    # Statistics in Medicine 17:857-872, Table II, method 3 (score interval without continuity correction).
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
])
def test_wilson_interval_matches_newcombes_worked_examples(correct, n, low, high):
    interval = wilson_interval(correct, n)
    assert interval.estimate == pytest.approx(correct / n)
    assert (round(interval.low, 4), round(interval.high, 4)) == (low, high)
    assert interval.method == "Wilson score interval, 95%"


def test_wilson_interval_is_none_without_trials_and_refuses_impossible_counts():
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_a_person_is_named_only_when_the_interval_lies_wholly_below_and_after_enough_controls():
    assert DEFAULT_CONTROL_RATE == 0.1 and 0 < DEFAULT_MIN_ACCURACY < 1
    assert named_below(5, 20, 0.8)  # 25%: interval well below 0.8
    assert not named_below(15, 20, 0.8)  # 75%: the interval reaches above 0.8
    assert not named_below(0, DEFAULT_MIN_CONTROLS - 1, 0.8)  # too few controls to name anyone
    assert named_below(0, DEFAULT_MIN_CONTROLS, 0.8)
    assert not named_below(0, 0, 0.8)


# ---------------------------------------------------------------- the release's error rate


def _release(n: int, seed: int, audit_share: float = 0.0):
    """N items, each decided by two agreeing careful judges (or adjudicated by one), their true errors drawn from
    the predicted error; an audit of AUDIT_SHARE of them."""
    rng = random.Random(seed)
    judges = [Decider("a", 90, 100), Decider("b", 85, 100), Decider("c", 95, 100)]
    items, wrong = [], {}
    for i in range(n):
        if rng.random() < 0.2:
            deciders, adjudicated = (rng.choice(judges),), True
        else:
            deciders, adjudicated = tuple(rng.sample(judges, 2)), False
        items.append(ItemEvidence(f"i{i}", deciders, adjudicated))
        q = predicted_error([d.correct / d.controls for d in deciders])
        wrong[f"i{i}"] = rng.random() < q
    audited = rng.sample(sorted(wrong), int(audit_share * n))
    return items, wrong, {key: not wrong[key] for key in audited}


def test_predicted_error_of_agreeing_judges_and_of_an_adjudicator():
    assert predicted_error([0.9, 0.9]) == pytest.approx(0.01 / (0.81 + 0.01))
    assert predicted_error([0.8]) == pytest.approx(0.2)


def test_release_error_rate_with_an_audit_is_prediction_powered_and_narrower_with_a_telling_predictor():
    # Wrong items were decided by an adjudicator who failed every control, right ones by two who passed every one:
    # the predictor tells them apart, so the audit needs to correct it little and the interval is narrow.
    good, bad = (Decider("a", 30, 30), Decider("b", 30, 30)), (Decider("c", 0, 30),)
    wrong = {f"i{i}": i % 20 == 0 for i in range(2000)}  # 5%
    items = [ItemEvidence(key, bad if w else good, adjudicated=w) for key, w in wrong.items()]
    audited = sorted(wrong)[::10]  # 200 items, 10 of them wrong
    rate = release_error_rate(items, {key: not wrong[key] for key in audited})
    assert "prediction-powered inference" in rate.interval.method and not rate.model_based
    assert (rate.audited, rate.audited_wrong) == (200, 10)
    assert rate.interval.low <= 0.05 <= rate.interval.high
    audit_alone = wilson_interval(10, 200)
    assert rate.interval.high - rate.interval.low < (audit_alone.high - audit_alone.low) / 2


def test_with_a_predictor_that_tells_nothing_the_audit_interval_is_wilsons_of_the_audit():
    same = (Decider("a", 27, 30), Decider("b", 27, 30))
    wrong = {f"i{i}": i % 25 == 0 for i in range(20000)}  # 4%
    items = [ItemEvidence(key, same) for key in wrong]
    audited = sorted(wrong)[::50]  # 400 items
    found = sum(wrong[key] for key in audited)
    rate = release_error_rate(items, {key: not wrong[key] for key in audited}).interval
    classical = wilson_interval(found, len(audited))
    share_of_rest = (rate.estimate * 20000 - found) / (20000 - len(audited))
    assert share_of_rest == pytest.approx(classical.estimate)
    # the interval of the release's own items: Wilson's, a little wider for the items not audited (1/n + 1/m)
    assert rate.low == pytest.approx(classical.low, abs=0.002) and rate.high == pytest.approx(classical.high, abs=0.002)


def test_release_error_rate_without_controls_falls_back_to_the_audit_alone():
    items, _, audit = _release(300, seed=2, audit_share=0.2)
    items = [ItemEvidence(e.item, tuple(Decider(d.person, 0, 0) for d in e.deciders), e.adjudicated) for e in items]
    rate = release_error_rate(items, audit)
    wrong = sum(1 for right in audit.values() if not right)
    classical = wilson_interval(wrong, len(audit))
    assert (rate.interval.estimate, rate.interval.low, rate.interval.high) == \
           (classical.estimate, classical.low, classical.high)
    assert "audited sample alone" in rate.interval.method
    assert release_error_rate(items) is None  # neither audit nor predictor: no figure


def test_release_error_rate_without_an_audit_is_model_based_and_says_so():
    items, wrong, _ = _release(500, seed=3)
    rate = release_error_rate(items, draws=500)
    assert rate.model_based and rate.audited == 0
    assert "model-based" in rate.interval.method and "weaker than an audit" in rate.interval.method
    assert rate.interval.low <= sum(wrong.values()) / len(wrong) <= rate.interval.high
    assert release_error_rate(items, draws=500) == rate  # seeded: the same figure twice


def test_an_audit_of_items_not_released_is_refused():
    items, _, _ = _release(10, seed=4)
    with pytest.raises(ValueError, match="not released"):
        release_error_rate(items, {"elsewhere": True})


# ---------------------------------------------------------------- the store readers


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Three cvqa items: item 1 judged alike by ann1 and ann2; item 2 judged apart and adjudicated by ann3 (for
    ann1's verdict); item 3 judged by ann1 and ann2 with a correction each, the same; a deleted task's judgment
    and someone else's judgment of an assigned task do not count; a MuCR pair's select task judged apart."""
    from cftools.workspace import init_workspace

    ws = init_workspace(tmp_path_factory.mktemp("quality") / "ws")
    with ws.store.write() as session:
        items = [Item(key=f"q{i}", kind="cvqa", group="boolean", question=f"Q{i}?", answer="2", status=ACCEPTED)
                 for i in range(1, 4)]
        session.add_all(items)
        session.flush()

        def judged(item, person, purpose="verify", state="decided", assignee=None, lead=None, **answer):
            task = AnnotationTask(item_id=item.id, purpose=purpose, server="http://s", ls_project_id=1,
                                  ls_task_id=None, state=state, assignee=assignee or person)
            session.add(task)
            session.flush()
            raw = {"lead_time": lead, "fields": answer.pop("raw_fields", None)}
            session.add(Judgment(task_id=task.id, annotator=person, raw=raw, **answer))

        yes = dict(related=True, answer_correct=True)
        no = dict(related=True, answer_correct=False)
        judged(items[0], "ann1@x", lead=10.0, **yes)
        judged(items[0], "ann2@x", lead=30.0, **yes)
        judged(items[1], "ann1@x", lead=20.0, **yes)
        judged(items[1], "ann2@x", lead=40.0, **no, corrected_answer="3")
        judged(items[1], "ann3@x", purpose="adjudicate", lead=5.0, decision="accept_corrected",
               corrected_answer="three")
        judged(items[2], "ann1@x", lead=30.0, **no, corrected_answer="4")
        judged(items[2], "ann2@x", lead=60.0, **no, corrected_answer="four")
        judged(items[2], "ann2@x", state="deleted", lead=999.0, **yes)  # a deleted task: not counted
        judged(items[2], "intruder@x", assignee="ann1@x", lead=999.0, **yes)  # not the assignee's: not counted
        items[2].status = IN_REVIEW
        pair = Item(key="m1", kind="mucr", group="pair", question="cause and effect", status=IN_REVIEW)
        session.add(pair)
        session.flush()
        for person, effect in (("ann1@x", 2), ("ann2@x", 3)):  # a kind's own task: one unit (style) each
            judged(pair, person, purpose="select:photo", raw_fields={"cause": 1, "effect": effect})
    yield ws
    ws.close()


def test_pair_kappas_compare_the_verdicts_of_the_items_both_judged(store):
    with store.store.session() as session:
        pairs = pair_kappas(session, kind="cvqa")
        own = pair_kappas(session, kind="mucr")
    assert [(p.kind, p.task, p.first, p.second, p.n) for p in pairs] == [("cvqa", "verify", "ann1@x", "ann2@x", 3)]
    # a kind's own task: its agreement labels together (MuCR select: the picks), per task, not per unit
    assert [(p.task, p.n, p.percent_agreement) for p in own] == [("select", 1, 0.0)]
    # verdicts: accepted/accepted, accepted/accepted: 3, accepted: 4/accepted: 4 (the corrections' normal form)
    assert pairs[0].percent_agreement == pytest.approx(200 / 3)
    assert pairs[0].kappa == pytest.approx(0.5)  # sklearn: po 2/3, pe 1/3 (labels: accepted, accepted: 3, ...: 4)


def test_overturn_rates_count_the_adjudications_that_decided_otherwise(store):
    with store.store.session() as session:
        rates = {r.person: r for r in overturn_rates(session)}
    assert (rates["ann1@x"].adjudicated, rates["ann1@x"].overturned) == (1, 1)  # ann1 accepted 2; adjudged 3
    assert (rates["ann2@x"].adjudicated, rates["ann2@x"].overturned) == (1, 0)  # "3" and "three": the same
    assert rates["ann1@x"].interval.method.startswith("Wilson")
    assert "ann3@x" not in rates


def test_lead_times_per_person_and_task(store):
    with store.store.session() as session:
        speeds = {(s.person, s.task): s for s in lead_times(session)}
    assert (speeds[("ann1@x", "verify")].n, speeds[("ann1@x", "verify")].median_s) == (3, 20.0)
    assert speeds[("ann2@x", "verify")].p90_s == pytest.approx(56.0)  # 30, 40, 60: numpy's linear percentile
    assert speeds[("ann3@x", "adjudicate")].median_s == 5.0
    assert not any(person == "intruder@x" for person, _ in speeds)


def test_the_analysis_uses_release_pseudonyms_and_renders_for_the_card_and_croissant(store):
    controls = {"ann1@x": ControlScore(20, 20), "ann2@x": ControlScore(2, 20)}
    items = [ItemEvidence("q1", (Decider("ann1@x", 20, 20), Decider("ann2@x", 2, 20)))]
    pseudonym = workspace_boundary(store).pseudonym  # the workspace's keyed ids, as a release names people
    with store.store.session() as session:
        analysis = annotation_analysis(session, controls, release_error_rate(items, draws=200), kind="cvqa",
                                       pseudonym=pseudonym)
    ids = {p.id: p for p in analysis.people}
    assert set(ids) == {pseudonym("ann1@x"), pseudonym("ann2@x"), pseudonym("ann3@x")}
    assert ids[pseudonym("ann2@x")].named and not ids[pseudonym("ann1@x")].named
    assert ids[pseudonym("ann1@x")].overturned == 1 and ids[pseudonym("ann1@x")].lead_time_median_s == 20.0
    card, sentences = analysis_markdown(analysis), analysis_croissant(analysis)
    for text in (card, "\n".join(sentences)):
        assert "@x" not in text  # no email anywhere
        assert pseudonym("ann2@x") in text and "model-based" in text
    assert "| annotator | controls |" in card and "Cohen's kappa" in card
    assert all(isinstance(s, str) for s in sentences)
    assert analysis.as_dict()["error_rate"]["model_based"] is True


def test_item_evidence_names_the_adjudicator_or_the_agreeing_judges(store):
    controls = {"ann1@x": ControlScore(9, 10), "ann3@x": ControlScore(10, 10)}
    with store.store.session() as session:
        evidence = {e.item: e for e in item_evidence(session, controls, ["q1", "q2", "q9"])}
    assert [d.person for d in evidence["q1"].deciders] == ["ann1@x", "ann2@x"] and not evidence["q1"].adjudicated
    assert evidence["q1"].deciders[1].controls == 0  # ann2 judged no control
    assert evidence["q2"].adjudicated and evidence["q2"].deciders == (Decider("ann3@x", 10, 10),)
    assert evidence["q9"].deciders == ()  # nobody judged it


# ---------------------------------------------------------------- scripted annotators


def test_scripted_annotators_behave_as_named():
    options = ["yes", "no"]
    tasks = [("yes", "yes" if i % 2 else "no") for i in range(2000)]

    def accuracy(person):
        return sum(person.judge(truth, proposed, options).verdict(proposed) == truth
                   for truth, proposed in tasks) / len(tasks)

    assert accuracy(careful(seed=1)) == pytest.approx(0.9, abs=0.03)
    assert accuracy(hurried(seed=1)) == pytest.approx(0.75, abs=0.03)
    assert accuracy(random_clicker(seed=1)) == pytest.approx(0.5, abs=0.03)
    agrees = always_agrees()
    assert all(agrees.judge(truth, proposed, options).answer_correct for truth, proposed in tasks[:20])
    assert [careful(seed=5).judge("yes", "no", options) for _ in range(3)] == \
           [careful(seed=5).judge("yes", "no", options) for _ in range(3)]  # seeded
