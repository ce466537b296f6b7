"""`annotate push`: `checked` items of a kind become tasks of the kind's verification project (batched imports).

Each batch's task links and the items' move to `in_review` are written in one transaction. Before importing, the
project's tasks are reconciled with the store (by the item key every task carries), so a push killed between an
import and its store write never imports an item twice; nor does an import whose answer was lost (the tasks the
server did create are found by their keys and linked before the rest is imported again). `--adjudicate` sends
disagreements to the adjudication project; a kind's own tasks (`--task`) push their units the same way.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from sqlalchemy import and_, insert, select
from sqlmodel import Session

from cftools.judgments import ADJUDICATE, VERIFY
from cftools.annotate.projects import DELETED, GONE, ImageLinks, OPEN, Progress, STAGE, _no_progress, _update, ensure_project, own_task, purpose_of
from cftools.errors import CftoolsError
from cftools.annotate.label_studio import LabelStudioServer, UncertainImport, backoff, server_settings
from cftools.annotate.authoring import authoring_task, push_authoring
from cftools.models import (
    CHECKED, IN_REVIEW, NEEDS_ADJUDICATION, AnnotationTask, CheckFlag, Image,
    Item, ItemEvent, Judgment, SourceQuestion, utcnow,
)
from cftools.images import data_image_shas
from cftools.kinds import get_kind
from cftools.store import Store, in_chunks
from cftools.workspace import Workspace

# ---------------------------------------------------------------- push


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

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _open_task_filter(server_url: str, project_id: int, purpose: str):  # noqa: ANN202
    return and_(AnnotationTask.server == server_url, AnnotationTask.ls_project_id == project_id,
                AnnotationTask.purpose == purpose, AnnotationTask.state.not_in(GONE))


def _event(item_id: int, from_status: Optional[str], to_status: Optional[str], detail: dict) -> dict:
    return {"item_id": item_id, "stage": STAGE, "from_status": from_status, "to_status": to_status,
            "detail": detail, "created_at": utcnow()}


def _link_tasks(session: Session, server_url: str, project_id: int, purpose: str,
                links: list[tuple[int, int]], how: str, purposes: Optional[list[str]] = None,
                spec: Any = None, assignee: Optional[str] = None, moved: frozenset | set = frozenset()) -> None:
    """Record (item id, task id) links and move verified items to in_review, in the caller's transaction.
    PURPOSES, when given, is each link's own purpose (a kind's task with units); SPEC is that task's spec;
    ASSIGNEE the one person the tasks are for; MOVED the items an earlier link of theirs moved already."""
    now = utcnow()
    purposes = purposes or [purpose] * len(links)
    session.execute(insert(AnnotationTask.__table__), [
        {"item_id": item_id, "purpose": p, "server": server_url, "ls_project_id": project_id,
         "ls_task_id": task_id, "state": OPEN, "assignee": assignee, "pushed_at": now, "updated_at": now}
        for (item_id, task_id), p in zip(links, purposes)])
    kept = [(link, p) for link, p in zip(links, purposes) if link[0] not in moved]
    links, purposes = [link for link, _ in kept], [p for _, p in kept]
    if not links:
        return
    item_ids = [item_id for item_id, _ in links]
    if spec is not None:
        if spec.to_status:
            for start in range(0, len(item_ids), 900):
                session.execute(_update(Item).where(Item.id.in_(item_ids[start:start + 900]))
                                .values(status=spec.to_status, updated_at=now))
        session.execute(insert(ItemEvent.__table__), [
            _event(item_id, None, spec.to_status, {"pushed_to": p, "project": project_id, "task": task_id,
                                                   "server": server_url, "how": how})
            for (item_id, task_id), p in zip(links, purposes)])
        return
    from_status = CHECKED if purpose == VERIFY else NEEDS_ADJUDICATION
    to_status = IN_REVIEW if purpose == VERIFY else NEEDS_ADJUDICATION
    for part in in_chunks(item_ids):
        session.execute(_update(Item).where(Item.id.in_(part))
                        .values(status=to_status, updated_at=now))
    session.execute(insert(ItemEvent.__table__), [
        _event(item_id, from_status, to_status, {"pushed_to": purpose, "project": project_id, "task": task_id,
                                                 "server": server_url, "how": how})
        for item_id, task_id in links])


def _candidates(session: Session, kind: str, purpose: str, limit: Optional[int]) -> list[Item]:
    status = CHECKED if purpose == VERIFY else NEEDS_ADJUDICATION
    linked = select(AnnotationTask.item_id).where(AnnotationTask.purpose == purpose, AnnotationTask.state != DELETED)
    query = select(Item).where(Item.kind == kind, Item.status == status, Item.id.not_in(linked)).order_by(Item.id)
    if limit is not None:
        query = query.limit(limit)
    return list(session.execute(query).scalars())


def _own_candidates(session: Session, kind: str, spec: Any, limit: Optional[int]) -> list[tuple[Item, str]]:
    """(item, unit) of every task of a kind's own task still to push: items in the spec's statuses, each unit
    the kind names that has no live task yet."""
    linked = set(session.execute(select(AnnotationTask.item_id, AnnotationTask.purpose).where(
        AnnotationTask.state != DELETED)).all())
    query = select(Item).where(Item.kind == kind, Item.status.in_(list(spec.statuses))).order_by(Item.id)
    found: list[tuple[Item, str]] = []
    for item in session.execute(query).scalars():
        for unit in get_kind(kind).task_units(spec.name, item):
            if (item.id, purpose_of(spec.name, unit)) not in linked:
                found.append((item, unit))
    return found[:limit] if limit is not None else found


def reconcile(store: Store, server: LabelStudioServer, project_id: int, purpose: str, kind: str) -> tuple[int, int]:
    """Link tasks that exist on the server but not in the store (a push killed after an import).

    Returns (links recorded, duplicate tasks seen on the server for already linked items)."""
    if own_task(kind, purpose) is not None:
        return 0, 0  # a kind's own tasks carry their unit in the task: resumed by their key and unit below
    if server.task_count(project_id) == 0:
        return 0, 0
    on_server = server.task_keys(project_id)
    with store.session() as session:
        known = set(session.execute(select(AnnotationTask.ls_task_id)
                                    .where(_open_task_filter(server.url, project_id, purpose))).scalars())
        unknown = {tid: key for tid, key in on_server.items() if tid not in known and key}
        if not unknown:
            return 0, 0
        keys = sorted(set(unknown.values()))
        items: dict[str, Item] = {}
        for part in in_chunks(keys):
            items.update({i.key: i for i in session.execute(
                select(Item).where(Item.key.in_(part), Item.kind == kind)).scalars()})
        linked_items = set(session.execute(select(AnnotationTask.item_id).where(
            AnnotationTask.purpose == purpose, AnnotationTask.state != DELETED)).scalars())
    status = CHECKED if purpose == VERIFY else NEEDS_ADJUDICATION
    links: list[tuple[int, int]] = []
    duplicates = 0
    for task_id, key in sorted(unknown.items()):
        item = items.get(key)
        if item is None or item.status != status:
            continue
        if item.id in linked_items:
            duplicates += 1
            continue
        links.append((item.id, task_id))
        linked_items.add(item.id)
    if links:
        with store.write() as session:
            _link_tasks(session, server.url, project_id, purpose, links, how="reconciled")
    return len(links), duplicates


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


def _judgment_text(judgment: Judgment) -> str:
    yes_no = {True: "yes", False: "no", None: "?"}
    text = (f"{judgment.annotator}: related={yes_no[judgment.related]}, "
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
    return text


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
    """Per item: the further images its data names as `sha256:<hex>` (a MuCR pair), linked for Label Studio."""
    wanted = {item.id: data_image_shas(item.data or {}) for item in items}
    shas = sorted({sha for found in wanted.values() for sha in found})
    stored = {img.sha256: img for part in in_chunks(shas)
              for img in session.execute(select(Image).where(Image.sha256.in_(part))).scalars()}
    linked: dict[int, dict[str, str]] = {}
    for item_id, found in wanted.items():
        links = {f"sha256:{sha}": images.link(stored[sha].path) for sha in found if sha in stored}
        linked[item_id] = {ref: link for ref, link in links.items() if link}
    return linked


def task_payloads(session: Session, items: list[Item], purpose: str, images: ImageLinks,
                  allow_missing_images: bool, report: PushReport,
                  units: Optional[list[str]] = None) -> list[tuple[Item, dict]]:
    """The Label Studio task of each item (data + meta with the item key); items without a usable image are
    counted and left out unless ALLOW_MISSING_IMAGES. With UNITS (a kind's own task, one unit per item), the
    kind lays out the task and shows its own images."""
    if units is not None:
        return _own_payloads(session, items, units, purpose, images)
    item_ids = [i.id for i in items]
    flags = _flags_by_item(session, item_ids)
    sources = _sources_by_item(session, items)
    judgments = _judgments_by_item(session, item_ids) if purpose == ADJUDICATE else {}
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
                **get_kind(item.kind).task_data(item, source, image_value, extra_images.get(item.id, {}))}
        if purpose == ADJUDICATE:
            found = judgments.get(item.id, [])
            data["judgment_1"] = _judgment_text(found[0]) if len(found) > 0 else "none"
            data["judgment_2"] = _judgment_text(found[1]) if len(found) > 1 else "none"
        payloads.append((item, {"data": data, "meta": {"item_key": item.key, "item_id": item.id}}))
    return payloads


def _own_payloads(session: Session, items: list[Item], units: list[str], task: str,
                  images: ImageLinks) -> list[tuple[Item, dict]]:
    flags = _flags_by_item(session, [i.id for i in items])
    extra_images = _extra_images(session, items, images)
    payloads = []
    for item, unit in zip(items, units):
        data = {"item_key": item.key, "kind": item.kind, "group": item.group, "returned": "",
                "check_flags": "\n".join(flags.get(item.id, [])) or "none",
                **get_kind(item.kind).task_payload(task, unit, item, None, "", extra_images.get(item.id, {}))}
        payloads.append((item, {"data": data, "meta": {"item_key": item.key, "item_id": item.id,
                                                       "purpose": purpose_of(task, unit)}}))
    return payloads


def waiting_kind(store: Store, adjudicate: bool = False) -> Optional[str]:
    """The one kind whose items wait to be pushed (checked, or needs_adjudication with ADJUDICATE); with none
    waiting, the first kind in the store; None for an empty store."""
    status = NEEDS_ADJUDICATION if adjudicate else CHECKED
    with store.session() as session:
        waiting = sorted(session.execute(select(Item.kind).where(Item.status == status).distinct()).scalars())
        present = waiting or sorted(session.execute(select(Item.kind).distinct()).scalars())
    if len(waiting) > 1:
        raise CftoolsError(f"{status} items of several kinds are waiting ({', '.join(waiting)}): pass --kind")
    return present[0] if present else None


def push(workspace: Workspace, kind: Optional[str], limit: Optional[int] = None, adjudicate: bool = False,
         data_uri: bool = False, allow_missing_images: bool = False, if_configured: bool = False,
         progress: Progress = _no_progress, task: Optional[str] = None) -> PushReport:
    """Push `checked` items (or, with ADJUDICATE, `needs_adjudication` ones) of KIND to Label Studio. TASK names one
    of the kind's own tasks instead: a task on items (`Kind.task_spec`, e.g. MuCR's select, explain) or an
    authoring task on images, whose submissions become new items (`Kind.authoring_tasks`, e.g. CFMM's author)."""
    purpose = ADJUDICATE if adjudicate else VERIFY
    if task is not None and task != purpose and kind is not None:
        purpose = task if get_kind(kind).task_spec(task) is not None else authoring_task(kind, task)
    report = PushReport(purpose=purpose, kind=kind)
    settings = server_settings(workspace)
    if not settings.configured and if_configured:
        report.configured = False
        report.message = settings.how_to_configure()
        return report
    server = LabelStudioServer.from_settings(settings)
    try:
        server.check()
        store = workspace.store
        if kind is None:
            report.message = "nothing to push: the store holds no items yet"
            return report
        get_kind(kind).task_template(purpose)  # an unknown kind or task is an error before anything is created
        spec = own_task(kind, purpose)
        if settings.assigns and (spec is not None or purpose in (VERIFY, ADJUDICATE)):
            from cftools.annotate.assign import push_assigned

            push_assigned(workspace, server, settings, kind, purpose, limit, report, data_uri, allow_missing_images,
                          progress)
            return report
        project_id = ensure_project(server, settings, kind, purpose, str(workspace.root))
        report.project_id, report.project_url = project_id, server.project_url(project_id)
        if spec is None and purpose not in (VERIFY, ADJUDICATE):
            push_authoring(store, server, settings, project_id, kind, ImageLinks.from_config(workspace, data_uri),
                           limit, report, progress, purpose, str(workspace.root))
            return report
        if spec is not None:
            report.reconciled = reconcile_own(store, server, project_id, kind, spec)
        else:
            report.reconciled, report.duplicates_on_server = reconcile(store, server, project_id, purpose, kind)
        with store.session() as session:
            images = ImageLinks.from_config(workspace, data_uri)
            if spec is not None:
                pairs = _own_candidates(session, kind, spec, limit)
                items = [item for item, _ in pairs]
                payloads = task_payloads(session, items, purpose, images, allow_missing_images, report,
                                         units=[unit for _, unit in pairs])
            else:
                items = _candidates(session, kind, purpose, limit)
                payloads = task_payloads(session, items, purpose, images, allow_missing_images, report)
            report.candidates = len(items)
        report.storages_created = server.ensure_local_storage(project_id, images.folders)
        progress("push", 0, len(payloads))
        done = 0
        for start in range(0, len(payloads), settings.batch_size):
            batch = payloads[start:start + settings.batch_size]
            import_batch(store, server, project_id, kind, purpose, spec, batch, report)
            done += len(batch)
            progress("push", done, len(payloads))
    finally:
        server.close()
    return report


Batch = list[tuple[Item, dict]]


def import_reconciled(server: LabelStudioServer, project_id: int, batch: Batch, reconcile: Callable[[], int],
                      remaining: Callable[[Batch], Batch]) -> tuple[Batch, list[int]]:
    """Import BATCH into PROJECT_ID: (what was imported, its task ids). An import whose outcome is unknown (the
    connection dropped, its answer was lost) is not simply sent again: RECONCILE first links the tasks the server
    did create (by their keys), and only REMAINING(batch), the entries still without a task, is imported."""
    for attempt in range(server.retries + 1):
        try:
            return batch, server.import_tasks(project_id, [task for _, task in batch])
        except UncertainImport:
            if attempt >= server.retries:
                raise
            time.sleep(backoff(attempt))
            reconcile()
            batch = remaining(batch)
            if not batch:
                break
    return [], []


def import_batch(store: Store, server: LabelStudioServer, project_id: int, kind: str, purpose: str, spec: Any,
                 batch: Batch, report: PushReport) -> None:
    """Import BATCH and record its links in one transaction (see `import_reconciled`)."""
    def relink() -> int:
        found = (reconcile_own(store, server, project_id, kind, spec) if spec is not None
                 else reconcile(store, server, project_id, purpose, kind)[0])
        report.reconciled += found
        return found

    batch, task_ids = import_reconciled(server, project_id, batch, relink,
                                        lambda rest: _without_task(store, rest, purpose))
    if not batch:
        return
    with store.write() as session:
        _link_tasks(session, server.url, project_id, purpose,
                    [(item.id, task_id) for (item, _), task_id in zip(batch, task_ids, strict=True)], how="imported",
                    purposes=[t["meta"].get("purpose", purpose) for _, t in batch], spec=spec)
    report.pushed += len(batch)


def _without_task(store: Store, batch: list[tuple[Item, dict]], purpose: str) -> list[tuple[Item, dict]]:
    """The items of BATCH that still have no live task for their purpose."""
    with store.session() as session:
        linked = set(session.execute(select(AnnotationTask.item_id, AnnotationTask.purpose).where(
            AnnotationTask.item_id.in_([item.id for item, _ in batch]), AnnotationTask.state != DELETED)).all())
    return [(item, task) for item, task in batch if (item.id, task["meta"].get("purpose", purpose)) not in linked]


def reconcile_own(store: Store, server: LabelStudioServer, project_id: int, kind: str, spec: Any) -> int:
    """Link tasks of a kind's own task that a killed push imported but did not record (by item key and unit)."""
    if server.task_count(project_id) == 0:
        return 0
    with store.session() as session:
        known = set(session.execute(select(AnnotationTask.ls_task_id).where(
            AnnotationTask.server == server.url, AnnotationTask.ls_project_id == project_id)).scalars())
        linked = set(session.execute(select(AnnotationTask.item_id, AnnotationTask.purpose).where(
            AnnotationTask.state != DELETED)).all())
        unknown = {task_id: meta for task_id, (meta, _) in server.task_metas(project_id).items()
                   if task_id not in known}
        keys = {meta.get("item_key") for meta in unknown.values()}
        items = {i.key: i.id for i in session.execute(select(Item).where(Item.kind == kind,
                                                                         Item.key.in_(list(keys)))).scalars()}
    links, purposes = [], []
    for task_id, meta in sorted(unknown.items()):
        item_id, purpose = items.get(meta.get("item_key")), meta.get("purpose") or spec.name
        if item_id is None or (item_id, purpose) in linked:
            continue
        links.append((item_id, task_id))
        purposes.append(purpose)
        linked.add((item_id, purpose))
    if links:
        with store.write() as session:
            _link_tasks(session, server.url, project_id, spec.name, links, "reconciled", purposes, spec)
    return len(links)


