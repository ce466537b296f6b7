"""`cftools annotate serve`: one loopback Label Studio per person, each with its own data dir and port, that
person's account its only user (its admin).

Each person listed in `[label_studio.people."EMAIL"]` whose `url` is on this machine (http://127.0.0.1:PORT or
http://localhost:PORT) gets a server in `<workspace>/label-studio/<person>/`, started with the label-studio binary
of `--ls-bin` / $LS_BIN. A fresh data dir takes about 30 s of database migrations; so the first `serve` migrates one
data dir without any user (`label-studio/template/`) and every person's data dir starts as a copy of it (about
3 s). On the first start of a person's server their account is made: the password comes from the environment
variable `password_env` of their table when set, else it is generated and shown once; the API token is the value of
their `token_env` when set, else generated and shown once (put it in that variable). Neither is written anywhere
by cftools, and neither is on any command line (`ps` shows those to everyone on the host): the account reaches the
server in its environment, which holds no other person's secret. `label-studio/servers.json` records each
server's pid, port, data dir and log (no secrets), for `annotate stop` and `annotate servers`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Optional
from urllib.parse import urlsplit

import httpx

from cftools.annotate.label_studio import PersonServer, server_settings
from cftools.annotate.separation import Finding, last_checks, refuse_document_root, verify_separation
from cftools.errors import CftoolsError, Hint
from cftools.processes import is_running
from cftools.progress import ProgressCallback, no_progress
from cftools.workspace import Workspace

LS_BIN_ENV = "LS_BIN"
SERVE_DIR = "label-studio"
STATE_NAME = "servers.json"
TEMPLATE_NAME = "template"
START_TIMEOUT_S = 240
STOP_TIMEOUT_S = 20
LOOPBACK = ("127.0.0.1", "localhost")
# The lines `serve` reports (`cftools.progress`): the servers up so far, the one-off migration, each person's server.
SERVERS_UP, MIGRATING = "servers up", "migrating Label Studio's database (first serve only)"
CHECKING = "checking each server is its person's alone"


def starting_line(person: str) -> str:
    return f"starting {person}'s server"


@dataclass
class Served:
    """One running server as `servers.json` records it (no secrets)."""

    email: str
    url: str
    port: int
    pid: int
    data_dir: str
    log: str
    started_at: float


@dataclass
class Started:
    """What `serve` tells about one person's server: where, and how they log in (secrets only when new)."""

    email: str
    url: str
    pid: int
    new_account: bool
    password: Optional[str] = None  # generated now: shown once
    password_env: Optional[str] = None  # where the password came from
    token: Optional[str] = None  # generated now: shown once; to be put in token_env
    token_env: str = ""
    already_running: bool = False


def serve_root(workspace: Workspace) -> Path:
    return workspace.path(SERVE_DIR)


def person_dir(workspace: Workspace, person: str) -> Path:
    """PERSON's data dir: their email as a folder name (characters other than letters, digits, . _ - @ as _)."""
    return serve_root(workspace) / "".join(c if c.isalnum() or c in "._-@" else "_" for c in person)


def find_ls_bin(given: Optional[str]) -> Path:
    value = given or os.environ.get(LS_BIN_ENV)
    if not value:
        found = shutil.which("label-studio")
        if not found:
            raise CftoolsError("no label-studio binary: set $LS_BIN (scripts/install-label-studio.sh prints the path)",
                               hint=Hint("no label-studio binary: pass {ls_bin} or set $LS_BIN "
                                         "(scripts/install-label-studio.sh prints the path)", ls_bin="--ls-bin"))
        value = found
    path = Path(value)
    if not path.is_file():
        raise CftoolsError(f"label-studio binary not found at {path}",
                           hint=Hint(f"{{message}} ({{ls_bin}} / ${LS_BIN_ENV})", ls_bin="--ls-bin"))
    return path


def local_port(person: PersonServer) -> Optional[int]:
    """The port of PERSON's server when its URL is on this machine (http, loopback, explicit port), else None."""
    parts = urlsplit(person.url)
    if parts.scheme != "http" or parts.hostname not in LOOPBACK or not parts.port:
        return None
    return parts.port


def read_state(workspace: Workspace) -> dict[str, Served]:
    path = serve_root(workspace) / STATE_NAME
    if not path.exists():
        return {}
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
        return {person: Served(**row) for person, row in rows.items()}
    except (ValueError, TypeError) as exc:
        raise CftoolsError(f"{path}: not a state file cftools wrote ({exc}); stop the servers by hand and delete "
                           "it") from None


