"""A real PostgreSQL server on loopback, started from the machine's PostgreSQL binaries (tests and benchmarks)."""

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator, Optional


def find_pg_bin() -> Optional[Path]:
    found = shutil.which("initdb") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)), None)
    return Path(found).parent if found else None


def as_server_user(cmd: list[str]) -> list[str]:
    # initdb refuses to run as root; the distribution's postgres user runs it instead.
    return ["runuser", "-u", "postgres", "--"] + cmd if os.geteuid() == 0 else cmd


@contextlib.contextmanager
def running_postgres(pg_bin: Path) -> Iterator[str]:
    """A fresh cluster on a free port; yields its SQLAlchemy URL and removes everything afterwards."""
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
                                   "-o", f"-p {port} -k {folder} -h 127.0.0.1 -c max_connections=200", "start"]),
                   check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://cftools@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(as_server_user([str(pg_bin / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"]),
                       capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def fresh_database(postgres_url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(postgres_url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return postgres_url.rsplit("/", 1)[0] + f"/{name}"
