"""Acting on a person's accuracy: pausing them, resuming them, and sending their judgments to others.

`annotate push` pauses a person whose accuracy on controls has a 95% interval wholly below `[annotate]
min_accuracy` (`quality.named_below`): it gives them no new work until the lead runs `annotate resume PERSON`
(only controls they judge after a resume can pause them again). `annotate requeue --by PERSON [--since DATE]` sends
the items a person judged to others as new tasks: their judgments stay on record (the task is marked `requeued`),
but no longer count toward the item, and each item's history says so. Pauses are kept in `person_pauses` (who,
when, why, who resumed them).
"""

from __future__ import annotations

import getpass
from datetime import datetime
from typing import Any, Optional

from sqlalchemy import insert, select, update

from cftools.annotate.projects import REQUEUED
from cftools.errors import CftoolsError
from cftools.models import AnnotationTask, PersonPause, TaskOutcome, utcnow
from cftools.store import Store, in_chunks


def lead_name() -> str:
    """Who ran a lead's command (the login name of this machine): what the history records."""
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container without a passwd entry)
        return "unknown"


def min_accuracy(workspace: Any) -> float:
    from cftools.annotate.quality import DEFAULT_MIN_ACCURACY

    value = workspace.section("annotate").get("min_accuracy")
    return float(DEFAULT_MIN_ACCURACY if value is None else value)


def min_controls(workspace: Any) -> int:
    """How many controls a person judges before their accuracy can name them (`[annotate] min_controls`)."""
    from cftools.annotate.quality import DEFAULT_MIN_CONTROLS

    value = workspace.section("annotate").get("min_controls")
    return int(DEFAULT_MIN_CONTROLS if value is None else value)


def paused_people(store: Store) -> dict[str, PersonPause]:
    """Person -> their pause now in force."""
    with store.session() as session:
        found = {p.person: p for p in session.execute(
            select(PersonPause).where(PersonPause.resumed_at.is_(None)).order_by(PersonPause.id)).scalars()}
        session.expunge_all()
    return found


def last_resumed(store: Store) -> dict[str, datetime]:
    with store.session() as session:
        found: dict[str, datetime] = {}
        for person, when in session.execute(select(PersonPause.person, PersonPause.resumed_at)
                                            .where(PersonPause.resumed_at.is_not(None))):
            found[person] = max(found.get(person, when), when)
    return found


def control_results(store: Store) -> dict[str, list[bool]]:
    """Per person: whether each of their scored controls was right, counting only those judged after their last
    resume (a resume is the lead's word: the evidence before it was weighed)."""
    since = last_resumed(store)
    found: dict[str, list[bool]] = {}
    with store.session() as session:
        for person, correct, judged, updated in session.execute(
                select(TaskOutcome.person, TaskOutcome.correct, TaskOutcome.judged_at, TaskOutcome.updated_at)
                .where(TaskOutcome.role == "control", TaskOutcome.correct.is_not(None)).order_by(TaskOutcome.id)):
            when = judged or updated
            if person in since and when is not None and local_naive(when) <= local_naive(since[person]):
                continue
            found.setdefault(person, []).append(bool(correct))
    return found


def local_naive(when: datetime) -> datetime:
    """WHEN as a naive local time, so stored (naive) and aware times compare."""
    return when.replace(tzinfo=None) if when.tzinfo is None else when.astimezone(tz=None).replace(tzinfo=None)


def pause_the_named(workspace: Any) -> list[dict]:
    """Pause each person `quality.named_below` names (not paused yet); returns who was paused and why."""
    from cftools.annotate.quality import named_below, wilson_interval

    store, minimum, at_least = workspace.store, min_accuracy(workspace), min_controls(workspace)
    results = control_results(store)
    already = paused_people(store)
    paused = []
    for person in sorted(results):
        if person in already or not named_below(sum(results[person]), len(results[person]), minimum,
                                                min_controls=at_least):
            continue
        right, n = sum(results[person]), len(results[person])
        interval = wilson_interval(right, n)
        why = (f"accuracy on controls {right}/{n} (95% interval {interval.low:.2f}-{interval.high:.2f}) lies wholly "
               f"below [annotate] min_accuracy {minimum:.2f}")
        detail = {"right": right, "controls": n, "low": interval.low, "high": interval.high, "min_accuracy": minimum}
        with store.write() as session:
            session.execute(insert(PersonPause.__table__), [{"person": person, "paused_at": utcnow(),
                                                             "paused_by": "annotate push", "reason": why,
                                                             "detail": detail}])
        paused.append({"person": person, "reason": why, **detail})
    return paused


def resume(store: Store, person: str, by: Optional[str] = None) -> PersonPause:
    """End PERSON's pause (the lead's word); an error when they are not paused."""
    pause = paused_people(store).get(person)
    if pause is None:
        raise CftoolsError(f"{person} is not paused (`cftools annotate status` names who is)")
    with store.write() as session:
        session.execute(update(PersonPause).where(PersonPause.id == pause.id)
                        .values(resumed_at=utcnow(), resumed_by=by or lead_name()))
    with store.session() as session:
        found = session.get(PersonPause, pause.id)
        session.expunge(found)
    return found


def pause_history(store: Store) -> list[dict]:
    """Every pause, oldest first: who, when, why, and when and by whom they were resumed."""
    with store.session() as session:
        return [{"person": p.person, "paused_at": p.paused_at.isoformat(), "paused_by": p.paused_by,
                 "reason": p.reason, "resumed_at": p.resumed_at.isoformat() if p.resumed_at else None,
                 "resumed_by": p.resumed_by}
                for p in session.execute(select(PersonPause).order_by(PersonPause.id)).scalars()]


def requeued_from(store: Store, item_ids: list[int]) -> dict[int, set[str]]:
    """Per item: the people whose judgment of it was requeued (they are not asked about it again)."""
    found: dict[int, set[str]] = {}
    with store.session() as session:
        for part in in_chunks(item_ids):
            for item_id, person in session.execute(select(AnnotationTask.item_id, AnnotationTask.assignee).where(
                    AnnotationTask.item_id.in_(part), AnnotationTask.state == REQUEUED)):
                if person:
                    found.setdefault(item_id, set()).add(person)
    return found
