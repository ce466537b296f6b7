"""Human verification in Label Studio: push checked items as tasks, pull judgments, decide, adjudicate.

- `push`: `checked` items of a kind become tasks of the kind's verification project (batched imports);
  each batch's task links and the items' move to `in_review` are written in one transaction. Before
  importing, the project's tasks are reconciled with the store (by the item key every task carries),
  so a push killed between an import and its store write never imports an item twice.
- `pull`: every known task is exported with its annotations; one Judgment per (task, annotator);
  edited annotations update their judgment; results that do not fit the label config are rejected
  and reported; tasks the server confirms are gone (its task listing lacks them, or the project is gone)
  are marked deleted and their items go back to `checked`; a task merely missing from an export snapshot
  is left as it was and listed in `missing_from_export`.
- Two judgments from different annotators decide the item (see `annotation_rules.decide`); a
  disagreement goes to the adjudication project (`push --adjudicate`), whose decision settles it.
- `annotation_status`: progress per project, agreement per question (stored for the data card),
  counts per annotator.
"""

from __future__ import annotations

import os
import threading
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional
from urllib.parse import quote

from sqlalchemy import and_, bindparam, delete, func, insert, select, update
from sqlmodel import Session

from cftools.annotate.rules import (
    ADJUDICATE, VERIFY, Answer, Decision, InvalidResult, adjudicated, agreement, decide, label_agreement,
    preload_agreement_library, render_label_config,
)
from cftools.errors import CftoolsError
from cftools.annotate.label_studio import LabelStudioServer, ServerSettings, server_settings
from cftools.annotate.authoring import AuthoringPull, authoring_task, pull_authoring, push_authoring
from cftools.models import (
    ACCEPTED, CHECKED, IN_REVIEW, NEEDS_ADJUDICATION, REJECTED, AgreementStat, AnnotationTask, CheckFlag, Image,
    Item, ItemEvent, Judgment, SourceQuestion, utcnow,
)
from cftools.images import data_image_shas, data_uri
from cftools.kinds import all_kinds, get_kind
from cftools.store import Store, in_chunks
from cftools.workspace import Workspace

STAGE = "annotate"
OPEN, DECIDED, DELETED = "open", "decided", "deleted"
ANNOTATIONS_PER_TASK = 2
MAX_TITLE = 50  # Label Studio refuses longer project titles
Progress = Callable[[str, int, int], None]  # (what, done, total)


def _update(entity):  # noqa: ANN001, ANN202
    """A bulk UPDATE that doesn't scan the session's identity map (slow with thousands of loaded rows)."""
    return update(entity).execution_options(synchronize_session=False)


def _delete(entity):  # noqa: ANN001, ANN202
    return delete(entity).execution_options(synchronize_session=False)


def _no_progress(what: str, done: int, total: int) -> None:
    return None


# ---------------------------------------------------------------- images


@dataclass
class ImageLinks:
    """How task data points at an image: local-files serving, a URL prefix, or (asked for) a data URI."""

    mode: Optional[str]  # local | url | data | None (not configured)
    document_root: Optional[Path] = None
    url_prefix: Optional[str] = None
    folders: set[Path] = field(default_factory=set)  # folders that need a LocalFiles storage row

    @classmethod
    def from_config(cls, workspace: Workspace, data_uri: bool = False) -> "ImageLinks":
        section = workspace.section("label_studio")
        root = section.get("document_root") or os.environ.get("LOCAL_FILES_DOCUMENT_ROOT")
        root_path = Path(workspace.root, root).resolve() if root else None
        if data_uri or section.get("image_data_uri"):
            return cls("data", root_path)
        if section.get("image_url_prefix"):
            return cls("url", root_path, str(section["image_url_prefix"]).rstrip("/"))
        return cls("local" if root_path else None, root_path)

    def _relative(self, path: Path) -> Optional[str]:
        if self.document_root is None:
            return None
        try:
            return path.resolve().relative_to(self.document_root).as_posix()
        except ValueError:
            return None

    def link(self, path: str) -> Optional[str]:
        """The task's image value, or None when the image can't be served this way (outside the root)."""
        file = Path(path)
        if self.mode == "data":
            return data_uri(file)
        if self.mode == "url":
            return f"{self.url_prefix}/{quote(self._relative(file) or file.name)}"
        if self.mode == "local":
            relative = self._relative(file)
            if relative is None:
                return None
            self.folders.add(file.resolve().parent)
            return f"/data/local-files/?d={quote(relative)}"
        raise CftoolsError("no way to show images in Label Studio: set [label_studio] document_root (the server's "
                           "LOCAL_FILES_DOCUMENT_ROOT) or image_url_prefix in cftools.toml, or push with --data-uri")


