"""The Label Studio server: where it is, the token, and the few calls cftools makes (label-studio-sdk 2.x).

The URL comes from `[label_studio] url` (or $LABEL_STUDIO_URL), the token from the environment
variable named by `[label_studio] token_env` (default LABEL_STUDIO_API_KEY). The token is never
stored, logged or put into an error message: every error raised here is scrubbed of it.

Transient failures (a lost connection, a time-out, a cut-off answer, 429 and 5xx) are retried here, and only where
doing a request twice is harmless: reads, deletes, updates, and steps that look before they create. A task import
is never simply repeated: its failure raises `UncertainImport` and the caller checks what the server holds.
`[label_studio] timeout` (seconds per request, default 300), `retries` (default 5), `pull_workers` (export
snapshots fetched at once, all but one of them built at once; default 2) and `export_chunk` (tasks per
snapshot, default 1000) tune this.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import os
import threading
import time
import uuid
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

from cftools.errors import CftoolsError, error_text
from cftools.workspace import Workspace

DEFAULT_TOKEN_ENV = "LABEL_STUDIO_API_KEY"
URL_ENV = "LABEL_STUDIO_URL"
DEFAULT_BATCH = 1000
LIST_PAGE = 1000  # tasks per page of a task listing
EXPORT_CHUNK = 1000  # tasks per export snapshot: small enough to store one while the next is built
SNAPSHOT_TITLE = "cftools pull (temporary)"
TASKS_VIEW = "Tasks"  # the Data Manager tab cftools sets up in each project (internal columns hidden)
SNAPSHOT_TIME = "%Y-%m-%dT%H:%M:%SZ"
STALE_AFTER_S = 3600  # a pull's view or snapshot lives for one chunk; one this old was left by a killed pull
# Annotators as ids (cftools maps them to e-mails once per pull); drafts and predictions are not needed.
SNAPSHOT_OPTIONS = {"drafts": {"only_id": True}, "predictions": {"only_id": True},
                    "annotations__completed_by": {"only_id": True}}
TIMEOUT_S = 300
RETRIES = 5  # further tries of a request that failed in passing
# Snapshots fetched at once; all but one of them may be being built by the server at a time. Two: the server
# builds one while cftools downloads the one before (and stores the one before that), so it never waits for
# cftools. Label Studio's own server serializes in one process (one core at most): two builds at once cost it
# more CPU than one after the other, and hold SQLite's lock longer (an annotator's save waits for every
# export's read to end). A server with several worker processes may gain from more.
PULL_WORKERS = 2
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
RETRY_PAUSE_S, RETRY_PAUSE_MAX_S = 0.25, 8.0  # doubling pause between tries (unless the server says Retry-After)
RETRY_AFTER_MAX_S = 60.0
ERROR_BODY_CHARS = 300  # of a server's error answer shown in our error
T = TypeVar("T")


def snapshot_title(now: Optional[datetime] = None) -> str:
    """The title of a pull's temporary view or export snapshot: its creation time (UTC), then a tag of its own
    (snapshots made in the same second by parallel fetches, or by a retry, are told apart by it)."""
    return (f"{SNAPSHOT_TITLE} {(now or datetime.now(timezone.utc)).strftime(SNAPSHOT_TIME)} "
            f"{uuid.uuid4().hex[:8]}")


def is_stale_snapshot(title: Optional[str], now: datetime) -> bool:
    """Whether TITLE names a pull's temporary view or snapshot that no running pull can still need
    (another person may be pulling from the same project right now)."""
    if not title or not title.startswith(SNAPSHOT_TITLE + " "):
        return False
    made_at = title[len(SNAPSHOT_TITLE) + 1:].split(" ")[0]
    try:
        made = datetime.strptime(made_at, SNAPSHOT_TIME).replace(tzinfo=timezone.utc)
    except ValueError:
        return False
    return (now - made).total_seconds() > STALE_AFTER_S


class LabelStudioError(CftoolsError):
    """The server could not be reached, refused the token, or answered with an error."""


class UncertainImport(LabelStudioError):
    """A task import failed in a way that leaves open whether the server created the tasks (the answer was lost)."""


def _status_and_headers(exc: BaseException) -> tuple[Optional[int], Any]:
    from label_studio_sdk.core.api_error import ApiError

    if isinstance(exc, ApiError):
        return exc.status_code, exc.headers or {}
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code, exc.response.headers
    return None, {}


def _retry_after(headers: Any) -> Optional[float]:
    """The server's Retry-After (seconds or an HTTP date), capped; None when absent or unreadable."""
    value = str(headers.get("retry-after") or headers.get("Retry-After") or "").strip()
    if not value:
        return None
    if value.isdigit():
        return min(float(value), RETRY_AFTER_MAX_S)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return min(max(when.timestamp() - time.time(), 0.0), RETRY_AFTER_MAX_S)


