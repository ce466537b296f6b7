"""Secrets stay with their owner (issue 43): `annotate serve` puts no password or token on any server's command line
(readable by anyone on the host in /proc/PID/cmdline), gives each server an environment that holds only its own
person's secrets, and writes no secret into servers.json or any log under label-studio/.

Real servers: three people's Label Studio servers started by `annotate serve`, each read through /proc."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest
from fixtures_label_studio import free_port, ls_bin, migrated_template

from cftools.annotate.serve import Secrets, configured_secrets, server_env
from cftools.workspace import load_workspace

PEOPLE = ("ann1@example.com", "ann2@example.com", "ann3@example.com")
SUPPLIED = {  # what the operator's environment holds; ann3 has nothing, so serve generates both of theirs
    "LS_TOKEN_ANN1": "ann1-token-0123456789abcdef",
    "LS_PASSWORD_ANN1": "Ann1-password-secret",
    "LS_PASSWORD_ANN2": "Ann2-password-secret",
}
STRAYS = {  # secrets that belong to no server: a former person's token, a copy of ann2's password under a plain name
    "LS_TOKEN_FORMER": "former-token-fedcba9876543210",
    "ANN2_BACKUP": SUPPLIED["LS_PASSWORD_ANN2"],
}


def people_tables(ports: dict[str, int]) -> str:
    text = ""
    for n, email in enumerate(PEOPLE, 1):
        text += (f'\n[label_studio.people."{email}"]\nurl = "http://127.0.0.1:{ports[email]}"\n'
                 f'token_env = "LS_TOKEN_ANN{n}"\npassword_env = "LS_PASSWORD_ANN{n}"\n')
    return text


def process_group(pid: int) -> list[int]:
    """PID and every process of its group (the server runs in a session of its own; children stay in it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(") ", 1)[1].split()[2]) == pid:
            found.append(int(entry.name))
    assert pid in found
    return found


def proc_text(pid: int, name: str) -> str:
    return (Path("/proc") / str(pid) / name).read_bytes().replace(b"\0", b"\n").decode(errors="replace")


def shown_once(output: str, email: str) -> dict[str, str]:
    """The generated password and token `serve` printed for EMAIL (if any)."""
    block = output.split(f"{email}: ", 1)[1].split("\n\n", 1)[0]
    found = {}
    if "with password " in block:
        found["password"] = block.split("with password ", 1)[1].split()[0]
    if "export " in block:
        found["token"] = block.split("export ", 1)[1].split()[0].split("=", 1)[1]
    return found


