"""The store on a real PostgreSQL server (started on loopback from the machine's PostgreSQL binaries): ingest, and
many generate workers on one store."""

import os
import subprocess
from pathlib import Path

import pytest

from cftools.kinds.cvqa.ingest import ingest_cvqa
from cftools.overview import store_counts
from cftools.workspace import init_workspace
from llm_stub import start_process as start_stub
from opening_at_once import open_at_once
from pg_server import find_pg_bin, fresh_database, running_postgres


@pytest.fixture(scope="module")
def postgres_url():
    pg_bin = find_pg_bin()
    if pg_bin is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no PostgreSQL server binaries: .ci/run installs Debian's postgresql")
        pytest.skip("no PostgreSQL server binaries on this machine")
    with running_postgres(pg_bin) as url:
        yield url


def test_workspace_on_postgresql_ingests_idempotently(tmp_path, postgres_url, peer_cvqa_real):
    ws = init_workspace(tmp_path / "ws", postgres_url)
    assert ws.store.engine.dialect.name == "postgresql"
    assert ingest_cvqa(ws.store, peer_cvqa_real).items_added == 300
    assert ingest_cvqa(ws.store, peer_cvqa_real).items_added == 0
    assert store_counts(ws.store)["by_group"] == {"boolean": 100, "numerical-direct": 100, "numerical-indirect": 100}
    assert not (tmp_path / "ws" / "cftools.db").exists()
    ws.close()


# ---------------------------------------------------------------- many workers, one store


def worker_command(ws_root: Path, limit: int | None = None) -> list[str]:
    import sys

    return [sys.executable, "-m", "cftools.cli", "--workspace", str(ws_root), "generate", "rewrite", "--group",
            "numerical-direct", "--backend", "openai", "--model", "stub", "--concurrency", "4", "--quiet"]


def workers_workspace(tmp_path: Path, postgres_url: str, name: str, stub_url: str, n: int):
    from cftools.ingest.readers import ingest_table

    ws = init_workspace(tmp_path / name, fresh_database(postgres_url, name))
    table = tmp_path / f"{name}.csv"
    table.write_text("image,question,answer\n" + "".join(f"im{i}.png,How many cups are on table {i}?,{i % 7}\n"
                                                          for i in range(n)))
    ingest_table(ws.store, table)
    config = ws.root / "cftools.toml"
    config.write_text(config.read_text().replace("[llm]\n", f'[llm]\nbase_url = "{stub_url}"\n', 1))
    return ws


def generation_counts(ws) -> tuple[int, int, int]:
    from sqlalchemy import func, select

    from cftools.models import Generation, Item

    with ws.store.session() as session:
        items = session.execute(select(func.count()).select_from(Item).where(Item.origin == "generated")).scalar_one()
        gens = session.execute(select(func.count()).select_from(Generation)
                               .where(Generation.generator == "rewrite")).scalar_one()  # not the re-derivations
        distinct = session.execute(select(func.count(func.distinct(Item.source_id))).where(
            Item.origin == "generated")).scalar_one()
    return items, gens, distinct


