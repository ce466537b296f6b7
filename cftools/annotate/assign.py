"""cftools owns assignment: who judges what, and the one place each person works in.

Label Studio Community Edition has no per-annotator queues, so with `[label_studio] annotators` set every task is
assigned by cftools: each item goes to as many different people as its task needs (two for verify, a kind's
`TaskSpec.annotators` for its own tasks), the least loaded first (ties in the configured order), a tiebreak or an
adjudication to someone who has not judged the item. Each person has their own project per kind and task
("<prefix> <kind> <task> for <person>"), holding only their tasks with one annotation each: doing one's work the
documented way (open one's project, label) never shows another person's judgment. The assignment is recorded on
the task (`AnnotationTask.assignee`), and `pull` counts a judgment only from that person.

A task whose submission cannot be used (`InvalidResult`) is not dropped: it is marked `returned` and the item
goes back to the same person as a new task whose text says why (`Sender.send(..., notes=...)`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Optional

from sqlalchemy import and_, func, not_, or_, select

from cftools.annotate.label_studio import LabelStudioServer, ServerSettings
from cftools.annotate.projects import DELETED, GONE, ImageLinks, OPEN, Progress, ensure_project, own_task
from cftools.annotate.purpose import Purpose
from cftools.errors import CftoolsError
from cftools.judgments import ADJUDICATE, MEASURE, VERIFY, without_emails
from cftools.annotate.controls import AUDIT, CONTROL, control_items, shuffled_batches
from cftools.annotate.servers import Servers
from cftools.annotate.task_import import PushReport, PushRun, TaskLinks, import_reconciled, link_tasks, task_payloads
from cftools.models import CHECKED, CONTROL as CONTROL_STATUS, DRAFT, IN_REVIEW, NEEDS_ADJUDICATION, AnnotationTask, ControlItem, Item
from cftools.progress import no_progress
from cftools.store import Store, in_chunks
from cftools.workspace import Workspace



def people_needed(kind: str, purpose: Purpose) -> int:
    """How many different people judge one task of PURPOSE before a tiebreak."""
    spec = own_task(kind, purpose)
    if spec is not None:
        return spec.annotators
    return 2 if purpose.task == VERIFY else 1


def choose_people(annotators: tuple[str, ...], load: Counter, n: int, exclude: set[str], what: str) -> list[str]:
    """The N least loaded ANNOTATORS not in EXCLUDE (ties in configured order); LOAD is updated."""
    free = [a for a in annotators if a not in exclude]
    if len(free) < n:
        raise CftoolsError(f"{what} needs {n} annotator(s) besides {', '.join(sorted(exclude)) or 'no one'}, "
                           f"but [label_studio] annotators lists only {len(annotators)}: add people")
    chosen = sorted(free, key=lambda a: (load[a], annotators.index(a)))[:n]
    for person in chosen:
        load[person] += 1
    return chosen


def current_load(store: Store) -> Counter:
    """Live tasks per assignee: open, and of an item that still waits on them (a verification of an item not yet
    decided, an adjudication of one that needs it; a kind's own task, a control or an audit while open)."""
    settled = or_(and_(AnnotationTask.purpose == VERIFY, Item.status.not_in([CHECKED, IN_REVIEW])),
                  and_(AnnotationTask.purpose == ADJUDICATE, Item.status != NEEDS_ADJUDICATION))
    with store.session() as session:
        return Counter(dict(session.execute(
            select(AnnotationTask.assignee, func.count()).join(Item, Item.id == AnnotationTask.item_id).where(
                AnnotationTask.assignee.is_not(None), AnnotationTask.state == OPEN, not_(settled))
            .group_by(AnnotationTask.assignee)).all()))


def live_assignees(store: Store, item_ids: list[int]) -> dict[tuple[int, Purpose], list[str]]:
    """(item id, purpose) -> the people of its live tasks (their assignees)."""
    found: dict[tuple[int, Purpose], list[str]] = defaultdict(list)
    with store.session() as session:
        for part in in_chunks(item_ids):
            for item_id, purpose, person in session.execute(
                    select(AnnotationTask.item_id, AnnotationTask.purpose, AnnotationTask.assignee)
                    .where(AnnotationTask.item_id.in_(part), AnnotationTask.state.not_in(GONE))):
                found[(item_id, Purpose.parse(purpose))].append(person)
    return found


@dataclass
class Sender:
    """Sends tasks to the projects of single people (each on their server: `Servers.for_person`) and records who
    each one is for."""

    workspace: Workspace
    servers: Servers
    settings: ServerSettings
    data_uri: bool = False
    allow_missing_images: bool = False
    projects: dict[tuple[str, Purpose, Optional[str]], int] = field(default_factory=dict)
    folders: set = field(default_factory=set)  # image folders the last payloads need a LocalFiles storage for

    def project(self, kind: str, purpose: Purpose, person: Optional[str]) -> int:
        """PERSON's project of KIND's task on their server (None: the shared project), created once; a control or
        audit task lives in the person's verification project."""
        task = purpose.project
        key = (kind, task, person)
        if key not in self.projects:
            self.projects[key] = ensure_project(self.servers.for_person(person), self.settings, kind, task,
                                                str(self.workspace.root), person=person)
        return self.projects[key]

    @classmethod
    def of_run(cls, run: PushRun) -> "Sender":
        """The sender of RUN's tasks, with its image options."""
        return cls(run.workspace, run.servers, run.settings, run.options.data_uri, run.options.allow_missing_images)

    def payloads(self, kind: str, wanted: list[tuple[Item, Purpose, str]], report: PushReport) -> dict[str, list]:
        """Per person: (item, task payload) of each (item, purpose, person) in WANTED."""
        specs = {purpose: own_task(kind, purpose) for _, purpose, _ in wanted}
        images = ImageLinks.from_config(self.workspace, self.data_uri)
        per_person: dict[str, list] = defaultdict(list)
        by_purpose: dict[Purpose, list[tuple[Item, Purpose, str]]] = defaultdict(list)
        for entry in wanted:
            by_purpose[entry[1]].append(entry)
        shown = control_items(self.workspace.store, sorted({item.id for item, purpose, _ in wanted
                                                             if purpose.task == CONTROL}))
        with self.workspace.store.session() as session:
            for purpose, entries in by_purpose.items():
                items = list({item.id: shown.get(item.id, item) if purpose.task == CONTROL else item
                              for item, _, _ in entries}.values())  # one payload per item, copied
                if specs[purpose] is not None:
                    made = task_payloads(session, items, purpose.task, images, self.allow_missing_images,
                                         report, units=[purpose.unit for _ in items])
                else:
                    made = task_payloads(session, items, purpose.shown.task, images, self.allow_missing_images,
                                         report)
                made_by_id = {item.id: payload for item, payload in made}
                for item, _, person in entries:
                    if item.id in made_by_id:  # else left out for its image (counted in REPORT)
                        payload = made_by_id[item.id]
                        # A control's task is a verification task to its server and person: only "_purpose"
                        # (kept here, never imported) says what the store records it as. Nothing names the person:
                        # the task's JSON reaches their browser, and the store knows whose task it is.
                        task = {"data": dict(payload["data"]),
                                # no item id: ids grow with time, and a control's item is older than the rest
                                "meta": {**{k: v for k, v in payload["meta"].items() if k != "item_id"},
                                         "purpose": str(purpose.shown)},
                                "_purpose": str(purpose)}
                        if purpose.task == MEASURE:  # blind to the checks: shown as a draft no check flagged
                            task["data"]["check_flags"] = "none"
                        per_person[person].append((item, task))
        self.folders = images.folders
        return per_person

    def send(self, kind: str, wanted: list[tuple[Item, Purpose, str]], report: PushReport, notes: Optional[dict] = None,
             progress: Progress = no_progress) -> int:
        """Import one task for each (item, purpose, person) of WANTED into that person's project; NOTES maps
        (item id, person) to the text the task shows about why it came back. Returns the tasks sent."""
        per_person = self.payloads(kind, wanted, report)
        shuffled_batches(per_person, kind)
        sent, total = 0, sum(len(v) for v in per_person.values())
        progress("push", 0, total)
        for person, batch in per_person.items():
            for item, task in batch:
                task["data"]["returned"] = shown_note((notes or {}).get((item.id, person), ""), person)
            server = self.servers.for_person(person)
            project_id = self.project(kind, task_purpose(batch[0][1]), person)
            server.ensure_local_storage(project_id, self.folders)
            for start in range(0, len(batch), self.settings.batch_size):
                part = batch[start:start + self.settings.batch_size]
                sent += import_for(self.workspace.store, server, project_id, kind, person, part)
                progress("push", sent, total)
            server.hide_data_columns(project_id, {key for _, task in batch for key in task["data"]})
        return sent


def shown_note(note: str, person: Optional[str]) -> str:
    """Why a task came back, as its PERSON reads it: a refusal it quotes names people by email; on their screen
    they are "you" and "someone else" (another person's email never reaches anyone's browser)."""
    return without_emails(note.replace(person, "you") if person else note, "someone else")


def import_for(store: Store, server: LabelStudioServer, project_id: int, kind: str, person: str,
               batch: list[tuple[Item, dict]]) -> int:
    """Import BATCH into PERSON's project and record the links in one transaction (see `import_reconciled`)."""
    batch, task_ids = import_reconciled(server, project_id, batch,
                                        lambda: reconcile_person(store, server, project_id, kind, person),
                                        lambda rest: without_task(store, project_id, rest, server.url))
    if batch:
        link_batch(store, server.url, project_id, person, batch, task_ids, "imported")
    return len(batch)


def link_batch(store: Store, server_url: str, project_id: int, person: str, batch: list[tuple[Item, dict]],
               task_ids: list[int], how: str) -> None:
    by_purpose: dict[Purpose, list[tuple[int, int]]] = defaultdict(list)
    for (item, task), task_id in zip(batch, task_ids, strict=True):
        by_purpose[task_purpose(task)].append((item.id, task_id))
    with store.write() as session:
        for purpose, links in by_purpose.items():
            if purpose.measuring:  # its item stays as it is: the task measures its person
                link_tasks(session, TaskLinks(server_url, project_id, purpose, links, how, person),
                           moved={item_id for item_id, _ in links})
                continue
            spec = own_task(batch[0][0].kind, purpose)
            already = set(session.execute(select(AnnotationTask.item_id).where(
                AnnotationTask.item_id.in_([i for i, _ in links]), AnnotationTask.purpose == str(purpose),
                AnnotationTask.state.not_in(GONE))).scalars())
            link_tasks(session, TaskLinks(server_url, project_id, purpose, links, how, person), spec=spec,
                       moved=set() if spec is not None else already)


def without_task(store: Store, project_id: int, batch: list[tuple[Item, dict]],
                 server_url: Optional[str] = None) -> list[tuple[Item, dict]]:
    """The entries of BATCH whose item has no live task of that purpose in PROJECT_ID (of SERVER_URL: project ids
    repeat across people's servers) yet."""
    where = [AnnotationTask.ls_project_id == project_id, AnnotationTask.state.not_in(GONE)]
    if server_url is not None:
        where.append(AnnotationTask.server == server_url)
    with store.session() as session:
        linked = {(item_id, Purpose.parse(purpose)) for item_id, purpose in session.execute(
            select(AnnotationTask.item_id, AnnotationTask.purpose).where(*where))}
    return [(item, task) for item, task in batch if (item.id, task_purpose(task)) not in linked]


def task_purpose(task: dict) -> Purpose:
    """The purpose of a task payload: what the store records it as (a control's is kept apart from what it shows)."""
    return Purpose.parse(task.get("_purpose") or task["meta"]["purpose"])


def measuring_purpose(store: Store, item: Item, meta: dict) -> Purpose:
    """What a task found on a server but not in the store is: a verification task of an item past review is a
    control (of a control item) or an audit, of a draft a measuring task, never a new verification of it."""
    purpose = Purpose.parse(meta.get("purpose") or VERIFY)
    if purpose.task != VERIFY or item.status in (CHECKED, IN_REVIEW):
        return purpose
    if item.status == DRAFT:  # a flagged draft is only ever shown to measure the checks
        return Purpose(MEASURE)
    with store.session() as session:
        is_control = session.execute(select(ControlItem.id).where(ControlItem.item_id == item.id)).first()
    return Purpose(CONTROL if is_control or item.status == CONTROL_STATUS else AUDIT)


def reconcile_person(store: Store, server: LabelStudioServer, project_id: int, kind: str, person: Optional[str],
                     purpose: Optional[Purpose] = None) -> int:
    """Link the tasks of PERSON's project (None: the shared project) that a killed push imported but did not
    record (by key and purpose; PURPOSE for a task that names none, as tasks pushed before purposes were)."""
    metas = server.task_metas(project_id)
    with store.session() as session:
        known = set(session.execute(select(AnnotationTask.ls_task_id).where(
            AnnotationTask.server == server.url, AnnotationTask.ls_project_id == project_id)).scalars())
        unknown = {tid: meta for tid, (meta, _) in metas.items() if tid not in known and meta.get("item_key")}
        items = {}
        for part in in_chunks(sorted({m["item_key"] for m in unknown.values()})):
            items.update({i.key: i for i in session.execute(
                select(Item).where(Item.kind == kind, Item.key.in_(part))).scalars()})
        for item in items.values():
            session.expunge(item)
    if purpose is not None:
        unknown = {tid: {**m, "purpose": m.get("purpose") or str(purpose)} for tid, m in unknown.items()}
    wanted = [(items[m["item_key"]], {"meta": m, "_purpose": str(measuring_purpose(store, items[m["item_key"]], m))}, tid)
              for tid, m in sorted(unknown.items()) if m["item_key"] in items and m.get("purpose")]
    batch = without_task(store, project_id, [(item, task) for item, task, _ in wanted], server.url)
    keep = {(item.id, task_purpose(task)) for item, task in batch}
    chosen = [(item, task, tid) for item, task, tid in wanted if (item.id, task_purpose(task)) in keep]
    if chosen:
        link_batch(store, server.url, project_id, person, [(i, t) for i, t, _ in chosen], [t for _, _, t in chosen],
                   "reconciled")
    return len(chosen)


def assignment_status(store: Store) -> dict[str, dict[str, int]]:
    """Per person: open, decided and returned tasks by task (`annotate status`)."""
    queue: dict[str, Counter] = defaultdict(Counter)
    with store.session() as session:
        for person, purpose, state, n in session.execute(
                select(AnnotationTask.assignee, AnnotationTask.purpose, AnnotationTask.state, func.count())
                .where(AnnotationTask.assignee.is_not(None), AnnotationTask.state != DELETED)
                .group_by(AnnotationTask.assignee, AnnotationTask.purpose, AnnotationTask.state)):
            queue[person][f"{Purpose.parse(purpose).task} {state}"] += n
    return {person: dict(sorted(counts.items())) for person, counts in sorted(queue.items())}
