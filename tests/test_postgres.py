"""The store on a real PostgreSQL server (started on loopback from the machine's PostgreSQL binaries)."""

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from cftools.ingest import ingest_cvqa
from cftools.overview import store_counts
from cftools.workspace import init_workspace


def find_pg_bin() -> Path | None:
    found = shutil.which("initdb") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)), None)
    return Path(found).parent if found else None


def as_server_user(cmd: list[str]) -> list[str]:
    # initdb refuses to run as root; the distribution's postgres user runs it instead.
    return ["runuser", "-u", "postgres", "--"] + cmd if os.geteuid() == 0 else cmd


@pytest.fixture(scope="module")
def postgres_url():
    pg_bin = find_pg_bin()
    if pg_bin is None:
        pytest.skip("no PostgreSQL server binaries on this machine")
    folder = Path(tempfile.mkdtemp(prefix="cftools-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = folder / "data"
    subprocess.run(as_server_user([str(pg_bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "cftools"]),
                   check=True, capture_output=True)
    subprocess.run(as_server_user([str(pg_bin / "pg_ctl"), "-D", str(data), "-w", "-l", str(folder / "log"),
                                   "-o", f"-p {port} -k {folder} -h 127.0.0.1", "start"]),
                   check=True, capture_output=True)
    yield f"postgresql+psycopg://cftools@127.0.0.1:{port}/postgres"
    subprocess.run(as_server_user([str(pg_bin / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"]),
                   capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


def test_workspace_on_postgresql_ingests_idempotently(tmp_path, postgres_url, peer_cvqa_real):
    ws = init_workspace(tmp_path / "ws", postgres_url)
    assert ws.store.engine.dialect.name == "postgresql"
    assert ingest_cvqa(ws.store, peer_cvqa_real).items_added == 300
    assert ingest_cvqa(ws.store, peer_cvqa_real).items_added == 0
    assert store_counts(ws.store)["by_group"] == {"boolean": 100, "numerical-direct": 100, "numerical-indirect": 100}
    assert not (tmp_path / "ws" / "cftools.db").exists()
    ws.close()


def test_init_never_writes_the_store_password(postgres_url, tmp_path, run_cli, monkeypatch):
    secret = "s3cret-Pw-7f1c"
    url = postgres_url.replace("cftools@", f"cftools:{secret}@")
    result = run_cli("init", tmp_path / "ws", "--db", url, "--password-env", "CFTOOLS_TEST_PG")
    assert result.exit_code == 0, result.output
    assert secret not in result.output and "CFTOOLS_TEST_PG" in result.output
    for path in (tmp_path / "ws").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    from cftools.workspace import load_workspace

    monkeypatch.setenv("CFTOOLS_TEST_PG", secret)
    workspace = load_workspace(tmp_path / "ws")
    assert workspace.config["store"]["password_env"] == "CFTOOLS_TEST_PG"
    assert workspace.config["store"]["url"] == postgres_url
    assert f":{secret}@" in workspace.db_url and secret not in workspace.store.safe_url
    workspace.close()
