"""Workers racing for one store's claims: N `generate rewrite` processes on one SQLite store at once, and what
they made (tests/test_claims.py runs it once; bench/soak_faults.py `two-workers` runs it many times)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select

SOURCES = 48


@dataclass
class WorkersOutcome:
    items: int  # generated items
    calls: int  # rewrite model calls
    rederived: int  # re-derive model calls (each draft's once, between the workers)
    open_claims: int  # claims neither done nor failed

    @property
    def each_once(self) -> bool:
        return self.items == self.calls == self.rederived == SOURCES and self.open_claims == 0

    def describe(self) -> str:
        return (f"{self.items} items, {self.calls} rewrite calls, {self.rederived} re-derive calls, "
                f"{self.open_claims} open claims")


def rewrite_workers(scratch: Path, workers: int = 2, delay: float = 0.05) -> WorkersOutcome:
    """WORKERS rewrite processes started together on one fresh store of SOURCES sources; each must exit 0."""
    from cftools.generate.claims import DONE
    from cftools.ingest.readers import ingest_table
    from cftools.models import Generation, Item, WorkClaim
    from cftools.workspace import init_workspace
    from fault_trials import cli_env
    from llm_stub import start_process

    stub, url = start_process(delay)
    try:
        ws = init_workspace(scratch / "ws")
        table = scratch / "t.csv"
        table.write_text("image,question,answer\n" + "".join(f"im{i}.png,How many cups are on table {i}?,{i % 7}\n"
                                                              for i in range(SOURCES)))
        ingest_table(ws.store, table)
        config = ws.root / "cftools.toml"
        config.write_text(config.read_text().replace("[llm]\n", f'[llm]\nbase_url = "{url}"\n', 1))
        command = [sys.executable, "-m", "cftools.cli", "--workspace", str(ws.root), "generate", "rewrite",
                   "--group", "numerical-direct", "--backend", "openai", "--model", "stub", "--concurrency", "4",
                   "--quiet"]
        env = {**cli_env(), "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", "sk-test-claims")}
        running = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
                   for _ in range(workers)]
        for worker in running:
            code = worker.wait(timeout=300)
            assert code == 0, worker.stderr.read()
        with ws.store.session() as session:
            def count(table, *where) -> int:  # noqa: ANN001
                return session.execute(select(func.count()).select_from(table).where(*where)).scalar_one()

            outcome = WorkersOutcome(items=count(Item, Item.origin == "generated"),
                                     calls=count(Generation, Generation.generator == "rewrite"),
                                     rederived=count(Generation, Generation.generator == "rederive"),
                                     open_claims=count(WorkClaim, WorkClaim.state != DONE))
        ws.close()
        return outcome
    finally:
        stub.kill()
        stub.wait()


def finish_while_another_chooses(store) -> list[str]:  # noqa: ANN001
    """Worker A finishes key `k` in a transaction that stays open while worker B starts choosing its jobs (B's
    selection: is `k` not done yet?) and registers what it chose; returns what B then claims (nothing, when a
    start waits for finishes stamped before it)."""
    from cftools.generate.claims import DONE, Claims, selection_start
    from cftools.models import WorkClaim

    a = Claims(store, "g", ["k"])
    a.worker = "host0:1:a"  # as on another host: B must not take A for a dead worker of its own process
    assert a.claim(1) == ["k"]
    seen: dict = {}
    chosen = threading.Event()

    def second_worker_chooses() -> None:
        seen["at"] = selection_start(store)
        with store.session() as session:
            seen["listed"] = session.execute(select(WorkClaim.state).where(WorkClaim.key == "k")).scalar_one() != DONE
        chosen.set()

    chooser = threading.Thread(target=second_worker_chooses)
    try:
        with store.write() as session:
            a.finish(session, ["k"], ok=True)
            chooser.start()
            chosen.wait(timeout=2)  # a start that does not wait has chosen by now; one that waits, waits for this
        chooser.join(timeout=120)
        assert chosen.is_set()
        b = Claims(store, "g", ["k"] if seen["listed"] else [], selected_at=seen["at"])
        try:
            return b.claim(1)
        finally:
            b.close()
    finally:
        a.close()
