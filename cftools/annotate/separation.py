"""Separation proven, then stated: whether each person's own Label Studio server is really theirs alone, asked of the
servers themselves, recorded with each judgment, and counted as "not blind" wherever it was not proven.

URL text proves nothing (`http://127.0.0.1:8301` and `http://localhost:8301` are one server), and Label Studio
Community lets every user of a server read every project on it. So at `annotate serve` (after the servers start),
`push` and `pull`, cftools asks each person's server, with that person's token:

- **users**: its users (`GET /api/users/`) are exactly its person; any other is named, with when they joined;
- **tokens**: every other configured person's token is refused there (401/403). Two URLs to one server fail here,
  by what the server answers, not by their spelling;
- **document root**: it serves images only. `[label_studio] document_root` (or $LOCAL_FILES_DOCUMENT_ROOT, as
  cftools knows it) must not contain the workspace, the store file or a Label Studio data dir
  (`<workspace>/label-studio/...`): refused at serve and push before anything is created. Where the server has a
  project to ask about, its local-files validation (`POST /api/storages/localfiles/validate`) tells its own
  document root, and whether it would serve a storage inside the workspace.

Each check is a `SeparationCheck` row (server, person, when, during what, how, ok, problems, reason). A judgment is
linked to the check that covers it (`Judgment.separation_check_id`): the newest check of its server at the pull that
stored it or later, unless one it had already failed (what was on a server while it was open to others stays
exposed). A judgment with no check, or whose check failed, is **not blind**. Export reads the recorded checks and
needs no server; the release names a failure by its code's words (no emails), `annotate status` and
`annotate servers` by its reason (naming people, which stays in the workspace).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

import httpx
from sqlalchemy import func, select, update

from cftools.annotate.label_studio import LabelStudioServer, PersonServer, ServerSettings
from cftools.errors import CftoolsError
from cftools.models import AnnotationTask, Judgment, SeparationCheck, utcnow
from cftools.workspace import Workspace

SERVE_DIR = "label-studio"  # where `annotate serve` keeps each person's data dir (cftools.annotate.serve)

# What failed, as codes (stored, released) and as words a release can carry: no person is named in them.
EXTRA_USER, TOKEN_ACCEPTED, DOCUMENT_ROOT, CHECK_FAILED, NOT_CHECKED = (
    "another-user", "other-token-accepted", "document-root", "check-failed", "not-checked")
RELEASE_WORDS = {
    EXTRA_USER: "the judge's Label Studio server had another user, who could read the judgments on it",
    TOKEN_ACCEPTED: "the judge's Label Studio server accepted another person's token (it was not a server of "
                    "their own)",
    DOCUMENT_ROOT: "the judge's Label Studio server could serve files of the workspace (its document root was "
                   "not images only)",
    CHECK_FAILED: "the separation check of the judge's server could not be completed",
    NOT_CHECKED: "no separation check covered the judgment (a shared server, or judged before cftools checked)",
}
METHOD = ("as {person}: GET /api/users/ (its users), GET /api/current-user/whoami with each other person's "
          "token (refused?), document root: {root}")
ROOT_IN_MESSAGE = re.compile(r'LOCAL_FILES_DOCUMENT_ROOT="([^"]*)"')
PROBE_TIMEOUT_S = 30.0


@dataclass
class Finding:
    """One person's server, as found now."""

    person: str
    server: str
    method: str
    problems: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def fail(self, code: str, reason: str) -> None:
        if code not in self.problems:
            self.problems.append(code)
        self.reasons.append(reason)


# ---------------------------------------------------------------- the document root, as cftools knows it


def document_root(workspace: Workspace) -> Optional[Path]:
    """`[label_studio] document_root` (else $LOCAL_FILES_DOCUMENT_ROOT), resolved as `serve` and push use it."""
    root = workspace.section("label_studio").get("document_root") or os.environ.get("LOCAL_FILES_DOCUMENT_ROOT")
    return Path(workspace.root, root).resolve() if root else None


def private_paths(workspace: Workspace) -> list[tuple[str, Path]]:
    """(what, path) of everything a document root must never contain: the workspace, the store file, every Label
    Studio data dir in it."""
    root = Path(workspace.root).resolve()
    found = [("the workspace", root), ("the Label Studio data dirs", root / SERVE_DIR)]
    store = store_file(workspace)
    if store is not None:
        found.append(("the store", store))
    return found


def store_file(workspace: Workspace) -> Optional[Path]:
    url = str(getattr(workspace, "db_url", "") or "")
    if url.startswith("sqlite:///"):
        return Path(workspace.root, url[len("sqlite:///"):]).resolve()
    return None


def exposed(root: Path, workspace: Workspace) -> list[str]:
    """What of the workspace a document root ROOT would serve (empty: images only)."""
    return [what for what, path in private_paths(workspace) if path == root or root in path.parents]


