"""Annotator quality: each person's accuracy on control items with its interval, agreement per pair of people,
adjudication overturn rates, speed, and the release's own error rate (issue 33). Pure functions and readers of
the store; `annotate status`, the data card, croissant.json and `cftools verify` show what they return.

The figures, in words (docs/annotate.md, "Annotator quality: the figures", says the same):

- **Accuracy** of a person: the share of their control items (items with a settled answer) whose judgment agrees
  with the settled answer, with a Wilson score interval (scipy's `binomtest(...).proportion_ci(method="wilson")`).
- **Named**: a person is named (and gets no new work) when their accuracy interval lies wholly below
  `min_accuracy` — its upper end is under it — once they have judged at least `DEFAULT_MIN_CONTROLS` controls.
- **Verdict** of one judgment: what that judgment alone would make of the item, by the kind's own decision rule
  (`AnnotateHooks.decide(answer, answer)`: accepted, accepted with a corrected answer, rejected); for a kind's own task
  (MuCR select, explain) its agreement labels taken together.
- **Agreement of a pair** of people: over the items both judged in the same task (live, counted tasks), the share
  of items with the same verdict and Cohen's kappa over the verdicts (scikit-learn; None where undefined, e.g.
  when both always gave one and the same verdict).
- **Overturn rate** of a person: of the items they verified that went to adjudication, the share whose
  adjudication decided otherwise than their verdict, with a Wilson interval.
- **Lead time**: Label Studio's `lead_time` of each judgment (seconds the annotation was open); per person the
  median and the 90th percentile.
- **Release error rate**: the share of released items whose released answer is wrong. Each item's *predicted*
  error probability comes from the control accuracies p of the people whose judgments decided it: judges who
  agreed are wrong together with probability prod(1 - p) / (prod(p) + prod(1 - p)) (both wrong, the same way, as
  on a yes/no question); an adjudicated item is wrong when its adjudicator is (1 - p). With an audited random
  sample (`annotate audit`): prediction-powered inference (the PPI++ estimate, with a score interval: see
  `_ppi_interval`) of the share of wrong items among those not audited, the audited ones counting as the audit
  found them; without predictor, the Wilson interval of the audit alone. Without an audit: a model-based
  estimate whose interval comes from a parametric bootstrap over each person's accuracy (Beta(correct + 1/2,
  wrong + 1/2), Jeffreys) and the items' outcomes: it holds only as far as the model does, and says so.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Any, Callable, Collection, Mapping, Optional, Sequence

from cftools.annotate.projects import DECIDED, GONE
from cftools.annotate.purpose import Purpose
from cftools.annotate.rules import label_agreement
from cftools.judgments import ADJUDICATE, MEASURING, VERIFY, Answer, Decision, normal_correction
from cftools.models import NEEDS_ADJUDICATION
from cftools.store import in_chunks

CONFIDENCE = 0.95
# Chosen by bench/bench_annotators.py (exact sequential figures in docs/annotate.md): a person is named once the
# upper end of their Wilson 95% accuracy interval falls below 0.8, checked after every control from the 10th on.
# Checking after every control is repeated testing: from the first control on, one wrong answer in the first
# two would name a careful person (90% accurate) in about 11% of runs; waiting for 10 controls brings that to
# 0.4% over 1,000 tasks (100 controls), while a random clicker (50% accurate at best: a yes/no question) is
# still named within 25 controls in 96% of runs. A threshold of 0.85 would name careful people in 3% of runs;
# one of 0.75 would name random clickers within 25 controls in only 86%.
DEFAULT_MIN_ACCURACY = 0.8
DEFAULT_MIN_CONTROLS = 10
# About 1 in 10 tasks a control: 25 controls (enough to name a random clicker) within 250 tasks.
DEFAULT_CONTROL_RATE = 0.1


# ---------------------------------------------------------------- intervals and naming


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    method: str  # the method in words, e.g. "Wilson score interval, 95%"

    def as_dict(self) -> dict[str, Any]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "method": self.method}


def percent(confidence: float) -> str:
    return f"{100 * confidence:g}%"


def wilson_interval(correct: int, n: int, confidence: float = CONFIDENCE) -> Optional[Interval]:
    """CORRECT of N as a proportion with its Wilson score interval; None when N is 0."""
    if n == 0:
        return None
    if not 0 <= correct <= n:
        raise ValueError(f"{correct} correct of {n}: not a count of successes")
    from scipy.stats import binomtest

    ci = binomtest(correct, n).proportion_ci(confidence_level=confidence, method="wilson")
    return Interval(correct / n, float(ci.low), float(ci.high), f"Wilson score interval, {percent(confidence)}")


def share_with_interval(part: int, whole: int) -> tuple[Optional[float], Optional[list[float]]]:
    """PART of WHOLE and its Wilson interval as [low, high], as reports write them; (None, None) when WHOLE is 0."""
    interval = wilson_interval(part, whole)
    if interval is None:
        return None, None
    return part / whole, [interval.low, interval.high]


def named_below(correct: int, n: int, min_accuracy: float = DEFAULT_MIN_ACCURACY, confidence: float = CONFIDENCE,
                min_controls: int = DEFAULT_MIN_CONTROLS) -> bool:
    """True when a person's accuracy interval (CORRECT of N controls) lies wholly below MIN_ACCURACY, once they
    have judged MIN_CONTROLS controls (fewer never name anyone: see DEFAULT_MIN_CONTROLS)."""
    if n < max(min_controls, 1):
        return False
    return wilson_interval(correct, n, confidence).high < min_accuracy


@dataclass(frozen=True)
class ControlScore:
    """A person's controls: how many they judged, how many of those agree with the settled answer."""

    correct: int
    n: int

    @property
    def accuracy(self) -> Optional[Interval]:
        return wilson_interval(self.correct, self.n)