def is_transient(exc: BaseException) -> bool:
    """A failure that may pass: a dropped or cut-off connection, a time-out, 408, 429 or a 5xx. A server that
    refuses connections is not (it is down: said at once), nor is a refused token or a bad request."""
    status, _ = _status_and_headers(exc)
    if status is not None:
        return status in TRANSIENT_STATUSES
    return isinstance(exc, httpx.TransportError) and not isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))


def backoff(attempt: int) -> float:
    """A doubling pause before try ATTEMPT + 1 (ATTEMPT counts from 0)."""
    return min(RETRY_PAUSE_S * 2 ** attempt, RETRY_PAUSE_MAX_S)


def retry_pause(exc: BaseException, attempt: int) -> float:
    """Seconds to wait before try ATTEMPT + 1: the server's Retry-After, else a doubling pause."""
    _, headers = _status_and_headers(exc)
    told = _retry_after(headers)
    return told if told is not None else backoff(attempt)


def public_url(url: str) -> str:
    """The URL without credentials or a trailing slash: what the store keeps."""
    parts = urlsplit(url.strip())
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


@dataclass(frozen=True)
class ServerSettings:
    url: Optional[str]
    token_env: str
    token: Optional[str]
    project_prefix: str
    batch_size: int
    timeout: float = TIMEOUT_S
    retries: int = RETRIES
    pull_workers: int = PULL_WORKERS
    export_chunk: Optional[int] = None  # None: EXPORT_CHUNK
    annotators: tuple[str, ...] = ()  # the people cftools assigns tasks to (emails); () = shared projects
    # `[label_studio.people."EMAIL"]`: each person's own server (email -> PersonServer); () = one shared server
    people: tuple["PersonServer", ...] = ()

    @property
    def assigns(self) -> bool:
        return bool(self.annotators)

    @property
    def separate_servers(self) -> bool:
        """One server per person is configured; else one shared server, not blind. Configured, not proven: what is
        said about verification comes from the separation checks (`cftools.annotate.separation`)."""
        return bool(self.people)

    def person(self, person: str) -> Optional["PersonServer"]:
        return next((p for p in self.people if p.email == person), None)

    @property
    def configured(self) -> bool:
        if self.people:
            return all(p.token for p in self.people)
        return bool(self.url and self.token)

    def how_to_configure(self) -> str:
        if self.people:
            missing = [p for p in self.people if not p.token]
            return "no Label Studio token for " + ", ".join(
                f"{p.email} (put the token of {p.url} in ${p.token_env})" for p in missing)
        if not self.url:
            return (f"no Label Studio server configured: set [label_studio] url in cftools.toml (or ${URL_ENV}) "
                    f"and put the token in ${self.token_env}; start one with "
                    "'label-studio start --internal-host 127.0.0.1 --port 8080' (see scripts/install-label-studio.sh)")
        return f"no Label Studio token: put the API token of {public_url(self.url)} in ${self.token_env}"


@dataclass(frozen=True)
class PersonServer:
    """One person's own Label Studio server (`[label_studio.people."EMAIL"]`): its URL and the environment
    variable that holds the person's token there (the token itself is never written anywhere)."""

    email: str
    url: str
    token_env: str
    token: Optional[str] = None

    def __repr__(self) -> str:  # never the token
        return f"PersonServer({self.email!r}, {self.url!r}, ${self.token_env})"


