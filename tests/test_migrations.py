from sqlalchemy import text

from cftools.store import Store, current_revision, head_revision, make_engine, upgrade
from cftools.workspace import init_workspace, load_workspace


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
