"""Tasks onto the Label Studio server: what each item's task carries (its payload), imports reconciled with what the
server already holds, and the links between tasks and items the store keeps. Shared by `annotate push` and the
per-person pushes of `cftools.annotate.assign`."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from sqlalchemy import and_, insert, select
from sqlmodel import Session

from cftools.judgments import ADJUDICATE, VERIFY, shown_person, without_emails
from cftools.annotate.projects import DELETED, GONE, ImageLinks, OPEN, Progress, STAGE, unsynced_update
from cftools.annotate.purpose import Purpose
from cftools.annotate.label_studio import LabelStudioServer, ServerSettings, UncertainImport, backoff
from cftools.annotate.servers import Servers
from cftools.models import (
    CHECKED, IN_REVIEW, NEEDS_ADJUDICATION, AnnotationTask, CheckFlag, Image,
    Item, ItemEvent, Judgment, SourceQuestion, utcnow,
)
from cftools.images import data_image_shas
from cftools.kinds import get_kind
from cftools.progress import no_progress
from cftools.store import in_chunks
from cftools.workspace import Workspace


@dataclass
class PushReport:
    purpose: str
    kind: str
    project_id: Optional[int] = None
    project_url: Optional[str] = None
    candidates: int = 0
    pushed: int = 0
    reconciled: int = 0
    duplicates_on_server: int = 0
    skipped_no_image: int = 0
    skipped_outside_root: int = 0
    storages_created: int = 0
    configured: bool = True
    message: Optional[str] = None
    assigned: dict[str, int] = field(default_factory=dict)  # tasks given to each person by this push
    project_ids: dict[str, int] = field(default_factory=dict)  # each person's project of this task
    project_urls: dict[str, str] = field(default_factory=dict)  # each person's project, on their server
    verification: str = ""  # "separate servers" or why not blind, in words (cftools.annotate.verification)
    separation: list[str] = field(default_factory=list)  # what the separation check found wrong (names people)
    controls: int = 0  # control items mixed into the people's queues by this push
    paused: list[dict] = field(default_factory=list)  # people this push paused (accuracy wholly below the minimum)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PushOptions:
    """How one push runs, as `annotate push` (or a requeue) asked for it."""

    limit: Optional[int] = None  # at most this many items (or images)
    data_uri: bool = False  # images inline in the task instead of linked
    allow_missing_images: bool = False  # push an item whose image is missing, without it
    only: Optional[frozenset[int]] = None  # these items alone (a requeue)
    progress: Progress = no_progress


@dataclass(frozen=True)
class PushRun:
    """One push of KIND's PURPOSE: the workspace, its open servers and their settings, and its options. The steps of
    a push take it instead of its parts; what they find goes into the run's `PushReport`."""

    workspace: Workspace
    servers: Servers
    settings: ServerSettings
    kind: str
    purpose: Purpose
    options: PushOptions = PushOptions()

    def images(self) -> ImageLinks:
        """How this push's tasks point at their images."""
        return ImageLinks.from_config(self.workspace, self.options.data_uri)


def open_tasks_of(server_url: str, project_id: int, purpose: Purpose):  # noqa: ANN202
    """The WHERE clause of a project's tasks for PURPOSE that still take judgments."""
    return and_(AnnotationTask.server == server_url, AnnotationTask.ls_project_id == project_id,
                AnnotationTask.purpose == str(purpose), AnnotationTask.state.not_in(GONE))

def item_event_row(item_id: int, from_status: Optional[str], to_status: Optional[str], detail: dict) -> dict:
    """An ItemEvent row of the annotation stage, for a bulk insert."""
    return {"item_id": item_id, "stage": STAGE, "from_status": from_status, "to_status": to_status,
            "detail": detail, "created_at": utcnow()}

@dataclass(frozen=True)
class TaskLinks:
    """Tasks of one PURPOSE just made in one project: (item id, task id) LINKS, HOW they were found (imported,
    reconciled), and the one PERSON they are for (None: the shared project)."""

    server_url: str
    project_id: int
    purpose: Purpose
    links: list[tuple[int, int]]
    how: str
    person: Optional[str] = None


