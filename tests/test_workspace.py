import os
import sqlite3

import pytest

from cftools.errors import WorkspaceError
from cftools.workspace import find_workspace, init_workspace, load_workspace


def test_init_creates_config_and_sqlite_store_in_wal_mode(tmp_path, run_cli):
    result = run_cli("init", tmp_path / "ws")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ws" / "cftools.toml").exists()
    db = tmp_path / "ws" / "cftools.db"
    assert db.exists()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
    assert {"items", "source_questions", "images", "generations", "check_flags", "judgments",
            "annotation_tasks", "releases", "eval_runs", "predictions", "alembic_version"} <= tables


def test_foreign_keys_are_enforced(tmp_path):
    ws = init_workspace(tmp_path / "ws")
    from sqlalchemy.exc import IntegrityError

    from cftools.models import CheckFlag
    with pytest.raises(IntegrityError):
        with ws.store.write() as session:
            session.add(CheckFlag(item_id=12345, code="arithmetic", reason="no such item"))
    ws.close()


def test_init_with_db_url_uses_that_store(tmp_path):
    url = f"sqlite:///{tmp_path / 'elsewhere' / 'team.db'}"
    ws = init_workspace(tmp_path / "ws", url)
    assert ws.db_url == url
    assert (tmp_path / "elsewhere" / "team.db").exists()
    assert not (tmp_path / "ws" / "cftools.db").exists()
    ws.close()


def test_workspace_found_from_option_then_env_then_cwd(tmp_path, monkeypatch):
    a = init_workspace(tmp_path / "a")
    b = init_workspace(tmp_path / "b")
    monkeypatch.chdir(a.root)
    monkeypatch.delenv("CFTOOLS_WORKSPACE", raising=False)
    assert find_workspace().root == a.root
    monkeypatch.setenv("CFTOOLS_WORKSPACE", str(b.root))
    assert find_workspace().root == b.root
    assert find_workspace(a.root).root == a.root


def test_no_workspace_is_a_clear_error(tmp_path, monkeypatch, run_cli):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CFTOOLS_WORKSPACE", raising=False)
    with pytest.raises(WorkspaceError):
        find_workspace()
    result = run_cli("status")
    assert result.exit_code != 0
    assert "no cftools workspace" in result.output
    assert "cftools init" in result.output


def test_broken_config_names_the_file(tmp_path):
    (tmp_path / "cftools.toml").write_text("[store\nurl=")
    with pytest.raises(WorkspaceError, match="cftools.toml"):
        load_workspace(tmp_path)


def test_relative_sqlite_url_is_relative_to_the_workspace(tmp_path, monkeypatch):
    ws = init_workspace(tmp_path / "ws")
    monkeypatch.chdir(tmp_path)
    assert ws.db_url == f"sqlite:///{(tmp_path / 'ws' / 'cftools.db').resolve()}"
    assert os.path.exists(ws.db_url.removeprefix("sqlite:///"))
    ws.close()
