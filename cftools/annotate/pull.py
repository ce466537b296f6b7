"""`annotate pull`: every known task is exported with its annotations; one Judgment per (task, annotator).

Edited annotations update their judgment; results that do not fit the label config are rejected and reported;
tasks the server confirms are gone (its task listing lacks them, or the project is gone) are marked deleted and
their items go back to `checked`; a task merely missing from an export snapshot is left as it was and listed in
`missing_from_export`. Two judgments from different annotators decide the item (the kind's `decide`, by default
`cftools.annotate.rules.decide`); a disagreement goes to adjudication, whose decision settles it.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from sqlalchemy import bindparam, insert, select
from sqlmodel import Session

from cftools.annotate.projects import ANNOTATIONS_PER_TASK, DECIDED, DELETED, GONE, OPEN, RETURNED, Progress, STAGE, project_about, unsynced_delete, unsynced_update, own_task
from cftools.annotate.purpose import Purpose
from cftools.annotate.assign import Sender, choose_people, current_load, live_assignees, reconcile_person
from cftools.annotate.attribution import person_of, refusal
from cftools.annotate.controls import record_outcomes
from cftools.annotate.pauses import paused_people
from cftools.annotate.push import verify_judges
from cftools.annotate.task_import import PushReport, StoredTask, item_event_row, open_tasks_of, forget_deleted
from cftools.annotate.status import record_agreement
from cftools.judgments import ADJUDICATE, CONTROL, VERIFY, Answer, Decision, InvalidResult, adjudicated, decide
from cftools.annotate.rules import preload_agreement_library
from cftools.annotate.label_studio import LabelStudioError, LabelStudioServer, ServerSettings, parse_time, server_settings
from cftools.annotate.separation import link_after_pull, refresh_instructions, verify_separation
from cftools.annotate.servers import Servers
from cftools.annotate.authoring import AuthoringPull, pull_authoring
from cftools.errors import CftoolsError
from cftools.models import (
    IN_REVIEW, NEEDS_ADJUDICATION, AnnotationTask, Item, ItemEvent, Judgment, utcnow,
)
from cftools.kinds import all_kinds, get_kind
from cftools.progress import no_progress
from cftools.store import Store, in_chunks
from cftools.workspace import Workspace

# ---------------------------------------------------------------- pull

# Why a task was returned (its `decision` while its state is `returned`): `annotate status` counts each apart.
INVALID, SKIPPED, REFUSED, TASK_DELETED = "invalid", "skipped", "refused", "deleted"
LEFT = "left"  # handed over: its assignee is no longer in [label_studio] annotators
WHY_BACK = {INVALID: "your last submission (task {task}) could not be used: {reason}",
            SKIPPED: "{reason}; every task needs your answer (write in the comment why it is hard)",
            REFUSED: "{reason}: your judgment must be yours as you left it",
            TASK_DELETED: "your task {task} was deleted on the server"}
BACK_IN_REVIEW = "back in review (a judgment was withdrawn)"  # what pull's summary says of an undone decision
HANDED_OVER = "Sent to you: the person who had it left the team (their task was never answered)."
RESEND = "resend"  # the plan a return's or hand-over's mark keeps: the new task's person and note (see ReturnPlanner)


@dataclass
class PullReport:
    projects: int = 0
    tasks: int = 0
    annotations: int = 0
    judgments_added: int = 0
    judgments_updated: int = 0
    judgments_unchanged: int = 0
    judgments_removed: int = 0
    cancelled: int = 0
    skipped: list[dict] = field(default_factory=list)  # assigned tasks their assignee skipped: sent back to them
    ignored_same_annotator: int = 0
    ignored_extra_annotators: int = 0
    invalid: list[dict] = field(default_factory=list)
    # Annotations not counted: made or last changed by someone other than the person the task is for.
    refused: list[dict] = field(default_factory=list)
    returned: dict[str, list[dict]] = field(default_factory=dict)  # per person: submissions sent back, and why
    tiebreaks: list[dict] = field(default_factory=list)  # tasks of a kind's own task that now ask one more person
    # Open tasks of people no longer in [label_studio] annotators: each went to someone else ("sent_to"; None and
    # "unassigned" saying why when no one could take it: the task stays as it was).
    handed_over: list[dict] = field(default_factory=list)
    # Tasks of a shared project that the server counted as done short of usable judgments: offered to more people.
    reopened: list[dict] = field(default_factory=list)
    # Returned or handed-over tasks whose new task an earlier pull marked but never sent (killed, or the server
    # failed in between): sent now, to the person and with the note planned then.
    resent: list[dict] = field(default_factory=list)
    items_made: int = 0  # items a kind's decisions made (a MuCR selection)
    mismatched: list[dict] = field(default_factory=list)
    deleted_tasks: list[dict] = field(default_factory=list)
    # Tasks missing from the export but still on the server: left as they were, read again by the next pull.
    missing_from_export: list[dict] = field(default_factory=list)
    decisions: Counter = field(default_factory=Counter)
    authoring: AuthoringPull = field(default_factory=AuthoringPull)
    # Servers the store says hold live tasks, but no longer in cftools.toml: their tasks were not read.
    servers_not_configured: list[str] = field(default_factory=list)
    # What the separation check at the pull's start found wrong (the judgments it covers are not blind).
    separation: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["decisions"] = dict(self.decisions)
        out["authoring"] = self.authoring.as_dict()
        return out


@dataclass
class Chosen:
    """The annotation kept for one (task, person): the person who made it, and what it answers."""

    person: str
    annotation: dict
    answer: Answer


def choose_annotations(task: dict, kind: str, purpose: Purpose, people: dict[int, str], report: PullReport,
                       workspace_root: Optional[str] = None, person: Optional[str] = None,
                       judges: frozenset[str] = frozenset()) -> list[Chosen]:
    """The first valid annotation of each author (PEOPLE: the server's users), in annotation order, at most two
    authors (one for adjudication; with a PERSON, the task's, only theirs); everything else is counted or reported.
    An annotation made by someone other than the person, or changed by someone other than its author, is refused
    by name: it is not that person's judgment as they left it. So is an adjudication by one of the item's JUDGES:
    a third person settles a disagreement (in a shared project anyone can open the task)."""
    chosen: list[Chosen] = []
    seen: set[str] = set()
    spec = own_task(kind, purpose)
    limit = (spec.annotators + spec.tiebreak) if spec is not None else ANNOTATIONS_PER_TASK if purpose.task == VERIFY else 1
    if person:
        limit = 1
    name = purpose.shown.task  # a control or audit task was made with the verify config
    unusable: list[dict] = []  # skips and refusals of an assigned task: it comes back unless a judgment counts
    for annotation in sorted(task.get("annotations") or [], key=lambda a: a.get("id") or 0):
        report.annotations += 1
        author = person_of(annotation.get("completed_by"), people)
        where = {"project": task.get("project"), "task": task.get("id"), "annotation": annotation.get("id"),
                 "annotator": author}
        if annotation.get("was_cancelled"):
            report.cancelled += 1
            if person and author == person:
                unusable.append({**where, "why": SKIPPED, "reason": f"you skipped task {task.get('id')}"})
            continue
        refused = refusal(annotation, task.get("id"), people, person)
        if refused is None and author in judges:
            refused = f"task {task.get('id')}: {author} judged this item, so cannot settle it: not counted"
        if refused is not None:
            report.refused.append({**where, "reason": refused})
            if person:
                unusable.append({**where, "why": REFUSED, "reason": refused})
            continue
        try:
            answer = get_kind(kind).hooks.annotate.read_judgment(name, annotation.get("result"), workspace_root)
            get_kind(kind).hooks.annotate.check_judgment(name, answer, task.get("data") or {})
        except InvalidResult as exc:
            report.invalid.append({**where, "reason": str(exc)})
            if person:
                report.returned.setdefault(author, []).append({**where, "purpose": str(purpose), "why": INVALID,
                                                                  "reason": str(exc)})
            continue
        if author in seen:
            report.ignored_same_annotator += 1
            continue
        if len(chosen) >= limit:
            report.ignored_extra_annotators += 1
            continue
        seen.add(author)
        chosen.append(Chosen(author, annotation, answer))
    returned = report.returned.get(person or "", [])
    if person and unusable and not chosen and not any(r["task"] == task.get("id") for r in returned):
        last = unusable[-1]  # the task goes back to its person as a new one that says why (nothing stuck)
        entry = {**last, "annotator": person, "purpose": str(purpose)}
        report.returned.setdefault(person, []).append(entry)
        if last["why"] == SKIPPED:
            report.skipped.append({k: v for k, v in entry.items() if k != "why"})
    return chosen


def short_of_judgments(task: dict, picks: list[Chosen], needed: int) -> Optional[int]:
    """The overlap that has the server hand a shared project's TASK to one more person per missing judgment, where
    it counts the task as done (every submission counts toward its overlap there, usable or not, skips aside) with
    fewer than NEEDED usable PICKS; None where it still hands the task out."""
    submitted = sum(1 for a in task.get("annotations") or [] if not a.get("was_cancelled"))
    missing = needed - len(picks)
    return submitted + missing if missing > 0 and submitted + missing > needed else None


def sibling_picks(session: Session, tasks: dict[int, StoredTask], changed: set[int]) -> dict[int, list[Chosen]]:
    """For each changed assigned task: the judgments of every live task of its item and purpose (one per person's
    project), in the order they were made: what decides the item."""
    wanted = {(tasks[t].item_id, tasks[t].purpose): t for t in changed if tasks[t].assignee}
    if not wanted:
        return {}
    found: dict[tuple[int, Purpose], list[Chosen]] = defaultdict(list)
    item_ids = sorted({item_id for item_id, _ in wanted})
    for part in in_chunks(item_ids):
        for item_id, purpose, j in session.execute(
                select(AnnotationTask.item_id, AnnotationTask.purpose, Judgment)
                .join(Judgment, Judgment.task_id == AnnotationTask.id)
                .where(AnnotationTask.item_id.in_(part), AnnotationTask.state.not_in(GONE))
                .order_by(Judgment.annotated_at, Judgment.ls_annotation_id)).all():
            purpose = Purpose.parse(purpose)
            if (item_id, purpose) in wanted:
                answer = Answer(related=j.related, answer_correct=j.answer_correct,
                                corrected_answer=j.corrected_answer, flags=list(j.flags or []), comment=j.comment,
                                decision=j.decision, fields=(j.raw or {}).get("fields") or {})
                found[(item_id, purpose)].append(Chosen(j.annotator, {"id": j.ls_annotation_id}, answer))
    return {t: found.get((tasks[t].item_id, tasks[t].purpose), []) for t in changed if tasks[t].assignee}


def _judgment_row(task_id: int, chosen: Chosen) -> dict:
    a, answer = chosen.annotation, chosen.answer
    return {"task_id": task_id, "annotator": chosen.person, "ls_annotation_id": a.get("id"),
            "related": answer.related, "answer_correct": answer.answer_correct,
            "corrected_answer": answer.corrected_answer, "flags": answer.flags, "comment": answer.comment,
            "decision": answer.decision,
            "raw": {"result": a.get("result"), "completed_by": a.get("completed_by"), "fields": answer.fields or None,
                    "created_at": a.get("created_at"), "updated_at": a.get("updated_at"),
                    "lead_time": a.get("lead_time")},
            "annotated_at": parse_time(a.get("updated_at") or a.get("created_at")), "updated_at": utcnow()}


def store_judgments(session: Session, chosen: dict[int, list[Chosen]], report: PullReport) -> set[int]:
    """Upsert one judgment per (task, annotator); returns the store ids of tasks whose judgments changed.

    Afterwards the judgments of each task in CHOSEN are exactly its picks, in the same order."""
    task_ids = list(chosen)
    existing: dict[tuple[int, str], Any] = {}
    for part in in_chunks(task_ids):
        for j in session.execute(select(Judgment.id, Judgment.task_id, Judgment.annotator, Judgment.ls_annotation_id,
                                        Judgment.raw)
                                 .where(Judgment.task_id.in_(part))):
            existing[(j.task_id, j.annotator)] = j
    changed: set[int] = set()
    new_rows: list[dict] = []
    updates: list[dict] = []
    for task_id, picks in chosen.items():
        for pick in picks:
            row = _judgment_row(task_id, pick)
            old = existing.pop((task_id, pick.person), None)
            if old is None:
                new_rows.append(row)
                changed.add(task_id)
            elif (old.ls_annotation_id != row["ls_annotation_id"]
                  or (old.raw or {}).get("updated_at") != row["raw"]["updated_at"]):
                updates.append({**row, "id": old.id})
                changed.add(task_id)
            else:
                report.judgments_unchanged += 1
    stale = [j for (task_id, _), j in existing.items() if task_id in chosen]  # annotation gone or now invalid
    if new_rows:
        session.execute(insert(Judgment.__table__), new_rows)
    for row in updates:
        session.execute(unsynced_update(Judgment).where(Judgment.id == row.pop("id")).values(**row))
    for j in stale:
        session.execute(unsynced_delete(Judgment).where(Judgment.id == j.id))
        changed.add(j.task_id)
    report.judgments_added += len(new_rows)
    report.judgments_updated += len(updates)
    report.judgments_removed += len(stale)
    return changed


@dataclass
class PendingWrites:
    """Row changes collected while deciding, written in a few executemany statements."""

    items: list[dict] = field(default_factory=list)
    tasks: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)

    def flush(self, session: Session) -> None:
        _bulk_update(session, Item.__table__, self.items)
        _bulk_update(session, AnnotationTask.__table__, self.tasks)
        if self.events:
            session.execute(insert(ItemEvent.__table__), self.events)


def _bulk_update(session: Session, table, rows: list[dict]) -> None:  # noqa: ANN001
    """UPDATE table SET ... WHERE id = row["id"], one executemany per set of changed columns."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[tuple(sorted(k for k in row if k != "id"))].append(row)
    for columns, group in groups.items():
        statement = (table.update().where(table.c.id == bindparam("row_id"))
                     .values({c: bindparam(f"new_{c}") for c in columns}))
        session.execute(statement, [{"row_id": r["id"], **{f"new_{c}": r[c] for c in columns}} for r in group])


def _set_item_decision(writes: PendingWrites, item: Any, decision: Decision, task: Any,
                       annotators: list[str]) -> None:
    """Queue the item's new status (and answer) with its history event; ITEM and TASK are rows of their tables."""
    now = utcnow()
    detail: dict[str, Any] = {"decision": decision.status, "rule": decision.rule, "purpose": str(task.purpose),
                              "project": task.ls_project_id, "task": task.ls_task_id, "annotators": annotators}
    values: dict[str, Any] = {"id": item.id, "status": decision.status, "updated_at": now}
    if decision.corrected_answer is not None:
        proposed = item.proposed_answer if item.proposed_answer is not None else item.answer
        values.update(answer=decision.corrected_answer, proposed_answer=proposed)
        detail.update(proposed_answer=proposed, corrected_answer=decision.corrected_answer)
    elif item.proposed_answer is not None and item.answer != item.proposed_answer:
        # An earlier correction no longer holds (an annotation was edited): back to the proposed answer.
        values.update(answer=item.proposed_answer, proposed_answer=None)
        detail.update(restored_answer=item.proposed_answer)
    if decision.data:  # a kind's adjudication settles fields of the item's data (MuCR: the accepted cue set)
        values["data"] = merged(getattr(item, "data", None) or {}, decision.data)
        detail.update(settled={k: decision.data[k] for k in ("cue", "false_cues") if k in decision.data})
    unchanged = (item.status == decision.status and task.decision == decision.status
                 and values.get("answer", item.answer) == item.answer and "data" not in values)
    if unchanged:
        return
    writes.items.append(values)
    writes.tasks.append({"id": task.id, "state": DECIDED, "decision": decision.status, "updated_at": now})
    writes.events.append(item_event_row(item.id, item.status, decision.status, detail))


def apply_decisions(session: Session, tasks: dict[int, StoredTask], changed: set[int], chosen: dict[int, list[Chosen]],
                    report: PullReport, kind: Optional[str] = None) -> None:
    """Decide the items of tasks whose judgments changed (an adjudicated item keeps its adjudication).

    TASKS holds AnnotationTask rows by store id; a changed task's judgments are its picks in CHOSEN
    (see `store_judgments`), so they are not read back."""
    ids = sorted(changed)
    if not ids:
        return
    own = [t for t in ids if own_task(tasks[t].kind, tasks[t].purpose) is not None]
    if own:
        apply_own_decisions(session, tasks, own, chosen, report)
        ids = [t for t in ids if t not in own]
        if not ids:
            return
    item_ids = sorted({tasks[t].item_id for t in ids})
    items: dict[int, Any] = {}
    adjudicated_items: set[int] = set()
    for part in in_chunks(item_ids):
        items.update({i.id: i for i in session.execute(
            select(Item.id, Item.status, Item.answer, Item.proposed_answer, Item.data).where(Item.id.in_(part)))})
        adjudicated_items.update(session.execute(select(AnnotationTask.item_id).where(
            AnnotationTask.item_id.in_(part), AnnotationTask.purpose == ADJUDICATE,
            AnnotationTask.state == DECIDED)).scalars())
    writes = PendingWrites()
    settled: dict[tuple[int, Purpose], str] = {}  # (item, purpose) -> the decision its judgments made
    reopened: set[tuple[int, Purpose]] = set()  # (item, purpose) whose decision a withdrawn judgment undid
    for task_id in ids:
        task, found = tasks[task_id], chosen.get(task_id, [])
        item = items[task.item_id]
        if task.purpose.task == ADJUDICATE:
            if found:
                decision = (get_kind(kind).hooks.annotate.adjudicated(found[0].answer, item.data, found[0].person) if kind
                            else adjudicated(found[0].answer))
                _set_item_decision(writes, item, decision, task, [found[0].person])
                report.decisions[f"adjudicated {decision.status}"] += 1
            continue
        if item.id in adjudicated_items:
            continue
        if len(found) >= ANNOTATIONS_PER_TASK:
            decision = (get_kind(kind).hooks.annotate.decide if kind else decide)(found[0].answer, found[1].answer)
            _set_item_decision(writes, item, decision, task, [pick.person for pick in found[:2]])
            settled[(item.id, task.purpose)] = decision.status
            report.decisions[decision.status + (" (corrected)" if decision.corrected_answer else "")] += 1
        elif task.decision is not None:  # a judgment went away: the item is under review again
            now = utcnow()
            writes.tasks.append({"id": task.id, "state": OPEN, "decision": None, "updated_at": now})
            writes.items.append({"id": item.id, "status": IN_REVIEW, "updated_at": now})
            writes.events.append(item_event_row(item.id, item.status, IN_REVIEW, {"reopened": "a judgment was withdrawn"}))
            if (item.id, task.purpose) not in reopened:  # once per item, however many of its tasks lost one
                report.decisions[BACK_IN_REVIEW] += 1
            reopened.add((item.id, task.purpose))
    writes.flush(session)
    reopen_decided(session, reopened - set(settled))
    close_decided(session, settled)


def reopen_decided(session: Session, undone: set[tuple[int, Purpose]]) -> None:
    """An item back under review has no task of that purpose still marked decided (each person's task of it holds
    no decision the item no longer has; `close_decided` the other way round)."""
    now = utcnow()
    for item_id, purpose in undone:
        session.execute(unsynced_update(AnnotationTask).where(
            AnnotationTask.item_id == item_id, AnnotationTask.purpose == str(purpose), AnnotationTask.state == DECIDED)
            .values(state=OPEN, decision=None, updated_at=now))


def close_decided(session: Session, settled: dict[tuple[int, Purpose], str]) -> None:
    """Once an item is decided, none of its tasks of that purpose stays open (each person's task of it is decided:
    a sibling whose judgment came in an earlier pull would otherwise wait forever and count as load)."""
    now = utcnow()
    for (item_id, purpose), status in settled.items():
        session.execute(unsynced_update(AnnotationTask).where(
            AnnotationTask.item_id == item_id, AnnotationTask.purpose == str(purpose), AnnotationTask.state == OPEN)
            .values(state=DECIDED, decision=status, updated_at=now))


def merged(data: dict, update: dict) -> dict:
    """DATA with UPDATE's keys; a dict value is merged one level down (one style's selection beside another's)."""
    out = dict(data)
    for key, value in update.items():
        out[key] = {**out[key], **value} if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def apply_own_decisions(session: Session, tasks: dict[int, StoredTask], ids: list[int], chosen: dict[int, list[Chosen]],
                        report: PullReport) -> None:
    """Decide tasks of a kind's own task by the kind's rule: the item's data and status, the items a decision
    makes, and the tasks that need one more person (their overlap is raised after the write)."""
    now = utcnow()
    for task_id in ids:
        task = tasks[task_id]
        item = session.get(Item, task.item_id)
        name, unit = task.purpose.task, task.purpose.unit
        picks = chosen.get(task_id, [])
        outcome = get_kind(item.kind).hooks.annotate.decide_task(name, unit, item, [(p.person, p.answer) for p in picks])
        if outcome.wants:
            report.tiebreaks.append({"item": item.key, "task": task.ls_task_id, "annotators": outcome.wants})
        before = item.status
        if outcome.data:
            item.data = merged(item.data or {}, outcome.data)
        if outcome.status:
            item.status = outcome.status
        item.updated_at = now
        session.add(item)
        state = DECIDED if outcome.decided else OPEN
        decision = (outcome.status or outcome.rule) if outcome.decided else None
        session.execute(unsynced_update(AnnotationTask).where(AnnotationTask.id == task_id)
                        .values(state=state, decision=decision, updated_at=now))
        if outcome.decided:
            close_decided(session, {(item.id, task.purpose): decision})
        if outcome.decided or outcome.wants or item.status != before:  # not a task still waiting for judgments
            report.decisions[f"{name}: {outcome.rule or item.status}"] += 1
            session.add(ItemEvent(item_id=item.id, stage=STAGE, from_status=before, to_status=item.status,
                                  detail={"task": str(task.purpose), "rule": outcome.rule,
                                          "annotators": [p.person for p in picks]}))
        for row in outcome.new_items:
            if session.execute(select(Item.id).where(Item.key == row["key"])).first() is None:
                made = Item(**row)
                session.add(made)
                session.flush()
                session.add(ItemEvent(item_id=made.id, stage=STAGE, from_status=None, to_status=made.status,
                                      detail={"made_by": str(task.purpose), "from_item": item.key}))
                report.items_made += 1


def still_wanted(task: StoredTask, item: Item) -> bool:
    """Whether TASK's item still waits on a task of its purpose (a deleted one then goes back to its person): a
    verification while the item is under review, an adjudication while it needs one, a kind's own task while the
    item is in one of its statuses, a control or an audit always (it measures its person)."""
    if task.purpose.task == VERIFY:
        return item.status == IN_REVIEW
    if task.purpose.task == ADJUDICATE:
        return item.status == NEEDS_ADJUDICATION
    if task.purpose.measuring:
        return True
    spec = own_task(item.kind, task.purpose)
    return spec is not None and (item.status in spec.statuses or item.status == spec.to_status)


def mark_deleted(session: Session, tasks: list[StoredTask], report: PullReport,
                 resend: Optional["ReturnPlanner"] = None) -> list[dict]:
    """Tasks gone from the server: marked deleted; items still under review go back to `checked`. With RESEND (who
    each goes to), an assigned task of any purpose that its item still waits on is instead returned (a new task goes
    to its assignee, saying why: see `send_back`); the entries to send are returned. The server may give a deleted
    task's id to a new task: the store lets go of it (the id stays in the item's history)."""
    now = utcnow()
    entries = []
    for task in tasks:
        item = session.get(Item, task.item_id)
        reason = f"task {task.ls_task_id} was deleted on the server"
        entry = {"project": task.ls_project_id, "task": task.ls_task_id, "annotator": task.assignee,
                 "purpose": str(task.purpose), "why": TASK_DELETED, "reason": reason}
        if resend is not None and task.assignee and getattr(task, "state", OPEN) == OPEN and still_wanted(task, item):
            resend.plan(task, entry)  # with no one to take it, forgotten below (its item pushed again)
        if RESEND in entry:
            session.execute(unsynced_update(AnnotationTask).where(AnnotationTask.id == task.id)
                            .values(state=RETURNED, decision=TASK_DELETED, ls_task_id=None, updated_at=now))
            session.execute(insert(ItemEvent.__table__), [item_event_row(item.id, item.status, item.status, {
                "task_deleted": task.ls_task_id, "project": task.ls_project_id, "purpose": str(task.purpose),
                "returned_to": task.assignee, "why": TASK_DELETED, "reason": reason, RESEND: entry[RESEND]})])
            entries.append(entry)
            report.deleted_tasks.append({"item": item.key, "project": task.ls_project_id, "task": task.ls_task_id,
                                         "purpose": str(task.purpose), "item_status": item.status,
                                         "sent_back_to": entry[RESEND]["to"]})
            continue
        report.deleted_tasks.append(forget_deleted(session, task))
    return entries


@dataclass(frozen=True)
class PullRun:
    """One pull: its workspace, the sender of tiebreaks and returned submissions (with assignment, to the person
    they are for), and where its progress goes."""

    workspace: Workspace
    sender: Sender
    progress: Progress = no_progress


def pull_project(run: PullRun, job: ProjectJob, server: LabelStudioServer, people: dict[int, str],
                 report: PullReport, fetched: Optional[list[list[dict]]] = None) -> None:
    """Read JOB's project's tasks back from SERVER (PEOPLE: its users' ids -> the people they are). FETCHED: the project's export
    chunks, already read (`fetch_projects`)."""
    store, sender, progress, workspace_root = run.workspace.store, run.sender, run.progress, str(run.workspace.root)
    project_id, kind, purpose = job.project_id, job.kind, job.purpose
    with store.session() as session:
        tasks = {t.id: StoredTask.of(t) for t in session.execute(select(
            AnnotationTask.id, AnnotationTask.item_id, AnnotationTask.purpose, AnnotationTask.ls_project_id,
            AnnotationTask.ls_task_id, AnnotationTask.decision, AnnotationTask.assignee, AnnotationTask.state,
            Item.kind)
            .join(Item, Item.id == AnnotationTask.item_id)
            .where(open_tasks_of(server.url, project_id, purpose)))}
        keys = dict(session.execute(select(Item.id, Item.key).where(Item.id.in_(
            select(AnnotationTask.item_id).where(open_tasks_of(server.url, project_id, purpose))))).all())
    by_ls_id = {t.ls_task_id: t for t in tasks.values()}
    report.projects += 1
    seen: set[int] = set()
    chunks: Iterable[list[dict]] = ()
    if fetched is not None:
        chunks = fetched
    elif server.project_exists(project_id):
        chunks = server.export_tasks(project_id, sorted(by_ls_id))
    done, needed = 0, project_about(kind, purpose)[0]
    judges = verify_judges(store, sorted({t.item_id for t in tasks.values()})) if purpose.task == ADJUDICATE else {}
    for chunk in chunks:  # each chunk is written in its own transaction while the server exports the next ones
        chosen: dict[int, list[Chosen]] = {}
        reopen: list[dict] = []
        for data in chunk:
            task = by_ls_id.get(data.get("id"))
            if task is None:
                continue
            seen.add(task.ls_task_id)
            carried = (data.get("meta") or {}).get("item_key") or (data.get("data") or {}).get("item_key")
            if carried != keys.get(task.item_id):
                report.mismatched.append({"project": project_id, "task": task.ls_task_id,
                                          "expected": keys.get(task.item_id), "found": carried})
                continue
            report.tasks += 1
            chosen[task.id] = choose_annotations(data, kind, purpose, people, report, workspace_root, task.assignee,
                                                 frozenset(judges.get(task.item_id, ())))
            if not task.assignee and (overlap := short_of_judgments(data, chosen[task.id], needed)) is not None:
                reopen.append({"project": project_id, "task": task.ls_task_id, "item": keys.get(task.item_id),
                               "annotators": overlap})
        asked = len(report.tiebreaks)
        returning = [r for person in report.returned.values() for r in person if r.get("project") == project_id
                     and not r.get("sent") and not r.get("unassigned")]
        if returning:  # planned before the mark, which keeps the plan: a killed pull's next run sends it
            ReturnPlanner.of(store, sender.settings.annotators, by_ls_id, returning).plan_all(by_ls_id, returning)
            returning = [r for r in returning if RESEND in r]  # one no one can take stays open (`unassigned`)
        with store.write() as session:
            changed = store_judgments(session, chosen, report)
            returned = mark_returned(session, by_ls_id, returning)
            changed -= returned
            if purpose.measuring:  # scored against the settled answer; never counted toward its item
                record_outcomes(session, tasks, changed, chosen, report)
            else:
                apply_decisions(session, tasks, changed, {**chosen, **sibling_picks(session, tasks, changed)},
                                report, kind)
            # only where the item still waits on the task (not one an adjudication settled meanwhile)
            reopen = [r for r in reopen
                      if still_wanted(by_ls_id[r["task"]], session.get(Item, by_ls_id[r["task"]].item_id))]
        tiebreaks = report.tiebreaks[asked:]
        shared = [t for t in tiebreaks if not by_ls_id[t["task"]].assignee]
        for tiebreak in shared:  # a shared project: the server is to hand the task to one more person
            server.set_task_overlap(tiebreak["task"], tiebreak["annotators"])
        for task_short in reopen:  # nothing stuck: no one could be handed it, nothing would decide its item
            server.set_task_overlap(task_short["task"], task_short["annotators"])
        report.reopened += reopen
        if returning or len(shared) < len(tiebreaks):
            send_back(store, sender, kind, tasks, by_ls_id, returning, [t for t in tiebreaks if t not in shared])
        done += len(chunk)
        # by server too: each person's server numbers its projects from 1
        progress(f"tasks of project {project_id} on {server.url}", done, len(by_ls_id))
    unseen = [ls_id for ls_id in by_ls_id if ls_id not in seen]
    confirmed = set(server.tasks_gone(project_id, unseen))
    report.missing_from_export += [{"project": project_id, "task": ls_id} for ls_id in unseen
                                   if ls_id not in confirmed]
    gone = [by_ls_id[ls_id] for ls_id in unseen if ls_id in confirmed]
    if gone:
        planner = ReturnPlanner.of(store, sender.settings.annotators, by_ls_id,
                                   [{"task": task.ls_task_id} for task in gone])
        with store.write() as session:
            back = mark_deleted(session, gone, report, resend=planner)
        if back:  # an assigned task deleted on the server: a new one goes to its assignee (or another person)
            send_back(store, sender, kind, tasks, by_ls_id, back, [])


def mark_returned(session: Session, by_ls_id: dict[int, Any], returning: list[dict]) -> set[int]:
    """Tasks whose assignee's submission was invalid take no more judgments (a new task goes back to them)."""
    now, ids = utcnow(), set()
    for entry in returning:
        task = by_ls_id[entry["task"]]
        ids.add(task.id)
        session.execute(unsynced_update(AnnotationTask).where(AnnotationTask.id == task.id)
                        .values(state=RETURNED, decision=entry.get("why") or INVALID, updated_at=now))
        session.execute(insert(ItemEvent.__table__), [item_event_row(task.item_id, None, None, {
            "returned_to": entry["annotator"], "task": entry["task"], "why": entry.get("why") or INVALID,
            "reason": entry["reason"], RESEND: entry[RESEND]})])
    return ids


def send_back(store: Store, sender: Sender, kind: str, tasks: dict[int, Any], by_ls_id: dict[int, Any],
              returning: list[dict], tiebreaks: list[dict]) -> None:
    """With assignment: each returned submission's item goes back to its author as a new task saying why, and
    each tiebreak to one more person who has not judged the item (their own project: `/next` hands it to them)."""
    items: dict[int, Item] = {}
    with store.session() as session:
        ids = {by_ls_id[r["task"]].item_id for r in returning} | {by_ls_id[t["task"]].item_id for t in tiebreaks}
        for item_id in ids:
            item = session.get(Item, item_id)
            session.expunge(item)
            items[item_id] = item
    wanted, notes = [], {}
    load = current_load(store)
    assigned = live_assignees(store, sorted(items))
    for entry in returning:  # to the person, with the note, that the mark planned (`ReturnPlanner`)
        task, plan = by_ls_id[entry["task"]], entry.pop(RESEND)
        wanted.append((items[task.item_id], task.purpose, plan["to"]))
        notes[(task.item_id, plan["to"])] = plan["note"]
        entry["sent"] = True
    if tiebreaks:
        for tiebreak in tiebreaks:
            task = by_ls_id[tiebreak["task"]]
            people = [p for p in assigned.get((task.item_id, task.purpose), []) if p]
            missing = tiebreak["annotators"] - len(people)
            if missing > 0:
                try:
                    chosen = choose_people(sender.settings.annotators, load, missing, set(people),
                                           f"the tiebreak of item {tiebreak['item']}")
                except CftoolsError as exc:  # too few people: said, and the rest of the pull goes on
                    tiebreak["unassigned"] = str(exc)
                    continue
                wanted += [(items[task.item_id], task.purpose, person) for person in chosen]
                tiebreak["sent_to"] = chosen
    if wanted:
        sender.send(kind, wanted, PushReport(purpose="returns and tiebreaks", kind=kind), notes)


def resend_plan(task: StoredTask, person: str, note: str) -> dict:
    """What a mark keeps of the new task it promises: the task it replaces, its purpose, the person, the note."""
    return {"task": task.id, "purpose": str(task.purpose), "to": person, "note": note}


@dataclass
class ReturnPlanner:
    """Who each task that comes back goes to, and the note it shows, planned before the mark is written: the mark's
    event keeps the plan (`resend`), so what a pull killed before the send leaves is sent by the next pull or by
    `doctor --repair`, to the same person with the same note."""

    annotators: tuple[str, ...]
    load: Counter
    assigned: dict[tuple[int, Purpose], list[str]]

    @classmethod
    def of(cls, store: Store, annotators: tuple[str, ...], by_ls_id: dict[int, Any],
           entries: list[dict]) -> "ReturnPlanner":
        items = sorted({by_ls_id[entry["task"]].item_id for entry in entries})
        return cls(annotators, current_load(store), live_assignees(store, items))

    def plan_all(self, by_ls_id: dict[int, Any], entries: list[dict]) -> None:
        for entry in entries:
            self.plan(by_ls_id[entry["task"]], entry)

    def plan(self, task: Any, entry: dict) -> None:
        """ENTRY's person (its annotator, or while they are off the team someone who has not judged the item) and
        note, kept in ENTRY["resend"]."""
        person = entry["annotator"]
        if person not in self.annotators:  # the assignee is gone: someone who has not judged the item
            taken = {p for p in self.assigned.get((task.item_id, task.purpose), []) if p} | {person}
            try:
                person = choose_people(self.annotators, self.load, 1, taken, f"item {task.item_id}")[0]
            except CftoolsError as exc:  # no one can take it: unmarked, as it is (the pull says why), planned no send
                entry["unassigned"] = str(exc)
                return
            entry["sent_to"] = person
        why = WHY_BACK.get(entry.get("why") or INVALID, WHY_BACK[INVALID]).format(task=entry["task"],
                                                                                 reason=entry["reason"])
        # the reason was the leaver's ("your last submission ..."): the new person is told only why it is theirs
        note = (f"Returned to you: {why}. Please answer again." if person == entry["annotator"]
                else "Sent to you: the person who had it left the team.")
        entry[RESEND] = resend_plan(task, person, note)


def unsent_returns(store: Store) -> list[tuple[Item, dict]]:
    """(item, plan) of each returned or handed-over task whose new task was never made (no task of the item, of that
    purpose, for the planned person after it), while the item still waits on it; one per (item, purpose, person). A
    task's last plan counts (`replan_for_people_gone` writes a later one)."""
    with store.session() as session:
        returned_items = select(AnnotationTask.item_id).where(AnnotationTask.state == RETURNED)
        last = {detail[RESEND]["task"]: (item_id, detail[RESEND]) for item_id, detail in session.execute(
            select(ItemEvent.item_id, ItemEvent.detail).where(ItemEvent.stage == STAGE,
                                                              ItemEvent.item_id.in_(returned_items))
            .order_by(ItemEvent.id)) if isinstance(detail, dict) and isinstance(detail.get(RESEND), dict)}
        plans = [last[task_id] for task_id in sorted(last)]
        made = session.execute(select(AnnotationTask.id, AnnotationTask.item_id, AnnotationTask.purpose,
                                      AnnotationTask.assignee).where(
            AnnotationTask.item_id.in_(returned_items))).all()
        found, seen = [], set()
        for item_id, plan in plans:
            key = (item_id, plan["purpose"], plan["to"])
            if key in seen or any((t.item_id, t.purpose, t.assignee) == key and t.id > plan["task"] for t in made):
                continue
            item = session.get(Item, item_id)
            if still_wanted(StoredTask(plan["task"], item_id, Purpose.parse(plan["purpose"])), item):
                seen.add(key)
                session.expunge(item)
                found.append((item, plan))
    return found


def send_unsent(store: Store, sender: Sender) -> list[dict]:
    """Send the new task of each returned or handed-over task whose send an earlier run never made, to the person
    and with the note its mark planned. First links what a send killed after its import left on the person's
    server (by key), so no one gets a task twice. Returns what was sent."""
    team = sender.settings.annotators
    if any(plan["to"] not in team for _, plan in unsent_returns(store)):
        replan_for_people_gone(store, team)
    unsent = [(item, plan) for item, plan in unsent_returns(store) if plan["to"] in team]  # else no one can take it
    for kind, purpose, person in sorted({(item.kind, plan["purpose"], plan["to"]) for item, plan in unsent}):
        project_id = sender.project(kind, Purpose.parse(purpose), person)
        reconcile_person(store, sender.servers.for_person(person), project_id, kind, person)
    unsent = unsent_returns(store) if unsent else []
    by_kind: dict[str, list[tuple[Item, dict]]] = defaultdict(list)
    for item, plan in unsent:
        by_kind[item.kind].append((item, plan))
    for kind, entries in sorted(by_kind.items()):
        sender.send(kind, [(item, Purpose.parse(plan["purpose"]), plan["to"]) for item, plan in entries],
                    PushReport(purpose="returns never sent", kind=kind),
                    {(item.id, plan["to"]): plan["note"] for item, plan in entries})
    return [{"item": item.key, "purpose": plan["purpose"], "sent_to": plan["to"]} for item, plan in unsent]


def replan_for_people_gone(store: Store, team: tuple[str, ...]) -> None:
    """A planned person who left the team since: the task goes to someone on TEAM who never had a task of the item
    and is not paused, as a hand-over, kept as the task's last plan (the store first, then the send); with no such
    person the plan stays as it was and nothing is sent."""
    gone = [(item, plan) for item, plan in unsent_returns(store) if plan["to"] not in team]
    load, paused = current_load(store), set(paused_people(store))
    had = people_of_items(store, sorted({item.id for item, _ in gone}))
    rows = []
    for item, plan in gone:
        try:
            [person] = choose_people(team, load, 1, had[item.id] | paused, f"item {item.key}")
        except CftoolsError:
            continue
        had[item.id].add(person)
        rows.append(item_event_row(item.id, None, None, {
            "handed_over_from": plan["to"], "sent_to": person, "purpose": plan["purpose"], "why": LEFT,
            RESEND: {**plan, "to": person, "note": "Sent to you: the person who had it left the team."}}))
    if rows:
        with store.write() as session:
            session.execute(insert(ItemEvent.__table__), rows)


def tasks_of_people_gone(store: Store, annotators: tuple[str, ...]) -> list[tuple[StoredTask, Item]]:
    """Open tasks of people not in ANNOTATORS that no judgment of theirs answers, whose items still wait on them,
    each with its item; not a control (it measures its person, who is gone)."""
    answered = select(Judgment.id).where(Judgment.task_id == AnnotationTask.id,
                                         Judgment.annotator == AnnotationTask.assignee).exists()
    found = []
    with store.session() as session:
        for row in session.execute(
                select(AnnotationTask.id, AnnotationTask.item_id, AnnotationTask.purpose, AnnotationTask.ls_project_id,
                       AnnotationTask.ls_task_id, AnnotationTask.assignee, AnnotationTask.state, Item.kind)
                .join(Item, Item.id == AnnotationTask.item_id)
                .where(AnnotationTask.assignee.is_not(None), AnnotationTask.assignee.not_in(annotators),
                       AnnotationTask.state == OPEN, AnnotationTask.ls_task_id.is_not(None), ~answered)
                .order_by(AnnotationTask.id)).all():
            task, item = StoredTask.of(row), session.get(Item, row.item_id)
            if task.purpose.task != CONTROL and still_wanted(task, item):
                session.expunge(item)
                found.append((task, item))
    return found


def people_of_items(store: Store, item_ids: list[int]) -> dict[int, set[str]]:
    """Per item: everyone who ever had a task of it."""
    found: dict[int, set[str]] = defaultdict(set)
    with store.session() as session:
        for part in in_chunks(item_ids):
            for item_id, person in session.execute(select(AnnotationTask.item_id, AnnotationTask.assignee).where(
                    AnnotationTask.item_id.in_(part), AnnotationTask.assignee.is_not(None))):
                found[item_id].add(person)
    return found


def hand_over(run: PullRun, report: PullReport) -> None:
    """Nothing stuck when a person leaves the team: each open task of someone no longer in [label_studio]
    annotators that they never answered, and that its item still waits on, goes to someone who never had a task of
    the item and is not paused, as a new task saying why; theirs takes no more judgments. With no such person the
    task stays as it is (`unassigned` says why, and `annotate status` counts its item as waiting on no one)."""
    store, sender = run.workspace.store, run.sender
    gone = tasks_of_people_gone(store, sender.settings.annotators)
    if not gone:
        return
    load, paused = current_load(store), set(paused_people(store))
    had = people_of_items(store, sorted({task.item_id for task, _ in gone}))
    wanted: dict[str, list[tuple[Item, Purpose, str]]] = defaultdict(list)
    notes: dict[tuple[int, str], str] = {}
    handed: list[tuple[StoredTask, dict]] = []
    for task, item in gone:
        entry = {"item": item.key, "project": task.ls_project_id, "task": task.ls_task_id, "purpose": str(task.purpose),
                 "from": task.assignee, "sent_to": None}
        report.handed_over.append(entry)
        try:
            [person] = choose_people(sender.settings.annotators, load, 1, had[item.id] | paused, f"item {item.key}")
        except CftoolsError as exc:
            entry["unassigned"] = str(exc)
            continue
        had[item.id].add(person)
        entry["sent_to"] = person
        wanted[item.kind].append((item, task.purpose, person))
        notes[(item.id, person)] = HANDED_OVER
        handed.append((task, entry))
    if not handed:
        return
    now = utcnow()
    with store.write() as session:  # theirs first, with the plan: a killed pull's next run sends what it did not
        for task, entry in handed:
            session.execute(unsynced_update(AnnotationTask).where(AnnotationTask.id == task.id)
                            .values(state=RETURNED, decision=LEFT, updated_at=now))
            session.execute(insert(ItemEvent.__table__), [item_event_row(task.item_id, None, None, {
                "handed_over_from": entry["from"], "sent_to": entry["sent_to"], "task": entry["task"],
                "purpose": entry["purpose"], "why": LEFT,
                RESEND: resend_plan(task, entry["sent_to"], HANDED_OVER)})])
    for kind, entries in wanted.items():
        sender.send(kind, entries, PushReport(purpose="handed over", kind=kind), notes)


@dataclass(frozen=True)
class ProjectJob:
    """One project to read back: where it is, what it holds, and the task ids the store links to it."""

    server_url: str
    project_id: int
    kind: str
    purpose: Purpose
    task_ids: tuple[int, ...]


def project_jobs(store: Store) -> list[ProjectJob]:
    """Every project with live tasks, on every server: verification first (an adjudication pulled in the same run
    must have the last word), then by server and project."""
    with store.session() as session:
        rows = session.execute(
            select(AnnotationTask.server, AnnotationTask.ls_project_id, Item.kind, AnnotationTask.purpose,
                   AnnotationTask.ls_task_id)
            .join(Item, Item.id == AnnotationTask.item_id)
            .where(AnnotationTask.state.not_in(GONE))).all()
    tasks: dict[tuple, list[int]] = defaultdict(list)
    for url, project_id, kind, purpose, task_id in rows:
        tasks[(url, project_id, kind, purpose)].append(task_id)
    order = sorted(tasks, key=lambda key: (key[0], key[1], key[2]))
    order.sort(key=lambda key: key[3], reverse=True)  # stable: purposes descending, then server and project
    return [ProjectJob(url, pid, kind, Purpose.parse(purpose), tuple(sorted(tasks[(url, pid, kind, purpose)])))
            for url, pid, kind, purpose in order]


def fetch_project(server: LabelStudioServer, job: ProjectJob) -> list[list[dict]]:
    """The export chunks of JOB's project (none when the project is gone: its tasks are then confirmed gone)."""
    if not server.project_exists(job.project_id):
        return []
    return list(server.export_tasks(job.project_id, list(job.task_ids)))


def fetch_projects(servers: Servers, jobs: list[ProjectJob]) -> dict[ProjectJob, Future]:
    """Start reading every project: one thread per server, so all servers export at once (each person's server is
    a single-process Label Studio: its serializer bounds its own pull, not the others'); a server's projects are
    read one after another, in JOBS' order. Each future gives (server, its users as people, chunks); a job on a server
    no longer configured gives (None, {}, [])."""
    pools: dict[str, ThreadPoolExecutor] = {}
    futures: dict[ProjectJob, Future] = {}

    def read(job: ProjectJob) -> tuple[Optional[LabelStudioServer], dict[int, str], list[list[dict]]]:
        server = servers.for_url(job.server_url)
        if server is None:
            return None, {}, []
        return server, servers.people(server), fetch_project(server, job)

    for job in jobs:
        if job.server_url not in pools:
            pools[job.server_url] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cftools-pull")
        futures[job] = pools[job.server_url].submit(read, job)
    for pool in pools.values():
        pool.shutdown(wait=False)  # the submitted reads run on; the pools go when they are done
    return futures


class PullCounts:
    """The lines a pull reports beside each project's tasks: projects read of all, and with one server per person
    the people whose every project is read."""

    PROJECTS, PEOPLE = "projects pulled", "people pulled"

    def __init__(self, jobs: list[ProjectJob], per_person: bool, progress: Progress) -> None:
        self.progress, self.per_person = progress, per_person
        self.total, self.projects = len(jobs), 0
        self.left = Counter(job.server_url for job in jobs)  # a person's projects are all on their server
        self.people = len(self.left)
        self.progress(self.PROJECTS, 0, self.total)
        if per_person:
            self.progress(self.PEOPLE, 0, self.people)

    def done(self, job: ProjectJob) -> None:
        self.projects += 1
        self.progress(self.PROJECTS, self.projects, self.total)
        self.left[job.server_url] -= 1
        if self.per_person:
            self.progress(self.PEOPLE, sum(1 for n in self.left.values() if n == 0), self.people)


def pull(workspace: Workspace, progress: Progress = no_progress) -> PullReport:
    """Fetch the annotations of every task this workspace pushed, from every configured server at once, then decide
    project by project as the chunks come in."""
    settings = server_settings(workspace)
    if not settings.configured:
        raise LabelStudioError(settings.how_to_configure())
    servers = Servers(settings)
    report = PullReport()
    preload = threading.Thread(target=preload_agreement_library, daemon=True)
    preload.start()  # while the servers build the first export snapshots
    futures: dict[ProjectJob, Future] = {}
    try:
        servers.check()
        verify_separation(workspace, settings, servers, "pull")
        refresh_instructions(workspace, servers, settings)
        run = PullRun(workspace, Sender(workspace, servers, settings), progress)
        if settings.assigns:  # what a killed pull marked but never sent, before anything new is read
            report.resent = send_unsent(workspace.store, run.sender)
        jobs = project_jobs(workspace.store)
        futures = fetch_projects(servers, jobs)
        counted = PullCounts(jobs, per_person=bool(settings.people), progress=progress)
        for job in jobs:
            server, people, chunks = futures[job].result()
            if server is None:
                if job.server_url not in report.servers_not_configured:
                    report.servers_not_configured.append(job.server_url)
            else:
                pull_project(run, job, server, people, report, fetched=chunks)
            counted.done(job)
        if settings.assigns:
            hand_over(run, report)
        pull_authoring_projects(workspace, servers, settings, report)
        link_after_pull(workspace.store, servers)  # what this pull stored, checked at its start
        report.separation = servers.separation_reasons
    finally:
        for future in futures.values():
            future.cancel()
        for future in futures.values():
            if not future.cancelled():
                try:
                    future.result()  # a read still running uses its server's connection: let it end first
                except Exception:  # noqa: BLE001 - raised in the loop above already, or moot after another error
                    pass
        servers.close()
    preload.join()
    record_agreement(workspace.store)
    return report


def pull_authoring_projects(workspace: Workspace, servers: Servers, settings: ServerSettings,
                            report: PullReport) -> None:
    """Submissions of every kind's authoring projects (each person's, on their server) become draft items (new
    ones only)."""
    from cftools.annotate.authoring import authoring_projects

    for name, spec in sorted(all_kinds().items()):
        for task in spec.hooks.annotate.authoring_tasks:
            for person, (server, project_id) in authoring_projects(servers, settings, name, task).items():
                pull_authoring(workspace, server, project_id, name, task, servers.people(server),
                               report.authoring, person)
