"""Agreement and progress of the annotation stage: agreement per kind and question (stored for the data card),
progress per project and counts per annotator (`annotate status`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from functools import partial
from typing import Any, Iterable, Optional

from sqlalchemy import and_, func, insert, select
from sqlmodel import Session

from cftools.annotate.controls import MEASURING
from cftools.annotate.label_studio import server_settings
from cftools.annotate.projects import DELETED, GONE, OPEN, RETURNED, unsynced_delete
from cftools.annotate.purpose import Purpose
from cftools.judgments import ADJUDICATE, VERIFY, Answer
from cftools.annotate.rules import agreement, label_agreement
from cftools.models import (
    ACCEPTED, IN_REVIEW, NEEDS_ADJUDICATION, REJECTED, AgreementStat, AnnotationTask, Item, Judgment, utcnow,
)
from cftools.errors import CftoolsError
from cftools.kinds import get_kind
from cftools.store import Store
from cftools.workspace import Workspace

# ---------------------------------------------------------------- status and agreement


def verify_ratings(session: Session, item_keys: Optional[Iterable[str]] = None) -> dict[str, dict[int, dict[str, Answer]]]:
    """Per item kind: every live verification task's judgments by person (only ITEM_KEYS' items when given)."""
    query = (select(Item.kind, Item.key, Judgment.task_id, Judgment.annotator, Judgment.related,
                    Judgment.answer_correct, Judgment.flags, Judgment.raw)
             .join(AnnotationTask, AnnotationTask.id == Judgment.task_id)
             .join(Item, Item.id == AnnotationTask.item_id)
             .where(AnnotationTask.purpose == VERIFY, AnnotationTask.state.not_in(GONE))
             .order_by(Judgment.task_id, Judgment.ls_annotation_id))
    wanted = set(item_keys) if item_keys is not None else None
    ratings: dict[str, dict[int, dict[str, Answer]]] = defaultdict(dict)
    for kind, key, task_id, person, related, correct, flags, raw in session.execute(query):
        if wanted is not None and key not in wanted:
            continue
        # By item: with assignment each person judges the item in a task of their own.
        ratings[kind].setdefault(key, {}).setdefault(person, Answer(
            related=related, answer_correct=correct, flags=list(flags or []), fields=(raw or {}).get("fields") or {}))
    return ratings


def agreement_project_name(kind: str) -> str:
    return f"{kind} verification"


def own_task_pairs(session: Session) -> dict[str, list[tuple[dict, dict]]]:
    """Per "KIND TASK" of the kinds' own tasks: the labels of the first two judgments of every live task."""
    rows = session.execute(
        select(Item.kind, AnnotationTask.purpose, AnnotationTask.item_id, Judgment.raw)
        .join(AnnotationTask, AnnotationTask.id == Judgment.task_id)
        .join(Item, Item.id == AnnotationTask.item_id)
        .where(AnnotationTask.purpose.not_in([VERIFY, ADJUDICATE, *MEASURING]), AnnotationTask.state.not_in(GONE))
        .order_by(AnnotationTask.item_id, Judgment.annotated_at, Judgment.ls_annotation_id)).all()
    per_task: dict[tuple, tuple[str, str, list[dict]]] = {}
    for kind, stored, item_id, raw in rows:  # by item and purpose: one task per person with assignment
        purpose = Purpose.parse(stored)
        task = purpose.task
        labels = get_kind(kind).hooks.annotate.agreement_labels(task, Answer(fields=(raw or {}).get("fields") or {}))
        per_task.setdefault((item_id, purpose), (kind, task, []))[2].append(labels)
    pairs: dict[str, list[tuple[dict, dict]]] = defaultdict(list)
    for kind, task, found in per_task.values():
        if len(found) >= 2 and found[0] and found[1]:
            pairs[f"{kind} {task}"].append((found[0], found[1]))
    return pairs


def record_agreement(store: Store) -> dict[str, dict[str, dict[str, Any]]]:
    """Compute agreement per kind and question and store it (AgreementStat) for the data card; a kind's own
    tasks under the project name "KIND TASK"."""
    with store.session() as session:
        stats = {agreement_project_name(kind):
                 agreement(ratings, partial(get_kind(kind).hooks.annotate.agreement_labels, VERIFY))
                 for kind, ratings in verify_ratings(session).items()}
        stats.update({name: label_agreement(pairs) for name, pairs in own_task_pairs(session).items()})
    now = utcnow()
    with store.write() as session:
        for name, questions in stats.items():
            session.execute(unsynced_delete(AgreementStat).where(AgreementStat.project == name))
            session.execute(insert(AgreementStat.__table__), [
                {"project": name, "question": q, "n_pairs": s["n_pairs"],
                 "percent_agreement": s["percent_agreement"], "cohen_kappa": s["cohen_kappa"], "computed_at": now}
                for q, s in questions.items()])
    return stats


PERSON_COUNTS = ("open", "submitted", "returned", "skipped", "refused")


def people_status(store: Store) -> dict[str, dict[str, int]]:
    """Per person, their assigned tasks: open (not yet submitted), submitted (their judgment is in), returned (an
    unusable submission, or a task deleted on the server, came back as a new task), skipped and refused (an edit
    by someone else): each returned task counts once, under why it came back. A task closed without their judgment
    (a tiebreak the others settled meanwhile) counts in none: they submitted nothing."""
    people: dict[str, Counter] = defaultdict(Counter)
    with store.session() as session:
        # one row per task (grouping by a correlated EXISTS is not portable: PostgreSQL refuses it)
        judged = set(session.execute(select(Judgment.task_id).join(AnnotationTask, and_(
            AnnotationTask.id == Judgment.task_id, AnnotationTask.assignee == Judgment.annotator))).scalars())
        for task_id, person, state, why in session.execute(
                select(AnnotationTask.id, AnnotationTask.assignee, AnnotationTask.state, AnnotationTask.decision)
                .where(AnnotationTask.assignee.is_not(None), AnnotationTask.state != DELETED)):
            done, n = task_id in judged, 1
            if state == RETURNED and why == "left":  # handed to someone else: it never came back to them
                continue
            if state == RETURNED:
                people[person][why if why in ("skipped", "refused") else "returned"] += n
            elif done or state == OPEN:
                people[person]["submitted" if done else "open"] += n
    return {person: {what: counts[what] for what in PERSON_COUNTS} for person, counts in sorted(people.items())}