# ---------------------------------------------------------------- verdicts


def decision_label(decision: Decision) -> Optional[str]:
    """A decision as one comparable label: the status, and the corrected answer in its normal form; None when it
    decides nothing (adjudication needed)."""
    if decision.status == NEEDS_ADJUDICATION:
        return None
    if decision.corrected_answer is not None:
        return f"{decision.status}: {normal_correction(decision.corrected_answer)}"
    return decision.status


def verdict(kind: str, task: str, answer: Answer) -> Optional[str]:
    """What one judgment alone makes of its item: verify by the kind's decision rule applied to the judgment
    twice; a kind's own task by its agreement labels together. None when it says nothing comparable."""
    from cftools.kinds import get_kind

    if task == VERIFY:
        return decision_label(get_kind(kind).hooks.annotate.decide(answer, answer))
    labels = get_kind(kind).hooks.annotate.agreement_labels(task, answer)
    return "; ".join(f"{q}={v}" for q, v in sorted(labels.items())) or None


# ---------------------------------------------------------------- the store's judgments


@dataclass(frozen=True)
class JudgmentRow:
    kind: str
    item_id: int
    item_key: str
    purpose: Purpose  # verify, adjudicate, or a kind's task (with its unit)
    person: str
    answer: Answer
    lead_time: Optional[float]
    item_data: Optional[dict] = None

    @property
    def task(self) -> str:
        return self.purpose.task


def answer_of(judgment: Any) -> Answer:
    """A stored Judgment row as the Answer the decision rules read."""
    return Answer(related=judgment.related, answer_correct=judgment.answer_correct,
                  corrected_answer=judgment.corrected_answer, flags=list(judgment.flags or []),
                  comment=judgment.comment, decision=judgment.decision,
                  fields=(judgment.raw or {}).get("fields") or {})


def counts_toward_item() -> tuple[Any, ...]:
    """The SQL conditions on a Judgment joined to its AnnotationTask that make it count (see `counted_judgments`):
    the one rule, for every query that reads judgments toward their items (the quality figures, `cftools report`)."""
    from sqlalchemy import or_

    from cftools.models import AnnotationTask, Judgment

    return (AnnotationTask.state.not_in(GONE), AnnotationTask.purpose.not_in(MEASURING),
            or_(AnnotationTask.assignee.is_(None), AnnotationTask.assignee == Judgment.annotator))


