"""The annotate stage's side of judgments: the kind's label config, and agreement between annotators.

The vocabulary, validation of results and the decision rules are below both this stage and the kinds, in
`cftools.judgments`.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Optional

from cftools.judgments import FLAG_CODES, NO, YES, Answer

# Questions whose inter-annotator agreement is reported (flags: one yes/no question per flag).
AGREEMENT_QUESTIONS = ("related", "answer_correct", *FLAG_CODES)


def render_label_config(kind: str, task: str, workspace_root: Optional[str] = None) -> str:
    """The kind's label config for TASK, a purpose's task (annotation/<kind>/<task>.xml.j2; a workspace's copy
    wins)."""
    from cftools.kinds import get_kind

    return get_kind(kind).hooks.annotate.label_config(task, workspace_root)


def question_labels(answer: Answer) -> dict[str, str]:
    """The yes/no label of each agreement question for one judgment."""
    labels = {"related": YES if answer.related else NO, "answer_correct": YES if answer.answer_correct else NO}
    for code in FLAG_CODES:
        labels[code] = YES if code in answer.flags else NO
    return labels


def label_agreement(pairs: list[tuple[dict[str, str], dict[str, str]]]) -> dict[str, dict[str, Any]]:
    """Per question of a kind's own task: pairs, percent agreement (0-100) and Cohen's kappa over its labels
    (each pair: the first two annotators' question -> label)."""
    from sklearn.metrics import cohen_kappa_score

    questions = sorted({q for a, b in pairs for q in a if q in b})
    stats: dict[str, dict[str, Any]] = {}
    for question in questions:
        rows = [(a[question], b[question]) for a, b in pairs if question in a and question in b]
        labels = sorted({x for row in rows for x in row})
        agree = sum(x == y for x, y in rows)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # one label only: kappa is undefined (nan)
            kappa = float(cohen_kappa_score([x for x, _ in rows], [y for _, y in rows], labels=labels))
        stats[question] = {"n_pairs": len(rows), "percent_agreement": 100.0 * agree / len(rows),
                           "cohen_kappa": None if math.isnan(kappa) else kappa}
    return stats


def preload_agreement_library() -> None:
    """Import scikit-learn ahead of `agreement`: it takes a second or more, which a pull can spend waiting."""
    try:
        import sklearn.metrics  # noqa: F401
    except ImportError:
        pass  # `agreement` raises the error where it is needed


def _percent_agreement(labels_per_unit: list[list[str]]) -> Optional[float]:
    """Share of agreeing pairs of annotators over every pair within every item (0-100)."""
    agree = total = 0
    for labels in labels_per_unit:
        for i in range(len(labels)):
            for j in range(i + 1, len(labels)):
                total += 1
                agree += labels[i] == labels[j]
    return 100.0 * agree / total if total else None


def _krippendorff_alpha(units: list[dict[str, str]], annotators: list[str]) -> Optional[float]:
    """Nominal Krippendorff's alpha over every annotator (missing ratings allowed; nltk's AnnotationTask, Apache-2.0);
    None where undefined (one label only, or fewer than two ratings per item)."""
    from nltk.metrics.agreement import AnnotationTask

    data = [(annotator, str(n), label) for n, unit in enumerate(units) for annotator, label in unit.items()]
    if not units or len({label for _, _, label in data}) < 2:
        return None
    try:
        value = float(AnnotationTask(data=data).alpha())
    except ZeroDivisionError:
        return None
    return None if math.isnan(value) else value


def _cohen_kappa(units: list[dict[str, str]]) -> Optional[float]:
    """Cohen's kappa where the same two people rated every item; None otherwise or where undefined."""
    from sklearn.metrics import cohen_kappa_score

    raters = {tuple(sorted(unit)) for unit in units}
    if len(raters) != 1 or len(next(iter(raters))) != 2:
        return None
    first, second = next(iter(raters))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one label only: kappa is undefined (nan)
        labels = sorted({u[first] for u in units} | {u[second] for u in units} | {YES, NO})
        kappa = float(cohen_kappa_score([u[first] for u in units], [u[second] for u in units], labels=labels))
    return None if math.isnan(kappa) else kappa


def agreement(ratings: dict[Any, dict[str, Answer]],
              kind_labels: Optional[Callable[[Answer], dict[str, str]]] = None) -> dict[str, dict[str, Any]]:
    """Per question, over the items rated by two or more annotators (RATINGS: item -> annotator -> Answer):
    n_items, n_pairs (pairs of annotators within an item), percent agreement (0-100), Krippendorff's alpha
    (nominal, all annotators) and Cohen's kappa (only where the same two people rated every item). KIND_LABELS adds
    a kind's own questions (CFMM: the counterfactual answer, "cannot be determined" among its labels)."""
    rated = {unit: by_annotator for unit, by_annotator in ratings.items() if len(by_annotator) >= 2}
    annotators = sorted({a for by_annotator in rated.values() for a in by_annotator})
    n_pairs = sum(len(b) * (len(b) - 1) // 2 for b in rated.values())
    labelled = [{a: {**question_labels(answer), **(kind_labels(answer) if kind_labels else {})}
                 for a, answer in by_annotator.items()} for by_annotator in rated.values()]
    extra = sorted({q for unit in labelled for labels in unit.values() for q in labels} - set(AGREEMENT_QUESTIONS))
    stats: dict[str, dict[str, Any]] = {}
    for question in (*AGREEMENT_QUESTIONS, *extra):
        units = [{a: labels[question] for a, labels in unit.items() if question in labels} for unit in labelled]
        units = [unit for unit in units if len(unit) >= 2]
        stats[question] = {"n_items": len(units), "n_pairs": n_pairs,
                           "percent_agreement": _percent_agreement([list(u.values()) for u in units]),
                           "krippendorff_alpha": _krippendorff_alpha(units, annotators),
                           "cohen_kappa": _cohen_kappa(units) if units else None}
    return stats
