"""`annotate push`: `checked` items of a kind become tasks: each person's in their own project (on their own
server with one server per person), or one shared project's without `[label_studio] annotators`.

One path (`cftools.annotate.assign.push_tasks`): resume, plan, route, payload, import, link. Each batch's task
links and the items' move to `in_review` are written in one transaction. Before importing, each project's tasks are
reconciled with the store (by the item key and purpose every task carries), so a push killed between an import and
its store write never imports an item twice; nor does an import whose answer was lost (the tasks the server did
create are found by their keys and linked before the rest is imported again). `--adjudicate` sends disagreements to
someone who did not judge them; a kind's own tasks (`--task`) push their units the same way.
"""

from __future__ import annotations

from typing import Optional

from sqlalchemy import select

from cftools.annotate.assign import push_tasks
from cftools.annotate.authoring import authoring_task, push_authoring
from cftools.annotate.label_studio import LabelStudioError, server_settings
from cftools.annotate.projects import Progress, own_task
from cftools.annotate.separation import refresh_instructions, refuse_document_root, verify_separation
from cftools.annotate.servers import Servers
from cftools.annotate.task_import import PushOptions, PushReport, PushRun
from cftools.errors import CftoolsError
from cftools.judgments import ADJUDICATE, VERIFY
from cftools.kinds import get_kind
from cftools.models import CHECKED, NEEDS_ADJUDICATION, Item
from cftools.progress import no_progress
from cftools.store import Store
from cftools.workspace import Workspace


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


def push(workspace: Workspace, kind: Optional[str], *, limit: Optional[int] = None, adjudicate: bool = False,
         data_uri: bool = False, allow_missing_images: bool = False, if_configured: bool = False,
         progress: Progress = no_progress, task: Optional[str] = None) -> PushReport:
    """Push `checked` items (or, with ADJUDICATE, `needs_adjudication` ones) of KIND to Label Studio. TASK names one
    of the kind's own tasks instead: a task on items (`Kind.task_spec`, e.g. MuCR's select, explain) or an
    authoring task on images, whose submissions become new items (`Kind.authoring_tasks`, e.g. CFMM's author).

    Items take one path whatever the set-up (`assign.push_tasks`): plan (who gets which task), route (each
    person's project on their own server, or the shared project of the shared server, created once), payload,
    import (batched, reconciled by item key), link (one transaction per batch). Images for an authoring task go
    one to a person (`authoring.push_authoring`)."""
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
        get_kind(kind).task_template(purpose)  # an unknown kind or task is an error before anything is created
        options = PushOptions(limit=limit, data_uri=data_uri, allow_missing_images=allow_missing_images,
                              progress=progress)
        run = PushRun(workspace, servers, settings, kind, purpose, options)
        if own_task(kind, purpose) is None and purpose not in (VERIFY, ADJUDICATE):
            push_authoring(run, report)
        else:
            push_tasks(run, report)
    finally:
        servers.close()
    return report
