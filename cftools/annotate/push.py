"""`annotate push`: `checked` items of a kind become tasks: each person's in their own project (on their own
server with one server per person), or one shared project's without `[label_studio] annotators`.

One path (`push_tasks`, its steps below in order): resume, plan, route, payload, import, link. Each batch's task
links and the items' move to `in_review` are written in one transaction. Before importing, each project's tasks are
reconciled with the store (by the item key and purpose every task carries), so a push killed between an import and
its store write never imports an item twice; nor does an import whose answer was lost (the tasks the server did
create are found by their keys and linked before the rest is imported again). `--adjudicate` sends disagreements to
someone who did not judge them; a kind's own tasks (`--task`) push their units the same way.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Optional

from sqlalchemy import select

from cftools.annotate.assign import Sender, choose_people, current_load, live_assignees, people_needed, reconcile_person
from cftools.annotate.authoring import authoring_task, push_authoring
from cftools.annotate.label_studio import LabelStudioError, server_settings
from cftools.annotate.controls import control_rate, plan_controls
from cftools.annotate.pauses import pause_the_named, paused_people, requeued_from
from cftools.annotate.projects import DELETED, Progress, find_person_project, own_task
from cftools.annotate.purpose import Purpose
from cftools.annotate.separation import refresh_instructions, refuse_document_root, verify_separation
from cftools.annotate.servers import Servers
from cftools.annotate.task_import import PushOptions, PushReport, PushRun
from cftools.errors import CftoolsError, Hint
from cftools.judgments import ADJUDICATE, VERIFY
from cftools.kinds import get_kind
from cftools.models import CHECKED, IN_REVIEW, NEEDS_ADJUDICATION, AnnotationTask, Item, Judgment
from cftools.progress import no_progress
from cftools.store import Store, in_chunks
from cftools.workspace import Workspace


def waiting_kind(store: Store, adjudicate: bool = False) -> Optional[str]:
    """The one kind whose items wait to be pushed (checked, or needs_adjudication with ADJUDICATE); with none
    waiting, the first kind in the store; None for an empty store."""
    status = NEEDS_ADJUDICATION if adjudicate else CHECKED
    with store.session() as session:
        waiting = sorted(session.execute(select(Item.kind).where(Item.status == status).distinct()).scalars())
        present = waiting or sorted(session.execute(select(Item.kind).distinct()).scalars())
    if len(waiting) > 1:
        raise CftoolsError(f"{status} items of several kinds are waiting ({', '.join(waiting)})",
                           hint=Hint("{message}: pass {kind}", kind="--kind"))
    return present[0] if present else None


def push(workspace: Workspace, kind: Optional[str], *, limit: Optional[int] = None, adjudicate: bool = False,
         data_uri: bool = False, allow_missing_images: bool = False, if_configured: bool = False,
         progress: Progress = no_progress, task: Optional[str] = None) -> PushReport:
    """Push `checked` items (or, with ADJUDICATE, `needs_adjudication` ones) of KIND to Label Studio. TASK names one
    of the kind's own tasks instead: a task on items (`AnnotateHooks.task_spec`, e.g. MuCR's select, explain) or an
    authoring task on images, whose submissions become new items (`AnnotateHooks.authoring_tasks`, e.g. CFMM's author).

    Items take one path whatever the set-up (`assign.push_tasks`): plan (who gets which task), route (each
    person's project on their own server, or the shared project of the shared server, created once), payload,
    import (batched, reconciled by item key), link (one transaction per batch). Images for an authoring task go
    one to a person (`authoring.push_authoring`)."""
    purpose = Purpose(ADJUDICATE if adjudicate else VERIFY)
    if task is not None and task != purpose.task and kind is not None:
        purpose = Purpose.parse(task if get_kind(kind).hooks.annotate.task_spec(task) is not None else authoring_task(kind, task))
    report = PushReport(purpose=str(purpose), kind=kind)
    settings = server_settings(workspace)
    if not settings.configured and if_configured:
        report.configured = False
        report.message = settings.how_to_configure()
        return report
    if not settings.configured:
        raise LabelStudioError(settings.how_to_configure())
    refuse_document_root(workspace)  # before anything is created
    servers = Servers(settings)
    try:
        servers.check()
        verify_separation(workspace, settings, servers, "push")
        refresh_instructions(workspace, servers, settings)
        report.verification, report.separation = servers.verification, servers.separation_reasons
        if kind is None:
            report.message = "nothing to push: the store holds no items yet"
            return report
        get_kind(kind).hooks.annotate.task_template(purpose.task)  # an unknown kind or task is an error before anything is created
        options = PushOptions(limit=limit, data_uri=data_uri, allow_missing_images=allow_missing_images,
                              progress=progress)
        run = PushRun(workspace, servers, settings, kind, purpose, options)
        if own_task(kind, purpose) is None and purpose.task not in (VERIFY, ADJUDICATE):
            push_authoring(run, report)
        else:
            push_tasks(run, report)
    finally:
        servers.close()
    return report


# ---------------------------------------------------------------- the steps of a push


def push_tasks(run: PushRun, report: PushReport) -> None:
    """Push RUN's kind's purpose (verify, adjudicate or a kind's own task on items), one path for every set-up:

    1. resume: tasks a killed push imported but did not record are linked first (`resume`);
    2. plan: who gets which task (`plan`);
    3. route: each person's project on their server, created once (`Sender.project`; the shared project of the
       shared server without annotators);
    4. payload: what each task shows (`task_import.task_payloads`);
    5. import: batched, reconciled by item key when an answer is lost (`assign.import_for`);
    6. link: each batch's links and status moves in one transaction (`assign.link_batch`).

    With assignment, each person's new verification tasks come with control items at `[annotate] control_rate`
    (`controls.plan_controls`), shuffled among them."""
    sender = Sender.of_run(run)
    report.reconciled += resume(run, sender)
    if run.settings.assigns:
        report.paused = pause_the_named(run.workspace)
    wanted = plan(run)
    report.candidates = len({(item.id, task_purpose) for item, task_purpose, _ in wanted})
    if run.settings.assigns and run.purpose.task == VERIFY:
        controls = plan_controls(run.workspace.store, run.kind, wanted, control_rate(run.workspace))
        report.controls = len(controls)
        wanted += controls
    # route, payload, import and link, person by person and batch by batch
    report.pushed += sender.send(run.kind, wanted, report, progress=run.options.progress)
    report.assigned = dict(Counter(person for _, _, person in wanted if person))
    report_projects(run, sender, report)


def resume(run: PushRun, sender: Sender) -> int:
    """Link the tasks a killed push imported but did not record, in each project of RUN's task that exists (the
    shared project is made here); returns how many. The projects found are SENDER's from then on."""
    kind, purpose, task = run.kind, run.purpose, run.purpose.project
    fallback = purpose if own_task(kind, purpose) is None else None
    reconciled = 0
    for person in run.settings.annotators or (None,):
        server = run.servers.for_person(person)
        project_id = (sender.project(kind, purpose, None) if person is None
                      else find_person_project(server, run.settings, kind, task, person))
        if project_id is not None:
            sender.projects[(kind, task, person)] = project_id
            reconciled += reconcile_person(run.workspace.store, server, project_id, kind, person, fallback)
    return reconciled


def plan(run: PushRun) -> list[tuple[Item, Purpose, Optional[str]]]:
    """Who gets which task: (item, purpose, person) of each task to push. With `[label_studio] annotators`, each
    item goes to as many different people as its task needs, the least loaded first; an adjudication to someone
    who did not judge the item. Nobody paused (`annotate resume`) gets one, nor anyone whose judgment of the item
    was requeued. With `only` among RUN's options: these items alone. Without annotators, one task per item for the
    shared project (person None)."""
    store, settings, kind, purpose = run.workspace.store, run.settings, run.kind, run.purpose
    limit, only = run.options.limit, run.options.only
    candidates = assigned_candidates(store, kind, purpose, None if only else limit, shared=not settings.assigns)
    if only is not None:
        candidates = [c for c in candidates if c[0].id in only][:limit]
    if not settings.assigns:
        return [(item, task_purpose, None) for item, task_purpose, _ in candidates]
    item_ids = sorted({item.id for item, _, _ in candidates})
    assigned = live_assignees(store, item_ids)
    judges = verify_judges(store, item_ids) if purpose.task == ADJUDICATE else {}
    former = requeued_from(store, item_ids)
    paused = set(paused_people(store))
    load = current_load(store)
    wanted = []
    for item, task_purpose, missing in candidates:
        exclude = (set(p for p in assigned.get((item.id, task_purpose), []) if p) | judges.get(item.id, set())
                   | former.get(item.id, set()) | paused)
        for person in choose_people(settings.annotators, load, missing, exclude, f"item {item.key}"):
            wanted.append((item, task_purpose, person))
    return wanted


def assigned_candidates(store: Store, kind: str, purpose: Purpose, limit: Optional[int],
                        shared: bool = False) -> list[tuple[Item, Purpose, int]]:
    """(item, purpose, tasks still needed) of every task of KIND's PURPOSE with fewer live tasks than it needs: new
    items, and items a killed push gave to some of their people only (already under review). SHARED: one task per
    item in the shared project (the server hands it to as many people as the project's overlap)."""
    spec = own_task(kind, purpose)
    need = 1 if shared else people_needed(kind, purpose)
    if spec is not None:
        fresh, resumed = list(spec.statuses), [spec.to_status] if spec.to_status else []
    else:
        fresh, resumed = ([CHECKED], [IN_REVIEW]) if purpose.task == VERIFY else ([NEEDS_ADJUDICATION], [])
    with store.session() as session:
        items = list(session.execute(select(Item).where(Item.kind == kind, Item.status.in_(fresh + resumed))
                                     .order_by(Item.id)).scalars())
        if spec is not None:
            pairs = [(item, Purpose(spec.name, unit)) for item in items
                     for unit in get_kind(kind).hooks.annotate.task_units(spec.name, item)]
        else:
            pairs = [(item, purpose) for item in items]
        session.expunge_all()
    assigned = live_assignees(store, sorted({item.id for item, _ in pairs}))
    found = []
    for item, task_purpose in pairs:
        people = assigned.get((item.id, task_purpose), [])
        if None in people and not shared:
            continue  # in a shared project of old
        if item.status in resumed and item.status not in fresh and not people:
            continue  # under review by other means
        if len(people) < need:
            found.append((item, task_purpose, need - len(people)))
    return found[:limit] if limit is not None else found


def verify_judges(store: Store, item_ids: list[int]) -> dict[int, set[str]]:
    """Per item: who was assigned or judged any of its tasks but an adjudication (its verification, a kind's own
    task such as MuCR's explain): an adjudicator must be someone else."""
    found: dict[int, set[str]] = defaultdict(set)
    with store.session() as session:
        for part in in_chunks(item_ids):
            for item_id, assignee, annotator in session.execute(
                    select(AnnotationTask.item_id, AnnotationTask.assignee, Judgment.annotator)
                    .outerjoin(Judgment, Judgment.task_id == AnnotationTask.id)
                    .where(AnnotationTask.item_id.in_(part), AnnotationTask.purpose != ADJUDICATE,
                           AnnotationTask.state != DELETED)):
                found[item_id].update(p for p in (assignee, annotator) if p)
    return found


def report_projects(run: PushRun, sender: Sender, report: PushReport) -> None:
    """The project (with assignment, each person's) this push sent tasks to, and its address, into REPORT."""
    for (_, _, person), project_id in sorted(sender.projects.items(), key=lambda entry: str(entry[0][2])):
        url = run.servers.for_person(person).project_url(project_id)
        if person is None:
            report.project_id, report.project_url = project_id, url
        else:
            report.project_ids[person], report.project_urls[person] = project_id, url
