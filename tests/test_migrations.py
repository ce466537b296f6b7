from sqlalchemy import text

from cftools.store import Store, current_revision, head_revision, make_engine, upgrade
from cftools.workspace import init_workspace, load_workspace
from opening_at_once import open_at_once


def test_workspace_made_with_first_schema_opens_and_is_upgraded(tmp_path):
    ws = init_workspace(tmp_path / "ws")
    url = ws.db_url
    ws.close()
    # Recreate the database as the first schema version wrote it, with data in it.
    (tmp_path / "ws" / "cftools.db").unlink()
    engine = make_engine(url)
    upgrade(engine, "0001")
    assert current_revision(engine) == "0001"
    with engine.begin() as conn:
        assert "ingest_runs" not in {r[0] for r in conn.execute(text("select name from sqlite_master"))}
        conn.execute(text("insert into source_questions (dataset, external_id, image_ref, question, created_at)"
                          " values ('old', '1', 'a.jpg', 'How many cats?', '2025-01-01 00:00:00')"))
    engine.dispose()

    reopened = load_workspace(tmp_path / "ws")
    assert reopened.store.schema_version == head_revision(reopened.store.engine)
    with reopened.store.session() as s:
        assert s.execute(text("select question from source_questions")).scalar_one() == "How many cats?"
        assert s.execute(text("select count(*) from ingest_runs")).scalar_one() == 0
    reopened.close()


def test_open_is_read_only_when_schema_is_current(tmp_path):
    ws = init_workspace(tmp_path / "ws")
    store = Store(ws.db_url)
    assert store.schema_version == head_revision(store.engine)
    store.dispose()
    ws.close()


def test_workers_opening_an_old_store_at_once_all_find_it_upgraded(tmp_path):
    """Each upgrade holds the write lock from its start: the others wait and find the schema current (they failed
    with 'database is locked' when their deferred transactions collided)."""
    url = f"sqlite:///{tmp_path / 'cftools.db'}"
    engine = make_engine(url)
    upgrade(engine, "0001")
    head = head_revision(engine)
    engine.dispose()
    assert open_at_once(url, processes=6) == [f"opened {head}"] * 6


def test_a_store_a_newer_cftools_migrated_is_one_line_saying_so(tmp_path, run_cli):
    ws = init_workspace(tmp_path / "ws")
    with ws.store.engine.begin() as conn:
        conn.execute(text("update alembic_version set version_num = '9999'"))
    ws.close()
    result = run_cli("-w", tmp_path / "ws", "status")
    assert result.exit_code == 1
    assert "has schema 9999, which this cftools does not know" in result.output
    assert "upgrade cftools" in result.output
