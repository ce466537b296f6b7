"""`annotate push`: `checked` items of a kind become tasks of the kind's verification project (batched imports).

Each batch's task links and the items' move to `in_review` are written in one transaction. Before importing, the
project's tasks are reconciled with the store (by the item key every task carries), so a push killed between an
import and its store write never imports an item twice; nor does an import whose answer was lost (the tasks the
server did create are found by their keys and linked before the rest is imported again). `--adjudicate` sends
disagreements to the adjudication project; a kind's own tasks (`--task`) push their units the same way.
"""

from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import select
from sqlmodel import Session

from cftools.judgments import ADJUDICATE, VERIFY
from cftools.annotate.projects import (
    DELETED, ImageLinks, Progress, _no_progress, ensure_project, own_task, purpose_of,
)
from cftools.errors import CftoolsError
from cftools.annotate.label_studio import LabelStudioError, LabelStudioServer, server_settings
from cftools.annotate.servers import Servers
from cftools.annotate.task_import import (Batch, PushReport, _link_tasks, _open_task_filter, import_reconciled,
                                         task_payloads)
from cftools.annotate.authoring import authoring_task, push_authoring
from cftools.models import CHECKED, NEEDS_ADJUDICATION, AnnotationTask, Item
from cftools.kinds import get_kind
from cftools.store import Store, in_chunks
from cftools.workspace import Workspace

# ---------------------------------------------------------------- push


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
    authoring task on images, whose submissions become new items (`Kind.authoring_tasks`, e.g. CFMM's author).

    The path, top to bottom: plan (who gets which task: `assign.plan`), route (each person's server and their
    project there, created once: `Servers`, `Sender.project`), payload (`task_import.task_payloads`), import
    (batched, reconciled by item key: `import_reconciled`), link (one transaction per batch: `link_batch`). Without
    `[label_studio] annotators` the tasks go to one shared project of the shared server instead."""
    purpose = ADJUDICATE if adjudicate else VERIFY
    if task is not None and task != purpose and kind is not None:
        purpose = task if get_kind(kind).task_spec(task) is not None else authoring_task(kind, task)
    report = PushReport(purpose=purpose, kind=kind)
    settings = server_settings(workspace)
    if not settings.configured and if_configured:
        report.configured = False
        report.message = settings.how_to_configure()
        return report
    if not settings.configured:
        raise LabelStudioError(settings.how_to_configure())
    servers = Servers(settings)
    report.verification = servers.verification
    try:
        servers.check()
        if kind is None:
            report.message = "nothing to push: the store holds no items yet"
            return report
        get_kind(kind).task_template(purpose)  # an unknown kind or task is an error before anything is created
        spec = own_task(kind, purpose)
        if spec is None and purpose not in (VERIFY, ADJUDICATE):
            push_authoring(workspace.store, servers, settings, kind, ImageLinks.from_config(workspace, data_uri),
                           limit, report, progress, purpose, str(workspace.root))
        elif settings.assigns:
            from cftools.annotate.assign import push_assigned

            push_assigned(workspace, servers, settings, kind, purpose, limit, report, data_uri, allow_missing_images,
                          progress)
        else:
            push_shared(workspace, servers.shared(), settings, kind, purpose, spec, limit, report, data_uri,
                        allow_missing_images, progress)
    finally:
        servers.close()
    return report


def push_shared(workspace: Workspace, server: LabelStudioServer, settings: Any, kind: str, purpose: str, spec: Any,
                limit: Optional[int], report: PushReport, data_uri: bool, allow_missing_images: bool,
                progress: Progress) -> None:
    """Without assignment: every task into the one shared project of KIND's PURPOSE (not blind)."""
    store = workspace.store
    project_id = ensure_project(server, settings, kind, purpose, str(workspace.root))
    report.project_id, report.project_url = project_id, server.project_url(project_id)
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
    if payloads:
        server.hide_data_columns(project_id, {key for _, task in payloads for key in task["data"]})


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