def counted_judgments(session: Any, kind: Optional[str] = None,
                      item_keys: Optional[Collection[str]] = None) -> list[JudgmentRow]:
    """Every judgment that counts: on a live task (not deleted, returned or requeued) that judges its item (not a
    control or audit task, which measure their person), made by the task's assignee (or in a shared project of old,
    by anyone); only KIND's items and ITEM_KEYS' items when given. The one place that
    says which judgments the quality figures read."""
    from sqlalchemy import select

    from cftools.models import AnnotationTask, Item, Judgment

    query = (select(Item.kind, Item.id, Item.key, AnnotationTask.purpose, Judgment)
             .join(AnnotationTask, AnnotationTask.id == Judgment.task_id)
             .join(Item, Item.id == AnnotationTask.item_id)
             .where(*counts_toward_item())
             .order_by(Judgment.annotated_at, Judgment.ls_annotation_id, Judgment.id))
    if kind is not None:
        query = query.where(Item.kind == kind)
    wanted = set(item_keys) if item_keys is not None else None
    rows = []
    for item_kind, item_id, key, purpose, j in session.execute(query):
        if wanted is not None and key not in wanted:
            continue
        lead = (j.raw or {}).get("lead_time")
        rows.append(JudgmentRow(item_kind, item_id, key, Purpose.parse(purpose), j.annotator, answer_of(j),
                                float(lead) if isinstance(lead, (int, float)) else None))
    # An adjudication's decision may read its item's data (a MuCR cue set): only those items' data is read.
    adjudicated = sorted({row.item_id for row in rows if row.task == ADJUDICATE})
    data: dict[int, Optional[dict]] = {}
    for part in in_chunks(adjudicated):
        data.update(session.execute(select(Item.id, Item.data).where(Item.id.in_(part))).all())
    return [replace(row, item_data=data.get(row.item_id)) if row.task == ADJUDICATE else row for row in rows]


# ---------------------------------------------------------------- agreement per pair


@dataclass(frozen=True)
class PairKappa:
    kind: str
    task: str  # verify, or a kind's own task (select, explain)
    first: str  # the two people, in sorted order (emails in the store; pseudonymous ids in a release)
    second: str
    n: int  # items both judged in this task
    percent_agreement: float  # 0-100: items with the same verdict
    kappa: Optional[float]  # Cohen's kappa over the verdicts; None where undefined

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def pair_kappas(session: Any, kind: Optional[str] = None,
                item_keys: Optional[Collection[str]] = None) -> list[PairKappa]:
    """Per kind, task and pair of people: the items both judged (same item, same task purpose, a verdict each),
    their percent agreement and Cohen's kappa over the verdicts."""
    return kappas_of(counted_judgments(session, kind, item_keys))


def kappas_of(rows: Sequence[JudgmentRow]) -> list[PairKappa]:
    units: dict[tuple[str, str, int, Purpose], dict[str, str]] = defaultdict(dict)
    for row in rows:
        if row.task == ADJUDICATE:
            continue
        label = verdict(row.kind, row.task, row.answer)
        if label is not None:
            units[(row.kind, row.task, row.item_id, row.purpose)].setdefault(row.person, label)
    pairs: dict[tuple[str, str, str, str], list[tuple[dict, dict]]] = defaultdict(list)
    for (kind, task, _, _), by_person in units.items():
        for first, second in combinations(sorted(by_person), 2):
            pairs[(kind, task, first, second)].append(({"verdict": by_person[first]}, {"verdict": by_person[second]}))
    out = []
    for (kind, task, first, second), labelled in sorted(pairs.items()):
        stats = label_agreement(labelled)["verdict"]
        out.append(PairKappa(kind, task, first, second, stats["n_pairs"], stats["percent_agreement"],
                             stats["cohen_kappa"]))
    return out


# ---------------------------------------------------------------- adjudication overturns


@dataclass(frozen=True)
class OverturnRate:
    kind: str
    person: str
    adjudicated: int  # items they verified that went to adjudication (and were decided there)
    overturned: int  # of those, items the adjudication decided otherwise than their verdict
    interval: Optional[Interval]  # of overturned / adjudicated

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "person": self.person, "adjudicated": self.adjudicated,
                "overturned": self.overturned, "interval": self.interval.as_dict() if self.interval else None}


def overturn_rates(session: Any, kind: Optional[str] = None,
                   item_keys: Optional[Collection[str]] = None) -> list[OverturnRate]:
    """Per kind and person: the adjudicated items they verified and how many the adjudication decided against
    their verdict (the verify task: a kind's own adjudication that settles its data, e.g. a MuCR cue set, is not
    compared with verify verdicts)."""
    from sqlalchemy import select

    from cftools.models import AnnotationTask

    rows = counted_judgments(session, kind, item_keys)
    decided = set(session.execute(select(AnnotationTask.item_id).where(
        AnnotationTask.purpose == ADJUDICATE, AnnotationTask.state == DECIDED)).scalars())
    return overturns_of(rows, decided)


