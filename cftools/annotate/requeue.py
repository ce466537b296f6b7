"""`annotate requeue --by PERSON [--since DATE]`: the items a person judged go to other people as new tasks.

Their judgments stay on record (each task is marked `requeued`) but no longer count toward the item, and each
item's history says so (who was requeued, by whom, that the judgment is kept and not counted). An adjudication of
such an item is set aside too: it settled a disagreement that no longer counts. The new tasks go to people who
never had the item (`assign.plan` leaves out whoever's judgment was requeued, and anyone paused). All or nothing:
whether there are enough such people is checked before anything changes, and the set-aside adjudication tasks are
deleted on their servers (no one is to answer them any more).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional

from sqlalchemy import insert, select, update

from cftools.annotate.assign import choose_people, current_load, people_needed
from cftools.annotate.label_studio import LabelStudioError, server_settings
from cftools.annotate.pauses import local_naive, lead_name, paused_people, requeued_from
from cftools.annotate.projects import GONE, REQUEUED, STAGE
from cftools.annotate.purpose import Purpose
from cftools.annotate.push import push_tasks
from cftools.annotate.servers import Servers
from cftools.annotate.task_import import PushOptions, PushReport, PushRun
from cftools.errors import CftoolsError
from cftools.judgments import ADJUDICATE, VERIFY
from cftools.models import ACCEPTED, IN_REVIEW, NEEDS_ADJUDICATION, REJECTED, AnnotationTask, Item, ItemEvent, Judgment, utcnow
from cftools.progress import no_progress
from cftools.store import Store, in_chunks


@dataclass
class RequeueReport:
    person: str
    since: Optional[str] = None
    tasks: int = 0  # their tasks whose judgments no longer count
    items: list[str] = field(default_factory=list)  # the items sent to others
    pushed: dict[str, int] = field(default_factory=dict)  # per kind: new tasks pushed
    assigned: dict[str, int] = field(default_factory=dict)  # new tasks per person
    adjudications_closed: int = 0  # set-aside adjudication tasks deleted on their servers

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Judged:
    """One of PERSON's judged verification tasks to requeue."""

    task_id: int
    item_id: int
    item_key: str
    kind: str
    status: str


def judged_tasks(store: Store, person: str, since: Optional[datetime]) -> list[Judged]:
    """PERSON's judged verification tasks that still count (judged since SINCE)."""
    with store.session() as session:
        rows = session.execute(
            select(AnnotationTask.id, AnnotationTask.item_id, Item.key, Item.kind, Item.status, Judgment.annotated_at)
            .join(Judgment, Judgment.task_id == AnnotationTask.id).join(Item, Item.id == AnnotationTask.item_id)
            .where(AnnotationTask.purpose == VERIFY, AnnotationTask.state.not_in(GONE),
                   Judgment.annotator == person)).all()
    since_naive = local_naive(since) if since else None
    return [Judged(r.id, r.item_id, r.key, r.kind, r.status) for r in rows
            if since_naive is None or (r.annotated_at and local_naive(r.annotated_at) >= since_naive)]


def adjudications_to_set_aside(store: Store, item_ids: list[int]) -> list[AnnotationTask]:
    """The live adjudication tasks of these items: they settled a disagreement that no longer counts."""
    found: list[AnnotationTask] = []
    with store.session() as session:
        for part in in_chunks(item_ids):
            found += session.execute(select(AnnotationTask).where(
                AnnotationTask.item_id.in_(part), AnnotationTask.purpose == ADJUDICATE,
                AnnotationTask.state.not_in(GONE))).scalars()
        session.expunge_all()
    return found


def check_people_enough(store: Store, settings: Any, person: str, judged: list[Judged],
                        set_aside: list[AnnotationTask]) -> None:
    """Refuse, before anything changes, a requeue that cannot be pushed: each item needs new judges who never had
    it (not PERSON, not its other judges, not whoever's judgment of it was requeued or set aside, nobody paused),
    and an item whose adjudication is set aside needs one more person besides them to adjudicate it again."""
    item_ids = sorted({j.item_id for j in judged})
    requeued_ids = {j.task_id for j in judged}
    remaining: dict[int, set[str]] = {i: set() for i in item_ids}
    with store.session() as session:
        for part in in_chunks(item_ids):
            for task_id, item_id, assignee in session.execute(
                    select(AnnotationTask.id, AnnotationTask.item_id, AnnotationTask.assignee).where(
                        AnnotationTask.item_id.in_(part), AnnotationTask.purpose == VERIFY,
                        AnnotationTask.state.not_in(GONE))):
                if task_id not in requeued_ids and assignee:
                    remaining[item_id].add(assignee)
    former = requeued_from(store, item_ids)
    for task in set_aside:
        if task.assignee:
            former.setdefault(task.item_id, set()).add(task.assignee)
    paused = set(paused_people(store))
    disputed = {t.item_id for t in set_aside}
    load = current_load(store)
    for judged_item in {j.item_id: j for j in judged}.values():
        item_id = judged_item.item_id
        exclude = remaining[item_id] | former.get(item_id, set()) | {person} | paused
        missing = people_needed(judged_item.kind, Purpose(VERIFY)) - len(remaining[item_id])
        what = f"item {judged_item.item_key}"
        try:
            chosen = choose_people(settings.annotators, load, max(missing, 0), exclude, what)
            if item_id in disputed:
                choose_people(settings.annotators, Counter(load), 1, exclude | set(chosen),
                              f"the adjudication of {what}")
        except CftoolsError as exc:
            raise CftoolsError(f"requeue of {person}'s judgments changed nothing: {exc}") from None