def link_tasks(session: Session, made: TaskLinks, spec: Any = None, moved: frozenset | set = frozenset()) -> None:
    """Record MADE's links and move verified items to in_review, in the caller's transaction. SPEC is the spec of a
    kind's own task; MOVED the items an earlier link of theirs moved already."""
    now = utcnow()
    server_url, project_id, purpose, how = made.server_url, made.project_id, made.purpose, made.how
    free_reused_ids(session, server_url, project_id, [task_id for _, task_id in made.links])
    session.execute(insert(AnnotationTask.__table__), [
        {"item_id": item_id, "purpose": str(purpose), "server": server_url, "ls_project_id": project_id,
         "ls_task_id": task_id, "state": OPEN, "assignee": made.person, "pushed_at": now, "updated_at": now}
        for item_id, task_id in made.links])
    links = [link for link in made.links if link[0] not in moved]
    if not links:
        return
    item_ids = [item_id for item_id, _ in links]
    if spec is not None:
        if spec.to_status:
            for start in range(0, len(item_ids), 900):
                session.execute(unsynced_update(Item).where(Item.id.in_(item_ids[start:start + 900]))
                                .values(status=spec.to_status, updated_at=now))
        session.execute(insert(ItemEvent.__table__), [
            item_event_row(item_id, None, spec.to_status, {"pushed_to": str(purpose), "project": project_id,
                                                           "task": task_id, "server": server_url, "how": how})
            for item_id, task_id in links])
        return
    from_status = CHECKED if purpose.task == VERIFY else NEEDS_ADJUDICATION
    to_status = IN_REVIEW if purpose.task == VERIFY else NEEDS_ADJUDICATION
    for part in in_chunks(item_ids):
        session.execute(unsynced_update(Item).where(Item.id.in_(part))
                        .values(status=to_status, updated_at=now))
    session.execute(insert(ItemEvent.__table__), [
        item_event_row(item_id, from_status, to_status, {"pushed_to": str(purpose), "project": project_id, "task": task_id,
                                                 "server": server_url, "how": how})
        for item_id, task_id in links])

@dataclass(frozen=True)
class StoredTask:
    """An annotation task as push and pull read it from the store, its purpose parsed (`AnnotationTask.purpose`
    stays the stored string); KIND is its item's when the query joined it."""

    id: int
    item_id: int
    purpose: Purpose
    ls_project_id: Optional[int] = None
    ls_task_id: Optional[int] = None
    decision: Optional[str] = None
    assignee: Optional[str] = None
    state: str = OPEN
    kind: Optional[str] = None

    @classmethod
    def of(cls, row: Any) -> "StoredTask":
        """The task of a store ROW: an AnnotationTask, or a query's row with (some of) its columns."""
        return cls(row.id, row.item_id, Purpose.parse(row.purpose), getattr(row, "ls_project_id", None),
                   getattr(row, "ls_task_id", None), getattr(row, "decision", None), getattr(row, "assignee", None),
                   getattr(row, "state", OPEN), getattr(row, "kind", None))


def forget_deleted(session: Session, task: StoredTask) -> dict[str, Any]:
    """TASK is gone from its server: marked deleted, letting go of its id (Label Studio gives a deleted task's id to
    a new task; the id stays in the item's history); its item, if under review, back to `checked`. Returns what a
    report lists."""
    now = utcnow()
    item = session.get(Item, task.item_id)
    back = task.purpose.task == VERIFY and item.status == IN_REVIEW
    session.execute(unsynced_update(AnnotationTask).where(AnnotationTask.id == task.id)
                    .values(state=DELETED, ls_task_id=None, updated_at=now))
    if back:
        session.execute(unsynced_update(Item).where(Item.id == item.id).values(status=CHECKED, updated_at=now))
    session.execute(insert(ItemEvent.__table__), [item_event_row(
        item.id, item.status, CHECKED if back else item.status,
        {"task_deleted": task.ls_task_id, "project": task.ls_project_id, "purpose": str(task.purpose)})])
    return {"item": item.key, "project": task.ls_project_id, "task": task.ls_task_id, "purpose": str(task.purpose),
            "item_status": CHECKED if back else item.status}