def items_without_open_task(store: Store, team: Optional[tuple[str, ...]] = None) -> list[tuple[int, str]]:
    """(id, key) of items in review that no open task waits on (no live task without its assignee's judgment, or
    in a shared project without two judgments): nothing will ever decide them. Must be none. With TEAM ([label_studio]
    annotators), a task of someone no longer on it waits on no one."""
    judged = select(func.count()).where(Judgment.task_id == AnnotationTask.id).scalar_subquery()
    assigned = AnnotationTask.assignee.is_not(None)
    if team:
        assigned = assigned & AnnotationTask.assignee.in_(team)
    waiting = select(AnnotationTask.item_id).where(
        AnnotationTask.state == OPEN, AnnotationTask.ls_task_id.is_not(None),
        ((assigned & ~select(Judgment.id).where(
            Judgment.task_id == AnnotationTask.id, Judgment.annotator == AnnotationTask.assignee).exists())
         | (AnnotationTask.assignee.is_(None) & (judged < 2))))
    with store.session() as session:
        return [tuple(row) for row in session.execute(
            select(Item.id, Item.key).where(Item.status == IN_REVIEW, Item.id.not_in(waiting)).order_by(Item.id))]


def current_team(workspace: Workspace) -> Optional[tuple[str, ...]]:
    """[label_studio] annotators of WORKSPACE (None where its people tables do not add up: status reports anyway,
    push and pull say what is wrong)."""
    try:
        return server_settings(workspace).annotators
    except CftoolsError:
        return None


def annotation_status(store: Store, team: Optional[tuple[str, ...]] = None) -> dict[str, Any]:
    """Progress per project, agreement per question (also stored) and counts per annotator, from the store;
    TEAM: [label_studio] annotators now (an item waiting only on someone no longer on it counts as waiting on no one)."""
    agreement_stats = record_agreement(store)
    with store.session() as session:
        judgment_counts = (select(Judgment.task_id, func.count().label("n")).group_by(Judgment.task_id).subquery())
        rows = session.execute(
            select(AnnotationTask.server, AnnotationTask.ls_project_id, AnnotationTask.purpose, Item.kind,
                   AnnotationTask.state, AnnotationTask.decision, func.coalesce(judgment_counts.c.n, 0))
            .join(Item, Item.id == AnnotationTask.item_id)
            .outerjoin(judgment_counts, judgment_counts.c.task_id == AnnotationTask.id)).all()
        projects: dict[tuple, dict[str, Any]] = {}
        for server, project_id, purpose, kind, state, decision, n in rows:
            p = projects.setdefault((server, project_id, purpose), {
                "server": server, "project_id": project_id, "purpose": purpose, "kind": kind, "tasks": 0,
                "deleted": 0, "annotations": {"0": 0, "1": 0, "2+": 0}, "decisions": Counter()})
            # gone from the server: marked deleted, or (with assignment) returned to its person as a new task
            if state == DELETED or (state == RETURNED and decision == DELETED):
                p["deleted"] += 1
                continue
            if state == RETURNED:  # its `decision` says why it came back, not what was decided
                decision = None
            p["tasks"] += 1
            p["annotations"]["0" if n == 0 else "1" if n == 1 else "2+"] += 1
            if decision:
                p["decisions"][decision] += 1
        annotators: dict[str, dict[str, Any]] = {}
        for person, stored, related, correct, corrected in session.execute(
                select(Judgment.annotator, AnnotationTask.purpose, Judgment.related, Judgment.answer_correct,
                       Judgment.corrected_answer).join(AnnotationTask, AnnotationTask.id == Judgment.task_id)
                .where(AnnotationTask.state != DELETED)):
            a = annotators.setdefault(person, {"judgments": 0, "adjudications": 0, "related_yes": 0,
                                                  "correct_yes": 0, "corrections": 0})
            purpose = Purpose.parse(stored)
            if purpose.task == ADJUDICATE:
                a["adjudications"] += 1
                continue
            if purpose.measuring:  # measures the person, says nothing of the item
                continue
            a["judgments"] += 1
            a["related_yes"] += bool(related)
            a["correct_yes"] += bool(correct)
            a["corrections"] += bool(corrected)
        items = dict(session.execute(select(Item.status, func.count()).where(Item.status.in_(
            [IN_REVIEW, ACCEPTED, REJECTED, NEEDS_ADJUDICATION])).group_by(Item.status)).all())
    for p in projects.values():
        p["decisions"] = dict(p["decisions"])
    from cftools.annotate.assign import assignment_status

    return {"projects": sorted(projects.values(), key=lambda p: (p["server"], p["project_id"])),
            "queues": assignment_status(store),
            "people": people_status(store),
            "in_review_without_open_task": len(stuck := items_without_open_task(store, team)),
            # of them, those still waiting on an open task of someone no longer in [label_studio] annotators
            "waiting_on_people_gone": len(set(stuck) - set(items_without_open_task(store))),
            "agreement": dict(sorted(agreement_stats.items())),
            "annotators": dict(sorted(annotators.items())), "items_by_status": items}
