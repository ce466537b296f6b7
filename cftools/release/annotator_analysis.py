"""The release's account of its annotators (issue 33): each person's figures under their pseudonymous id (accuracy on
controls, kappa per pair, overturn rate, lead time) and the release's own error rate (`quality.release_error_rate`:
prediction-powered inference over the audited sample of `annotate audit`, else the audit alone, else a model-based
estimate), written as `annotation_analysis.json`, a data-card section and croissant.json's
`rai:dataAnnotationAnalysis`; `cftools verify` reports it. Emails never leave the store: every person is named by
the workspace boundary's keyed pseudonym (`cftools.boundary`), as the records' `verification` names them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

from sqlalchemy import select

ANALYSIS_NAME = "annotation_analysis.json"


def audited(store: Any, keys: set[str]) -> dict[str, bool]:
    """Item key -> the audit found its released answer right (the last audit of each released item)."""
    from cftools.judgments import AUDIT
    from cftools.models import Item, TaskOutcome

    found: dict[str, bool] = {}
    with store.session() as session:
        for key, given in session.execute(select(Item.key, TaskOutcome.given_ok).join(Item, Item.id == TaskOutcome.item_id)
                                          .where(TaskOutcome.role == AUDIT).order_by(TaskOutcome.id)):
            if key in keys:
                found[key] = bool(given)
    return found


def release_analysis(workspace: Any, records: Sequence[dict], boundary: Any) -> Optional[Any]:
    """The AnnotationAnalysis of the released RECORDS' verified items, people named by BOUNDARY's pseudonyms; None
    when no person judged any of them."""
    from cftools.annotate.figures import control_counts
    from cftools.annotate.pauses import min_accuracy, min_controls
    from cftools.annotate.audit import drawn_among
    from cftools.annotate.quality import ControlScore, annotation_analysis, item_evidence, release_error_rate

    keys = {r["id"] for r in records if r.get("verified")}
    if not keys:
        return None
    store = workspace.store
    scores = {person: ControlScore(sum(r for r, _ in kinds.values()), sum(n for _, n in kinds.values()))
              for person, kinds in control_counts(store).items()}
    with store.session() as session:
        # the items people decided (a kind's own tasks, such as MuCR's, have no verify judgments to weigh)
        items = [e for e in item_evidence(session, scores, keys) if e.deciders]
        if not items:
            return None
        audit = {key: right for key, right in audited(store, keys).items() if key in {e.item for e in items}}
        error = release_error_rate(items, audit, drawn_among=drawn_among(store, {e.item for e in items}))
        return annotation_analysis(session, scores, error, item_keys=keys, min_accuracy=min_accuracy(workspace),
                                   min_controls=min_controls(workspace), pseudonym=boundary.pseudonym)


def write_analysis(folder: Path, analysis: Any) -> None:
    (Path(folder) / ANALYSIS_NAME).write_text(json.dumps(analysis.as_dict(), indent=2, sort_keys=True) + "\n",
                                              encoding="utf-8")


def read_analysis(folder: Path) -> Optional[dict[str, Any]]:
    """A release's annotation_analysis.json (None for a release without one)."""
    path = Path(folder) / ANALYSIS_NAME
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def verify_summary(folder: Path) -> Optional[dict[str, Any]]:
    """What `cftools verify` says of a release's annotators: how many, and its error rate."""
    analysis = read_analysis(folder)
    if analysis is None:
        return None
    return {"people": len(analysis.get("people") or []),
            "named": sum(1 for p in analysis.get("people") or [] if p.get("named")),
            "error_rate": analysis.get("error_rate")}


def summary_words(summary: Optional[dict[str, Any]]) -> Optional[str]:
    if not summary:
        return None
    rate = summary.get("error_rate")
    text = f"{summary['people']} annotators ({summary['named']} named below the minimum accuracy)"
    if not rate:
        return text + "; release error rate not estimated"
    return (text + f"; release error rate {100 * rate['estimate']:.1f}% ({100 * rate['low']:.1f} to "
            f"{100 * rate['high']:.1f}%, {rate['method']})")
