"""`annotate audit --sample N [--seed S] [--person EMAIL]`: a seeded random sample of accepted (releasable) items goes
to an auditor as verification tasks in their own project; `annotate pull` stores each verdict as an audit outcome
(`TaskOutcome`, role `audit`), which never changes the item. The release's error rate (`quality.release_error_rate`)
then uses the audited sample: prediction-powered inference over it, the judges' control accuracies as the predictor.

The sample is drawn among the accepted items the auditor had no task of (they judge none of their own work) and not
audited yet, in item-key order shuffled by the seed: the same store and seed give the same sample. So it is a random
sample of those items, not of the whole release: `drawn_among` says of which, and the release says it so."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Collection, Optional

from sqlalchemy import select

from cftools.annotate.assign import Sender
from cftools.annotate.controls import AUDIT, seen_items
from cftools.annotate.label_studio import LabelStudioError, server_settings
from cftools.annotate.purpose import Purpose
from cftools.annotate.servers import Servers
from cftools.annotate.task_import import PushReport
from cftools.errors import CftoolsError
from cftools.models import ACCEPTED, AnnotationTask, Item, Judgment, TaskOutcome


@dataclass
class AuditReport:
    person: str
    seed: int
    sample: int
    eligible: int = 0  # accepted items the auditor had no task of, not audited yet
    pushed: int = 0
    items: list[str] = field(default_factory=list)
    by_kind: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def choose_auditor(settings: Any, seen: dict[str, set[int]], accepted: set[int]) -> str:
    """The configured person who had a task of the fewest accepted items (ties: configured order)."""
    if not settings.annotators:
        raise CftoolsError("audit needs [label_studio] annotators (or people tables): the auditor works in a project "
                           "of their own")
    return min(settings.annotators, key=lambda p: (len(seen.get(p, set()) & accepted), settings.annotators.index(p)))


def audit_sample(store: Any, person: str, n: int, seed: int) -> tuple[list[Item], int]:
    """(the sample, how many items were eligible)."""
    with store.session() as session:
        accepted = {item.id: item for item in session.execute(select(Item).where(Item.status == ACCEPTED)).scalars()}
        audited = set(session.execute(select(AnnotationTask.item_id).where(AnnotationTask.purpose == AUDIT)).scalars())
        session.expunge_all()
    mine = seen_items(store, [person]).get(person, set())
    eligible = sorted((item for item_id, item in accepted.items() if item_id not in mine | audited),
                      key=lambda item: item.key)
    return random.Random(seed).sample(eligible, min(n, len(eligible))), len(eligible)


def drawn_among(store: Any, keys: Collection[str]) -> str:
    """Which of the released items (KEYS) the audit of them was drawn among, in words: those its auditor had no task
    of other than the audit (per auditor, when several audited), e.g. "the 66 of 130 items its auditor had no other
    task of". Empty when none of KEYS was audited."""
    with store.session() as session:
        ids = {item_id: key for item_id, key in session.execute(select(Item.id, Item.key)) if key in keys}
        auditors = sorted(set(session.execute(select(TaskOutcome.person).where(
            TaskOutcome.role == AUDIT, TaskOutcome.item_id.in_(list(ids)))).scalars()))
        had: dict[str, set[int]] = defaultdict(set)
        for item_id, assignee, annotator in session.execute(
                select(AnnotationTask.item_id, AnnotationTask.assignee, Judgment.annotator)
                .outerjoin(Judgment, Judgment.task_id == AnnotationTask.id)
                .where(AnnotationTask.purpose != AUDIT)):
            for person in {assignee, annotator} & set(auditors):
                had[person].add(item_id)
    if not auditors:
        return ""
    sizes = [len(set(ids) - had[person]) for person in auditors]
    if len(sizes) == 1:
        return f"the {sizes[0]} of {len(ids)} items its auditor had no other task of"
    return (f"the items each of its {len(sizes)} auditors had no other task of ({', '.join(map(str, sizes))} of "
            f"{len(ids)} items)")


def audit(workspace: Any, sample: int, seed: int = 0, person: Optional[str] = None) -> AuditReport:
    settings = server_settings(workspace)
    if not settings.configured:
        raise LabelStudioError(settings.how_to_configure())
    store = workspace.store
    if person is None:
        with store.session() as session:
            accepted = set(session.execute(select(Item.id).where(Item.status == ACCEPTED)).scalars())
        person = choose_auditor(settings, seen_items(store, list(settings.annotators)), accepted)
    elif settings.assigns and person not in settings.annotators:
        raise CftoolsError(f"{person} is not among [label_studio] annotators (or people tables): the auditor needs "
                           "a project of their own")
    items, eligible = audit_sample(store, person, sample, seed)
    report = AuditReport(person, seed, sample, eligible=eligible, items=sorted(i.key for i in items))
    servers = Servers(settings)
    try:
        servers.check()
        sender = Sender(workspace, servers, settings)
        by_kind: dict[str, list[Item]] = defaultdict(list)
        for item in items:
            by_kind[item.kind].append(item)
        for kind, chosen in sorted(by_kind.items()):
            pushed = PushReport(purpose=AUDIT, kind=kind)
            sent = sender.send(kind, [(item, Purpose(AUDIT), person) for item in chosen], pushed)
            report.pushed += sent
            report.by_kind[kind] = sent
    finally:
        servers.close()
    report.by_kind = dict(Counter(report.by_kind))
    return report