def refuse_document_root(workspace: Workspace) -> Optional[Path]:
    """The configured document root, or a one-line error when it would serve the workspace, the store or a Label
    Studio data dir (any user of a server can add a local-files storage anywhere under it)."""
    root = document_root(workspace)
    if root is not None and (what := exposed(root, workspace)):
        raise CftoolsError(f"[label_studio] document_root {root} contains {' and '.join(what)}: every user of a "
                           "server can download any file under it; set it to the images folder only")
    return root


# ---------------------------------------------------------------- asking the servers


def check_servers(workspace: Workspace, settings: ServerSettings, servers: Any) -> list[Finding]:
    """Each person's server, asked with their token (SERVERS: the open connections, `cftools.annotate.servers`).
    Nothing to check with one shared server: it is not blind, and says so without asking."""
    root = document_root(workspace)
    return [check_person(workspace, person, servers.for_person(person.email), settings.people, root)
            for person in settings.people]


def check_person(workspace: Workspace, person: PersonServer, server: LabelStudioServer,
                 people: Iterable[PersonServer], root: Optional[Path]) -> Finding:
    finding = Finding(person.email, person.url, METHOD.format(person=person.email, root="as configured"))
    name = short(person.email)
    try:
        for other in users_besides(server, person.email):
            finding.fail(EXTRA_USER, f"{name}'s server has another user: {other}")
        for other in people:
            if other.email != person.email and other.token and (as_whom := accepted(person.url, other.token)):
                finding.fail(TOKEN_ACCEPTED, f"{name}'s server accepts {short(other.email)}'s token (as {as_whom}): "
                                             "it is not a server of their own")
        how = check_document_root(workspace, server, root, finding)
    except (CftoolsError, httpx.HTTPError) as exc:
        finding.fail(CHECK_FAILED, f"{name}'s server could not be checked: {exc}")
        how = "not asked"
    finding.method = METHOD.format(person=person.email, root=how)
    return finding


def short(person: str) -> str:
    return person.split("@")[0]


def users_besides(server: LabelStudioServer, person: str) -> list[str]:
    """The other users of SERVER, each with when they joined (Label Studio does not say how: with sign-up only by
    invitation, an invite link or an account made on the server)."""
    return [f"{u.get('email')} (joined {str(u.get('date_joined') or '?')[:16].replace('T', ' ')})"
            for u in server.users() if (u.get("email") or "").lower() != person]


def accepted(url: str, token: str) -> Optional[str]:
    """Whom the server at URL takes TOKEN for; None when it refuses it (401/403)."""
    from label_studio_sdk import LabelStudio
    from label_studio_sdk.core.api_error import ApiError

    try:
        me = LabelStudio(base_url=url, api_key=token, timeout=PROBE_TIMEOUT_S, max_retries=0).users.whoami()
    except ApiError as exc:
        if exc.status_code in (401, 403):
            return None
        raise CftoolsError(f"{url} answered HTTP {exc.status_code} to another person's token") from None
    return me.email or f"user {me.id}"


def check_document_root(workspace: Workspace, server: LabelStudioServer, root: Optional[Path],
                        finding: Finding) -> str:
    """The document root, as configured and, where the server has a project to ask about, as the server says;
    returns how it was established."""
    if root is not None and (what := exposed(root, workspace)):
        finding.fail(DOCUMENT_ROOT, f"the document root {root} contains {' and '.join(what)}")
    project = server.first_project()
    if project is None:
        return f"as configured ({root or 'none'}; no project on the server to ask)"
    # Would the server accept a local-files storage on the workspace itself? Its refusal names its own root.
    workspace_root = Path(workspace.root).resolve()
    said = server.local_storage_refusal(project, str(workspace_root))
    name = short(finding.person)
    if said is None:
        finding.fail(DOCUMENT_ROOT, f"{name}'s server would serve files from the workspace {workspace_root}")
        return "POST /api/storages/localfiles/validate (it accepted the workspace)"
    told = ROOT_IN_MESSAGE.search(said)
    if told is None:
        return ("POST /api/storages/localfiles/validate (local files not served)" if "SERVING_ENABLED" in said
                else f"as configured ({root or 'none'}; the server did not say its own)")
    served = Path(told.group(1))
    if what := exposed(served, workspace):
        finding.fail(DOCUMENT_ROOT, f"{name}'s server's document root {served} contains {' and '.join(what)}")
    return f"POST /api/storages/localfiles/validate (the server's root: {served})"


# ---------------------------------------------------------------- recording


def record(store: Any, findings: list[Finding], during: str) -> dict[str, int]:
    """Store FINDINGS as checks and link each person's judgments to their new check; returns the check id per
    person."""
    now = utcnow()
    ids: dict[str, int] = {}
    with store.write() as session:
        for f in findings:
            row = SeparationCheck(server=f.server, person=f.person, checked_at=now, during=during, method=f.method,
                                  ok=f.ok, problems=list(f.problems), reason="; ".join(f.reasons))
            session.add(row)
            session.flush()
            ids[f.person] = row.id
        link_checked(session, findings, ids)
    return ids