def mark_requeued(store: Store, person: str, judged: list[Judged], set_aside: list[AnnotationTask],
                  by: str) -> None:
    """Mark JUDGED (PERSON's tasks) requeued and their items in review again, each with a history event, and the
    adjudications SET_ASIDE requeued too, all in one transaction."""
    aside_by_item: dict[int, list[int]] = {}
    for task in set_aside:
        aside_by_item.setdefault(task.item_id, []).append(task.id)
    now = utcnow()
    with store.write() as session:
        if set_aside:
            session.execute(update(AnnotationTask).where(AnnotationTask.id.in_([t.id for t in set_aside]))
                            .values(state=REQUEUED, updated_at=now))
        for j in judged:
            session.execute(update(AnnotationTask).where(AnnotationTask.id == j.task_id)
                            .values(state=REQUEUED, updated_at=now))
            new_status = IN_REVIEW if j.status in (ACCEPTED, REJECTED, NEEDS_ADJUDICATION, IN_REVIEW) else j.status
            session.execute(update(Item).where(Item.id == j.item_id).values(status=new_status, updated_at=now))
            aside = aside_by_item.pop(j.item_id, [])
            session.execute(insert(ItemEvent.__table__), [{
                "item_id": j.item_id, "stage": STAGE, "from_status": j.status, "to_status": new_status,
                "created_at": now, "detail": {
                    "requeued": person, "task": j.task_id, "by": by, "counted": False,
                    "note": f"{person}'s judgment is kept on record but no longer counts; the item goes to others",
                    **({"adjudication_set_aside": aside} if aside else {})}}])


def close_on_servers(store: Store, servers: Servers, tasks: list[AnnotationTask]) -> int:
    """Delete the set-aside adjudication TASKS on their servers (no one is to answer them any more; the store lets
    go of their ids, which the server may give to new tasks); a server no longer configured is left alone. Returns
    the tasks deleted."""
    closed = 0
    for task in tasks:
        server = servers.for_url(task.server)
        if server is None or task.ls_task_id is None:
            continue
        server.delete_task(task.ls_task_id)
        with store.write() as session:
            session.execute(update(AnnotationTask).where(AnnotationTask.id == task.id).values(ls_task_id=None))
            session.execute(insert(ItemEvent.__table__), [{
                "item_id": task.item_id, "stage": STAGE, "from_status": None, "to_status": None,
                "created_at": utcnow(), "detail": {"task_deleted": task.ls_task_id, "project": task.ls_project_id,
                                                   "purpose": task.purpose, "why": "set aside by requeue"}}])
        closed += 1
    return closed


def items_waiting(store: Store, person: str) -> dict[str, set[int]]:
    """Kind -> the items whose judgment by PERSON was requeued (this run's, and those a failed run left without
    new tasks: pushing them again gives only what is still missing)."""
    with store.session() as session:
        rows = session.execute(select(Item.kind, Item.id).join(AnnotationTask, AnnotationTask.item_id == Item.id)
                               .where(AnnotationTask.purpose == VERIFY, AnnotationTask.state == REQUEUED,
                                      AnnotationTask.assignee == person, Item.status == IN_REVIEW)).all()
    by_kind: dict[str, set[int]] = {}
    for kind, item_id in rows:
        by_kind.setdefault(kind, set()).add(item_id)
    return by_kind


def requeue(workspace: Any, person: str, since: Optional[datetime] = None, by: Optional[str] = None,
            progress: Any = None) -> RequeueReport:
    """`annotate requeue`: PERSON's judged items (since SINCE) go to other people as new verification tasks. All or
    nothing: too few people to take them changes nothing."""
    settings = server_settings(workspace)
    if not settings.configured:
        raise LabelStudioError(settings.how_to_configure())
    if not settings.assigns:
        raise CftoolsError("requeue needs [label_studio] annotators (or people tables): without them cftools does "
                           "not choose who judges an item")
    report = RequeueReport(person, since.isoformat() if since else None)
    store = workspace.store
    servers = Servers(settings)
    try:
        servers.check()
        judged = judged_tasks(store, person, since)
        set_aside = adjudications_to_set_aside(store, sorted({j.item_id for j in judged}))
        check_people_enough(store, settings, person, judged, set_aside)
        mark_requeued(store, person, judged, set_aside, by or lead_name())
        report.tasks = len(judged)
        report.adjudications_closed = close_on_servers(store, servers, set_aside)
        by_kind = items_waiting(store, person)
        with store.session() as session:
            report.items = sorted(session.execute(select(Item.key).where(
                Item.id.in_(sorted({i for ids in by_kind.values() for i in ids})))).scalars())
        for kind, item_ids in sorted(by_kind.items()):
            pushed = PushReport(purpose=VERIFY, kind=kind)
            options = PushOptions(only=frozenset(item_ids), progress=progress or no_progress)
            push_tasks(PushRun(workspace, servers, settings, kind, Purpose(VERIFY), options), pushed)
            report.pushed[kind] = pushed.pushed
            for who, n in pushed.assigned.items():
                report.assigned[who] = report.assigned.get(who, 0) + n
    finally:
        servers.close()
    return report