# ---------------------------------------------------------------- a kind's own tasks


def task_of(purpose: str) -> tuple[str, str]:
    """(task, unit) of a stored purpose: a kind's own task with units is stored as TASK:UNIT."""
    task, _, unit = purpose.partition(":")
    return task, unit


def purpose_of(task: str, unit: str) -> str:
    return f"{task}:{unit}" if unit else task


def own_task(kind: str, purpose: str):  # noqa: ANN201
    """The kind's TaskSpec of PURPOSE's task, None for verify/adjudicate."""
    return get_kind(kind).task_spec(task_of(purpose)[0])


# ---------------------------------------------------------------- projects


PROJECT_WHAT = {VERIFY: "verification", ADJUDICATE: "adjudication"}


def project_title(settings: ServerSettings, kind: str, purpose: str) -> str:
    what = PROJECT_WHAT.get(task_of(purpose)[0], task_of(purpose)[0])  # a kind's own task is named by itself
    title = f"{settings.project_prefix} {kind} {what}"
    if len(title) > MAX_TITLE:
        raise CftoolsError(f"Label Studio project title {title!r} is longer than {MAX_TITLE} characters: "
                           "shorten [label_studio] project_prefix")
    return title


PROJECT_DESCRIPTIONS = {VERIFY: "two annotators verify", ADJUDICATE: "one adjudicator settles"}


def ensure_project(server: LabelStudioServer, settings: ServerSettings, kind: str, purpose: str,
                   workspace_root: Optional[str] = None) -> int:
    title = project_title(settings, kind, purpose)
    project_id = server.find_project(title)
    spec = own_task(kind, purpose)
    if project_id is None and spec is not None:
        project_id = server.create_project(
            title, render_label_config(kind, spec.name, workspace_root), spec.annotators,
            description=f"cftools: {spec.description or spec.name} ({kind} items)")
    if project_id is None:
        project_id = server.create_project(
            title, render_label_config(kind, purpose, workspace_root), ANNOTATIONS_PER_TASK if purpose == VERIFY else 1,
            description=f"cftools: {PROJECT_DESCRIPTIONS.get(purpose, 'people write new')} {kind} items")
    return project_id


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

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _open_task_filter(server_url: str, project_id: int, purpose: str):  # noqa: ANN202
    return and_(AnnotationTask.server == server_url, AnnotationTask.ls_project_id == project_id,
                AnnotationTask.purpose == purpose, AnnotationTask.state != DELETED)


def _event(item_id: int, from_status: Optional[str], to_status: Optional[str], detail: dict) -> dict:
    return {"item_id": item_id, "stage": STAGE, "from_status": from_status, "to_status": to_status,
            "detail": detail, "created_at": utcnow()}


