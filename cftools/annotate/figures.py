"""Each person's figures for `annotate status`: accuracy on controls with its Wilson interval (overall and per kind),
Cohen's kappa with each other judge, adjudication overturn rate and speed (Label Studio's lead_time) per kind and
task, whether the push would name them (accuracy wholly below `[annotate] min_accuracy`) and their pauses. The
statistics are `cftools.annotate.quality`'s; this module reads the store's control outcomes and pauses for them."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import select

from cftools.annotate.controls import CONTROL
from cftools.annotate.pauses import control_results, min_accuracy, min_controls, pause_history, paused_people
from cftools.models import TaskOutcome


def control_counts(store: Any) -> dict[str, dict[str, list[int]]]:
    """Person -> kind -> [right, judged] over every scored control."""
    counts: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    with store.session() as session:
        for person, kind, correct in session.execute(
                select(TaskOutcome.person, TaskOutcome.kind, TaskOutcome.correct)
                .where(TaskOutcome.role == CONTROL, TaskOutcome.correct.is_not(None))):
            counts[person][kind][0] += bool(correct)
            counts[person][kind][1] += 1
    return counts


def _accuracy(right: int, n: int) -> dict[str, Any]:
    from cftools.annotate.quality import wilson_interval

    interval = wilson_interval(right, n)
    return {"controls": n, "correct": right, "accuracy": interval.as_dict() if interval else None}


def quality_status(workspace: Any) -> dict[str, Any]:
    """The figures of `annotate status` (`quality` in --json)."""
    from cftools.annotate.quality import lead_times, named_below, overturn_rates, pair_kappas

    store, minimum = workspace.store, min_accuracy(workspace)
    counts = control_counts(store)
    current = control_results(store)
    paused = paused_people(store)
    with store.session() as session:
        pairs, overturns, speeds = pair_kappas(session), overturn_rates(session), lead_times(session)
    people: dict[str, dict[str, Any]] = {}

    def entry_of(person: str) -> dict[str, Any]:
        return people.setdefault(person, {**_accuracy(0, 0), "by_kind": {}, "named": False, "paused": None,
                                         "kappa": [], "overturn": [], "lead_time": []})

    for person, kinds in counts.items():
        entry = entry_of(person)
        entry.update(_accuracy(sum(r for r, _ in kinds.values()), sum(n for _, n in kinds.values())))
        entry["by_kind"] = {kind: _accuracy(r, n) for kind, (r, n) in sorted(kinds.items())}
    for person, results in current.items():
        entry_of(person)["named"] = named_below(sum(results), len(results), minimum,
                                                min_controls=min_controls(workspace))
    for person, pause in paused.items():
        entry_of(person)["paused"] = {"since": pause.paused_at.isoformat(), "by": pause.paused_by, "why": pause.reason}
    for pair in pairs:
        for me, other in ((pair.first, pair.second), (pair.second, pair.first)):
            entry_of(me)["kappa"].append({"kind": pair.kind, "task": pair.task, "with": other, "items": pair.n,
                                        "percent_agreement": pair.percent_agreement, "kappa": pair.kappa})
    for rate in overturns:
        entry_of(rate.person)["overturn"].append(rate.as_dict())
    for speed in speeds:
        entry_of(speed.person)["lead_time"].append(speed.as_dict())
    return {"min_accuracy": minimum, "people": dict(sorted(people.items())),
            "named": sorted(person for person, entry in people.items() if entry["named"]),
            "paused": sorted(paused), "pauses": pause_history(store)}
