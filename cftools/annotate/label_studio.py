"""The Label Studio server: where it is, the token, and the few calls cftools makes (label-studio-sdk 2.x).

The URL comes from `[label_studio] url` (or $LABEL_STUDIO_URL), the token from the environment
variable named by `[label_studio] token_env` (default LABEL_STUDIO_API_KEY). The token is never
stored, logged or put into an error message: every error raised here is scrubbed of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Optional
from urllib.parse import urlsplit, urlunsplit

import httpx

from cftools.errors import CftoolsError, error_text
from cftools.workspace import Workspace

DEFAULT_TOKEN_ENV = "LABEL_STUDIO_API_KEY"
URL_ENV = "LABEL_STUDIO_URL"
DEFAULT_BATCH = 1000
EXPORT_CHUNK = 1000  # tasks per export snapshot: small enough to store one while the next is built
SNAPSHOT_TITLE = "cftools pull (temporary)"
SNAPSHOT_TIME = "%Y-%m-%dT%H:%M:%SZ"
STALE_AFTER_S = 3600  # a pull's view or snapshot lives for one chunk; one this old was left by a killed pull
# Annotators as ids (cftools maps them to e-mails once per pull); drafts and predictions are not needed.
SNAPSHOT_OPTIONS = {"drafts": {"only_id": True}, "predictions": {"only_id": True},
                    "annotations__completed_by": {"only_id": True}}
TIMEOUT_S = 300
ERROR_BODY_CHARS = 300  # of a server's error answer shown in our error


def snapshot_title(now: Optional[datetime] = None) -> str:
    """The title of a pull's temporary view or export snapshot: it carries its creation time (UTC)."""
    return f"{SNAPSHOT_TITLE} {(now or datetime.now(timezone.utc)).strftime(SNAPSHOT_TIME)}"


def is_stale_snapshot(title: Optional[str], now: datetime) -> bool:
    """Whether TITLE names a pull's temporary view or snapshot that no running pull can still need
    (another person may be pulling from the same project right now)."""
    if not title or not title.startswith(SNAPSHOT_TITLE + " "):
        return False
    try:
        made = datetime.strptime(title[len(SNAPSHOT_TITLE) + 1:], SNAPSHOT_TIME).replace(tzinfo=timezone.utc)
    except ValueError:
        return False
    return (now - made).total_seconds() > STALE_AFTER_S


class LabelStudioError(CftoolsError):
    """The server could not be reached, refused the token, or answered with an error."""


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

    @property
    def configured(self) -> bool:
        return bool(self.url and self.token)

    def how_to_configure(self) -> str:
        if not self.url:
            return (f"no Label Studio server configured: set [label_studio] url in cftools.toml (or ${URL_ENV}) "
                    f"and put the token in ${self.token_env}; start one with "
                    "'label-studio start --internal-host 127.0.0.1 --port 8080' (see scripts/install-label-studio.sh)")
        return f"no Label Studio token: put the API token of {public_url(self.url)} in ${self.token_env}"


def server_settings(workspace: Workspace) -> ServerSettings:
    section = workspace.section("label_studio")
    token_env = section.get("token_env") or DEFAULT_TOKEN_ENV
    return ServerSettings(url=section.get("url") or os.environ.get(URL_ENV) or None, token_env=token_env,
                          token=os.environ.get(token_env) or None,
                          project_prefix=section.get("project_prefix") or "cftools",
                          batch_size=int(section.get("batch_size") or DEFAULT_BATCH))