def people_servers(value: Any) -> tuple[PersonServer, ...]:
    """`[label_studio.people."EMAIL"]` tables, each with `url` and `token_env` (a config error names the person)."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise CftoolsError('cftools.toml: [label_studio.people] must hold one table per person, e.g. '
                           '[label_studio.people."alice@example.org"] with url and token_env')
    found = []
    for email, table in value.items():
        where = f'cftools.toml: [label_studio.people."{email}"]'
        if "@" not in email:
            raise CftoolsError(f"{where}: the table's name must be the person's email")
        if not isinstance(table, dict) or not table.get("url") or not table.get("token_env"):
            raise CftoolsError(f"{where} needs url (the person's server) and token_env (the environment "
                               "variable holding the person's token there)")
        env = str(table["token_env"])
        found.append(PersonServer(email.strip().lower(), public_url(str(table["url"])), env,
                                  os.environ.get(env) or None))
    if len({p.email for p in found}) != len(found):
        raise CftoolsError("cftools.toml: [label_studio.people] names someone twice")
    return tuple(found)


def server_settings(workspace: Workspace) -> ServerSettings:
    section = workspace.section("label_studio")
    token_env = section.get("token_env") or DEFAULT_TOKEN_ENV
    people = people_servers(section.get("people"))
    annotators = annotator_list(section.get("annotators"))
    if people:
        listed = {p.email for p in people}
        if not annotators:
            annotators = tuple(p.email for p in people)
        elif missing := [a for a in annotators if a not in listed]:
            raise CftoolsError(f"cftools.toml: [label_studio] annotators lists {', '.join(missing)} with no "
                               '[label_studio.people."EMAIL"] table (each person needs their own server)')
    return ServerSettings(url=section.get("url") or os.environ.get(URL_ENV) or None, token_env=token_env,
                          token=os.environ.get(token_env) or None,
                          project_prefix=section.get("project_prefix") or "cftools",
                          batch_size=int(section.get("batch_size") or DEFAULT_BATCH),
                          timeout=float(section.get("timeout") or TIMEOUT_S),
                          retries=int(section.get("retries", RETRIES)),
                          pull_workers=max(1, int(section.get("pull_workers") or PULL_WORKERS)),
                          export_chunk=int(section["export_chunk"]) if section.get("export_chunk") else None,
                          annotators=annotators, people=people)


def annotator_list(value: Any) -> tuple[str, ...]:
    """`[label_studio] annotators`: a list of distinct emails (a config error names the setting)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and "@" in v for v in value):
        raise CftoolsError("cftools.toml: [label_studio] annotators must be a list of emails, "
                           'e.g. ["alice@example.org", "bob@example.org"]')
    emails = tuple(v.strip().lower() for v in value)
    if len(set(emails)) != len(emails):
        raise CftoolsError("cftools.toml: [label_studio] annotators names someone twice")
    return emails