def overturns_of(rows: Sequence[JudgmentRow], decided_adjudications: Collection[int]) -> list[OverturnRate]:
    from cftools.kinds import get_kind

    settled: dict[int, str] = {}
    for row in rows:
        if row.task == ADJUDICATE and row.item_id in decided_adjudications and row.item_id not in settled:
            decision = get_kind(row.kind).hooks.annotate.adjudicated(row.answer, row.item_data, row.person)
            label = decision_label(decision)
            if label is not None and not decision.data:
                settled[row.item_id] = label
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    seen: set[tuple[int, str]] = set()
    for row in rows:
        if row.task != VERIFY or row.item_id not in settled or (row.item_id, row.person) in seen:
            continue
        label = verdict(row.kind, VERIFY, row.answer)
        if label is None:
            continue
        seen.add((row.item_id, row.person))
        tally = counts[(row.kind, row.person)]
        tally[0] += 1
        tally[1] += label != settled[row.item_id]
    return [OverturnRate(kind, person, n, against, wilson_interval(against, n))
            for (kind, person), (n, against) in sorted(counts.items())]


# ---------------------------------------------------------------- speed


@dataclass(frozen=True)
class LeadTime:
    kind: str
    task: str  # verify, adjudicate, or a kind's own task
    person: str
    n: int  # judgments with a lead time
    median_s: float
    p90_s: float  # 90th percentile (linear interpolation)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def lead_times(session: Any, kind: Optional[str] = None,
               item_keys: Optional[Collection[str]] = None) -> list[LeadTime]:
    """Per kind, task and person: the median and 90th percentile of Label Studio's lead_time (seconds)."""
    return lead_times_of(counted_judgments(session, kind, item_keys))


def lead_times_of(rows: Sequence[JudgmentRow]) -> list[LeadTime]:
    import numpy as np

    seconds: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for row in rows:
        if row.lead_time is not None and math.isfinite(row.lead_time):
            seconds[(row.kind, row.task, row.person)].append(row.lead_time)
    return [LeadTime(kind, task, person, len(values), float(statistics.median(values)),
                     float(np.percentile(values, 90)))
            for (kind, task, person), values in sorted(seconds.items())]


# ---------------------------------------------------------------- the release's error rate


@dataclass(frozen=True)
class Decider:
    """One person whose judgment decided a released item, with their control counts."""

    person: str
    correct: int  # controls judged right
    controls: int  # controls judged


@dataclass(frozen=True)
class ItemEvidence:
    """How a released item was decided: the judges who agreed on it, or (ADJUDICATED) its adjudicator."""

    item: str  # the item's key
    deciders: tuple[Decider, ...]
    adjudicated: bool = False


@dataclass(frozen=True)
class ErrorRate:
    interval: Interval  # estimate, low, high of the share of released items whose answer is wrong; method named
    items: int  # released items
    audited: int  # items in the audited sample (0: none)
    audited_wrong: int  # audited items whose released answer the audit found wrong
    model_based: bool  # no audit: the figure rests on the accuracy model alone (weaker)

    def as_dict(self) -> dict[str, Any]:
        return {**self.interval.as_dict(), "items": self.items, "audited": self.audited,
                "audited_wrong": self.audited_wrong, "model_based": self.model_based}


def item_evidence(session: Any, controls: Mapping[str, ControlScore], item_keys: Collection[str],
                  kind: Optional[str] = None) -> list[ItemEvidence]:
    """How each of ITEM_KEYS' items was decided, from the store: its adjudicator when a decided adjudication
    settled it, else the people whose counted verify judgments decided it; CONTROLS (email -> ControlScore) give
    their control counts (none judged: 0 of 0). An item nobody judged has no deciders."""
    from sqlalchemy import select

    from cftools.models import AnnotationTask

    rows = counted_judgments(session, kind, item_keys)
    decided = set(session.execute(select(AnnotationTask.item_id).where(
        AnnotationTask.purpose == ADJUDICATE, AnnotationTask.state == DECIDED)).scalars())
    adjudicator: dict[str, str] = {}
    judges: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        if row.task == ADJUDICATE and row.item_id in decided:
            adjudicator.setdefault(row.item_key, row.person)
        elif row.task == VERIFY and row.person not in judges[row.item_key]:
            judges[row.item_key].append(row.person)

    def decider(person: str) -> Decider:
        score = controls.get(person) or ControlScore(0, 0)
        return Decider(person, score.correct, score.n)

    out = []
    for key in sorted(set(item_keys)):
        if key in adjudicator:
            out.append(ItemEvidence(key, (decider(adjudicator[key]),), adjudicated=True))
        else:
            out.append(ItemEvidence(key, tuple(decider(p) for p in judges.get(key, [])[:2])))
    return out