@pytest.fixture
def served(workspace, run_cli, monkeypatch, tmp_path):
    binary = ls_bin()
    if not binary.exists():
        pytest.skip(f"no Label Studio at {binary}")
    ports = {email: free_port() for email in PEOPLE}
    config = workspace.root / "cftools.toml"
    config.write_text(config.read_text() + people_tables(ports))
    for name in ("LS_TOKEN_ANN2", "LS_TOKEN_ANN3", "LS_PASSWORD_ANN3"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {**SUPPLIED, **STRAYS}.items():
        monkeypatch.setenv(name, value)
    shutil.copytree(migrated_template(binary, tmp_path, empty=True), workspace.root / "label-studio" / "template")
    started = run_cli("annotate", "serve", "--ls-bin", binary)
    try:
        assert started.exit_code == 0, started.output
        yield started.output, ports
    finally:
        run_cli("annotate", "stop")


def test_no_server_has_a_secret_on_its_command_line_or_another_persons_secret_in_its_environment(
        served, workspace, run_cli):
    output, ports = served
    generated = {email: shown_once(output, email) for email in PEOPLE}
    mine = {  # each person's secrets: supplied in the environment or generated and shown once
        "ann1@example.com": {"token": SUPPLIED["LS_TOKEN_ANN1"], "password": SUPPLIED["LS_PASSWORD_ANN1"]},
        "ann2@example.com": {"token": generated["ann2@example.com"]["token"], "password": SUPPLIED["LS_PASSWORD_ANN2"]},
        "ann3@example.com": generated["ann3@example.com"],
    }
    own = {email: set(s.values()) for email, s in mine.items()}
    every = set().union(*own.values()) | set(STRAYS.values())
    state = json.loads((workspace.root / "label-studio" / "servers.json").read_text())
    for email in PEOPLE:
        others = every - own[email]
        for pid in process_group(state[email]["pid"]):
            cmdline, environ = proc_text(pid, "cmdline"), proc_text(pid, "environ")
            assert not [s for s in every if s in cmdline], (email, pid, "secret on the command line")
            assert email not in cmdline  # the account travels in the environment, the email with it
            assert not [s for s in others if s in environ], (email, pid, "another person's secret in the environment")
            for name in ("LS_TOKEN_ANN1", "LS_PASSWORD_ANN1", "LS_PASSWORD_ANN2", "LS_TOKEN_FORMER", "ANN2_BACKUP"):
                assert f"\n{name}=" not in "\n" + environ, (email, pid, name)
    # the account was made from the environment: each person's token is theirs (legacy tokens on), passwords log in
    for email in PEOPLE:
        me = httpx.get(f"http://127.0.0.1:{ports[email]}/api/current-user/whoami",
                       headers={"Authorization": f"Token {mine[email]['token']}"}, timeout=30)
        assert me.status_code == 200 and me.json()["email"] == email
        assert logs_in(f"http://127.0.0.1:{ports[email]}", email, mine[email]["password"])
    # nothing secret in servers.json, the server logs or anything else cftools wrote under label-studio/
    for path in (workspace.root / "label-studio").rglob("*"):
        if path.is_file() and path.suffix in (".json", ".log", ".tmp"):
            text = path.read_text(errors="replace")
            assert not [s for s in every if s in text], path
    # a secret supplied in the environment is never echoed by serve (only what it generated is shown, once)
    assert not [s for s in (*SUPPLIED.values(), *STRAYS.values()) if s in output]
    assert not [s for s in every if s in run_cli("annotate", "servers", "--json").output]


def logs_in(url: str, email: str, password: str) -> bool:
    with httpx.Client(base_url=url, follow_redirects=False, timeout=30) as s:
        s.get("/user/login/")
        r = s.post("/user/login/", data={"email": email, "password": password,
                                         "csrfmiddlewaretoken": s.cookies.get("csrftoken")},
                   headers={"Referer": url + "/user/login/"})
        return r.status_code == 302


def test_a_server_environment_drops_every_configured_and_secret_looking_variable(workspace, monkeypatch):
    config = workspace.root / "cftools.toml"
    config.write_text(config.read_text() + people_tables({email: 8100 + n for n, email in enumerate(PEOPLE)}))
    for name, value in {**SUPPLIED, **STRAYS, "OPENAI_API_KEY": "sk-not-for-label-studio", "SHLVL": "1"}.items():
        monkeypatch.setenv(name, value)
    secrets = configured_secrets(load_workspace(workspace.root))
    assert "Ann1-password-secret" not in repr(secrets)
    env = server_env(Path("/data"), None, secrets)
    assert not set(env) & {*SUPPLIED, *STRAYS, "OPENAI_API_KEY"}
    assert env["SHLVL"] == "1" and env["PATH"] == os.environ["PATH"]  # what is not secret stays
    assert server_env(Path("/data"), None, Secrets())["ANN2_BACKUP"]  # only a configured value is matched


def test_password_env_is_a_known_key_of_a_people_table(workspace, run_cli):
    config = workspace.root / "cftools.toml"
    config.write_text(config.read_text() + people_tables({email: 8100 + n for n, email in enumerate(PEOPLE)}))
    result = run_cli("status")
    assert result.exit_code == 0, result.output
    assert "password_env" not in result.stderr and "Warning" not in result.stderr, result.stderr
