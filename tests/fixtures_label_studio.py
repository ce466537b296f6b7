"""A real Label Studio server on loopback for the annotation tests.

The server runs from its own virtual environment (it pins `openai<2`; the toolkit does not):
`scripts/install-label-studio.sh` creates it and prints the binary's path. The fixture finds it
through `LS_BIN` (default: the venv that script creates). In CI (`CI=true`) a missing server is a
failure, never a skip.

Start-up is fast because the data dir is a copy of a migrated template, built once per
Label Studio version under `~/.cache/cftools/ls-template/<version>/`.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

ADMIN_EMAIL = "admin@example.com"
ADMIN_PASSWORD = "Admin-pass-123"
ADMIN_TOKEN = "cftools-test-admin-token-0123456789"
ANNOTATORS = (("ann1@example.com", "Annot1-pass-123"), ("ann2@example.com", "Annot2-pass-123"))
ADJUDICATOR = ("adj@example.com", "Adjud1-pass-123")
START_TIMEOUT_S = 240
CACHE = Path(os.environ.get("CFTOOLS_CACHE", Path.home() / ".cache" / "cftools"))


def default_ls_bin() -> Path:
    venv = os.environ.get("CFTOOLS_LS_VENV") or str(CACHE / "label-studio-venv")
    return Path(venv) / "bin" / "label-studio"


def ls_bin() -> Path:
    return Path(os.environ.get("LS_BIN") or default_ls_bin())


def ls_version(binary: Path) -> str:
    """The server's version, read from its venv's metadata (running it would be slow)."""
    venv = binary.resolve().parent.parent
    for dist in sorted(venv.glob("lib/python*/site-packages/label_studio-*.dist-info")):
        return dist.name.removeprefix("label_studio-").removesuffix(".dist-info")
    return "unknown"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(data_dir: Path, media_root: Path) -> dict[str, str]:
    # Settings fall back to unprefixed HOST/PORT/USERNAME/PASSWORD: keep stray ones away from the server.
    env = {k: v for k, v in os.environ.items() if k not in ("HOST", "PORT", "USERNAME", "PASSWORD")}
    env = {k: v for k, v in env.items() if not k.startswith(("LABEL_STUDIO_", "HEARTEX_"))}
    env.update(LABEL_STUDIO_BASE_DATA_DIR=str(data_dir), SENTRY_DSN="", FRONTEND_SENTRY_DSN="",
               LATEST_VERSION_CHECK="false", COLLECT_ANALYTICS="false",
               LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK="true",
               LOCAL_FILES_SERVING_ENABLED="true", LOCAL_FILES_DOCUMENT_ROOT=str(media_root))
    return env


@dataclass
class RunningServer:
    proc: subprocess.Popen
    url: str
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def launch_server(binary: Path, data_dir: Path, media_root: Path, log: Path,
                  account: tuple[str, str, str] | None = (ADMIN_EMAIL, ADMIN_PASSWORD, ADMIN_TOKEN)) -> RunningServer:
    """Start a server on a free port; ACCOUNT (email, password, token) becomes its admin on a fresh database
    (None: no user at all, for a template that people's servers are copied from)."""
    port = free_port()
    command = [str(binary), "start", "--no-browser", "--internal-host", "127.0.0.1", "--port", str(port)]
    if account is not None:
        command += ["--username", account[0], "--password", account[1], "--user-token", account[2],
                    "--enable-legacy-api-token"]
    with open(log, "w") as out:
        proc = subprocess.Popen(command, env=server_env(data_dir, media_root), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    return RunningServer(proc=proc, url=f"http://127.0.0.1:{port}", log=log)


def start_server(binary: Path, data_dir: Path, media_root: Path, log: Path,
                 account: tuple[str, str, str] | None = (ADMIN_EMAIL, ADMIN_PASSWORD, ADMIN_TOKEN)) -> RunningServer:
    return wait_until_up(launch_server(binary, data_dir, media_root, log, account))


def wait_until_up(server: RunningServer) -> RunningServer:
    proc, log = server.proc, server.log
    port = int(server.url.rsplit(":", 1)[1])
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"Label Studio exited with {proc.returncode}; log: {log}\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(server.url + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    else:
        server.stop()
        raise RuntimeError(f"Label Studio did not answer on {server.url} within {START_TIMEOUT_S} s; log: {log}")
    if f"127.0.0.1:{port}/" not in log.read_text():  # it silently moves to another port when busy
        server.stop()
        raise RuntimeError(f"Label Studio did not start on port {port}; log: {log}")
    return server


def migrated_template(binary: Path, scratch: Path, empty: bool = False) -> Path:
    """A data dir migrated once per Label Studio version; built under a lock, then only copied. EMPTY: with no user
    and no organization (a person's own server is a copy whose first user, its admin, is that person)."""
    template = CACHE / "ls-template" / (ls_version(binary) + ("-empty" if empty else ""))
    template.parent.mkdir(parents=True, exist_ok=True)
    with open(template.parent / f"{template.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (template / "label_studio.sqlite3").exists():
            building = scratch / "ls-template-build"
            shutil.rmtree(building, ignore_errors=True)
            building.mkdir(parents=True)
            media = scratch / "ls-template-media"
            media.mkdir(exist_ok=True)
            start_server(binary, building, media, scratch / "ls-template.log",
                         None if empty else (ADMIN_EMAIL, ADMIN_PASSWORD, ADMIN_TOKEN)).stop()
            staging = template.with_name(template.name + ".tmp")
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(building, staging, ignore=shutil.ignore_patterns("media", "export", "upload"))
            staging.rename(template)
    return template


def signup(url: str, admin_token: str, email: str, password: str) -> tuple[int, str]:
    """A second person, made the way a person joins: invite link, sign-up form, then their token."""
    headers = {"Authorization": f"Token {admin_token}"}
    invite = httpx.get(url + "/api/invite", headers=headers, timeout=30).raise_for_status().json()
    with httpx.Client(base_url=url, follow_redirects=False, timeout=30) as s:
        s.get("/user/signup/")
        r = s.post("/user/signup/", params={"token": invite["token"]},
                   data={"email": email, "password": password, "csrfmiddlewaretoken": s.cookies.get("csrftoken")},
                   headers={"Referer": url + "/user/signup/"})
        if r.status_code != 302:
            raise RuntimeError(f"sign-up of {email} failed with HTTP {r.status_code}")
        token = s.get("/api/current-user/token").raise_for_status().json()["token"]
        user_id = s.get("/api/current-user/whoami").raise_for_status().json()["id"]
    return user_id, token


@dataclass
class LabelStudioServer:
    url: str
    admin_token: str
    media_root: Path
    data_dir: Path
    pid: int
    users: dict[str, dict] = field(default_factory=dict)  # email -> {"id", "token"}

    @property
    def annotators(self) -> list[str]:
        return [email for email, _ in ANNOTATORS]

    @property
    def adjudicator(self) -> str:
        return ADJUDICATOR[0]

    def token(self, email: str) -> str:
        return self.users[email]["token"]

    def client(self, email: str | None = None):  # noqa: ANN201
        from label_studio_sdk import LabelStudio

        return LabelStudio(base_url=self.url, api_key=self.token(email) if email else self.admin_token)


def found_ls_bin() -> Path:
    """LS_BIN, or a skip (a failure in CI) naming how to install it."""
    binary = ls_bin()
    if not binary.exists():
        message = (f"Label Studio server not found at {binary}: run scripts/install-label-studio.sh "
                   f"and set LS_BIN to the path it prints")
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return binary


@pytest.fixture(scope="session")
def label_studio(tmp_path_factory) -> LabelStudioServer:
    """A real Label Studio server on 127.0.0.1 with an admin, two annotators and an adjudicator."""
    binary = found_ls_bin()
    scratch = tmp_path_factory.mktemp("label-studio")
    template = migrated_template(binary, scratch)
    data_dir = scratch / "data"
    shutil.copytree(template, data_dir)
    media_root = scratch / "media"
    media_root.mkdir()
    server = start_server(binary, data_dir, media_root, scratch / "server.log")
    try:
        info = LabelStudioServer(url=server.url, admin_token=ADMIN_TOKEN, media_root=media_root,
                                 data_dir=data_dir, pid=server.proc.pid)
        for email, password in (*ANNOTATORS, ADJUDICATOR):
            user_id, token = signup(server.url, ADMIN_TOKEN, email, password)
            info.users[email] = {"id": user_id, "token": token}
        yield info
    finally:
        server.stop()


def verify_result(related: str, correct: str, corrected: str | None = None,
                  flags: list[str] | None = None) -> list[dict]:
    """A verification annotation's result, as the Label Studio editor submits it for the verify label config."""
    result = [{"from_name": "related", "to_name": "image", "type": "choices", "value": {"choices": [related]}},
              {"from_name": "answer_correct", "to_name": "proposed_answer", "type": "choices",
               "value": {"choices": [correct]}}]
    if corrected is not None:
        result.append({"from_name": "corrected_answer", "to_name": "proposed_answer", "type": "textarea",
                       "value": {"text": [corrected]}})
    if flags:
        result.append({"from_name": "flags", "to_name": "question", "type": "choices", "value": {"choices": flags}})
    return result


# ---------------------------------------------------------------- one server per person

PEOPLE = (("ann1@example.com", "Annot1-pass-123"), ("ann2@example.com", "Annot2-pass-123"),
          ("adj@example.com", "Adjud1-pass-123"))
OUTSIDER = ("outsider@example.com", "Outsider-pass-123")  # in no list: has no account on anyone's server


@dataclass
class PersonServer:
    email: str
    password: str
    token: str
    url: str
    data_dir: Path

    @property
    def token_env(self) -> str:
        return "CFTOOLS_TEST_LS_TOKEN_" + self.email.split("@")[0].upper()


@dataclass
class PeopleServers:
    """One Label Studio per person (each person the only user and admin of theirs), one media root for all."""

    people: dict[str, PersonServer]
    media_root: Path

    def config(self, extra: str = "") -> str:
        """cftools.toml's people tables for these servers."""
        return "".join(f'[label_studio.people."{p.email}"]\nurl = "{p.url}"\ntoken_env = "{p.token_env}"\n'
                       for p in self.people.values()) + extra

    def configure(self, root: Path, prefix: str, annotate: str = "") -> None:
        """ROOT's cftools.toml pointed at these servers: their document root, PREFIX before project titles, the
        people tables; ANNOTATE: lines put at the top of its [annotate] table."""
        config = root / "cftools.toml"
        text = config.read_text().replace("[label_studio]\n", f'[label_studio]\ndocument_root = "{self.media_root}"'
                                          f'\nproject_prefix = "{prefix}"\n', 1)
        if annotate:
            text = text.replace("\n[annotate]\n", f"\n[annotate]\n{annotate}", 1)
        config.write_text(text + "\n" + self.config())

    def use_in(self, monkeypatch) -> None:
        """cftools' environment against these servers: each person's token, none of a shared server's settings."""
        for person in self.people.values():
            monkeypatch.setenv(person.token_env, person.token)
        monkeypatch.delenv("LOCAL_FILES_DOCUMENT_ROOT", raising=False)
        monkeypatch.delenv("LABEL_STUDIO_URL", raising=False)

    def client(self, email: str, server_of: str | None = None):  # noqa: ANN201
        """The SDK client of EMAIL's token, on SERVER_OF's server (default: their own)."""
        from label_studio_sdk import LabelStudio

        return LabelStudio(base_url=self.people[server_of or email].url, api_key=self.people[email].token,
                           max_retries=0)


class PeopleWorld:
    """A workspace at ROOT on PEOPLE_SERVERS, driven through the CLI in-process (a module's world: its tests share
    it); PREFIX: its project titles' prefix."""

    def __init__(self, root: Path, people_servers: PeopleServers, prefix: str) -> None:
        from click.testing import CliRunner

        self.root, self.people_servers, self.prefix = root, people_servers, prefix
        self.runner = CliRunner()

    def cli(self, *args):  # noqa: ANN201
        from cftools.cli import main

        result = self.runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result

    def json(self, *args) -> dict:
        import json

        return json.loads(self.cli(*args, "--json").output)

    def ws(self):  # noqa: ANN201
        from cftools.workspace import load_workspace

        return load_workspace(self.root)

    def read(self, query_of):  # noqa: ANN001, ANN201
        """QUERY_OF(session)'s answer, read from a freshly opened workspace."""
        ws = self.ws()
        try:
            with ws.store.session() as session:
                return query_of(session)
        finally:
            ws.close()


@pytest.fixture(scope="session")
def people_servers(tmp_path_factory) -> PeopleServers:
    """Three people, each with their own Label Studio server (copies of one migrated template with no user, all
    started at once); the outsider has none."""
    binary = found_ls_bin()
    scratch = tmp_path_factory.mktemp("people-servers")
    template = migrated_template(binary, scratch, empty=True)
    media_root = scratch / "media"
    media_root.mkdir()
    launched: list[tuple[PersonServer, RunningServer]] = []
    try:
        for email, password in PEOPLE:
            name = email.split("@")[0]
            data_dir = scratch / name
            shutil.copytree(template, data_dir)
            token = f"cftools-test-{name}-token-0123456789"
            running = launch_server(binary, data_dir, media_root, scratch / f"{name}.log", (email, password, token))
            launched.append((PersonServer(email, password, token, running.url, data_dir), running))
        for _, running in launched:
            wait_until_up(running)
        yield PeopleServers({p.email: p for p, _ in launched}, media_root)
    finally:
        for _, running in launched:
            running.stop()