def predictor_available(items: Sequence[ItemEvidence]) -> bool:
    """Every item has deciders and every decider judged at least one control."""
    return bool(items) and all(e.deciders and all(d.controls > 0 for d in e.deciders) for e in items)


def predicted_error(accuracies: Sequence[float]) -> float:
    """The probability that an item decided by people of these ACCURACIES is wrong: all of them wrong the same way
    (as on a yes/no question), given that they agreed; one decider (an adjudicator): 1 - p."""
    right = math.prod(accuracies)
    wrong = math.prod(1 - p for p in accuracies)
    return wrong / (right + wrong) if right + wrong > 0 else 1.0


def _point_accuracy(d: Decider) -> float:
    return (d.correct + 0.5) / (d.controls + 1)  # the Jeffreys posterior mean: never exactly 0 or 1


def release_error_rate(items: Sequence[ItemEvidence], audit: Optional[Mapping[str, bool]] = None,
                       confidence: float = CONFIDENCE, draws: int = 2000, seed: int = 0,
                       drawn_among: str = "") -> Optional[ErrorRate]:
    """The share of released ITEMS whose released answer is wrong, with its interval and the method named. AUDIT:
    item key -> the released answer was right under audit (a random sample of the items, or of those DRAWN_AMONG
    says, in words: the method then names them). None when there is neither an audit nor a predictor (controls for
    every decider)."""
    keys = {e.item for e in items}
    audit = dict(audit or {})
    unknown = sorted(set(audit) - keys)
    if unknown:
        raise ValueError(f"the audit names {len(unknown)} items that are not released, e.g. {unknown[0]!r}")
    have_predictor = predictor_available(items)
    if audit:
        wrong = sum(1 for right in audit.values() if not right)
        if not have_predictor:
            interval = wilson_interval(wrong, len(audit), confidence)
            sample = sample_words(len(audit), len(items), drawn_among)
            interval = Interval(interval.estimate, interval.low, interval.high,
                                f"{interval.method} on the audited sample alone ({sample}; no control accuracies for "
                                "every judge)")
        else:
            interval = _ppi_interval(items, audit, confidence, drawn_among)
        return ErrorRate(interval, len(items), len(audit), wrong, model_based=False)
    if not have_predictor:
        return None
    return ErrorRate(_model_interval(items, confidence, draws, seed), len(items), 0, 0, model_based=True)


def sample_words(n: int, total: int, drawn_among: str = "") -> str:
    """How an audited sample of N items is described: of the TOTAL items, or drawn among those DRAWN_AMONG says."""
    return f"{n} items drawn among {drawn_among}" if drawn_among else f"{n} of {total} items"