def write_state(workspace: Workspace, state: dict[str, Served]) -> None:
    path = serve_root(workspace) / STATE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({person: asdict(s) for person, s in sorted(state.items())}, indent=2), encoding="utf-8")
    tmp.replace(path)


def answers(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


# Names that hold a secret by their look: whoever's they are, a Label Studio server has no use for them.
SECRET_LOOKING = re.compile(r"TOKEN|PASSWORD|PASSWD|SECRET|API_?KEY|CREDENTIAL|PRIVATE_?KEY", re.IGNORECASE)


@dataclass(frozen=True)
class Account:
    """The person made the admin of a fresh server: handed over in its environment, never on its command line."""

    email: str
    password: str
    token: str

    def __repr__(self) -> str:  # never the secrets
        return f"Account({self.email!r})"

    def environment(self) -> dict[str, str]:
        """Label Studio's `start` reads its first user from LABEL_STUDIO_USERNAME / _PASSWORD / _USER_TOKEN."""
        return {"LABEL_STUDIO_USERNAME": self.email, "LABEL_STUDIO_PASSWORD": self.password,
                "LABEL_STUDIO_USER_TOKEN": self.token}


@dataclass(frozen=True)
class Secrets:
    """Every configured person's secret variables (names) and their values in this environment: none of them may
    reach a server other than through its own person's Account."""

    names: frozenset[str] = frozenset()
    values: frozenset[str] = frozenset()

    def __repr__(self) -> str:  # never the values
        return f"Secrets({sorted(self.names)!r})"

    def holds(self, name: str, value: str) -> bool:
        # a value is matched only when long enough to be a secret: a short one ("1") would strip innocent variables
        return name in self.names or bool(SECRET_LOOKING.search(name)) or (len(value) >= 6 and value in self.values)


def configured_secrets(workspace: Workspace) -> Secrets:
    """The names of every token_env / password_env in [label_studio] and its people tables, and their values."""
    section = workspace.section("label_studio")
    names = {str(section["token_env"])} if section.get("token_env") else set()
    for table in (section.get("people") or {}).values():
        if isinstance(table, dict):
            names |= {str(table[key]) for key in ("token_env", "password_env") if table.get(key)}
    return Secrets(frozenset(names), frozenset(v for n in names if (v := os.environ.get(n))))


def server_env(data_dir: Path, document_root: Optional[Path], others: Secrets = Secrets(),
               account: Optional[Account] = None) -> dict[str, str]:
    """The server's environment: no stray HOST/PORT/USERNAME/PASSWORD or LABEL_STUDIO_* (the server falls back to
    them), no one's secret (any configured person's variable, any secret-looking name, any value equal to a
    configured secret) but ACCOUNT's own, no phoning home, sign-up only by invitation, local files served from the
    document root."""
    env = {k: v for k, v in os.environ.items() if k not in ("HOST", "PORT", "USERNAME", "PASSWORD")
           and not k.startswith(("LABEL_STUDIO_", "HEARTEX_")) and not others.holds(k, v)}
    env.update(LABEL_STUDIO_BASE_DATA_DIR=str(data_dir), SENTRY_DSN="", FRONTEND_SENTRY_DSN="",
               LATEST_VERSION_CHECK="false", COLLECT_ANALYTICS="false",
               LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK="true")
    if document_root is not None:
        env.update(LOCAL_FILES_SERVING_ENABLED="true", LOCAL_FILES_DOCUMENT_ROOT=str(document_root))
    if account is not None:
        env.update(account.environment())
    return env


def launch(binary: Path, data_dir: Path, port: int, log: Path, document_root: Optional[Path],
           others: Secrets = Secrets(), account: Optional[Account] = None) -> subprocess.Popen:
    """Start a server on 127.0.0.1:PORT; ACCOUNT is made its admin on a fresh database. The command line holds no
    secret (anyone on the host can read it): the account travels in the environment, legacy tokens are a bare
    flag."""
    command = [str(binary), "start", "--no-browser", "--internal-host", "127.0.0.1", "--port", str(port)]
    if account is not None:
        command.append("--enable-legacy-api-token")  # acts on the organization's creation, with this first user
    with open(log, "a", encoding="utf-8") as out:
        return subprocess.Popen(command, env=server_env(data_dir, document_root, others, account), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def wait_until_up(proc: subprocess.Popen, url: str, port: int, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not answers(url):
        if proc.poll() is not None:
            raise CftoolsError(f"Label Studio for {url} exited with {proc.returncode}; see {log}")
        if time.monotonic() > deadline:
            stop_pid(proc.pid)
            raise CftoolsError(f"Label Studio did not answer on {url} within {START_TIMEOUT_S} s; see {log}")
        time.sleep(0.3)
    if f"127.0.0.1:{port}/" not in log.read_text(encoding="utf-8", errors="replace"):
        stop_pid(proc.pid)  # it moves to another port silently when its own is taken
        raise CftoolsError(f"Label Studio did not start on port {port}; see {log}")


def stop_pid(pid: int) -> None:
    """SIGTERM the server's process group (it was started in a session of its own), SIGKILL if it lingers."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while is_running(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if is_running(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def migrated_template(workspace: Workspace, binary: Path, progress: ProgressCallback = no_progress) -> Path:
    """A data dir with Label Studio's database migrated and no user: built once, copied for each person."""
    template = serve_root(workspace) / TEMPLATE_NAME
    if (template / "label_studio.sqlite3").exists():
        return template
    progress(MIGRATING, 0, None)  # about 30 s, once: nothing else shows meanwhile
    building = template.with_name(TEMPLATE_NAME + ".building")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    port = free_port()
    log = serve_root(workspace) / "template.log"
    proc = launch(binary, building, port, log, None, configured_secrets(workspace))
    try:
        wait_until_up(proc, f"http://127.0.0.1:{port}", port, log)
    finally:
        stop_pid(proc.pid)
        proc.wait(timeout=STOP_TIMEOUT_S)
    shutil.copytree(building, template, ignore=shutil.ignore_patterns("media", "export", "upload"))
    shutil.rmtree(building, ignore_errors=True)
    progress(MIGRATING, 1, 1)
    return template


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(workspace: Workspace, ls_bin: Optional[str] = None, only: tuple[str, ...] = (),
          progress: ProgressCallback = no_progress) -> list[Started]:
    """Start the server of each configured person (ONLY: just these) that is not running yet; returns what to tell
    each person. PROGRESS hears the servers up so far (of all to serve), and each starting server until it
    answers."""
    settings = server_settings(workspace)
    people = [p for p in settings.people if not only or p.email in only]
    if not people:
        raise CftoolsError('no person to serve: add [label_studio.people."EMAIL"] tables (url, token_env) to '
                           "cftools.toml" + (f" for {', '.join(only)}" if only else ""))
    far = [p.email for p in people if local_port(p) is None]
    if far:
        raise CftoolsError(f"not a server on this machine (http://127.0.0.1:PORT): {', '.join(far)}; "
                           "`annotate serve` starts loopback servers only")
    binary = find_ls_bin(ls_bin)
    state = {email: s for email, s in read_state(workspace).items() if is_running(s.pid)}
    section = workspace.section("label_studio")
    document_root = refuse_document_root(workspace)  # images only, refused before anything starts
    secrets_of_all = configured_secrets(workspace)
    starting: list[tuple[Started, subprocess.Popen, int, Path, Path]] = []
    told: list[Started] = []
    progress(SERVERS_UP, 0, len(people))
    try:
        for person in people:
            port = local_port(person)
            if person.email in state:
                told.append(Started(person.email, person.url, state[person.email].pid, False,
                                    token_env=person.token_env, already_running=True))
                progress(SERVERS_UP, len(told), len(people))
                continue
            if port_in_use(port):
                raise CftoolsError(f"port {port} of {person.email}'s server ({person.url}) is taken by another "
                                   "program; choose another port in their url")
            data_dir = person_dir(workspace, person.email)
            fresh = not (data_dir / "label_studio.sqlite3").exists()
            started = Started(person.email, person.url, 0, fresh, token_env=person.token_env)
            account = None
            if fresh:
                template = migrated_template(workspace, binary, progress)
                shutil.rmtree(data_dir, ignore_errors=True)
                shutil.copytree(template, data_dir)
                data_dir.chmod(0o700)  # its database and secret key are the person's alone
                password_env = people_tables(section).get(person.email, {}).get("password_env")
                password = os.environ.get(password_env) if password_env else None
                if password:
                    started.password_env = password_env
                else:
                    password = started.password = secrets.token_urlsafe(12)
                token = person.token or secrets.token_hex(20)
                if not person.token:
                    started.token = token
                account = Account(person.email, password, token)
            log = data_dir / "server.log"
            proc = launch(binary, data_dir, port, log, document_root, secrets_of_all, account)
            started.pid = proc.pid
            starting.append((started, proc, port, log, data_dir))
            progress(starting_line(person.email), 0, None)
        for started, proc, port, log, data_dir in starting:  # all start at once; wait for each
            wait_until_up(proc, started.url, port, log)
            state[started.email] = Served(started.email, started.url, port, proc.pid, str(data_dir), str(log),
                                          time.time())
            told.append(started)
            progress(starting_line(started.email), 1, 1)
            progress(SERVERS_UP, len(told), len(people))
    except BaseException:
        for started, proc, *_ in starting:
            if started.email not in state:
                stop_pid(proc.pid)
        raise
    finally:
        write_state(workspace, state)
    progress(CHECKING, 0, None)
    check_after_serve(workspace, told)  # proven theirs alone, by the servers themselves (recorded)
    progress(CHECKING, 1, 1)
    return told


def people_tables(section: dict) -> dict[str, dict]:
    """`[label_studio.people."EMAIL"]` tables by lower-cased email (as the people settings name them)."""
    return {email.strip().lower(): table for email, table in (section.get("people") or {}).items()
            if isinstance(table, dict)}


def stop(workspace: Workspace, only: tuple[str, ...] = ()) -> list[str]:
    """Stop the servers `serve` started (ONLY: just these people's); returns whose were stopped."""
    state = read_state(workspace)
    stopped = []
    for person, served in sorted(state.items()):
        if only and person not in only:
            continue
        if is_running(served.pid) and owns(served):
            stop_pid(served.pid)
            stopped.append(person)
        del state[person]
    write_state(workspace, state)
    return stopped


def owns(served: Served) -> bool:
    """Whether the pid still is the server `serve` started (a pid may be reused by another program)."""
    try:
        with open(f"/proc/{served.pid}/environ", "rb") as fh:
            return f"LABEL_STUDIO_BASE_DATA_DIR={served.data_dir}".encode() in fh.read().split(b"\0")
    except OSError:
        return True  # no /proc to ask: trust the state file


def servers_status(workspace: Workspace) -> list[dict]:
    """Each configured person's server: url, whether `serve` runs it (pid), whether it answers, its data dir."""
    settings = server_settings(workspace)
    state = read_state(workspace)
    rows = []
    for person in settings.people:
        served = state.get(person.email)
        running = served is not None and is_running(served.pid)
        rows.append({"person": person.email, "url": person.url, "token_env": person.token_env,
                     "token_set": bool(person.token), "served_here": local_port(person) is not None,
                     "pid": served.pid if running else None, "answers": answers(person.url),
                     "data_dir": served.data_dir if served else str(person_dir(workspace, person.email))})
    return rows


def check_after_serve(workspace: Workspace, started: Iterable[Any]) -> list[Finding]:
    """`annotate serve`, once the servers answer: check them, with the tokens just made where none was set yet."""
    from dataclasses import replace

    from cftools.annotate.servers import Servers

    started = list(started)
    made = {s.email: s.token for s in started if getattr(s, "token", None)}
    settings = server_settings(workspace)
    serving = {s.email for s in started}
    people = tuple(replace(p, token=p.token or made.get(p.email)) for p in settings.people if p.email in serving)
    settings = replace(settings, people=tuple(p for p in people if p.token))
    servers = Servers(settings)
    try:
        return verify_separation(workspace, settings, servers, "serve")
    finally:
        servers.close()


def servers_report(workspace: Workspace) -> list[dict]:
    """`annotate servers`: each person's server (`servers_status`) with its last separation
    check: when, during what, whether it proved the server theirs alone, and why not."""
    checks = last_checks(workspace.store)
    rows = servers_status(workspace)
    for row in rows:
        check = checks.get(row["person"])
        row["alone"] = bool(check and check.ok and check.server == row["url"])
        row["checked_at"] = check.checked_at.isoformat() if check else None
        row["checked_during"] = check.during if check else None
        row["not_alone_because"] = ("" if row["alone"] else check.reason if check and not check.ok
                                    else "never checked" if check is None else "checked at another url")
    return rows