def _link_tasks(session: Session, server_url: str, project_id: int, purpose: str,
                links: list[tuple[int, int]], how: str, purposes: Optional[list[str]] = None,
                spec: Any = None) -> None:
    """Record (item id, task id) links and move verified items to in_review, in the caller's transaction.
    PURPOSES, when given, is each link's own purpose (a kind's task with units); SPEC is that task's spec."""
    now = utcnow()
    purposes = purposes or [purpose] * len(links)
    session.execute(insert(AnnotationTask.__table__), [
        {"item_id": item_id, "purpose": p, "server": server_url, "ls_project_id": project_id,
         "ls_task_id": task_id, "state": OPEN, "pushed_at": now, "updated_at": now}
        for (item_id, task_id), p in zip(links, purposes)])
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
        data = {"item_key": item.key, "kind": item.kind, "group": item.group,
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
        data = {"item_key": item.key, "kind": item.kind, "group": item.group,
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
        project_id = ensure_project(server, settings, kind, purpose, str(workspace.root))
        report.project_id, report.project_url = project_id, server.project_url(project_id)
        if spec is None and purpose not in (VERIFY, ADJUDICATE):
            push_authoring(store, server, settings, project_id, kind, ImageLinks.from_config(workspace, data_uri),
                           limit, report, progress)
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
        for start in range(0, len(payloads), settings.batch_size):
            batch = payloads[start:start + settings.batch_size]
            task_ids = server.import_tasks(project_id, [task for _, task in batch])
            with store.write() as session:
                _link_tasks(session, server.url, project_id, purpose,
                            [(item.id, task_id) for (item, _), task_id in zip(batch, task_ids)], how="imported",
                            purposes=[t["meta"].get("purpose", purpose) for _, t in batch], spec=spec)
            report.pushed += len(batch)
            progress("push", report.pushed, len(payloads))
    finally:
        server.close()
    return report


def reconcile_own(store: Store, server: LabelStudioServer, project_id: int, kind: str, spec: Any) -> int:
    """Link tasks of a kind's own task that a killed push imported but did not record (by item key and unit)."""
    if server.task_count(project_id) == 0:
        return 0
    with store.session() as session:
        known = set(session.execute(select(AnnotationTask.ls_task_id).where(
            AnnotationTask.server == server.url, AnnotationTask.ls_project_id == project_id)).scalars())
        linked = set(session.execute(select(AnnotationTask.item_id, AnnotationTask.purpose).where(
            AnnotationTask.state != DELETED)).all())
        unknown = [t for t in server.client.tasks.list(project=project_id, fields="all", page_size=1000)
                   if t.id not in known]
        keys = {(t.meta or {}).get("item_key") for t in unknown}
        items = {i.key: i.id for i in session.execute(select(Item).where(Item.kind == kind,
                                                                         Item.key.in_(list(keys)))).scalars()}
    links, purposes = [], []
    for found in unknown:
        meta = found.meta or {}
        item_id, purpose = items.get(meta.get("item_key")), meta.get("purpose") or spec.name
        if item_id is None or (item_id, purpose) in linked:
            continue
        links.append((item_id, found.id))
        purposes.append(purpose)
        linked.add((item_id, purpose))
    if links:
        with store.write() as session:
            _link_tasks(session, server.url, project_id, spec.name, links, "reconciled", purposes, spec)
    return len(links)


# ---------------------------------------------------------------- pull


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
    ignored_same_annotator: int = 0
    ignored_extra_annotators: int = 0
    invalid: list[dict] = field(default_factory=list)
    tiebreaks: list[dict] = field(default_factory=list)  # tasks of a kind's own task that now ask one more person
    items_made: int = 0  # items a kind's decisions made (a MuCR selection)
    mismatched: list[dict] = field(default_factory=list)
    deleted_tasks: list[dict] = field(default_factory=list)
    # Tasks missing from the export but still on the server: left as they were, read again by the next pull.
    missing_from_export: list[dict] = field(default_factory=list)
    decisions: Counter = field(default_factory=Counter)
    authoring: AuthoringPull = field(default_factory=AuthoringPull)

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["decisions"] = dict(self.decisions)
        out["authoring"] = self.authoring.as_dict()
        return out


@dataclass
class Chosen:
    """The annotation kept for one (task, annotator)."""

    annotator: str
    annotation: dict
    answer: Answer


def _parse_time(value: Any) -> Optional[datetime]:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def choose_annotations(task: dict, kind: str, purpose: str, emails: dict[int, str], report: PullReport,
                       workspace_root: Optional[str] = None) -> list[Chosen]:
    """The first valid annotation of each annotator, in annotation order, at most two annotators
    (one for adjudication); everything else is counted or reported."""
    chosen: list[Chosen] = []
    seen: set[str] = set()
    spec = own_task(kind, purpose)
    limit = (spec.annotators + spec.tiebreak) if spec is not None else ANNOTATIONS_PER_TASK if purpose == VERIFY else 1
    for annotation in sorted(task.get("annotations") or [], key=lambda a: a.get("id") or 0):
        report.annotations += 1
        if annotation.get("was_cancelled"):
            report.cancelled += 1
            continue
        user = annotation.get("completed_by")
        if isinstance(user, dict):
            user = user.get("id")
        annotator = emails.get(user) or f"user:{user}"
        try:
            answer = get_kind(kind).read_judgment(task_of(purpose)[0], annotation.get("result"), workspace_root)
        except InvalidResult as exc:
            report.invalid.append({"project": task.get("project"), "task": task.get("id"),
                                   "annotation": annotation.get("id"), "annotator": annotator, "reason": str(exc)})
            continue
        if annotator in seen:
            report.ignored_same_annotator += 1
            continue
        if len(chosen) >= limit:
            report.ignored_extra_annotators += 1
            continue
        seen.add(annotator)
        chosen.append(Chosen(annotator, annotation, answer))
    return chosen


def _judgment_row(task_id: int, chosen: Chosen) -> dict:
    a, answer = chosen.annotation, chosen.answer
    return {"task_id": task_id, "annotator": chosen.annotator, "ls_annotation_id": a.get("id"),
            "related": answer.related, "answer_correct": answer.answer_correct,
            "corrected_answer": answer.corrected_answer, "flags": answer.flags, "comment": answer.comment,
            "decision": answer.decision,
            "raw": {"result": a.get("result"), "completed_by": a.get("completed_by"), "fields": answer.fields or None,
                    "created_at": a.get("created_at"), "updated_at": a.get("updated_at"),
                    "lead_time": a.get("lead_time")},
            "annotated_at": _parse_time(a.get("updated_at") or a.get("created_at")), "updated_at": utcnow()}


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
            old = existing.pop((task_id, pick.annotator), None)
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
        session.execute(_update(Judgment).where(Judgment.id == row.pop("id")).values(**row))
    for j in stale:
        session.execute(_delete(Judgment).where(Judgment.id == j.id))
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
    detail: dict[str, Any] = {"decision": decision.status, "rule": decision.rule, "purpose": task.purpose,
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
    unchanged = (item.status == decision.status and task.decision == decision.status
                 and values.get("answer", item.answer) == item.answer)
    if unchanged:
        return
    writes.items.append(values)
    writes.tasks.append({"id": task.id, "state": DECIDED, "decision": decision.status, "updated_at": now})
    writes.events.append(_event(item.id, item.status, decision.status, detail))


def apply_decisions(session: Session, tasks: dict[int, Any], changed: set[int], chosen: dict[int, list[Chosen]],
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
            select(Item.id, Item.status, Item.answer, Item.proposed_answer).where(Item.id.in_(part)))})
        adjudicated_items.update(session.execute(select(AnnotationTask.item_id).where(
            AnnotationTask.item_id.in_(part), AnnotationTask.purpose == ADJUDICATE,
            AnnotationTask.state == DECIDED)).scalars())
    writes = PendingWrites()
    for task_id in ids:
        task, found = tasks[task_id], chosen.get(task_id, [])
        item = items[task.item_id]
        if task.purpose == ADJUDICATE:
            if found:
                decision = adjudicated(found[0].answer)
                _set_item_decision(writes, item, decision, task, [found[0].annotator])
                report.decisions[f"adjudicated {decision.status}"] += 1
            continue
        if item.id in adjudicated_items:
            continue
        if len(found) >= ANNOTATIONS_PER_TASK:
            decision = (get_kind(kind).decide if kind else decide)(found[0].answer, found[1].answer)
            _set_item_decision(writes, item, decision, task, [pick.annotator for pick in found[:2]])
            report.decisions[decision.status + (" (corrected)" if decision.corrected_answer else "")] += 1
        elif task.decision is not None:  # a judgment went away: the item is under review again
            now = utcnow()
            writes.tasks.append({"id": task.id, "state": OPEN, "decision": None, "updated_at": now})
            writes.items.append({"id": item.id, "status": IN_REVIEW, "updated_at": now})
            writes.events.append(_event(item.id, item.status, IN_REVIEW, {"reopened": "a judgment was withdrawn"}))
    writes.flush(session)


def merged(data: dict, update: dict) -> dict:
    """DATA with UPDATE's keys; a dict value is merged one level down (one style's selection beside another's)."""
    out = dict(data)
    for key, value in update.items():
        out[key] = {**out[key], **value} if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def apply_own_decisions(session: Session, tasks: dict[int, Any], ids: list[int], chosen: dict[int, list[Chosen]],
                        report: PullReport) -> None:
    """Decide tasks of a kind's own task by the kind's rule: the item's data and status, the items a decision
    makes, and the tasks that need one more person (their overlap is raised after the write)."""
    now = utcnow()
    for task_id in ids:
        task = tasks[task_id]
        item = session.get(Item, task.item_id)
        name, unit = task_of(task.purpose)
        picks = chosen.get(task_id, [])
        outcome = get_kind(item.kind).decide_task(name, unit, item, [(p.annotator, p.answer) for p in picks])
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
        session.execute(_update(AnnotationTask).where(AnnotationTask.id == task_id)
                        .values(state=state, decision=decision, updated_at=now))
        if outcome.decided or outcome.status != before:
            report.decisions[f"{name}: {outcome.rule}"] += 1
            session.add(ItemEvent(item_id=item.id, stage=STAGE, from_status=before, to_status=item.status,
                                  detail={"task": task.purpose, "rule": outcome.rule,
                                          "annotators": [p.annotator for p in picks]}))
        for row in outcome.new_items:
            if session.execute(select(Item.id).where(Item.key == row["key"])).first() is None:
                made = Item(**row)
                session.add(made)
                session.flush()
                session.add(ItemEvent(item_id=made.id, stage=STAGE, from_status=None, to_status=made.status,
                                      detail={"made_by": task.purpose, "from_item": item.key}))
                report.items_made += 1


def mark_deleted(session: Session, tasks: list[Any], report: PullReport) -> None:
    """Tasks gone from the server: marked deleted; items still under review go back to `checked`."""
    now = utcnow()
    for task in tasks:
        item = session.get(Item, task.item_id)
        back = task.purpose == VERIFY and item.status == IN_REVIEW
        session.execute(_update(AnnotationTask).where(AnnotationTask.id == task.id)
                        .values(state=DELETED, updated_at=now))
        if back:
            session.execute(_update(Item).where(Item.id == item.id).values(status=CHECKED, updated_at=now))
        session.execute(insert(ItemEvent.__table__), [_event(
            item.id, item.status, CHECKED if back else item.status,
            {"task_deleted": task.ls_task_id, "project": task.ls_project_id, "purpose": task.purpose})])
        report.deleted_tasks.append({"item": item.key, "project": task.ls_project_id, "task": task.ls_task_id,
                                     "purpose": task.purpose, "item_status": CHECKED if back else item.status})


def pull_project(store: Store, server: LabelStudioServer, project_id: int, kind: str, purpose: str,
                 emails: dict[int, str], report: PullReport, progress: Progress,
                 workspace_root: Optional[str] = None) -> None:
    with store.session() as session:
        tasks = {t.id: t for t in session.execute(select(
            AnnotationTask.id, AnnotationTask.item_id, AnnotationTask.purpose, AnnotationTask.ls_project_id,
            AnnotationTask.ls_task_id, AnnotationTask.decision, Item.kind).join(Item, Item.id == AnnotationTask.item_id)
            .where(_open_task_filter(server.url, project_id, purpose)))}
        keys = dict(session.execute(select(Item.id, Item.key).where(Item.id.in_(
            select(AnnotationTask.item_id).where(_open_task_filter(server.url, project_id, purpose))))).all())
    by_ls_id = {t.ls_task_id: t for t in tasks.values()}
    report.projects += 1
    seen: set[int] = set()
    chunks: Iterable[list[dict]] = ()
    if server.project_exists(project_id):
        chunks = _prefetched(server.export_tasks(project_id, sorted(by_ls_id)))
    done = 0
    for chunk in chunks:  # each chunk is written in its own transaction while the server exports the next
        chosen: dict[int, list[Chosen]] = {}
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
            chosen[task.id] = choose_annotations(data, kind, purpose, emails, report, workspace_root)
        asked = len(report.tiebreaks)
        with store.write() as session:
            changed = store_judgments(session, chosen, report)
            apply_decisions(session, tasks, changed, chosen, report, kind)
        for tiebreak in report.tiebreaks[asked:]:
            server.set_task_overlap(tiebreak["task"], tiebreak["annotators"])
        done += len(chunk)
        progress(f"pull project {project_id}", done, len(by_ls_id))
    unseen = [ls_id for ls_id in by_ls_id if ls_id not in seen]
    confirmed = set(server.tasks_gone(project_id, unseen))
    report.missing_from_export += [{"project": project_id, "task": ls_id} for ls_id in unseen
                                   if ls_id not in confirmed]
    gone = [by_ls_id[ls_id] for ls_id in unseen if ls_id in confirmed]
    if gone:
        with store.write() as session:
            mark_deleted(session, gone, report)


def _prefetched(chunks: Iterator[list[dict]]) -> Iterator[list[dict]]:
    """Fetch the next chunk in a thread while the caller stores the current one."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(next, chunks, None)
        while (chunk := future.result()) is not None:
            future = pool.submit(next, chunks, None)
            yield chunk


def pull(workspace: Workspace, progress: Progress = _no_progress) -> PullReport:
    """Fetch the annotations of every task this workspace pushed to the configured server."""
    settings = server_settings(workspace)
    server = LabelStudioServer.from_settings(settings)
    report = PullReport()
    preload = threading.Thread(target=preload_agreement_library, daemon=True)
    preload.start()  # while the server builds the first export snapshot
    try:
        server.check()
        emails = server.user_emails()
        with workspace.store.session() as session:
            projects = session.execute(
                select(AnnotationTask.ls_project_id, Item.kind, AnnotationTask.purpose)
                .join(Item, Item.id == AnnotationTask.item_id)
                .where(AnnotationTask.server == server.url, AnnotationTask.state != DELETED)
                .group_by(AnnotationTask.ls_project_id, Item.kind, AnnotationTask.purpose)
                # verification first: an adjudication pulled in the same run must have the last word
                .order_by(AnnotationTask.purpose.desc(), AnnotationTask.ls_project_id)).all()
        for project_id, kind, purpose in projects:
            pull_project(workspace.store, server, project_id, kind, purpose, emails, report, progress,
                         str(workspace.root))
        pull_authoring_projects(workspace, server, settings, emails, report)
    finally:
        server.close()
    preload.join()
    record_agreement(workspace.store)
    return report


def pull_authoring_projects(workspace: Workspace, server: LabelStudioServer, settings: ServerSettings,
                            emails: dict[int, str], report: PullReport) -> None:
    """Submissions of every kind's authoring projects on this server become draft items (new ones only)."""
    for name, spec in sorted(all_kinds().items()):
        for task in spec.authoring_tasks:
            project_id = server.find_project(project_title(settings, name, task))
            if project_id is not None:
                pull_authoring(workspace.store, server, project_id, name, task, emails, report.authoring,
                               str(workspace.root))


# ---------------------------------------------------------------- status and agreement


def verify_ratings(session: Session, item_keys: Optional[Iterable[str]] = None) -> dict[str, dict[int, dict[str, Answer]]]:
    """Per item kind: every live verification task's judgments by annotator (only ITEM_KEYS' items when given)."""
    query = (select(Item.kind, Item.key, Judgment.task_id, Judgment.annotator, Judgment.related,
                    Judgment.answer_correct, Judgment.flags)
             .join(AnnotationTask, AnnotationTask.id == Judgment.task_id)
             .join(Item, Item.id == AnnotationTask.item_id)
             .where(AnnotationTask.purpose == VERIFY, AnnotationTask.state != DELETED)
             .order_by(Judgment.task_id, Judgment.ls_annotation_id))
    wanted = set(item_keys) if item_keys is not None else None
    ratings: dict[str, dict[int, dict[str, Answer]]] = defaultdict(dict)
    for kind, key, task_id, annotator, related, correct, flags in session.execute(query):
        if wanted is not None and key not in wanted:
            continue
        ratings[kind].setdefault(task_id, {})[annotator] = Answer(related=related, answer_correct=correct,
                                                                 flags=list(flags or []))
    return ratings


def agreement_project_name(kind: str) -> str:
    return f"{kind} verification"


def _own_task_pairs(session: Session) -> dict[str, list[tuple[dict, dict]]]:
    """Per "KIND TASK" of the kinds' own tasks: the labels of the first two judgments of every live task."""
    rows = session.execute(
        select(Item.kind, AnnotationTask.purpose, Judgment.task_id, Judgment.raw)
        .join(AnnotationTask, AnnotationTask.id == Judgment.task_id)
        .join(Item, Item.id == AnnotationTask.item_id)
        .where(AnnotationTask.purpose.not_in([VERIFY, ADJUDICATE]), AnnotationTask.state != DELETED)
        .order_by(Judgment.task_id, Judgment.ls_annotation_id)).all()
    per_task: dict[int, tuple[str, str, list[dict]]] = {}
    for kind, purpose, task_id, raw in rows:
        task = task_of(purpose)[0]
        labels = get_kind(kind).agreement_labels(task, Answer(fields=(raw or {}).get("fields") or {}))
        per_task.setdefault(task_id, (kind, task, []))[2].append(labels)
    pairs: dict[str, list[tuple[dict, dict]]] = defaultdict(list)
    for kind, task, found in per_task.values():
        if len(found) >= 2 and found[0] and found[1]:
            pairs[f"{kind} {task}"].append((found[0], found[1]))
    return pairs


def record_agreement(store: Store) -> dict[str, dict[str, dict[str, Any]]]:
    """Compute agreement per kind and question and store it (AgreementStat) for the data card; a kind's own
    tasks under the project name "KIND TASK"."""
    with store.session() as session:
        stats = {agreement_project_name(kind): agreement(ratings) for kind, ratings in verify_ratings(session).items()}
        stats.update({name: label_agreement(pairs) for name, pairs in _own_task_pairs(session).items()})
    now = utcnow()
    with store.write() as session:
        for name, questions in stats.items():
            session.execute(_delete(AgreementStat).where(AgreementStat.project == name))
            session.execute(insert(AgreementStat.__table__), [
                {"project": name, "question": q, "n_pairs": s["n_pairs"],
                 "percent_agreement": s["percent_agreement"], "cohen_kappa": s["cohen_kappa"], "computed_at": now}
                for q, s in questions.items()])
    return stats


def annotation_status(store: Store) -> dict[str, Any]:
    """Progress per project, agreement per question (also stored) and counts per annotator, from the store."""
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
            if state == DELETED:
                p["deleted"] += 1
                continue
            p["tasks"] += 1
            p["annotations"]["0" if n == 0 else "1" if n == 1 else "2+"] += 1
            if decision:
                p["decisions"][decision] += 1
        annotators: dict[str, dict[str, Any]] = {}
        for annotator, purpose, related, correct, corrected in session.execute(
                select(Judgment.annotator, AnnotationTask.purpose, Judgment.related, Judgment.answer_correct,
                       Judgment.corrected_answer).join(AnnotationTask, AnnotationTask.id == Judgment.task_id)
                .where(AnnotationTask.state != DELETED)):
            a = annotators.setdefault(annotator, {"judgments": 0, "adjudications": 0, "related_yes": 0,
                                                  "correct_yes": 0, "corrections": 0})
            if purpose == ADJUDICATE:
                a["adjudications"] += 1
                continue
            a["judgments"] += 1
            a["related_yes"] += bool(related)
            a["correct_yes"] += bool(correct)
            a["corrections"] += bool(corrected)
        items = dict(session.execute(select(Item.status, func.count()).where(Item.status.in_(
            [IN_REVIEW, ACCEPTED, REJECTED, NEEDS_ADJUDICATION])).group_by(Item.status)).all())
    for p in projects.values():
        p["decisions"] = dict(p["decisions"])
    return {"projects": sorted(projects.values(), key=lambda p: (p["server"], p["project_id"])),
            "agreement": dict(sorted(agreement_stats.items())),
            "annotators": dict(sorted(annotators.items())), "items_by_status": items}