def _ppi_interval(items: Sequence[ItemEvidence], audit: Mapping[str, bool], confidence: float,
                  drawn_among: str = "") -> Interval:
    """The prediction-powered estimate of the share of wrong items among those not audited (PPI++: the mean
    predicted error, corrected by the audit's errors less their predictions, the predictor power-tuned by lambda),
    with a score interval; the audited items count as the audit found them.

    Why not ppi-python's own interval: it is a Wald (CLT) interval, with the variance of the audit's errors
    estimated from the audit; with a few errors in a sample of a few hundred (a release with a 2-5% error rate,
    10% of 2,000 items audited) it covered the true rate in only 85-89% of simulated releases
    (bench/bench_annotators.py). Here, as in Wilson's interval, the errors' variance is that of the rate tested,
    theta (1 - theta), and the interval holds the thetas the estimate does not reject:
    (estimate - theta)^2 <= z^2 (1/n + 1/m) (theta (1 - theta) - 2 lambda c + lambda^2 v), with n audited items,
    m items not audited, c the audit's covariance of errors and predictions, v the variance of the predictions.
    The 1/m term makes it an interval for the share of the release's own items (a finite population), not for a
    rate behind them. With lambda = 0 and m large it is Wilson's interval of the audit alone."""
    import numpy as np
    from scipy.stats import norm

    predicted = {e.item: predicted_error([_point_accuracy(d) for d in e.deciders]) for e in items}
    labelled = sorted(audit)
    rest = [e.item for e in items if e.item not in audit]
    total, n, m = len(items), len(labelled), len(rest)
    found_wrong = sum(1 for key in labelled if not audit[key])
    method = (f"prediction-powered inference (PPI++ estimate, score interval), {percent(confidence)}: an audited "
              f"random sample of {sample_words(n, total, drawn_among)}, each item's error predicted from its judges' "
              "control accuracies")
    if not m:
        share = found_wrong / total
        return Interval(share, share, share, method + " (every item audited)")
    y = np.array([0.0 if audit[key] else 1.0 for key in labelled])
    yhat = np.array([predicted[key] for key in labelled])
    yhat_rest = np.array([predicted[key] for key in rest])
    every = np.concatenate([yhat, yhat_rest])
    covariance = float(np.mean((y - y.mean()) * (yhat - yhat.mean())))
    variance = float(np.var(every))
    lam = min(max(covariance / variance, 0.0), 1.0) if variance > 0 else 0.0  # regression slope, within [0, 1]
    estimate = float(lam * yhat_rest.mean() + np.mean(y - lam * yhat))
    z2 = float(norm.ppf(1 - (1 - confidence) / 2)) ** 2
    b = 1 / n + 1 / m
    a = b * (lam * lam * float(np.var(yhat)) - 2 * lam * covariance)
    # (1 + z2 b) theta^2 - (2 estimate + z2 b) theta + estimate^2 - z2 a <= 0
    qa, qb, qc = 1 + z2 * b, -(2 * estimate + z2 * b), estimate * estimate - z2 * a
    root = math.sqrt(max(qb * qb - 4 * qa * qc, 0.0))
    low, high = (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)
    low, high, estimate = (min(max(v, 0.0), 1.0) for v in (low, high, estimate))

    def whole(share_of_rest: float) -> float:
        return (found_wrong + m * share_of_rest) / total

    return Interval(whole(estimate), whole(low), whole(high), method)


def _model_interval(items: Sequence[ItemEvidence], confidence: float, draws: int, seed: int) -> Interval:
    """No audit: the mean predicted error, its interval from a parametric bootstrap (each person's accuracy drawn
    from Beta(correct + 1/2, wrong + 1/2), then each item's outcome drawn from its predicted error)."""
    import numpy as np

    people: dict[str, Decider] = {}
    for e in items:
        for d in e.deciders:
            people.setdefault(d.person, d)
    names = sorted(people)
    column = {name: i for i, name in enumerate(names)}
    rng = np.random.default_rng(seed)
    correct = np.array([people[n].correct for n in names], dtype=float)
    controls = np.array([people[n].controls for n in names], dtype=float)
    accuracy = rng.beta(correct + 0.5, controls - correct + 0.5, size=(draws, len(names)))
    # Items grouped by how many decided them, so each group is one array operation.
    by_size: dict[int, list[list[int]]] = defaultdict(list)
    for e in items:
        by_size[len(e.deciders)].append([column[d.person] for d in e.deciders])
    errors = np.zeros(draws)
    point = 0.0
    for size, groups in by_size.items():
        index = np.array(groups)  # items x size
        p = accuracy[:, index]  # draws x items x size
        right, wrong = p.prod(axis=2), (1 - p).prod(axis=2)
        q = wrong / (right + wrong)
        errors += (rng.random(q.shape) < q).sum(axis=1)
        point += sum(predicted_error([_point_accuracy(people[names[i]]) for i in g]) for g in groups)
    shares = errors / len(items)
    tail = (1 - confidence) / 2
    low, high = np.quantile(shares, [tail, 1 - tail])
    method = (f"model-based estimate, {percent(confidence)} (no audit): each item's error predicted from its judges' "
              f"control accuracies, interval from a parametric bootstrap over Beta posteriors of the accuracies "
              f"({draws} draws); holds only as far as the model does, weaker than an audit")
    return Interval(point / len(items), float(low), float(high), method)


# ---------------------------------------------------------------- the analysis of a release


@dataclass
class PersonFigures:
    id: str  # pseudonymous id (the workspace boundary's, cftools.boundary), never an email
    controls: int = 0
    controls_correct: int = 0
    accuracy: Optional[Interval] = None
    named: bool = False  # accuracy interval wholly below min_accuracy
    kappas: dict[str, Optional[float]] = field(default_factory=dict)  # "KIND TASK with OTHER-ID" -> kappa
    adjudicated: int = 0
    overturned: int = 0
    overturn: Optional[Interval] = None
    judgments: int = 0  # counted judgments with a lead time
    lead_time_median_s: Optional[float] = None
    lead_time_p90_s: Optional[float] = None

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["accuracy"] = self.accuracy.as_dict() if self.accuracy else None
        out["overturn"] = self.overturn.as_dict() if self.overturn else None
        return out


