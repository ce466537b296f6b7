"""Label Studio projects of the annotation stage: how tasks show images, a kind's own tasks, project titles.

Each kind has a verification and an adjudication project, and one per task of its own (MuCR's select and
explain, CFMM's author); `ensure_project` creates a project with the kind's label config once.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import quote

from sqlalchemy import delete, update

from cftools.judgments import ADJUDICATE, VERIFY
from cftools.annotate.rules import render_label_config
from cftools.errors import CftoolsError
from cftools.annotate.label_studio import LabelStudioServer, ServerSettings
from cftools.images import data_uri
from cftools.kinds import get_kind
from cftools.workspace import Workspace

STAGE = "annotate"
OPEN, DECIDED, DELETED = "open", "decided", "deleted"
RETURNED = "returned"  # its submission was invalid: a new task went back to its assignee with the reason
# Its person's judgment was sent to others (`annotate requeue`): kept on record, not counted.
REQUEUED = "requeued"
GONE = (DELETED, RETURNED, REQUEUED)  # states of tasks that take no more judgments
ANNOTATIONS_PER_TASK = 2
MAX_TITLE = 50  # Label Studio refuses longer project titles
Progress = Callable[[str, int, int], None]  # (what, done, total)


def unsynced_update(entity):  # noqa: ANN001, ANN202
    """A bulk UPDATE that doesn't scan the session's identity map (slow with thousands of loaded rows)."""
    return update(entity).execution_options(synchronize_session=False)


def unsynced_delete(entity):  # noqa: ANN001, ANN202
    """A bulk DELETE that doesn't scan the session's identity map, like `unsynced_update`."""
    return delete(entity).execution_options(synchronize_session=False)


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
    return get_kind(kind).hooks.annotate.task_spec(task_of(purpose)[0])


# ---------------------------------------------------------------- projects


PROJECT_WHAT = {VERIFY: "verification", ADJUDICATE: "adjudication"}


def person_label(email: str, room: int) -> str:
    """How a project title names its assignee: the email, else its name part with a short hash, in ROOM chars."""
    if len(email) <= room:
        return email
    digest = hashlib.sha1(email.encode()).hexdigest()[:6]
    return f"{email.split('@', 1)[0][:max(1, room - 7)]}-{digest}"


def project_title(settings: ServerSettings, kind: str, purpose: str, assignee: Optional[str] = None) -> str:
    """"<prefix> <kind> <what>", and " for <person>" for a project that holds only ASSIGNEE's tasks on a shared
    server. On a server of their own the title names no one: their email would show on every page they open (an
    adjudicator's screenshot included), and the server already tells whose project it is."""
    return titled(settings, kind, purpose, None if settings.separate_servers else assignee)


def titled(settings: ServerSettings, kind: str, purpose: str, assignee: Optional[str]) -> str:
    what = PROJECT_WHAT.get(task_of(purpose)[0], task_of(purpose)[0])  # a kind's own task is named by itself
    title = f"{settings.project_prefix} {kind} {what}"
    if len(title) > MAX_TITLE - (12 if assignee else 0):
        raise CftoolsError(f"Label Studio project title {title!r} is longer than {MAX_TITLE} characters: "
                           "shorten [label_studio] project_prefix")
    if assignee:
        title += f" for {person_label(assignee, MAX_TITLE - len(title) - 5)}"
    return title


def project_description(settings: ServerSettings, about: str, kind: str, assignee: Optional[str]) -> str:
    if assignee is None:
        return f"cftools: {about} ({kind} items)"
    whose = "one person's tasks only" if settings.separate_servers else f"the tasks of {assignee} only"
    return f"cftools: {about} ({kind} items); {whose}"


def find_person_project(server: LabelStudioServer, settings: ServerSettings, kind: str, purpose: str,
                        assignee: Optional[str]) -> Optional[int]:
    """The project of KIND's PURPOSE for ASSIGNEE on SERVER. A project an earlier cftools titled with the person's
    email on their own server is found by that title and renamed (once) to the title that names no one."""
    project_id = server.find_project(project_title(settings, kind, purpose, assignee))
    if project_id is not None or assignee is None or not settings.separate_servers:
        return project_id
    try:
        project_id = server.find_project(titled(settings, kind, purpose, assignee))
    except CftoolsError:  # a prefix too long for an email in the title: no such project was ever made
        return None
    if project_id is not None:
        server.rename_project(project_id, project_title(settings, kind, purpose, assignee),
                              project_description(settings, project_about(kind, purpose)[1], kind, assignee))
    return project_id


def project_about(kind: str, purpose: str) -> tuple[int, str]:
    """(overlap, what the project is for) of KIND's PURPOSE."""
    spec = own_task(kind, purpose)
    if spec is not None:
        return spec.annotators, spec.description or spec.name
    return (ANNOTATIONS_PER_TASK if purpose == VERIFY else 1), PROJECT_DESCRIPTIONS.get(purpose, "people write new")


PROJECT_DESCRIPTIONS = {VERIFY: "two annotators verify", ADJUDICATE: "one adjudicator settles"}


def alone(server: LabelStudioServer, assignee: Optional[str]) -> bool:
    """Whether ASSIGNEE's instructions may say the server is theirs alone: only as the last separation check proved
    it (`cftools.annotate.separation`), never from the config."""
    return assignee is not None and server.alone_for == assignee


def ensure_project(server: LabelStudioServer, settings: ServerSettings, kind: str, purpose: str,
                   workspace_root: Optional[str] = None, assignee: Optional[str] = None) -> int:
    """The project of KIND's PURPOSE (for ASSIGNEE alone when given: one annotation per task), created once with
    the kind's label config and instructions."""
    title = project_title(settings, kind, purpose, assignee)
    project_id = find_person_project(server, settings, kind, purpose, assignee)
    if project_id is not None:
        return project_id
    spec = own_task(kind, purpose)
    name = spec.name if spec is not None else purpose
    kind_spec = get_kind(kind).hooks.annotate
    overlap, about = project_about(kind, purpose)
    if assignee:
        overlap = 1
    description = project_description(settings, about, kind, assignee)
    return server.create_project(title, render_label_config(kind, name, workspace_root), overlap,
                                 description=description,
                                 instructions=kind_spec.instructions(name, workspace_root, alone(server, assignee)))