class LabelStudioServer:
    """A connection to one server; errors come out as LabelStudioError, one line, without the token."""

    def __init__(self, url: str, token: str, token_env: str = DEFAULT_TOKEN_ENV) -> None:
        from label_studio_sdk import LabelStudio

        self.url = public_url(url)
        self._token = token
        self.token_env = token_env
        self.client = LabelStudio(base_url=url.rstrip("/"), api_key=token, timeout=TIMEOUT_S)
        self._http: httpx.Client | None = None

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> "LabelStudioServer":
        if not settings.configured:
            raise LabelStudioError(settings.how_to_configure())
        return cls(settings.url, settings.token, settings.token_env)

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
        with self.errors("checking the token"):
            me = self.client.users.whoami()
        return {"id": me.id, "email": me.email}

    def project_url(self, project_id: int) -> str:
        return f"{self.url}/projects/{project_id}/data"

    def find_project(self, title: str) -> Optional[int]:
        with self.errors("looking up projects"):
            ids = [p.id for p in self.client.projects.list(title=title) if p.title == title]
        return min(ids) if ids else None

    def project_exists(self, project_id: int) -> bool:
        from label_studio_sdk.core.api_error import ApiError

        with self.errors(f"reading project {project_id}"):
            try:
                self.client.projects.get(id=project_id)
            except ApiError as exc:
                if exc.status_code == 404:
                    return False
                raise
        return True

    def create_project(self, title: str, label_config: str, maximum_annotations: int, description: str) -> int:
        with self.errors(f"creating project {title!r}"):
            project = self.client.projects.create(
                title=title, label_config=label_config, maximum_annotations=maximum_annotations,
                overlap_cohort_percentage=100, show_overlap_first=True, description=description)
        return project.id

    def set_task_overlap(self, task_id: int, overlap: int) -> None:
        """Ask OVERLAP annotators in all for one task (a tiebreak: the server hands it to one more person)."""
        with self.errors(f"raising the overlap of task {task_id}"):
            self.client.tasks.update(id=task_id, overlap=overlap)

    def task_count(self, project_id: int) -> int:
        with self.errors(f"reading project {project_id}"):
            return int(self.client.projects.get(id=project_id).task_number or 0)

    def ensure_local_storage(self, project_id: int, folders: set[Path]) -> int:
        """One LocalFiles import storage per image folder (Label Studio serves only files under one)."""
        if not folders:
            return 0
        with self.errors(f"setting up local file storage of project {project_id}"):
            existing = {s.path for s in self.client.import_storage.local.list(project=project_id)}
            missing = sorted(str(f) for f in folders if str(f) not in existing)
            for path in missing:
                self.client.import_storage.local.create(project=project_id, path=path, use_blob_urls=True,
                                                        title=f"cftools images {Path(path).name}")
        return len(missing)

    def import_tasks(self, project_id: int, tasks: list[dict]) -> list[int]:
        """Import a batch; the ids come back in the order of TASKS."""
        with self.errors(f"importing tasks into project {project_id}"):
            response = self.client.projects.import_tasks(id=project_id, request=tasks, return_task_ids=True)
        ids = list(response.task_ids or [])
        if len(ids) != len(tasks):
            raise LabelStudioError(f"Label Studio at {self.url} created {len(ids)} tasks for {len(tasks)} imported")
        return ids

    def task_keys(self, project_id: int) -> dict[int, Optional[str]]:
        """Task id -> the cftools item key it carries, for every task of the project."""
        found: dict[int, Optional[str]] = {}
        with self.errors(f"listing the tasks of project {project_id}"):
            for task in self.client.tasks.list(project=project_id, fields="task_only", page_size=1000):
                found[task.id] = ((task.meta or {}).get("item_key") or (task.data or {}).get("item_key"))
        return found

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
        if self._http is None:
            # The SDK's own headers carry the auth scheme it chose (legacy token or a refreshed PAT).
            headers = self.client._client_wrapper.get_headers()  # noqa: SLF001
            self._http = httpx.Client(base_url=self.url, headers=headers, timeout=TIMEOUT_S)
        return self._http

    def export_tasks(self, project_id: int, task_ids: list[int]) -> Iterator[list[dict]]:
        """The tasks with their annotations, in chunks; a task deleted on the server is simply absent.

        Each chunk is an export snapshot of a temporary Data Manager view that selects just the chunk's
        tasks. The snapshot path serializes tasks about a third faster than the one-shot export endpoint
        (which builds a Project object, and parses its label config, for every task), and a single-process
        server's serializer is what bounds pull speed. The view and the snapshot are deleted afterwards;
        ones a killed pull left (older than STALE_AFTER_S) are removed at the start of a later one.
        """
        self.remove_stale_snapshots(project_id)
        for start in range(0, len(task_ids), EXPORT_CHUNK):
            yield self._snapshot(project_id, task_ids[start:start + EXPORT_CHUNK])

    def _snapshot(self, project_id: int, task_ids: list[int]) -> list[dict]:
        http = self._http_client()
        title = snapshot_title()
        view_id = export_id = None
        with self.errors(f"exporting tasks of project {project_id}"):
            try:
                view_id = http.post("/api/dm/views/", json={
                    "project": project_id, "data": {"title": title},
                    "selected_items": {"all": False, "included": task_ids}}).raise_for_status().json()["id"]
                export = http.post(f"/api/projects/{project_id}/exports/", json={
                    "title": title, "task_filter_options": {"view": view_id},
                    "serialization_options": SNAPSHOT_OPTIONS}).raise_for_status().json()
                export_id = export["id"]
                self._wait_for_snapshot(project_id, export_id, export.get("status"))
                tasks = http.get(f"/api/projects/{project_id}/exports/{export_id}/download",
                                 params={"exportType": "JSON"}).raise_for_status().json()
                # A view deleted under the export makes the server export the whole project: keep the chunk.
                wanted = set(task_ids)
                return [task for task in tasks if task.get("id") in wanted]
            finally:
                if export_id is not None:
                    self._delete_quietly(f"/api/projects/{project_id}/exports/{export_id}")
                if view_id is not None:
                    self._delete_quietly(f"/api/dm/views/{view_id}/")

    def _delete_quietly(self, path: str) -> None:
        """Clean-up that must not hide the error being raised; what it misses the next pull removes."""
        try:
            self._http_client().delete(path)
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
            status = http.get(f"/api/projects/{project_id}/exports/{export_id}").raise_for_status().json().get("status")

    def remove_stale_snapshots(self, project_id: int) -> int:
        """Delete views and export snapshots a killed pull left in the project; returns how many."""
        http = self._http_client()
        now = datetime.now(timezone.utc)
        removed = 0
        with self.errors(f"cleaning up after an earlier pull of project {project_id}"):
            for view in http.get("/api/dm/views/", params={"project": project_id}).raise_for_status().json():
                if is_stale_snapshot((view.get("data") or {}).get("title"), now):
                    http.delete(f"/api/dm/views/{view['id']}/").raise_for_status()
                    removed += 1
            for export in http.get(f"/api/projects/{project_id}/exports/").raise_for_status().json():
                if is_stale_snapshot(export.get("title"), now):
                    http.delete(f"/api/projects/{project_id}/exports/{export['id']}").raise_for_status()
                    removed += 1
        return removed

    def user_emails(self) -> dict[int, str]:
        with self.errors("listing users"):
            return {u.id: u.email for u in self.client.users.list() if u.email}

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
