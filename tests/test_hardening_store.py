"""Issue 24, the store: damaged pages reported in one line by every command and named by doctor, a gone or empty
store refused, a malformed URL or a missing driver in one line, and a password in the URL's query string neither
printed nor written."""

from __future__ import annotations

import json
import random
import sqlite3
import tomllib

import pytest

from cftools.models import DRAFT, Item, utcnow
from cftools.workspace import init_workspace, without_password

# what a one-line error looks like: no traceback, no second line
TRACEBACK = "Traceback"


def one_line(result) -> str:  # noqa: ANN001
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code != 0 and len(lines) == 1 and TRACEBACK not in result.output, result.output
    return lines[0]


def fill_store(workspace, n: int = 3000) -> None:
    now = utcnow()
    with workspace.store.write() as session:
        session.add_all([Item(key=f"k{i}", kind="cvqa", group="boolean", question=f"Is there a cat {i}? " * 8,
                              answer="yes", status=DRAFT, created_at=now, updated_at=now) for i in range(n)])
    workspace.close()


def overwrite_pages(path, pages: list[int]) -> None:
    with sqlite3.connect(path) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        assert conn.execute("PRAGMA page_count").fetchone()[0] > max(pages)
    conn.close()
    noise = random.Random(7)
    with open(path, "r+b") as fh:
        for page in pages:
            fh.seek(page * page_size)
            fh.write(bytes(noise.randrange(256) for _ in range(page_size)))


@pytest.mark.parametrize("command", [("status",), ("check", "--no-embeddings"), ("show", "1"),
                                     ("export", "r", "--version", "1", "--include-unverified")])
def test_every_command_reports_damaged_pages_in_one_line(workspace, run_cli, command):
    fill_store(workspace)
    db = workspace.root / "cftools.db"
    overwrite_pages(db, [20, 21])
    line = one_line(run_cli(*command))
    assert f"the store {db} is damaged" in line and "integrity check" in line


def test_doctor_names_the_damage(workspace, run_cli):
    fill_store(workspace)
    db = workspace.root / "cftools.db"
    overwrite_pages(db, [20, 21])
    out = run_cli("doctor", "--json", "--offline")
    report = json.loads(out.output)
    assert out.exit_code == 1 and [p["code"] for p in report["problems"]] == ["store_integrity"]
    assert report["problems"][0]["path"] == str(db) and report["problems"][0]["damage"]
    human = run_cli("doctor", "--offline")
    assert human.exit_code == 1 and "store_integrity" in human.output and str(db) in human.output


@pytest.mark.parametrize("damage", ["deleted", "zero-length"])
def test_an_existing_workspace_whose_store_is_gone_is_an_error(workspace, run_cli, damage):
    fill_store(workspace, 3)
    db = workspace.root / "cftools.db"
    if damage == "deleted":
        db.unlink()
    else:
        db.write_bytes(b"")
    for command in (("status",), ("doctor", "--offline")):
        line = one_line(run_cli(*command))
        assert str(db) in line and ("is gone" in line or "is empty" in line), line
    assert not db.exists() or db.stat().st_size == 0  # nothing recreated it
    # init on the folder is how an empty store is started on purpose
    if damage == "zero-length":
        db.unlink()
    assert run_cli("init", workspace.root).exit_code == 0 and run_cli("status").exit_code == 0


@pytest.mark.parametrize("url", ["postgresql://user@host:notaport/db", "not a url", "://nothing"])
def test_init_with_a_malformed_url_is_one_line(tmp_path, run_cli, url):
    line = one_line(run_cli("init", tmp_path / "ws", "--db", url))
    assert "not a SQLAlchemy database URL" in line
    assert not (tmp_path / "ws").exists()


@pytest.mark.parametrize("url", ["postgresql+nosuchdriver://u:sekrit99@localhost/db", "nosuchdb://u@localhost/db"])
def test_init_with_a_missing_driver_is_one_line(tmp_path, run_cli, url):
    line = one_line(run_cli("init", tmp_path / "ws", "--db", url))
    assert "no driver for it is installed" in line and "sekrit99" not in line
    assert not (tmp_path / "ws").exists()


def test_a_password_in_the_query_string_is_neither_printed_nor_written(tmp_path, run_cli):
    url, password = without_password("postgresql+psycopg://alice@db.example.org/bench?password=sekrit99&sslmode=require")
    assert password == "sekrit99" and "sekrit99" not in url and "sslmode=require" in url
    # a store that cannot be reached: the error does not show it
    out = run_cli("init", tmp_path / "ws", "--db", "postgresql+psycopg://alice@127.0.0.1:1/bench?password=sekrit99")
    assert out.exit_code == 1 and "sekrit99" not in out.output
    # a reachable store (SQLite ignores nothing here: the password is taken off before the URL is used)
    ws = init_workspace(tmp_path / "ok", f"sqlite:///{tmp_path / 'ok' / 'x.db'}?password=sekrit99")
    try:
        text = ws.config_path.read_text()
        assert "sekrit99" not in text and "x.db" in tomllib.loads(text)["store"]["url"]
        assert "sekrit99" not in ws.store.safe_url
    finally:
        ws.close()


def test_damage_met_mid_command_in_a_store_too_large_to_check_on_open_is_one_line(workspace, run_cli, monkeypatch):
    import cftools.store_health as health

    fill_store(workspace)
    db = workspace.root / "cftools.db"
    with sqlite3.connect(db) as conn:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.close()
    overwrite_pages(db, list(range(5, pages - 1)))  # whatever the command reads, it meets a damaged page
    monkeypatch.setattr(health, "QUICK_CHECK_MAX_BYTES", 0)  # as if the store were larger than the limit
    line = one_line(run_cli("check", "--no-embeddings"))
    assert "is damaged" in line and "database disk image is malformed" in line and "cftools doctor" in line
