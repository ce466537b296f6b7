"""Authoring tasks: images go to Label Studio, people write items, `pull` turns each submission into a draft.

A kind lists such tasks in `AnnotateHooks.authoring_tasks` (its label config in
`annotation/<kind>/<task>.xml.j2`), says what the annotator sees (`AnnotateHooks.author_task_data`: the image and
its source questions) and reads a submission back (`AnnotateHooks.authored_item`: the new item's group, question,
answer and data, or None when the annotator said the image suits nothing). The drafts then go through check and
two-annotator verification like any other item.

The server is the record of what was pushed: every task carries `image:<sha256>` as its key, so a push sends only
images without a task yet (a killed push loses nothing and duplicates nothing), and a pull finds the project by
its title. Each submission becomes one item keyed by project, task and annotation, with a source question
(dataset `<kind>:<task>`) that links it to its image; pulling again adds only new submissions.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from sqlalchemy import select

from cftools.annotate.attribution import person_of, refusal
from cftools.annotate.label_studio import LabelStudioServer, ServerSettings
from cftools.annotate.purpose import Purpose
from cftools.annotate.servers import Servers
from cftools.annotate.task_import import PushReport, PushRun
from cftools.judgments import InvalidResult
from cftools.errors import CftoolsError
from cftools.generate.llm_task import insert_items
from cftools.kinds import get_kind
from cftools.models import DRAFT, Image, SourceQuestion, utcnow
from cftools.store import Store, in_chunks
from cftools.workspace import Workspace

KEY_PREFIX = "image:"


@dataclass
class AuthoringPull:
    projects: int = 0
    tasks: int = 0
    submissions: int = 0
    items_added: int = 0
    already_pulled: int = 0
    no_suitable_type: int = 0
    cancelled: int = 0
    invalid: list[dict] = field(default_factory=list)
    refused: list[dict] = field(default_factory=list)  # by someone other than the assignee, or changed by another
    returned: dict[str, list[dict]] = field(default_factory=dict)  # per author: submissions sent back, and why
    by_group: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "by_group": dict(self.by_group)}


def image_key(sha256: str) -> str:
    return f"{KEY_PREFIX}{sha256}"


def authoring_images(store: Store, pushed_keys: set[str], limit: Optional[int]) -> list[tuple[Image, list[Any]]]:
    """Images with their source questions that have no authoring task yet (those with source questions first)."""
    with store.session() as session:
        images = list(session.execute(select(Image).order_by(Image.id)).scalars())
        sources: dict[int, list[Any]] = {}
        for source in session.execute(select(SourceQuestion).where(SourceQuestion.image_id.is_not(None))
                                      .order_by(SourceQuestion.id)).scalars():
            sources.setdefault(source.image_id, []).append(source)
    waiting = [(image, sources.get(image.id, [])) for image in images if image_key(image.sha256) not in pushed_keys]
    waiting.sort(key=lambda pair: (not pair[1], pair[0].id))
    return waiting[:limit] if limit is not None else waiting


def authoring_projects(servers: Servers, settings: ServerSettings, kind: str, task: str, create: bool = False,
                       workspace_root: Optional[str] = None) -> dict[Optional[str], tuple[LabelStudioServer, int]]:
    """Person (None: the shared project) -> (server, project id) of KIND's authoring TASK: one per person, on
    their own server when they have one, with `[label_studio] annotators`; else the one shared project. CREATE
    makes the missing ones."""
    from cftools.annotate.projects import ensure_project, find_person_project

    purpose = Purpose(task)
    people: list[Optional[str]] = list(settings.annotators) or [None]
    found: dict[Optional[str], tuple[LabelStudioServer, int]] = {}
    for person in people:
        server = servers.for_person(person)
        project_id = (ensure_project(server, settings, kind, purpose, workspace_root, person=person) if create
                      else find_person_project(server, settings, kind, purpose, person))
        if project_id is not None:
            found[person] = (server, project_id)
    return found


def push_authoring(run: PushRun, report: PushReport) -> None:
    """Send images without a task of RUN's authoring task (its purpose) as tasks (batched): into the shared project,
    or with assignment each image to the project of one person (on their server), the least loaded first."""
    store, servers, settings, kind, task = run.workspace.store, run.servers, run.settings, run.kind, run.purpose.task
    workspace_root, images_links, progress = str(run.workspace.root), run.images(), run.options.progress
    spec = get_kind(kind).hooks.annotate
    projects = authoring_projects(servers, settings, kind, task, create=True, workspace_root=workspace_root)
    keys_by_person = {person: [key for key in server.task_keys(pid).values() if key]
                      for person, (server, pid) in projects.items()}
    pushed = {key for keys in keys_by_person.values() for key in keys}
    load = Counter({person: len(keys) for person, keys in keys_by_person.items()})
    waiting = authoring_images(store, pushed, run.options.limit)
    report.candidates = len(waiting)
    per_person: dict[Optional[str], list[dict]] = {person: [] for person in projects}
    for image, sources in waiting:
        link = images_links.link(image.path)
        if link is None:
            report.skipped_outside_root += 1
            continue
        key = image_key(image.sha256)
        person = min(projects, key=lambda p: (load[p], list(projects).index(p)))
        load[person] += 1
        data = {"item_key": key, "kind": kind, "returned": "", **spec.author_task_data(link, sources)}
        meta = {"item_key": key, "image_sha256": image.sha256, **({"assignee": person} if person else {})}
        per_person[person].append({"data": data, "meta": meta})
    total = sum(len(tasks) for tasks in per_person.values())
    progress("push", 0, total)
    for person, (server, pid) in projects.items():
        if person is None:
            report.project_id, report.project_url = pid, server.project_url(pid)
        tasks = per_person[person]
        if not tasks:
            continue
        if person is not None:  # the projects this push sent images to
            report.project_ids[person], report.project_urls[person] = pid, server.project_url(pid)
        report.storages_created += server.ensure_local_storage(pid, images_links.folders)
        for start in range(0, len(tasks), settings.batch_size):
            batch = tasks[start:start + settings.batch_size]
            server.import_tasks(pid, batch)
            report.pushed += len(batch)
            progress("push", report.pushed, total)
        server.hide_data_columns(pid, {key for task in tasks for key in task["data"]})
        if person:
            report.assigned[person] = report.assigned.get(person, 0) + len(tasks)


def submission_rows(kind: str, task: str, project_id: int, ls_task: dict, annotation: dict, author: str,
                    fields: dict[str, Any], image: Image) -> tuple[dict, dict]:
    """The source question (the image link) and the draft item one submission makes."""
    now = utcnow()
    key = f"{task}:{kind}:{project_id}:{ls_task['id']}:{annotation['id']}"
    data = dict(fields.get("data") or {})
    basic_question = data.get("basic_question") or fields["question"]
    source = {"dataset": f"{kind}:{task}", "external_id": key, "image_ref": Path(image.path).name,
              "image_id": image.id, "question": basic_question, "answer": data.get("basic_answer"),
              "answer_type": "other", "answers": None,
              "meta": {"project": project_id, "task": ls_task["id"], "annotation": annotation["id"]},
              "created_at": now}
    data.update(author=author, authored_in={"project": project_id, "task": ls_task["id"],
                                               "annotation": annotation["id"]})
    item = {"key": key, "kind": kind, "group": fields["group"], "question": fields["question"],
            "answer": fields.get("answer"), "status": DRAFT, "origin": "authored", "data": data,
            "created_at": now, "updated_at": now}
    return source, item


def store_submissions(store: Store, pairs: list[tuple[dict, dict]]) -> int:
    """Insert the sources and draft items of new submissions in one transaction; returns the items added."""
    if not pairs:
        return 0
    with store.write() as session:
        store.insert_ignore(session, SourceQuestion.__table__, [source for source, _ in pairs])
        ids = {}
        for part in in_chunks([source["external_id"] for source, _ in pairs]):
            ids.update(session.execute(select(SourceQuestion.external_id, SourceQuestion.id).where(
                SourceQuestion.dataset == pairs[0][0]["dataset"], SourceQuestion.external_id.in_(part))).all())
        items = [{**item, "source_id": ids[source["external_id"]]} for source, item in pairs]
        return insert_items(store, session, items, "annotate")


def return_submission(server: LabelStudioServer, project_id: int, ls_task: dict, annotation: dict, author: str,
                      reason: str, metas: dict[int, tuple[dict, dict]]) -> bool:
    """Send an invalid submission's image back to its author: a new task in the same project whose text says why
    (once: a task that already returns this annotation is not made again). True when a task was made."""
    if any(meta.get("returns_annotation") == annotation.get("id") for meta, _ in metas.values()):
        return False
    data = dict(ls_task.get("data") or {})
    data["returned"] = (f"Returned to you ({author}): your last submission (task {ls_task.get('id')}) could not "
                        f"be used: {reason}. Please write the pair again.")
    meta = {**(ls_task.get("meta") or {}), "returned_to": author, "returns_annotation": annotation.get("id")}
    server.import_tasks(project_id, [{"data": data, "meta": meta}])
    return True


def pull_authoring(workspace: Workspace, server: LabelStudioServer, project_id: int, kind: str, task: str,
                   people: dict[int, str], report: AuthoringPull, person: Optional[str] = None) -> None:
    """Every submitted annotation of the project becomes a draft item (new ones only). An invalid one goes back to
    its author as a new task saying why; with a PERSON (the project's), a submission by anyone else is refused by name."""
    store, workspace_root = workspace.store, str(workspace.root)
    spec = get_kind(kind).hooks.annotate
    metas = server.task_metas(project_id)
    keys = {tid: meta.get("item_key") for tid, (meta, _) in metas.items()}
    report.projects += 1
    shas = {tid: key[len(KEY_PREFIX):] for tid, key in keys.items() if key and key.startswith(KEY_PREFIX)}
    with store.session() as session:
        images = {img.sha256: img for part in in_chunks(sorted(set(shas.values())))
                  for img in session.execute(select(Image).where(Image.sha256.in_(part))).scalars()}
        dataset = f"{kind}:{task}"
        known = set(session.execute(select(SourceQuestion.external_id)
                                    .where(SourceQuestion.dataset == dataset)).scalars())
    pairs: list[tuple[dict, dict]] = []
    for chunk in server.export_tasks(project_id, sorted(shas)):
        for ls_task in chunk:
            image = images.get(shas.get(ls_task.get("id"), ""))
            if image is None:
                continue  # an image no longer in this store
            report.tasks += 1
            for annotation in sorted(ls_task.get("annotations") or [], key=lambda a: a.get("id") or 0):
                if annotation.get("was_cancelled"):
                    report.cancelled += 1
                    continue
                report.submissions += 1
                author = person_of(annotation.get("completed_by"), people)
                where = {"project": project_id, "task": ls_task.get("id"), "annotation": annotation.get("id"),
                         "annotator": author}
                if (refused := refusal(annotation, ls_task.get("id"), people, person)) is not None:
                    report.refused.append({**where, "reason": refused})
                    continue
                try:
                    fields = spec.authored_item(task, annotation.get("result"), workspace_root)
                except InvalidResult as exc:
                    report.invalid.append({**where, "reason": str(exc)})
                    if return_submission(server, project_id, ls_task, annotation, author, str(exc), metas):
                        report.returned.setdefault(author, []).append({**where, "reason": str(exc)})
                    continue
                if fields is None:
                    report.no_suitable_type += 1
                    continue
                source, item = submission_rows(kind, task, project_id, ls_task, annotation, author, fields, image)
                if source["external_id"] in known:
                    report.already_pulled += 1
                    continue
                report.by_group[item["group"]] += 1
                pairs.append((source, item))
    report.items_added += store_submissions(store, pairs)


def authoring_task(kind: str, task: str) -> str:
    spec = get_kind(kind).hooks.annotate
    if task not in spec.authoring_tasks:
        raise CftoolsError(f"kind {kind!r} has no authoring task {task!r}"
                           + (f"; it has: {', '.join(spec.authoring_tasks)}" if spec.authoring_tasks else ""))
    return task