def test_four_workers_on_one_store_generate_every_item_once(tmp_path, postgres_url, monkeypatch):
    stub, url = start_stub(0.05)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-workers")
    try:
        ws = workers_workspace(tmp_path, postgres_url, "workers4", url, 60)
        workers = [subprocess.Popen(worker_command(ws.root), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                   for _ in range(4)]
        for worker in workers:
            assert worker.wait(timeout=300) == 0, worker.stderr.read()
        assert generation_counts(ws) == (60, 60, 60)  # every item once, and no model call made twice
        ws.close()
    finally:
        stub.kill()


def test_a_killed_workers_items_are_finished_by_the_others(tmp_path, postgres_url, monkeypatch):
    import signal

    from fixtures_llm import ScriptedLLM
    from killed_runs import wait_for

    stub, url = start_stub(0.0)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-workers")
    try:
        ws = workers_workspace(tmp_path, postgres_url, "workerskill", url, 40)
        control = ScriptedLLM(url.removesuffix("/v1"))
        control.hold(after=4)  # 4 calls answered; every later one is held until the victim is dead
        victim = subprocess.Popen(worker_command(ws.root), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: generation_counts(ws)[0] == 4 and control.held() == 4, "4 items and the victim's 4 calls held")
        others = [subprocess.Popen(worker_command(ws.root), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                  for _ in range(2)]
        wait_for(lambda: control.held() == 4 + 2 * 4, "the other workers' calls held too")
        victim.send_signal(signal.SIGKILL)  # with 4 claims in flight, the others at work beside it
        victim.wait()
        control.release()
        for worker in others:
            assert worker.wait(timeout=300) == 0, worker.stderr.read()
        items, gens, distinct = generation_counts(ws)
        assert items == distinct == 40
        assert gens == 40  # the victim's 4 held calls stored nothing: asked again by the others, stored once
        ws.close()
    finally:
        stub.kill()


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


def test_init_again_names_the_variable_the_workspace_reads_and_never_changes_it(postgres_url, tmp_path, run_cli):
    url = postgres_url.replace("cftools@", "cftools:s3cret@")
    assert run_cli("init", tmp_path / "ws", "--db", url, "--password-env", "CFTOOLS_TEST_PG").exit_code == 0
    config = (tmp_path / "ws" / "cftools.toml").read_text(encoding="utf-8")

    again = run_cli("init", tmp_path / "ws", "--db", url)  # later runs read $CFTOOLS_TEST_PG, not $PGPASSWORD
    assert again.exit_code == 0, again.output
    assert "$CFTOOLS_TEST_PG" in again.output and "PGPASSWORD" not in again.output

    other = run_cli("init", tmp_path / "ws", "--db", url, "--password-env", "OTHER_PG")
    assert other.exit_code == 1
    assert "already reads the store's password from $CFTOOLS_TEST_PG" in other.output
    assert (tmp_path / "ws" / "cftools.toml").read_text(encoding="utf-8") == config


def test_a_batch_run_on_postgresql_collects_its_batch_after_a_kill(tmp_path, postgres_url):
    """`--batch-api` on a PostgreSQL store: killed between submit and collect, the rerun submits nothing again."""
    import signal
    import sys
    import time

    import httpx
    from sqlalchemy import func, select

    from cftools.models import Item, LLMBatch
    from loopback import running_server

    with running_server("batch_stub.py", "--port", "0") as url:
        root = url.removesuffix("/v1")
        ws = workers_workspace(tmp_path, postgres_url, "batch", root + "/v1", 20)
        config = ws.root / "cftools.toml"
        config.write_text(config.read_text().replace("[llm]\n", "[llm]\nbatch_poll_s = 0.05\n", 1))
        httpx.post(root + "/control/batches", json={"hold": True}, timeout=10).raise_for_status()
        command = worker_command(ws.root) + ["--batch-api", "--no-rederive"]  # one batch: the rewrites
        run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 120
        while time.time() < deadline and run.poll() is None:
            with ws.store.session() as session:
                if session.execute(select(LLMBatch.batch_id).where(LLMBatch.batch_id.is_not(None))).first():
                    break
            time.sleep(0.05)
        run.send_signal(signal.SIGKILL)
        run.wait()
        httpx.post(root + "/control/batches", json={"hold": False}, timeout=10).raise_for_status()
        rerun = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert rerun.returncode == 0, rerun.stderr
        state = httpx.get(root + "/control/batches", timeout=10).json()
        assert len(state["batches"]) == 1 and state["lines"] == 20
        assert generation_counts(ws) == (20, 20, 20)
        with ws.store.session() as session:
            assert session.execute(select(func.count()).select_from(LLMBatch).where(
                LLMBatch.state != "collected")).scalar_one() == 0
            assert session.execute(select(func.count(func.distinct(Item.key)))).scalar_one() == 20
        ws.close()


def test_a_key_finished_as_another_worker_starts_choosing_is_not_reopened_on_postgresql(tmp_path, postgres_url):
    from claim_trials import finish_while_another_chooses

    ws = init_workspace(tmp_path / "ws", fresh_database(postgres_url, "finish_race"))
    try:
        assert finish_while_another_chooses(ws.store) == []
    finally:
        ws.close()


def test_workers_opening_a_new_store_at_once_all_find_it_made(postgres_url):
    """One upgrade at a time (an advisory lock): three of four failed on the alembic_version table another made."""
    from cftools.store import head_revision, make_engine

    url = fresh_database(postgres_url, "opened_at_once")
    engine = make_engine(url)
    head = head_revision(engine)
    engine.dispose()
    assert open_at_once(url) == [f"opened {head}"] * 4
