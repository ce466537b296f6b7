"""The audit describes its sample as drawn (issue 43): `annotate audit` draws among the accepted items its auditor never
had, so the release's error rate names that population ("drawn among the 6 of 10 items its auditor had no other
task of"), not the whole release ("20 of 130 items")."""

from __future__ import annotations

from sqlalchemy import select

from cftools.annotate.audit import audit_sample, drawn_among
from cftools.annotate.quality import Decider, ItemEvidence, release_error_rate
from cftools.models import ACCEPTED, AnnotationTask, Item, Judgment, TaskOutcome

AUDITOR, OTHER = "aud@example.com", "ann@example.com"


def released_items(store, n: int, auditor_had: int) -> list[str]:
    """N accepted items; the auditor verified the first AUDITOR_HAD of them (the other person verified all)."""
    keys = []
    with store.write() as session:
        for i in range(n):
            item = Item(key=f"cvqa:items:{i:016x}", kind="cvqa", group="numerical-direct", question="How many?",
                        answer="2", status=ACCEPTED)
            session.add(item)
            session.flush()
            keys.append(item.key)
            for j, person in enumerate((OTHER, AUDITOR) if i < auditor_had else (OTHER,)):
                task = AnnotationTask(item_id=item.id, purpose="verify", ls_project_id=1, ls_task_id=10 * i + j,
                                      state="decided", assignee=person)
                session.add(task)
                session.flush()
                session.add(Judgment(task_id=task.id, annotator=person, decision="accept"))
    return keys


def audit_them(store, keys: list[str]) -> None:
    """The auditor's verdicts on KEYS, as `annotate pull` stores them."""
    with store.write() as session:
        for n, key in enumerate(keys):
            item = session.execute(select(Item).where(Item.key == key)).scalar_one()
            task = AnnotationTask(item_id=item.id, purpose="audit", ls_project_id=2, ls_task_id=9000 + n,
                                  state="decided", decision="scored", assignee=AUDITOR)
            session.add(task)
            session.flush()
            session.add(TaskOutcome(task_id=task.id, item_id=item.id, kind="cvqa", role="audit", person=AUDITOR,
                                    given_ok=True))


def test_the_audit_names_the_items_its_sample_was_drawn_among(workspace):
    keys = released_items(workspace.store, 10, auditor_had=4)
    sample, eligible = audit_sample(workspace.store, AUDITOR, 3, seed=1)
    assert eligible == 6 and all(int(i.key.rsplit(":", 1)[1], 16) >= 4 for i in sample)
    assert drawn_among(workspace.store, set(keys)) == ""  # nothing audited yet
    audit_them(workspace.store, [i.key for i in sample])
    among = drawn_among(workspace.store, set(keys))
    assert among == "the 6 of 10 items its auditor had no other task of"
    items = [ItemEvidence(k, (Decider(OTHER, 9, 10), Decider("x@example.com", 9, 10))) for k in keys]
    rate = release_error_rate(items, {i.key: True for i in sample}, drawn_among=among)
    assert "random sample of 3 items drawn among the 6 of 10 items its auditor had no other task of" in \
        rate.interval.method
    assert "3 of 10 items" not in rate.interval.method
    alone = release_error_rate([ItemEvidence(k, ()) for k in keys], {i.key: True for i in sample}, drawn_among=among)
    assert "(3 items drawn among the 6 of 10 items" in alone.interval.method
