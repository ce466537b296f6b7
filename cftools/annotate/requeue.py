"""`annotate requeue --by PERSON [--since DATE]`: the items a person judged go to other people as new tasks.

Their judgments stay on record (each task is marked `requeued`) but no longer count toward the item, and each
item's history says so (who was requeued, by whom, that the judgment is kept and not counted). An adjudication of
such an item is set aside too: it settled a disagreement that no longer counts. The new tasks go to people who
never had the item (`assign.plan` leaves out whoever's judgment was requeued, and anyone paused).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional

from sqlalchemy import insert, select, update

from cftools.annotate.assign import push_tasks
from cftools.annotate.label_studio import LabelStudioError, server_settings
from cftools.annotate.pauses import _naive, lead_name
from cftools.annotate.projects import GONE, REQUEUED, STAGE, _no_progress
from cftools.annotate.servers import Servers
from cftools.annotate.task_import import PushReport
from cftools.errors import CftoolsError
from cftools.judgments import ADJUDICATE, VERIFY
from cftools.models import ACCEPTED, IN_REVIEW, NEEDS_ADJUDICATION, REJECTED, AnnotationTask, Item, ItemEvent, Judgment, utcnow
from cftools.store import Store


@dataclass
class RequeueReport:
    person: str
    since: Optional[str] = None
    tasks: int = 0  # their tasks whose judgments no longer count
    items: list[str] = field(default_factory=list)  # the items sent to others
    pushed: dict[str, int] = field(default_factory=dict)  # per kind: new tasks pushed
    assigned: dict[str, int] = field(default_factory=dict)  # new tasks per person

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def mark_requeued(store: Store, person: str, since: Optional[datetime], by: str) -> tuple[int, dict[str, set[int]]]:
    """Mark PERSON's judged verification tasks (judged since SINCE) requeued and their items in review again, each
    with a history event; an adjudication of such an item is set aside too (it settled a disagreement that no
    longer counts). Returns (tasks marked, kind -> item ids)."""
    with store.session() as session:
        rows = session.execute(
            select(AnnotationTask.id, AnnotationTask.item_id, Item.kind, Item.status, Judgment.annotated_at)
            .join(Judgment, Judgment.task_id == AnnotationTask.id).join(Item, Item.id == AnnotationTask.item_id)
            .where(AnnotationTask.purpose == VERIFY, AnnotationTask.state.not_in(GONE),
                   Judgment.annotator == person)).all()
    since_naive = _naive(since) if since else None
    rows = [r for r in rows if since_naive is None or (r.annotated_at and _naive(r.annotated_at) >= since_naive)]
    by_kind: dict[str, set[int]] = {}
    now = utcnow()
    with store.write() as session:
        for task_id, item_id, kind, status, _ in rows:
            session.execute(update(AnnotationTask).where(AnnotationTask.id == task_id)
                            .values(state=REQUEUED, updated_at=now))
            set_aside = list(session.execute(select(AnnotationTask.id).where(
                AnnotationTask.item_id == item_id, AnnotationTask.purpose == ADJUDICATE,
                AnnotationTask.state.not_in(GONE))).scalars())
            if set_aside:
                session.execute(update(AnnotationTask).where(AnnotationTask.id.in_(set_aside))
                                .values(state=REQUEUED, updated_at=now))
            new_status = IN_REVIEW if status in (ACCEPTED, REJECTED, NEEDS_ADJUDICATION, IN_REVIEW) else status
            session.execute(update(Item).where(Item.id == item_id).values(status=new_status, updated_at=now))
            session.execute(insert(ItemEvent.__table__), [{
                "item_id": item_id, "stage": STAGE, "from_status": status, "to_status": new_status,
                "created_at": now, "detail": {
                    "requeued": person, "task": task_id, "by": by, "counted": False,
                    "note": f"{person}'s judgment is kept on record but no longer counts; the item goes to others",
                    **({"adjudication_set_aside": set_aside} if set_aside else {})}}])
            by_kind.setdefault(kind, set()).add(item_id)
    return len(rows), by_kind


def requeue(workspace: Any, person: str, since: Optional[datetime] = None, by: Optional[str] = None,
            progress: Any = None) -> RequeueReport:
    """`annotate requeue`: PERSON's judged items (since SINCE) go to other people as new verification tasks."""
    settings = server_settings(workspace)
    if not settings.configured:
        raise LabelStudioError(settings.how_to_configure())
    if not settings.assigns:
        raise CftoolsError("requeue needs [label_studio] annotators (or people tables): without them cftools does "
                           "not choose who judges an item")
    report = RequeueReport(person, since.isoformat() if since else None)
    servers = Servers(settings)
    try:
        servers.check()
        report.tasks, by_kind = mark_requeued(workspace.store, person, since, by or lead_name())
        with workspace.store.session() as session:
            report.items = sorted(session.execute(select(Item.key).where(
                Item.id.in_(sorted({i for ids in by_kind.values() for i in ids})))).scalars())
        for kind, item_ids in sorted(by_kind.items()):
            pushed = PushReport(purpose=VERIFY, kind=kind)
            push_tasks(workspace, servers, settings, kind, VERIFY, None, pushed, False, False,
                       progress or _no_progress, only=item_ids)
            report.pushed[kind] = pushed.pushed
            for who, n in pushed.assigned.items():
                report.assigned[who] = report.assigned.get(who, 0) + n
    finally:
        servers.close()
    return report