def free_reused_ids(session: Session, server_url: str, project_id: int, task_ids: list[int]) -> None:
    """The server just gave TASK_IDS to new tasks, so any task of the store that held one is gone from it (Label
    Studio reuses a deleted task's id): a live one is forgotten as pull forgets a deleted task, and the store lets
    go of the id."""
    held = []
    for part in in_chunks(task_ids):
        held += session.execute(select(AnnotationTask.id, AnnotationTask.item_id, AnnotationTask.purpose,
                                       AnnotationTask.ls_project_id, AnnotationTask.ls_task_id, AnnotationTask.state)
                                .where(AnnotationTask.server == server_url, AnnotationTask.ls_project_id == project_id,
                                       AnnotationTask.ls_task_id.in_(part))).all()
    for task in held:
        if task.state not in GONE:
            forget_deleted(session, StoredTask.of(task))
    gone = [task.id for task in held if task.state in GONE]
    if gone:
        session.execute(unsynced_update(AnnotationTask).where(AnnotationTask.id.in_(gone)).values(ls_task_id=None))


def _flags_by_item(session: Session, item_ids: list[int]) -> dict[int, list[str]]:
    flags: dict[int, list[str]] = defaultdict(list)
    for part in in_chunks(item_ids):
        for flag in session.execute(select(CheckFlag).where(CheckFlag.item_id.in_(part))
                                    .order_by(CheckFlag.code)).scalars():
            flags[flag.item_id].append(f"{flag.code}: {flag.reason}")
    return flags

def _sources_by_item(session: Session, items: list[Item]) -> dict[int, tuple[Optional[SourceQuestion], Optional[Image]]]:
    source_ids = sorted({i.source_id for i in items if i.source_id})
    sources: dict[int, tuple[SourceQuestion, Optional[Image]]] = {}
    for part in in_chunks(source_ids):
        rows = session.execute(select(SourceQuestion, Image).outerjoin(Image, Image.id == SourceQuestion.image_id)
                               .where(SourceQuestion.id.in_(part))).all()
        sources.update({s.id: (s, img) for s, img in rows})
    return {i.id: sources.get(i.source_id, (None, None)) for i in items}

def _judgment_text(judgment: Judgment, number: int) -> str:
    """One verification judgment as the adjudicator reads it: its author as "Person NUMBER" (who that is stays in
    the store), and no email address in anything they wrote."""
    yes_no = {True: "yes", False: "no", None: "?"}
    text = (f"{shown_person(number)}: related={yes_no[judgment.related]}, "
            f"answer correct={yes_no[judgment.answer_correct]}")
    for name, value in sorted(((judgment.raw or {}).get("fields") or {}).items()):  # a kind's own answers, as given
        label = name.replace("_", " ").replace("cf ", "counterfactual ")
        text += f", {label}={yes_no[value] if isinstance(value, bool) else repr(value)}"
    if judgment.corrected_answer:
        text += f", corrected answer={judgment.corrected_answer!r}"
    if judgment.flags:
        text += f", flags={', '.join(judgment.flags)}"
    if judgment.comment:
        text += f", comment={judgment.comment!r}"
    return without_emails(text)

def _judgments_by_item(session: Session, item_ids: list[int]) -> dict[int, list[Judgment]]:
    found: dict[int, list[Judgment]] = defaultdict(list)
    for part in in_chunks(item_ids):
        rows = session.execute(
            select(AnnotationTask.item_id, Judgment).join(Judgment, Judgment.task_id == AnnotationTask.id)
            .where(AnnotationTask.item_id.in_(part), AnnotationTask.purpose == VERIFY,
                   AnnotationTask.state != DELETED)
            .order_by(Judgment.ls_annotation_id)).all()
        for item_id, judgment in rows:
            found[item_id].append(judgment)
    return found

def _extra_images(session: Session, items: list[Item], images: ImageLinks) -> dict[int, dict[str, str]]:
    """Per item: the further images its data names as `sha256:<hex>` (a MuCR pair, edit candidates), linked for
    Label Studio; one that cannot be shown (its file missing, or outside the document root) is left out."""
    wanted = {item.id: data_image_shas(item.data or {}) for item in items}
    shas = sorted({sha for found in wanted.values() for sha in found})
    stored = {img.sha256: img for part in in_chunks(shas)
              for img in session.execute(select(Image).where(Image.sha256.in_(part))).scalars()}
    linked: dict[int, dict[str, str]] = {}
    for item_id, found in wanted.items():
        links = {f"sha256:{sha}": images.link(stored[sha].path) for sha in found
                 if sha in stored and Path(stored[sha].path).is_file()}
        linked[item_id] = {ref: link for ref, link in links.items() if link}
    return linked