def link_checked(session: Any, findings: list[Finding], ids: dict[str, int]) -> None:
    """Each person's judgments on their server now point at their check of IDS, unless the one they carry already
    failed (what was on a server while someone else could use it stays exposed). A server that could not be asked
    (down, say) proves nothing either way: its judgments keep the check they had."""
    failed = select(SeparationCheck.id).where(SeparationCheck.ok.is_(False))
    for f in findings:
        if f.problems == [CHECK_FAILED]:
            continue
        tasks = select(AnnotationTask.id).where(AnnotationTask.server == f.server, AnnotationTask.assignee == f.person)
        session.execute(update(Judgment).where(
            Judgment.task_id.in_(tasks),
            Judgment.separation_check_id.is_(None) | Judgment.separation_check_id.not_in(failed))
            .values(separation_check_id=ids[f.person]).execution_options(synchronize_session=False))


def link_after_pull(store: Any, servers: Any) -> None:
    """After a pull: the judgments it stored are covered by the checks made at its start."""
    if servers.separation:
        with store.write() as session:
            link_checked(session, servers.separation, servers.check_ids)


def verify_separation(workspace: Workspace, settings: ServerSettings, servers: Any, during: str) -> list[Finding]:
    """Ask every person's server, record what was found and link their judgments to it; nothing with a shared
    server."""
    if not settings.people:
        return []
    findings = check_servers(workspace, settings, servers)
    servers.separation = findings
    for f in findings:
        servers.for_person(f.person).alone_for = f.person if f.ok else None
    servers.check_ids = record(workspace.store, findings, during)
    return findings


def last_checks(store: Any) -> dict[str, SeparationCheck]:
    """Each person's newest check."""
    newest: dict[str, SeparationCheck] = {}
    last = select(func.max(SeparationCheck.id)).group_by(SeparationCheck.person)
    with store.session() as session:
        for check in session.execute(select(SeparationCheck).where(SeparationCheck.id.in_(last))).scalars():
            session.expunge(check)
            newest[check.person] = check
    return newest


def check_states(session: Any, ids: Iterable[Optional[int]]) -> dict[int, tuple[bool, list[str]]]:
    """Check id -> (ok, problem codes), for export (reads the store only)."""
    wanted = sorted({i for i in ids if i is not None})
    found: dict[int, tuple[bool, list[str]]] = {}
    for start in range(0, len(wanted), 500):
        for cid, ok, problems in session.execute(select(SeparationCheck.id, SeparationCheck.ok, SeparationCheck.problems)
                                                 .where(SeparationCheck.id.in_(wanted[start:start + 500]))):
            found[cid] = (bool(ok), list(problems or []))
    return found


def reasons_by_person(store: Any) -> dict[str, str]:
    """`annotate status` / `annotate servers`: each person whose newest check failed, and why."""
    return {person: check.reason for person, check in last_checks(store).items() if not check.ok}


def problem_words(codes: Iterable[str]) -> str:
    """The release's words for what failed (no person named)."""
    return "; ".join(RELEASE_WORDS.get(code, code) for code in dict.fromkeys(codes))


def refresh_instructions(workspace: Workspace, servers: Any, settings: ServerSettings) -> int:
    """Each person's projects (as the store knows them) show instructions that say "yours alone" only while the last
    check proves it, and the shared projects of a shared server (no one assigned) promise no return of an unusable
    submission (`AnnotateHooks.instructions`): rewritten where they say otherwise. Returns how many were rewritten."""
    rewritten = 0
    for person in settings.people:
        server = servers.for_person(person.email)
        alone = server.alone_for == person.email
        rewritten += rewrite_instructions(workspace, server, AnnotationTask.server == person.url,
                                          AnnotationTask.assignee == person.email, alone=alone)
    if not settings.people and settings.url:
        shared = servers.for_person(None)
        rewritten += rewrite_instructions(workspace, shared, AnnotationTask.server == shared.url,
                                          AnnotationTask.assignee.is_(None), alone=False, shared_project=True)
    return rewritten


def rewrite_instructions(workspace: Workspace, server: LabelStudioServer, *where: Any, alone: bool,
                         shared_project: bool = False) -> int:
    """The projects on SERVER of the tasks WHERE selects show the instructions their task's template gives for ALONE
    and SHARED_PROJECT; how many were rewritten."""
    from cftools.annotate.projects import own_task
    from cftools.annotate.purpose import Purpose
    from cftools.kinds import get_kind
    from cftools.models import Item

    with workspace.store.session() as session:
        projects = sorted(set(session.execute(
            select(AnnotationTask.ls_project_id, AnnotationTask.purpose, Item.kind)
            .join(Item, Item.id == AnnotationTask.item_id).where(*where)).all()))
    shown = {project_id: (Purpose.parse(purpose).shown, kind) for project_id, purpose, kind in projects}
    rewritten = 0
    for project_id, (purpose, kind) in sorted(shown.items()):
        spec = own_task(kind, purpose)
        wanted = get_kind(kind).hooks.annotate.instructions(spec.name if spec is not None else purpose.task,
                                                            str(workspace.root), alone, shared_project=shared_project)
        rewritten += server.set_instructions(project_id, wanted)
    return rewritten
