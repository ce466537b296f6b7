"""Work claims: many `cftools generate` processes on one store, and no job done twice.

Each worker lists the jobs it would do (what its selection finds missing), registers their keys, and runs only the
jobs it has claimed: a claim is a lease (`lease_s`) taken in one write transaction — `SELECT … FOR UPDATE SKIP
LOCKED` on PostgreSQL, `BEGIN IMMEDIATE` on SQLite — so two workers never hold the same key. A finished job is
`done` (or `failed`) in the same transaction that stores its output; a worker that dies leaves leases that lapse,
and the other workers take those jobs over (at once when the dead worker ran on the same host: its process is
gone). A live worker renews its leases from a heartbeat thread. A worker ends when each of its keys is done or
failed.

A key finished before a worker started choosing its jobs is open again when that worker registers it (its output
is gone, or the selection would not have listed it). "Before" must mean committed before: the worker takes its
start with `selection_start`, which waits for every finishing transaction that stamped an earlier time to commit
(on SQLite by taking the write lock, which a finishing transaction holds from its first statement; on PostgreSQL
by an advisory lock that each finish holds shared), so its selection, read afterwards, sees their output.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Iterator, Optional, Sequence

from sqlalchemy import and_, func, or_, select, text, update
from sqlmodel import Session

from cftools.models import WorkClaim, utcnow
from cftools.processes import is_running
from cftools.store import Store, in_chunks

if TYPE_CHECKING:
    from cftools.distributed import InFlight

DEFAULT_LEASE_S = 60.0  # renewed by a heartbeat every third of it while the worker lives
CLAIM_WINDOW = 64  # keys looked at per claim, at least
RESCAN_S = 0.5  # once every key has been seen, how often the whole list is looked at again
FREE, LEASED, DONE, FAILED = "free", "leased", "done", "failed"
FINISH_LOCK = 0x6366_776F_726B  # PostgreSQL advisory lock: finishes hold it shared, a selection's start exclusive


def selection_start(store: Store) -> datetime:
    """The time a worker starts choosing its jobs, taken once every finish stamped before it has committed."""
    with store.write() as session:
        hold_finish_lock(session, exclusive=True)
        return utcnow()


def hold_finish_lock(session: Session, exclusive: bool) -> None:
    """Begin SESSION's transaction (on SQLite a write one: the store's lock) and, on PostgreSQL, take FINISH_LOCK
    until it ends."""
    if session.connection().dialect.name == "postgresql":
        function = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        session.execute(text(f"SELECT {function}(:key)"), {"key": FINISH_LOCK})


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def is_dead_local_worker(worker: Optional[str]) -> bool:
    """A worker of this host whose process is gone (its leases are void now, not when they lapse)."""
    host, _, rest = (worker or "").partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if not is_running(int(pid)):
        return True
    return int(pid) == os.getpid() and worker != CURRENT.get(int(pid))


CURRENT: dict[int, str] = {}  # this process's live worker ids (one per run)


class Claims:
    """One worker's claims on the keys of one generator."""

    def __init__(self, store: Store, generator: str, keys: Sequence[str], lease_s: float = DEFAULT_LEASE_S,
                 selected_at: Optional[datetime] = None) -> None:
        self.store, self.generator, self.lease_s = store, generator, float(lease_s)
        self.keys = list(dict.fromkeys(keys))
        self.unseen = list(self.keys)  # not yet seen taken by anyone: the next claims look here first
        self._next_rescan = 0.0
        self.worker = worker_id()
        CURRENT[os.getpid()] = self.worker
        # a key finished after the worker chose its jobs was finished by another worker: it stays done
        self.started = selected_at or selection_start(store)
        self.register()
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(target=self._renew, daemon=True, name="cftools-claims")
        self._heartbeat.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            with self.store.write() as session:
                session.execute(update(WorkClaim).where(WorkClaim.worker == self.worker, WorkClaim.state == LEASED)
                                .values(lease_expires=utcnow() + timedelta(seconds=self.lease_s)))

    def close(self) -> None:
        """Stop renewing, and hand back the keys still leased (a run that stopped early: an error, Ctrl-C), so
        other workers need not wait for the leases to lapse."""
        self._stop.set()
        self._heartbeat.join(timeout=5)
        try:
            with self.store.write() as session:
                session.execute(update(WorkClaim).where(WorkClaim.worker == self.worker, WorkClaim.state == LEASED)
                                .values(state=FREE, worker=None, lease_expires=None))
        except Exception:  # noqa: BLE001 (best effort: the store may be what failed; the leases lapse anyway)
            pass

    def register(self) -> None:
        """Add a row per key; a key finished before this run started is open again (its output is gone, or the
        selection would not have listed it)."""
        with self.store.write() as session:
            for part in in_chunks(self.keys):
                self.store.insert_ignore(session, WorkClaim.__table__,
                                         [{"generator": self.generator, "key": k, "state": FREE} for k in part])
                session.execute(update(WorkClaim).where(
                    WorkClaim.generator == self.generator, WorkClaim.key.in_(part),
                    WorkClaim.state.in_([DONE, FAILED]), WorkClaim.finished_at < self.started)
                    .values(state=FREE, worker=None, lease_expires=None))

    def _claimable(self, now: datetime):  # noqa: ANN202
        return or_(WorkClaim.state == FREE, and_(WorkClaim.state == LEASED, WorkClaim.lease_expires < now))

    def release_dead_workers(self, session: Session, now: datetime) -> None:
        holders = session.execute(select(WorkClaim.worker).where(
            WorkClaim.generator == self.generator, WorkClaim.state == LEASED, WorkClaim.lease_expires >= now,
            WorkClaim.worker != self.worker).distinct()).scalars().all()
        dead = [w for w in holders if is_dead_local_worker(w)]
        if dead:
            session.execute(update(WorkClaim).where(WorkClaim.generator == self.generator, WorkClaim.state == LEASED,
                                                    WorkClaim.worker.in_(dead))
                            .values(state=FREE, worker=None, lease_expires=None))

    def claim(self, limit: int) -> list[str]:
        """Up to LIMIT of this worker's keys that nobody holds, now leased to it.

        Keys are looked at a window at a time (`unseen`: neither taken by this worker nor seen held or finished
        by another), so a claim costs the same whether the run has a hundred keys or a million; once every key
        has been seen, the whole list is looked at again (at most every `RESCAN_S`) for leases of dead workers
        and keys that came free."""
        now = utcnow()
        taken: list[str] = []
        with self.store.write() as session:
            self.release_dead_workers(session, now)
            while len(taken) < limit and self.unseen:
                window = self.unseen[:max(CLAIM_WINDOW, 4 * limit)]
                got = self._lease(session, window, limit - len(taken), now)
                taken += got
                # held (by this worker now, or another) or finished: not looked at again until the rescan
                elsewhere = set(session.execute(select(WorkClaim.key).where(
                    WorkClaim.generator == self.generator, WorkClaim.key.in_(window),
                    ~self._claimable(now))).scalars())
                self.unseen = [k for k in window if k not in elsewhere] + self.unseen[len(window):]
                if not got and not elsewhere:
                    break  # the window's free keys are being leased by another worker at this moment
            if len(taken) < limit and not self.unseen and time.monotonic() >= self._next_rescan:
                self._next_rescan = time.monotonic() + RESCAN_S
                for part in in_chunks(self.keys):
                    if len(taken) >= limit:
                        break
                    taken += self._lease(session, part, limit - len(taken), now)
        return taken

    def _lease(self, session: Session, keys: Sequence[str], limit: int, now: datetime) -> list[str]:
        """Lease up to LIMIT claimable rows among KEYS (rows another transaction is leasing right now are
        skipped, not waited for)."""
        rows = session.execute(
            select(WorkClaim.id, WorkClaim.key)
            .where(WorkClaim.generator == self.generator, WorkClaim.key.in_(keys), self._claimable(now))
            .order_by(WorkClaim.id).limit(limit)
            .with_for_update(skip_locked=True)).all()
        if rows:
            session.execute(update(WorkClaim).where(WorkClaim.id.in_([r.id for r in rows])).values(
                state=LEASED, worker=self.worker, lease_expires=now + timedelta(seconds=self.lease_s)))
        return [r.key for r in rows]

    def finish(self, session: Session, keys: Sequence[str], ok: bool) -> None:
        """Mark KEYS done (or failed) inside the transaction that stores their output."""
        if not keys:
            return
        hold_finish_lock(session, exclusive=False)  # stamped under the lock: a selection started later sees them
        finished_at = utcnow()
        for part in in_chunks(keys):
            session.execute(update(WorkClaim).where(WorkClaim.generator == self.generator, WorkClaim.key.in_(part),
                                                    WorkClaim.worker == self.worker)
                            .values(state=DONE if ok else FAILED, finished_at=finished_at, lease_expires=None))

    def open_keys(self) -> int:
        """How many of this worker's keys are neither done nor failed (held by others, or free)."""
        with self.store.session() as session:
            return sum(session.execute(select(func.count()).select_from(WorkClaim).where(
                WorkClaim.generator == self.generator, WorkClaim.key.in_(part),
                WorkClaim.state.in_([FREE, LEASED]))).scalar_one() for part in in_chunks(self.keys))

    def batches(self, size: InFlight) -> Iterator[Optional[list[str]]]:
        """Claimed batches until every key is finished; None while others hold live leases (the caller waits).
        SIZE may be a function (a Ray pool's calls in flight, which grows as nodes join): asked for each batch."""
        from cftools.distributed import current

        while True:
            batch = self.claim(current(size))
            if batch:
                yield batch
            elif not self.unseen and self.open_keys() == 0:
                return
            else:
                yield None