def task_payloads(session: Session, items: list[Item], task: str, images: ImageLinks,
                  allow_missing_images: bool, report: PushReport,
                  units: Optional[list[str]] = None) -> list[tuple[Item, dict]]:
    """The Label Studio task of each item (data + meta with the item key); items without a usable image are
    counted and left out unless ALLOW_MISSING_IMAGES. TASK: the task the items' tasks show (its label config's
    name). With UNITS (a kind's own task, one unit per item), the kind lays out the task and shows its own images."""
    if units is not None:
        return _own_payloads(session, items, units, task, images)
    item_ids = [i.id for i in items]
    flags = _flags_by_item(session, item_ids)
    sources = _sources_by_item(session, items)
    judgments = _judgments_by_item(session, item_ids) if task == ADJUDICATE else {}
    extra_images = _extra_images(session, items, images)
    payloads: list[tuple[Item, dict]] = []
    for item in items:
        source, image = sources[item.id]
        image_value = ""
        if image is not None:
            image_value = images.link(image.path)
            if image_value is None:
                report.skipped_outside_root += 1
                continue
        # An item may carry all its images in its data (a pair), with none on its source question.
        elif not allow_missing_images and not extra_images.get(item.id):
            report.skipped_no_image += 1
            continue
        data = {"item_key": item.key, "kind": item.kind, "group": item.group, "returned": "",
                "check_flags": "\n".join(flags.get(item.id, [])) or "none",
                **get_kind(item.kind).hooks.annotate.task_data(item, source, image_value, extra_images.get(item.id, {}))}
        if task == ADJUDICATE:
            found = judgments.get(item.id, [])
            data["judgment_1"] = _judgment_text(found[0], 1) if len(found) > 0 else "none"
            data["judgment_2"] = _judgment_text(found[1], 2) if len(found) > 1 else "none"
        payloads.append((item, {"data": data, "meta": {"item_key": item.key, "item_id": item.id}}))
    return payloads

def _own_payloads(session: Session, items: list[Item], units: list[str], task: str,
                  images: ImageLinks) -> list[tuple[Item, dict]]:
    flags = _flags_by_item(session, [i.id for i in items])
    extra_images = _extra_images(session, items, images)
    sources = _sources_by_item(session, items)  # a task on an item's own image (an edit beside its original)
    payloads = []
    for item, unit in zip(items, units):
        source, image = sources[item.id]
        image_value = (images.link(image.path) or "") if image is not None else ""
        data = {"item_key": item.key, "kind": item.kind, "group": item.group, "returned": "",
                "check_flags": "\n".join(flags.get(item.id, [])) or "none",
                **get_kind(item.kind).hooks.annotate.task_payload(task, unit, item, source, image_value,
                                                   extra_images.get(item.id, {}))}
        payloads.append((item, {"data": data, "meta": {"item_key": item.key, "item_id": item.id,
                                                       "purpose": str(Purpose(task, unit))}}))
    return payloads

Batch = list[tuple[Item, dict]]

def import_reconciled(server: LabelStudioServer, project_id: int, batch: Batch, reconcile: Callable[[], int],
                      remaining: Callable[[Batch], Batch]) -> tuple[Batch, list[int]]:
    """Import BATCH into PROJECT_ID: (what was imported, its task ids). An import whose outcome is unknown (the
    connection dropped, its answer was lost) is not simply sent again: RECONCILE first links the tasks the server
    did create (by their keys), and only REMAINING(batch), the entries still without a task, is imported."""
    for attempt in range(server.retries + 1):
        try:
            # keys starting with "_" are cftools' own notes on a task (its stored purpose): never sent
            return batch, server.import_tasks(project_id, [{k: v for k, v in task.items() if not k.startswith("_")}
                                                           for _, task in batch])
        except UncertainImport:
            if attempt >= server.retries:
                raise
            time.sleep(backoff(attempt))
            reconcile()
            batch = remaining(batch)
            if not batch:
                break
    return [], []
