"""Which Label Studio server each person works on: their own (`[label_studio.people."EMAIL"]`), or the one shared
server (`[label_studio] url`).

With a server per person, a person's tasks go to their own server (one project per kind and task there, created
once), and nothing of theirs is on anyone else's: no UI path and no API call with another person's token reaches
it. With one shared server, every annotator can open every project (Label Studio Community scopes projects only by
organization), so cftools calls that verification "shared server: not blind". Per-person servers are called
"separate servers" only once each was proven theirs alone (`cftools.annotate.separation`), never from the config.
"""

from __future__ import annotations

import threading
from typing import Optional

from cftools.annotate.label_studio import LabelStudioError, LabelStudioServer, ServerSettings, public_url
from cftools.annotate.verification import NOT_PROVEN, SEPARATE, SHARED
from cftools.errors import CftoolsError


class Servers:
    """Connections to the servers of a workspace, opened when first needed (thread-safe), closed together."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self._open: dict[str, LabelStudioServer] = {}
        self._people: dict[str, dict[int, str]] = {}
        self._lock = threading.Lock()
        self.separation: list = []  # what the last separation check found (cftools.annotate.separation.Finding)
        self.check_ids: dict[str, int] = {}  # person -> that check's id in the store

    @property
    def verification(self) -> str:
        """How judgments made through these servers are verified, in the words every report uses: from what the
        separation check found, never from the config alone."""
        if not self.settings.people or any("other-token-accepted" in f.problems for f in self.separation):
            return SHARED
        if not self.separation or not all(f.ok for f in self.separation):
            return NOT_PROVEN
        return SEPARATE

    @property
    def separation_reasons(self) -> list[str]:
        """Why judgments made now are not blind (empty when the check proved each server its person's alone)."""
        return [reason for f in self.separation for reason in f.reasons]

    def alone(self, person: Optional[str]) -> bool:
        """Whether PERSON's server was just proven theirs alone (what their instructions may say)."""
        return any(f.person == person and f.ok for f in self.separation)

    def _connect(self, url: str, token: Optional[str], token_env: str) -> LabelStudioServer:
        key = public_url(url)
        with self._lock:
            if key not in self._open:
                if not token:
                    raise LabelStudioError(f"no Label Studio token: put the API token of {key} in ${token_env}")
                s = self.settings
                self._open[key] = LabelStudioServer(url, token, token_env, s.timeout, s.retries, s.pull_workers,
                                                    s.export_chunk)
            return self._open[key]

    def shared(self) -> LabelStudioServer:
        """The one shared server (`[label_studio] url`)."""
        if not self.settings.url:
            raise CftoolsError("no shared Label Studio server: set [label_studio] url, or give each person a server "
                               'in [label_studio.people."EMAIL"]')
        return self._connect(self.settings.url, self.settings.token, self.settings.token_env)

    def for_person(self, person: Optional[str]) -> LabelStudioServer:
        """The server PERSON works on: their own with per-person servers, else the shared one (PERSON None: the
        shared server's shared projects)."""
        if self.settings.people and person is not None:
            own = self.settings.person(person)
            if own is None:
                raise CftoolsError(f'{person} has no server: add [label_studio.people."{person}"] with url and '
                                   "token_env to cftools.toml")
            return self._connect(own.url, own.token, own.token_env)
        return self.shared()

    def for_url(self, url: str) -> Optional[LabelStudioServer]:
        """The connection to the server at URL (where the store says a task lives); None when no configured server
        is there any more."""
        url = public_url(url)
        for person in self.settings.people:
            if person.url == url:
                return self.for_person(person.email)
        if self.settings.url and public_url(self.settings.url) == url:
            return self.shared()
        return None

    def configured_urls(self) -> list[str]:
        urls = [p.url for p in self.settings.people]
        if self.settings.url and self.settings.token:
            urls.append(public_url(self.settings.url))
        return list(dict.fromkeys(urls))

    def check(self) -> None:
        """Each server answers and each token is good; on a person's own server the token must be that person's
        (a judgment is counted only from the task's assignee, so another account's token would make every
        judgment refused)."""
        if not self.settings.people:
            self.shared().check()
            return
        for person in self.settings.people:
            me = self.for_person(person.email).check()
            if (me.get("email") or "").lower() != person.email:
                raise CftoolsError(f"the token in ${person.token_env} belongs to {me.get('email')}, not to "
                                   f"{person.email}, on {person.url}: use {person.email}'s own token")

    def people(self, server: LabelStudioServer) -> dict[int, str]:
        """User id -> the person (their email) on SERVER (read once)."""
        with self._lock:
            known = self._people.get(server.url)
        if known is None:
            known = server.user_emails()
            with self._lock:
                self._people[server.url] = known
        return known

    def close(self) -> None:
        with self._lock:
            for server in self._open.values():
                server.close()
            self._open.clear()
