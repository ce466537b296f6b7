"""Work claims (cftools.generate.claims) on an SQLite store: two workers never hold one key, leases of dead or
lapsed workers are taken over, and a worker's claims look at a window of its keys, not all of them."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from sqlalchemy import select, update

from cftools.generate import claims as claims_module
from cftools.generate.claims import DONE, FREE, LEASED, Claims
from cftools.models import WorkClaim

KEYS = [f"k{i:03d}" for i in range(200)]


@pytest.fixture
def two_workers(workspace):
    """Two workers of one generator over the same keys (as two processes that chose the same jobs)."""
    made = [Claims(workspace.store, "g", KEYS, lease_s=60), Claims(workspace.store, "g", KEYS, lease_s=60)]
    # one process, two workers: named as on other hosts, or the newer would take the older for a dead run of its own
    for n, worker in enumerate(made):
        worker.worker = f"host{n}:1:w{n}"
    yield made
    for c in made:
        c.close()


def finish(claims: Claims, keys: list[str]) -> None:
    with claims.store.write() as session:
        claims.finish(session, keys, ok=True)


def states(store) -> dict[str, str]:
    with store.session() as session:
        return dict(session.execute(select(WorkClaim.key, WorkClaim.state)).all())


def test_two_workers_never_hold_the_same_key_and_share_them_all(two_workers):
    a, b = two_workers
    held: dict[str, list[str]] = {a.worker: [], b.worker: []}
    for _ in range(40):
        for worker in (a, b):
            keys = worker.claim(7)
            held[worker.worker] += keys
            finish(worker, keys)
    mine, theirs = held[a.worker], held[b.worker]
    assert not set(mine) & set(theirs)
    assert sorted(mine + theirs) == KEYS
    assert len(mine) == len(set(mine)) and abs(len(mine) - len(theirs)) <= 7
    assert set(states(a.store).values()) == {DONE}


def test_a_claim_looks_at_a_window_of_the_keys_not_all_of_them(workspace, monkeypatch):
    seen_sizes: list[int] = []
    lease = Claims._lease

    def spy(self, session, keys, limit, now):  # noqa: ANN001, ANN202
        seen_sizes.append(len(keys))
        return lease(self, session, keys, limit, now)

    monkeypatch.setattr(Claims, "_lease", spy)
    many = [f"key{i}" for i in range(5000)]
    claims = Claims(workspace.store, "g", many)
    try:
        assert claims.claim(8) == many[:8]
        assert max(seen_sizes) == claims_module.CLAIM_WINDOW
    finally:
        claims.close()


def test_keys_another_worker_holds_are_skipped_then_taken_over_when_its_lease_lapses(two_workers, monkeypatch):
    a, b = two_workers
    monkeypatch.setattr(claims_module, "RESCAN_S", 0.0)
    taken_by_a = a.claim(150)
    assert len(taken_by_a) == 150
    rest = b.claim(200)
    assert sorted(rest) == sorted(set(KEYS) - set(taken_by_a))
    finish(b, rest)
    assert b.claim(10) == []  # the other worker's leases are live
    with a.store.write() as session:  # its lease lapses (a worker on another host that stopped renewing)
        session.execute(update(WorkClaim).where(WorkClaim.worker == a.worker)
                        .values(worker="otherhost:1:gone", lease_expires=claims_module.utcnow()))
    assert sorted(b.claim(200)) == sorted(taken_by_a)


def test_a_dead_local_workers_keys_are_free_at_once(workspace, monkeypatch):
    monkeypatch.setattr(claims_module, "RESCAN_S", 0.0)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with workspace.store.write() as session:
        session.add(WorkClaim(generator="g", key="k000", state=LEASED, worker=f"{socket.gethostname()}:{gone.pid}:x",
                              lease_expires=claims_module.utcnow() + claims_module.timedelta(hours=1)))
    claims = Claims(workspace.store, "g", KEYS[:3])
    try:
        assert sorted(claims.claim(3)) == KEYS[:3]
        assert states(workspace.store)["k000"] == LEASED
    finally:
        claims.close()


def test_batches_end_when_every_key_is_finished_and_wait_while_others_hold_some(two_workers, monkeypatch):
    a, b = two_workers
    monkeypatch.setattr(claims_module, "RESCAN_S", 0.0)
    held = b.claim(5)
    batches = a.batches(50)
    got: list[str] = []
    for batch in batches:
        if batch is None:  # only B's five keys are open
            assert sorted(got) == sorted(set(KEYS) - set(held))
            finish(b, held)
            continue
        got += batch
        finish(a, batch)
    assert sorted(got + held) == KEYS
    assert FREE not in states(a.store).values()


def test_a_key_finished_as_another_worker_starts_choosing_is_not_reopened(workspace):
    """A finish stamped before a worker's start but committed after its selection read (issue 45: one model call
    made twice): the start waits for that commit, so the selection sees the key done."""
    from claim_trials import finish_while_another_chooses

    assert finish_while_another_chooses(workspace.store) == []
    assert states(workspace.store)["k"] == DONE


def test_two_worker_processes_on_one_sqlite_store_make_every_item_once(tmp_path, monkeypatch):
    from claim_trials import SOURCES, rewrite_workers

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-claims")
    outcome = rewrite_workers(tmp_path)
    # every item once, no model call made twice; each draft's answer re-derived once, between them
    assert (outcome.items, outcome.calls, outcome.rederived) == (SOURCES, SOURCES, SOURCES), outcome.describe()
    assert outcome.open_claims == 0


def test_two_image_workers_draw_each_pair_and_style_once(tmp_path):
    from fault_trials import _images_setup, cli, cli_env, fresh_workspace, stop_helpers, store_path
    import sqlite3

    ws = fresh_workspace(tmp_path)
    helpers = _images_setup(ws, tmp_path)  # two pairs with contextual descriptions
    try:
        command = cli(ws, "generate", "images", "--per-prompt", "2", "--styles", "photograph,comic")
        workers = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cli_env())
                   for _ in range(2)]
        for worker in workers:
            assert worker.wait(timeout=600) == 0, worker.stderr.read()
    finally:
        stop_helpers(helpers)
    db = sqlite3.connect(store_path(ws))
    try:
        drawn = db.execute("select item_id, json_extract(detail, '$.style'), count(*) from item_events "
                           "where stage = 'generate images' group by 1, 2").fetchall()
        claims = db.execute("select state, count(*) from work_claims where generator = 'mucr-images' "
                            "group by state").fetchall()
    finally:
        db.close()
    assert len(drawn) == 4 and all(n == 1 for _, _, n in drawn), drawn  # 2 pairs x 2 styles, each drawn once
    assert claims == [(DONE, 4)]