@dataclass
class AnnotationAnalysis:
    people: list[PersonFigures] = field(default_factory=list)
    pairs: list[PairKappa] = field(default_factory=list)  # under pseudonymous ids
    error_rate: Optional[ErrorRate] = None
    min_accuracy: float = DEFAULT_MIN_ACCURACY
    min_controls: int = DEFAULT_MIN_CONTROLS

    def as_dict(self) -> dict[str, Any]:
        return {"people": [p.as_dict() for p in self.people], "pairs": [p.as_dict() for p in self.pairs],
                "error_rate": self.error_rate.as_dict() if self.error_rate else None,
                "min_accuracy": self.min_accuracy, "min_controls": self.min_controls}


def analysis_of(controls: Mapping[str, ControlScore], pairs: Sequence[PairKappa],
                overturns: Sequence[OverturnRate], speeds: Sequence[LeadTime], *, pseudonym: Callable[[str], str],
                error_rate: Optional[ErrorRate] = None, min_accuracy: float = DEFAULT_MIN_ACCURACY,
                task: str = VERIFY, min_controls: int = DEFAULT_MIN_CONTROLS) -> AnnotationAnalysis:
    """Gather per-person figures under pseudonymous ids (CONTROLS, PAIRS, OVERTURNS and SPEEDS by person, as the
    readers return them, named by PSEUDONYM: the workspace boundary's; lead times of TASK only, pooled over
    kinds)."""
    people: dict[str, PersonFigures] = {}

    def figures_of(person: str) -> PersonFigures:
        return people.setdefault(person, PersonFigures(id=pseudonym(person)))

    for person, score in controls.items():
        figures = figures_of(person)
        figures.controls, figures.controls_correct = score.n, score.correct
        figures.accuracy = wilson_interval(score.correct, score.n)
        figures.named = named_below(score.correct, score.n, min_accuracy, min_controls=min_controls)
    hidden = []
    for pair in pairs:
        a, b = figures_of(pair.first), figures_of(pair.second)
        a.kappas[f"{pair.kind} {pair.task} with {b.id}"] = pair.kappa
        b.kappas[f"{pair.kind} {pair.task} with {a.id}"] = pair.kappa
        first, second = sorted((a.id, b.id))
        hidden.append(PairKappa(pair.kind, pair.task, first, second, pair.n, pair.percent_agreement, pair.kappa))
    for rate in overturns:
        figures = figures_of(rate.person)
        figures.adjudicated += rate.adjudicated
        figures.overturned += rate.overturned
    for figures in people.values():
        figures.overturn = wilson_interval(figures.overturned, figures.adjudicated)
    pooled: dict[str, list[LeadTime]] = defaultdict(list)
    for speed in speeds:
        figures_of(speed.person)  # an adjudicator who verified nothing is one of the people too
        if speed.task == task:
            pooled[speed.person].append(speed)
    for person, found in pooled.items():
        figures = figures_of(person)
        figures.judgments = sum(s.n for s in found)
        # Pooled over kinds by their judgments' weight (each kind's own median when there is one kind).
        figures.lead_time_median_s = sum(s.median_s * s.n for s in found) / figures.judgments
        figures.lead_time_p90_s = max(s.p90_s for s in found)
    return AnnotationAnalysis(sorted(people.values(), key=lambda p: p.id),
                              sorted(hidden, key=lambda p: (p.kind, p.task, p.first, p.second)), error_rate,
                              min_accuracy, min_controls)


def annotation_analysis(session: Any, controls: Mapping[str, ControlScore], error_rate: Optional[ErrorRate] = None,
                        kind: Optional[str] = None, item_keys: Optional[Collection[str]] = None,
                        min_accuracy: float = DEFAULT_MIN_ACCURACY,
                        min_controls: int = DEFAULT_MIN_CONTROLS, *,
                        pseudonym: Callable[[str], str]) -> AnnotationAnalysis:
    """The analysis from the store (judgments of KIND's items, only ITEM_KEYS' when given) and the CONTROLS
    scored per person (email -> ControlScore), people named by PSEUDONYM (the workspace boundary's)."""
    from sqlalchemy import select

    from cftools.models import AnnotationTask

    rows = counted_judgments(session, kind, item_keys)
    decided = set(session.execute(select(AnnotationTask.item_id).where(
        AnnotationTask.purpose == ADJUDICATE, AnnotationTask.state == DECIDED)).scalars())
    return analysis_of(controls, kappas_of(rows), overturns_of(rows, decided), lead_times_of(rows),
                       pseudonym=pseudonym, error_rate=error_rate, min_accuracy=min_accuracy,
                       min_controls=min_controls)