class LabelStudioServer:
    """A connection to one server; errors come out as LabelStudioError, one line, without the token."""

    def __init__(self, url: str, token: str, token_env: str = DEFAULT_TOKEN_ENV, timeout: float = TIMEOUT_S,
                 retries: int = RETRIES, pull_workers: int = PULL_WORKERS, export_chunk: Optional[int] = None) -> None:
        from label_studio_sdk import LabelStudio

        self.url = public_url(url)
        self._token = token
        self.token_env = token_env
        self.timeout, self.retries, self.pull_workers, self.export_chunk = timeout, retries, pull_workers, export_chunk
        # No retries inside the SDK: it would repeat any request, a task import too (duplicate tasks when only
        # the answer was lost). `_retrying` repeats only what is safe to repeat.
        self.client = LabelStudio(base_url=url.rstrip("/"), api_key=token, timeout=timeout, max_retries=0)
        self._http: httpx.Client | None = None
        self._http_lock = threading.Lock()  # export workers may ask for the client at once
        self._build_slots = threading.Semaphore(max(1, pull_workers - 1))  # snapshots the server builds at once
        # The person the last separation check proved this server's only user (cftools.annotate.separation)
        self.alone_for: Optional[str] = None

    # ------------------------------------------------------------------ errors

    @contextlib.contextmanager
    def errors(self, doing: str) -> Iterator[None]:
        from label_studio_sdk.core.api_error import ApiError

        try:
            yield
        except ApiError as exc:
            raise self._api_error(doing, exc.status_code, exc.body) from None
        except httpx.HTTPStatusError as exc:
            raise self._api_error(doing, exc.response.status_code, exc.response.text) from None
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise LabelStudioError(f"cannot reach Label Studio at {self.url} while {doing} "
                                   f"({exc.__class__.__name__}); is the server running?") from None
        except httpx.HTTPError as exc:
            raise LabelStudioError(f"Label Studio at {self.url} failed while {doing}: " + error_text(
                f"{exc.__class__.__name__}: {exc}", [self._token], ERROR_BODY_CHARS)) from None
        except json.JSONDecodeError as exc:
            raise LabelStudioError(f"Label Studio at {self.url} answered with a body that is not JSON while "
                                   f"{doing} ({exc.msg})") from None

    def _retrying(self, call: Callable[[], T]) -> T:
        """CALL, and again after a transient failure (up to `retries` more times): only for calls that may run
        twice without harm. The last failure is raised as it is (`errors` turns it into one line)."""
        attempt = 0
        while True:
            try:
                return call()
            except Exception as exc:  # noqa: BLE001 - sorted by is_transient, raised again unless retried
                if attempt >= self.retries or not is_transient(exc):
                    raise
                time.sleep(retry_pause(exc, attempt))
                attempt += 1

    def _call(self, doing: str, call: Callable[[], T]) -> T:
        """A call that is safe to repeat, retried, with errors as one line."""
        with self.errors(doing):
            return self._retrying(call)

    def _api_error(self, doing: str, status: Optional[int], body: Any) -> LabelStudioError:
        if status in (401, 403):
            return LabelStudioError(f"Label Studio at {self.url} refused the token in ${self.token_env} "
                                    f"(HTTP {status}) while {doing}; check the token")
        if not isinstance(body, str):
            body = json.dumps(body, default=str)
        return LabelStudioError(f"Label Studio at {self.url} answered HTTP {status} while {doing}: "
                                f"{error_text(body, [self._token], ERROR_BODY_CHARS)}")

    # ------------------------------------------------------------------ calls

    def check(self) -> dict[str, Any]:
        """Who the token belongs to; fails fast on a wrong URL or token."""
        me = self._call("checking the token", self.client.users.whoami)
        return {"id": me.id, "email": me.email}

    def project_url(self, project_id: int) -> str:
        return f"{self.url}/projects/{project_id}/data"

    def _project_id(self, title: str) -> Optional[int]:
        """The oldest project titled TITLE: the server's listing of titles that contain it, page by page (each
        page retried on its own; the SDK's pager asks for one page more and restarts on a failure)."""
        ids: list[int] = []
        page, more = 1, True
        while more:
            body = self._retrying(partial(self._project_page, title, page))
            ids += [p["id"] for p in (body.get("results") or []) if p.get("title") == title]
            page, more = page + 1, bool(body.get("next"))
        return min(ids) if ids else None

    def _project_page(self, title: str, page: int) -> dict:
        return self._http_client().get("/api/projects/", params={
            "title": title, "page": page, "page_size": 100}).raise_for_status().json()

    def find_project(self, title: str) -> Optional[int]:
        with self.errors("looking up projects"):
            return self._project_id(title)

    def project_exists(self, project_id: int) -> bool:
        from label_studio_sdk.core.api_error import ApiError

        def read() -> bool:
            try:
                self.client.projects.get(id=project_id)
            except ApiError as exc:
                if exc.status_code == 404:
                    return False
                raise
            return True

        return self._call(f"reading project {project_id}", read)

    def _create_once(self, find: Callable[[], Optional[T]], create: Callable[[], T]) -> T:
        """CREATE, retried; each further try first FINDs what an earlier one may have made though its answer was
        lost (FIND retries its own reads: a failed look would otherwise cost a create its try)."""
        tried = False

        def attempt() -> T:
            nonlocal tried
            if tried and (found := find()) is not None:
                return found
            tried = True
            return create()

        return self._retrying(attempt)

    def create_project(self, title: str, label_config: str, maximum_annotations: int, description: str,
                       instructions: str = "") -> int:
        """A project; INSTRUCTIONS (HTML) are shown to each annotator before their first task."""
        def create() -> int:
            return self.client.projects.create(
                title=title, label_config=label_config, maximum_annotations=maximum_annotations,
                overlap_cohort_percentage=100, show_overlap_first=True, description=description,
                expert_instruction=instructions, show_instruction=bool(instructions)).id

        with self.errors(f"creating project {title!r}"):
            return self._create_once(lambda: self._project_id(title), create)

    def hide_data_columns(self, project_id: int, keys: Iterable[str]) -> None:
        """The project's Data Manager tab shows no column of the task data KEYS (item key, kind, choice lists as
        JSON, HTML, image URLs): the annotator opens a task and sees it laid out by the label config. Label
        Studio's views API (`data.hiddenColumns`) on the project's first tab, made when there is none."""
        columns = sorted(f"tasks:data.{key}" for key in set(keys))
        hidden = {"explore": columns, "labeling": columns}

        def views() -> list[dict]:
            return self._http_client().get("/api/dm/views/", params={"project": project_id}).raise_for_status().json()

        def ours(found: list[dict]) -> Optional[dict]:
            return next((v for v in found if (v.get("data") or {}).get("title") == TASKS_VIEW), None)

        with self.errors(f"hiding internal columns of project {project_id}"):
            view = self._create_once(lambda: ours(self._retrying(views)), lambda: ours(views()) or self._http_client().post(
                "/api/dm/views/", json={"project": project_id, "data": {"title": TASKS_VIEW, "hiddenColumns": hidden}})
                .raise_for_status().json())
            data = dict(view.get("data") or {})
            if data.get("hiddenColumns") != hidden:
                data["hiddenColumns"] = hidden
                self._retrying(lambda: self._http_client().patch(f"/api/dm/views/{view['id']}/", json={
                    "project": project_id, "data": data}).raise_for_status())

    def set_instructions(self, project_id: int, instructions: str) -> bool:
        """The project's instructions become INSTRUCTIONS (HTML) where they differ; whether they were rewritten."""
        from label_studio_sdk.core.api_error import ApiError

        def set_them() -> bool:
            try:
                project = self.client.projects.get(id=project_id)
            except ApiError as exc:
                if exc.status_code == 404:  # a project deleted on the server: nothing to show
                    return False
                raise
            if (project.expert_instruction or "") == instructions:
                return False
            self.client.projects.update(id=project_id, expert_instruction=instructions,
                                        show_instruction=bool(instructions))
            return True

        return self._call(f"updating the instructions of project {project_id}", set_them)

    def rename_project(self, project_id: int, title: str, description: str) -> None:
        self._call(f"renaming project {project_id}",
                   lambda: self.client.projects.update(id=project_id, title=title, description=description))

    def set_task_overlap(self, task_id: int, overlap: int) -> None:
        """Ask OVERLAP annotators in all for one task (a tiebreak, or a task short of usable judgments: the server
        hands it to one more person). The task is marked unlabeled too: Label Studio does not recompute a task's
        `is_labeled` when its overlap changes, and "Label All Tasks" never hands out a task marked labeled."""
        self._call(f"raising the overlap of task {task_id}",
                   lambda: self.client.tasks.update(id=task_id, overlap=overlap, is_labeled=False))

    def delete_task(self, task_id: int) -> None:
        """Delete one task (a task already gone is fine)."""
        with self.errors(f"deleting task {task_id}"):
            self._delete(f"/api/tasks/{task_id}/")

    def task_count(self, project_id: int) -> int:
        return self._call(f"reading project {project_id}",
                          lambda: int(self.client.projects.get(id=project_id).task_number or 0))

    def ensure_local_storage(self, project_id: int, folders: set[Path]) -> int:
        """One LocalFiles import storage per image folder (Label Studio serves only files under one)."""
        if not folders:
            return 0

        def paths() -> set[str]:
            return {s.path for s in self.client.import_storage.local.list(project=project_id)}

        def create(path: str) -> str:
            self.client.import_storage.local.create(project=project_id, path=path, use_blob_urls=True,
                                                    title=f"cftools images {Path(path).name}")
            return path

        with self.errors(f"setting up local file storage of project {project_id}"):
            missing = sorted(str(f) for f in folders if str(f) not in self._retrying(paths))
            for path in missing:
                self._create_once(lambda path=path: path if path in self._retrying(paths) else None,
                                  partial(create, path))
        return len(missing)

    def import_tasks(self, project_id: int, tasks: list[dict]) -> list[int]:
        """Import a batch; the ids come back in the order of TASKS. Never retried: a transient failure raises
        UncertainImport (the server may hold the tasks all the same), for the caller to check by the tasks' keys."""
        doing = f"importing tasks into project {project_id}"
        with self.errors(doing):
            try:
                response = self.client.projects.import_tasks(id=project_id, request=tasks, return_task_ids=True)
            except Exception as exc:  # noqa: BLE001 - a transient one is reported as uncertain, others as they are
                if not is_transient(exc):
                    raise
                status, _ = _status_and_headers(exc)
                raise UncertainImport(f"Label Studio at {self.url} failed while {doing} "
                                      f"({f'HTTP {status}' if status else exc.__class__.__name__}); "
                                      "it may have imported them all the same") from None
        ids = list(response.task_ids or [])
        if len(ids) != len(tasks):
            raise LabelStudioError(f"Label Studio at {self.url} created {len(ids)} tasks for {len(tasks)} imported")
        return ids

    def task_metas(self, project_id: int) -> dict[int, tuple[dict, dict]]:
        """Task id -> (meta, data) of every task of the project, page by page until the server's total (the SDK's
        pager asks for one page more, and a failure would restart it): a page that fails in passing is read again."""
        found: dict[int, tuple[dict, dict]] = {}
        page, total = 1, None
        with self.errors(f"listing the tasks of project {project_id}"):
            while total is None or len(found) < total:
                tasks, total = self._retrying(partial(self._task_page, project_id, page))
                if not tasks:
                    break
                found.update({t["id"]: (t.get("meta") or {}, t.get("data") or {}) for t in tasks})
                page += 1
        return found

    def _task_page(self, project_id: int, page: int) -> tuple[list[dict], int]:
        """One page of the project's task listing (ids, data and meta only) and the project's task total."""
        body = self._http_client().get("/api/tasks/", params={
            "project": project_id, "fields": "task_only", "page_size": LIST_PAGE, "page": page}).raise_for_status().json()
        return body.get("tasks") or [], int(body.get("total") or 0)

    def task_keys(self, project_id: int) -> dict[int, Optional[str]]:
        """Task id -> the cftools item key it carries, for every task of the project."""
        return {task_id: meta.get("item_key") or data.get("item_key")
                for task_id, (meta, data) in self.task_metas(project_id).items()}

    def tasks_gone(self, project_id: int, task_ids: list[int]) -> list[int]:
        """The tasks among TASK_IDS that the server confirms are gone: its project is gone, or a complete listing
        of the project's tasks lacks them. A task merely missing from an export snapshot (a failed page, a
        time-out) is not gone; a listing that fails raises instead of confirming anything."""
        if not task_ids:
            return []
        if not self.project_exists(project_id):
            return list(task_ids)
        present = self.task_keys(project_id)
        return [task_id for task_id in task_ids if task_id not in present]

    def _http_client(self) -> httpx.Client:
        with self._http_lock:
            if self._http is None:
                # The SDK's own headers carry the auth scheme it chose (legacy token or a refreshed PAT).
                headers = self.client._client_wrapper.get_headers()  # noqa: SLF001
                self._http = httpx.Client(base_url=self.url, headers=headers, timeout=self.timeout,
                                          limits=httpx.Limits(max_connections=max(10, 2 * self.pull_workers)))
            return self._http

    def export_tasks(self, project_id: int, task_ids: list[int]) -> Iterator[list[dict]]:
        """The tasks with their annotations, in chunks (in the order of TASK_IDS); a task deleted on the server is
        simply absent.

        Each chunk is an export snapshot of a temporary Data Manager view that selects just the chunk's tasks.
        The snapshot path serializes tasks about a third faster than the one-shot export endpoint (which builds
        a Project object, and parses its label config, for every task), and a single-process server's
        serializer is what bounds pull speed: `pull_workers` snapshots are fetched at once and all but one of them
        built at once, so the server builds the next one while cftools downloads and stores the ones before. The
        view and the snapshot are deleted afterwards; ones a killed pull left (older than STALE_AFTER_S) are
        removed at the start of a later one.
        """
        self.remove_stale_snapshots(project_id)
        size = self.export_chunk or EXPORT_CHUNK
        chunks = [task_ids[start:start + size] for start in range(0, len(task_ids), size)]
        yield from in_parallel(lambda chunk: self._snapshot(project_id, chunk), chunks, self.pull_workers)

    def _snapshot(self, project_id: int, task_ids: list[int]) -> list[dict]:
        """One chunk's snapshot. Each step is retried on its own: the reads and deletes as they are, the view and
        the snapshot by looking for their title first (one whose answer was lost is used, not made twice)."""
        title = snapshot_title()
        view_id = export_id = None
        with self.errors(f"exporting tasks of project {project_id}"):
            try:
                view_id = self._create_once(lambda: self._retrying(lambda: self._titled_view(project_id, title)),
                                            lambda: self._create_view(project_id, title, task_ids))["id"]
                with self._build_slots:  # the next snapshot's build waits here, not on the server's one core
                    export = self._create_once(
                        lambda: self._retrying(lambda: self._titled_export(project_id, title)),
                        lambda: self._create_export(project_id, title, view_id))
                    export_id = export["id"]
                    self._wait_for_snapshot(project_id, export_id, export.get("status"))
                tasks = self._retrying(lambda: self._http_client().get(
                    f"/api/projects/{project_id}/exports/{export_id}/download",
                    params={"exportType": "JSON"}).raise_for_status().json())
            except Exception:
                if view_id is None or export_id is None:  # one may exist all the same: known by its title
                    self._remove_titled_quietly(project_id, title)
                raise
            finally:
                if export_id is not None:
                    self._delete_quietly(f"/api/projects/{project_id}/exports/{export_id}")
                if view_id is not None:
                    self._delete_quietly(f"/api/dm/views/{view_id}/")
        # A view deleted under the export makes the server export the whole project: keep the chunk.
        wanted = set(task_ids)
        return [task for task in tasks if task.get("id") in wanted]

    def _create_view(self, project_id: int, title: str, task_ids: list[int]) -> dict:
        return self._http_client().post("/api/dm/views/", json={
            "project": project_id, "data": {"title": title},
            "selected_items": {"all": False, "included": task_ids}}).raise_for_status().json()

    def _titled_view(self, project_id: int, title: str) -> Optional[dict]:
        views = self._http_client().get("/api/dm/views/", params={"project": project_id}).raise_for_status().json()
        return next((v for v in views if (v.get("data") or {}).get("title") == title), None)

    def _create_export(self, project_id: int, title: str, view_id: int) -> dict:
        """Without a job queue the server builds the snapshot before it answers."""
        return self._http_client().post(f"/api/projects/{project_id}/exports/", json={
            "title": title, "task_filter_options": {"view": view_id},
            "serialization_options": SNAPSHOT_OPTIONS}).raise_for_status().json()

    def _titled_export(self, project_id: int, title: str) -> Optional[dict]:
        exports = self._http_client().get(f"/api/projects/{project_id}/exports/").raise_for_status().json()
        return next((e for e in exports if e.get("title") == title), None)

    def _delete_quietly(self, path: str) -> None:
        """Clean-up that must not hide the error being raised; what it misses the next pull removes."""
        try:
            self._delete(path)
        except httpx.HTTPError:
            pass

    def _delete(self, path: str) -> None:
        """DELETE PATH, retried; one already gone (a retried delete, another pull's clean-up) is fine."""
        def delete() -> None:
            response = self._http_client().delete(path)
            if response.status_code != 404:
                response.raise_for_status()

        self._retrying(delete)

    def _remove_titled_quietly(self, project_id: int, title: str) -> None:
        try:
            self._remove_snapshots(project_id, lambda found: found == title)
        except httpx.HTTPError:
            pass

    def _wait_for_snapshot(self, project_id: int, export_id: int, status: Optional[str]) -> None:
        """Without a job queue the server builds the snapshot before answering; with one (Redis), poll."""
        http = self._http_client()
        deadline, pause = time.monotonic() + TIMEOUT_S, 0.05
        while status != "completed":
            if status == "failed":
                raise LabelStudioError(f"Label Studio at {self.url} failed to export tasks of project {project_id} "
                                       "(see the server's log)")
            if time.monotonic() > deadline:
                raise LabelStudioError(f"Label Studio at {self.url} did not finish exporting tasks of project "
                                       f"{project_id} within {TIMEOUT_S} s")
            time.sleep(pause)
            pause = min(pause * 2, 2.0)
            status = self._retrying(lambda: http.get(f"/api/projects/{project_id}/exports/{export_id}")
                                    .raise_for_status().json().get("status"))

    def remove_stale_snapshots(self, project_id: int) -> int:
        """Delete views and export snapshots a killed pull left in the project; returns how many."""
        now = datetime.now(timezone.utc)
        with self.errors(f"cleaning up after an earlier pull of project {project_id}"):
            return self._remove_snapshots(project_id, lambda title: is_stale_snapshot(title, now))

    def _remove_snapshots(self, project_id: int, chosen: Callable[[Optional[str]], bool]) -> int:
        """Delete the project's views and export snapshots whose title CHOSEN picks (each request retried);
        returns how many."""
        http = self._http_client()
        views = self._retrying(lambda: http.get("/api/dm/views/", params={"project": project_id})
                               .raise_for_status().json())
        exports = self._retrying(lambda: http.get(f"/api/projects/{project_id}/exports/").raise_for_status().json())
        doomed = ([f"/api/dm/views/{v['id']}/" for v in views if chosen((v.get("data") or {}).get("title"))]
                  + [f"/api/projects/{project_id}/exports/{e['id']}" for e in exports if chosen(e.get("title"))])
        for path in doomed:
            self._delete(path)
        return len(doomed)

    def users(self) -> list[dict]:
        """Every user of the server, as its API lists them (id, email, date_joined, ...)."""
        def listed() -> list[dict]:
            body = self._http_client().get("/api/users/").raise_for_status().json()
            return (body.get("results") or []) if isinstance(body, dict) else body

        return self._call("listing users", listed)

    def first_project(self) -> Optional[int]:
        """The id of a project the token sees (any one), or None."""
        def first() -> Optional[int]:
            body = self._http_client().get("/api/projects/", params={"page_size": 1}).raise_for_status().json()
            found = body.get("results") if isinstance(body, dict) else body
            return found[0]["id"] if found else None

        return self._call("listing projects", first)

    def local_storage_refusal(self, project_id: int, path: str) -> Optional[str]:
        """Whether the server would accept a local-files storage at PATH in PROJECT_ID: None when it would, else its
        refusal's sentences. Only validates (`POST /api/storages/localfiles/validate`): nothing is created."""
        def validate() -> Optional[str]:
            response = self._http_client().post("/api/storages/localfiles/validate",
                                                json={"project": project_id, "path": path})
            if response.status_code in (200, 201, 204):
                return None
            if response.status_code != 400:
                response.raise_for_status()
            try:  # the sentences unquoted (the JSON body escapes the quotes they hold)
                return " ".join(str(v) for v in leaves((response.json() or {}).get("validation_errors")))
            except ValueError:
                return response.text

        return self._call("validating a local-files storage", validate)

    def user_emails(self) -> dict[int, str]:
        return self._call("listing users",
                          lambda: {u.id: u.email.lower() for u in self.client.users.list() if u.email})

    def close(self) -> None:
        if self._http is not None:
            self._http.close()


def leaves(value: Any) -> list[Any]:
    """The plain values inside nested dicts and lists (an error body's messages)."""
    if isinstance(value, dict):
        return [v for item in value.values() for v in leaves(item)]
    if isinstance(value, list):
        return [v for item in value for v in leaves(item)]
    return [value]


def in_parallel(work: Callable[[Any], T], inputs: list, workers: int) -> Iterator[T]:
    """WORK of each input, yielded in input order, with up to WORKERS of them running ahead of the consumer.

    Leaving early cancels the ones not started; running ones finish (they clean up after themselves)."""
    workers = max(1, workers)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cftools-ls") as pool:
        waiting = iter(inputs)
        running: deque[Future] = deque(pool.submit(work, item) for item in islice(waiting, workers))
        try:
            while running:
                result = running.popleft().result()
                running.extend(pool.submit(work, item) for item in islice(waiting, 1))  # one more for the one taken
                yield result
        finally:
            for future in running:
                future.cancel()


def parse_time(value: Any) -> Optional[datetime]:
    """A timestamp of Label Studio's API (ISO 8601, "Z" for UTC) as a datetime; None when absent or unreadable."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
