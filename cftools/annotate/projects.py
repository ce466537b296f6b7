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
from cftools.annotate.purpose import Purpose
from cftools.annotate.rules import render_label_config
from cftools.errors import CftoolsError, Hint
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
                           "LOCAL_FILES_DOCUMENT_ROOT) or image_url_prefix in cftools.toml",
                           hint=Hint("{message}, or push with {data_uri}", data_uri="--data-uri"))


# ---------------------------------------------------------------- a kind's own tasks


def own_task(kind: str, purpose: Purpose):  # noqa: ANN201
    """The kind's TaskSpec of PURPOSE's task, None for verify/adjudicate."""
    return get_kind(kind).hooks.annotate.task_spec(purpose.task)


# ---------------------------------------------------------------- projects


PROJECT_WHAT = {VERIFY: "verification", ADJUDICATE: "adjudication"}


def person_label(person: str, room: int) -> str:
    """How a project title names its person: the email, else its name part with a short hash, in ROOM chars."""
    if len(person) <= room:
        return person
    digest = hashlib.sha1(person.encode()).hexdigest()[:6]
    return f"{person.split('@', 1)[0][:max(1, room - 7)]}-{digest}"


def project_title(settings: ServerSettings, kind: str, purpose: Purpose, person: Optional[str] = None) -> str:
    """"<prefix> <kind> <what>", and " for <person>" for a project that holds only PERSON's tasks on a shared
    server. On a server of their own the title names no one: their email would show on every page they open (an
    adjudicator's screenshot included), and the server already tells whose project it is."""
    return titled(settings, kind, purpose, None if settings.separate_servers else person)


def titled(settings: ServerSettings, kind: str, purpose: Purpose, person: Optional[str]) -> str:
    what = PROJECT_WHAT.get(purpose.task, purpose.task)  # a kind's own task is named by itself
    title = f"{settings.project_prefix} {kind} {what}"
    if len(title) > MAX_TITLE - (12 if person else 0):
        raise CftoolsError(f"Label Studio project title {title!r} is longer than {MAX_TITLE} characters: "
                           "shorten [label_studio] project_prefix")
    if person:
        title += f" for {person_label(person, MAX_TITLE - len(title) - 5)}"
    return title


def project_description(settings: ServerSettings, about: str, kind: str, person: Optional[str]) -> str:
    if person is None:
        return f"cftools: {about} ({kind} items)"
    whose = "one person's tasks only" if settings.separate_servers else f"the tasks of {person} only"
    return f"cftools: {about} ({kind} items); {whose}"


def find_person_project(server: LabelStudioServer, settings: ServerSettings, kind: str, purpose: Purpose,
                        person: Optional[str]) -> Optional[int]:
    """The project of KIND's PURPOSE for PERSON on SERVER. A project an earlier cftools titled with the person's
    email on their own server is found by that title and renamed (once) to the title that names no one."""
    project_id = server.find_project(project_title(settings, kind, purpose, person))
    if project_id is not None or person is None or not settings.separate_servers:
        return project_id
    try:
        project_id = server.find_project(titled(settings, kind, purpose, person))
    except CftoolsError:  # a prefix too long for an email in the title: no such project was ever made
        return None
    if project_id is not None:
        server.rename_project(project_id, project_title(settings, kind, purpose, person),
                              project_description(settings, project_about(kind, purpose)[1], kind, person))
    return project_id


def project_about(kind: str, purpose: Purpose) -> tuple[int, str]:
    """(overlap, what the project is for) of KIND's PURPOSE."""
    spec = own_task(kind, purpose)
    if spec is not None:
        return spec.annotators, spec.description or spec.name
    return ((ANNOTATIONS_PER_TASK if purpose.task == VERIFY else 1),
            PROJECT_DESCRIPTIONS.get(purpose.task, "people write new"))


PROJECT_DESCRIPTIONS = {VERIFY: "two annotators verify", ADJUDICATE: "one adjudicator settles"}


def alone(server: LabelStudioServer, person: Optional[str]) -> bool:
    """Whether PERSON's instructions may say the server is theirs alone: only as the last separation check proved
    it (`cftools.annotate.separation`), never from the config."""
    return person is not None and server.alone_for == person


def ensure_project(server: LabelStudioServer, settings: ServerSettings, kind: str, purpose: Purpose,
                   workspace_root: Optional[str] = None, person: Optional[str] = None) -> int:
    """The project of KIND's PURPOSE (for PERSON alone when given: one annotation per task), created once with
    the kind's label config and instructions."""
    title = project_title(settings, kind, purpose, person)
    project_id = find_person_project(server, settings, kind, purpose, person)
    if project_id is not None:
        return project_id
    spec = own_task(kind, purpose)
    name = spec.name if spec is not None else purpose.task
    kind_spec = get_kind(kind).hooks.annotate
    overlap, about = project_about(kind, purpose)
    if person:
        overlap = 1
    description = project_description(settings, about, kind, person)
    return server.create_project(title, render_label_config(kind, name, workspace_root), overlap,
                                 description=description,
                                 instructions=kind_spec.instructions(name, workspace_root, alone(server, person),
                                                                   shared_project=person is None))