# ---------------------------------------------------------------- renderers


def _figure(value: Optional[float], fmt: str = ".2f") -> str:
    return "n/a" if value is None else format(value, fmt)


def _interval_text(interval: Optional[Interval], scale: float = 100, unit: str = "%") -> str:
    if interval is None:
        return "n/a"
    return (f"{interval.estimate * scale:.1f}{unit} ({interval.low * scale:.1f} to "
            f"{interval.high * scale:.1f}{unit})")


def error_rate_sentence(rate: Optional[ErrorRate]) -> str:
    if rate is None:
        return ("Release error rate: not estimated (no audit, and not every judge of the released items judged "
                "control items).")
    interval = rate.interval
    return (f"Release error rate: {100 * interval.estimate:.1f}% of the {rate.items} released items have a wrong "
            f"answer (interval {100 * interval.low:.1f}% to {100 * interval.high:.1f}%); method: {interval.method}.")


def analysis_markdown(analysis: AnnotationAnalysis) -> str:
    """A data-card section: each person's figures (pseudonymous ids), agreement per pair, the release's error
    rate."""
    lines = ["## Annotator quality", ""]
    if not analysis.people:
        return "\n".join(lines + ["No person judged the items of this release.", ""])
    lines += [f"Accuracy on control items (items with a settled answer) with Wilson 95% intervals; a person is "
              f"named when the interval lies wholly below {analysis.min_accuracy:g} (after at least "
              f"{analysis.min_controls} controls). Overturned: share of their adjudicated items decided otherwise. "
              "Lead time: seconds a task was open (median, 90th percentile).", "",
              "| annotator | controls | accuracy (95% CI) | named | adjudicated | overturned (95% CI) | "
              "lead time median / p90 (s) |",
              "|---|---|---|---|---|---|---|"]
    for p in analysis.people:
        lines.append(f"| {p.id} | {p.controls} | {_interval_text(p.accuracy)} | {'yes' if p.named else 'no'} | "
                     f"{p.adjudicated} | {_interval_text(p.overturn)} | "
                     f"{_figure(p.lead_time_median_s, '.1f')} / {_figure(p.lead_time_p90_s, '.1f')} |")
    if analysis.pairs:
        lines += ["", "Agreement per pair of people over the items both judged (the verdict each judgment alone "
                      "gives the item):", "",
                  "| kind | task | annotators | items | agreement | Cohen's kappa |", "|---|---|---|---|---|---|"]
        for pair in analysis.pairs:
            lines.append(f"| {pair.kind} | {pair.task} | {pair.first}, {pair.second} | {pair.n} | "
                         f"{pair.percent_agreement:.1f}% | {_figure(pair.kappa, '.3f')} |")
    lines += ["", error_rate_sentence(analysis.error_rate), ""]
    return "\n".join(lines)


def analysis_croissant(analysis: AnnotationAnalysis) -> list[str]:
    """croissant.json's `rai:dataAnnotationAnalysis` (Text in the Croissant RAI vocabulary): one sentence per
    person, per pair and for the error rate."""
    sentences = []
    for p in analysis.people:
        parts = [f"{p.id}: accuracy on {p.controls} control items "
                 + (_interval_text(p.accuracy) + " (Wilson 95% interval)" if p.accuracy else "not measured")]
        if p.named:
            parts.append(f"named: accuracy interval wholly below {analysis.min_accuracy:g}")
        if p.adjudicated:
            parts.append(f"overturned by adjudication in {p.overturned} of {p.adjudicated} adjudicated items")
        if p.lead_time_median_s is not None:
            parts.append(f"median lead time {p.lead_time_median_s:.1f} s (90th percentile {p.lead_time_p90_s:.1f} s)")
        sentences.append("; ".join(parts))
    for pair in analysis.pairs:
        sentences.append(f"{pair.kind} {pair.task}, {pair.first} and {pair.second}: {pair.n} items, "
                         f"{pair.percent_agreement:.1f}% agreement, Cohen's kappa {_figure(pair.kappa, '.3f')}")
    sentences.append(error_rate_sentence(analysis.error_rate))
    return sentences
