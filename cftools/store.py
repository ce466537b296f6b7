"""The item store: an engine over any SQLAlchemy URL, SQLite tuned for several writers, and migrations."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from sqlalchemy import create_engine, event, insert
from sqlalchemy.engine import Engine
from sqlalchemy.exc import NoSuchModuleError
from sqlalchemy.pool import NullPool
from sqlmodel import Session

from cftools.resources import packaged_dir

if TYPE_CHECKING:
    from alembic.config import Config
from cftools.errors import StoreError, error_text
from cftools.store_health import (DAMAGED_HINT, check_store_health, is_damage_error, is_read_only_error, parse_db_url,
                                  safe_url, url_secrets)

SQLITE_BUSY_TIMEOUT_MS = 120_000


def _tune_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def on_connect(dbapi_conn, _record):  # noqa: ANN001
        # Let SQLAlchemy's "begin" event issue BEGIN itself, so writers can ask for IMMEDIATE.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def on_begin(conn):  # noqa: ANN001
        # A deferred transaction that later writes can fail at once with "database is locked"
        # when another writer got there first; IMMEDIATE waits for the lock instead.
        mode = "IMMEDIATE" if conn.get_execution_options().get("cftools_write") else "DEFERRED"
        conn.exec_driver_sql(f"BEGIN {mode}")


def make_engine(url: str) -> Engine:
    parsed = parse_db_url(url)
    try:
        if parsed.get_backend_name() == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(url, poolclass=NullPool, connect_args={"check_same_thread": False})
            _tune_sqlite(engine)
            return engine
        return create_engine(url, pool_pre_ping=True)
    except (NoSuchModuleError, ImportError) as exc:  # an unknown dialect, or its driver is not installed
        raise StoreError(f"cannot open the store at {safe_url(url)}: no driver for it is installed "
                         f"({' '.join(str(exc).split())}); for PostgreSQL: pip install 'cftools[postgres]'") from None


# alembic is imported where the migrations run, not with this module: every command imports the store, and
# alembic is a good part of what `cftools --help` would otherwise load (bench/bench_startup.py).
def alembic_config(engine: Engine) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(packaged_dir("db")))
    cfg.attributes["engine"] = engine
    return cfg


def head_revision(engine: Engine) -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config(engine)).get_current_head()


REVISION_LINE = re.compile(r"""^(down_revision|revision)\b[^=\n]*=\s*['"]?([^'"\s]*)""", re.MULTILINE)


def plain_head() -> str | None:
    """The newest migration read from db/versions' `revision =` and `down_revision =` lines, without importing
    alembic (0.1 s of every command's start); None where that reading is not certain (alembic decides then)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (packaged_dir("db") / "versions").glob("*.py"):
        found = dict(match.groups() for match in REVISION_LINE.finditer(path.read_text(encoding="utf-8")))
        if not found.get("revision") or "down_revision" not in found:
            return None
        revisions.add(found["revision"])
        parents.add(found["down_revision"])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def stored_revision(engine: Engine) -> str | None:
    """The store's revision by one query; None where it has no single one (a new or foreign store)."""
    from sqlalchemy import text

    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    except Exception:  # no such table: alembic says what the store is
        return None
    return rows[0] if len(rows) == 1 else None


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def refuse_newer_schema(engine: Engine, current: str | None, where: str) -> None:
    """One line for a store whose schema revision this cftools does not have: a newer cftools migrated it (alembic
    would only say it cannot locate the revision)."""
    from alembic.script import ScriptDirectory
    from alembic.util.exc import CommandError

    if current is None:
        return
    try:
        ScriptDirectory.from_config(alembic_config(engine)).get_revision(current)
    except CommandError:
        raise StoreError(f"the store at {where} has schema {current}, which this cftools does not know (its newest "
                         f"is {head_revision(engine)}): a newer cftools made it; upgrade cftools to open it") from None


def upgrade(engine: Engine, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(engine), revision)


class Store:
    """Sessions over the workspace's database, brought to the newest schema on open."""

    def __init__(self, url: str, migrate: bool = True, check: bool = True) -> None:
        """CHECK: refuse a damaged SQLite file in one line (`cftools.store_health`) before anything reads it."""
        self.url = url
        self.engine = make_engine(url)
        if check:
            check_store_health(url)
        self.is_sqlite = self.engine.dialect.name == "sqlite"
        if migrate:
            self.migrate()

    def migrate(self) -> None:
        try:
            head = plain_head()
            if head is not None and stored_revision(self.engine) == head:
                return  # up to date, told without alembic
            current = current_revision(self.engine)
            if current != head_revision(self.engine):
                refuse_newer_schema(self.engine, current, self.safe_url)
                upgrade(self.engine)
        except StoreError:
            raise
        except Exception as exc:  # a broken or foreign database file, a server that cannot be reached
            # the driver's own message (SQLAlchemy's wrapper adds a second line), on one line
            reason = error_text(str(getattr(exc, "orig", None) or exc), url_secrets(self.url))
            if is_read_only_error(exc):
                raise StoreError(f"the store at {self.safe_url} is read-only: {reason}") from None
            if is_damage_error(exc):
                raise StoreError(f"the store at {self.safe_url} is damaged: {reason}; {DAMAGED_HINT}") from None
            raise StoreError(f"cannot open the store at {self.safe_url}: {reason}") from None

    @property
    def safe_url(self) -> str:
        return safe_url(self.url)

    @property
    def schema_version(self) -> str | None:
        return current_revision(self.engine)

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A read session (or a write that can tolerate a retry)."""
        with Session(self.engine, expire_on_commit=False) as session:
            yield session

    @contextlib.contextmanager
    def write(self) -> Iterator[Session]:
        """One transaction that holds the write lock from its start; commits on success."""
        with self.engine.connect() as conn:
            conn = conn.execution_options(cftools_write=True)
            with Session(bind=conn, expire_on_commit=False) as session:
                try:
                    yield session
                    session.commit()
                except BaseException:
                    session.rollback()
                    raise

    def insert_ignore(self, session: Session, table, rows: list[dict]) -> None:  # noqa: ANN001
        """Insert rows, skipping those that collide with a unique key (idempotent writes)."""
        if not rows:
            return
        if self.engine.dialect.name in ("sqlite", "postgresql"):
            if self.engine.dialect.name == "sqlite":
                from sqlalchemy.dialects.sqlite import insert as dialect_insert
            else:
                from sqlalchemy.dialects.postgresql import insert as dialect_insert
            session.execute(dialect_insert(table).on_conflict_do_nothing(), rows)
        else:
            session.execute(insert(table).prefix_with("IGNORE"), rows)

    def dispose(self) -> None:
        self.engine.dispose()


QUERY_CHUNK = 900  # bound parameters per IN (...) list: under SQLite's old 999 limit


def in_chunks(values: Sequence[Any], size: int = QUERY_CHUNK) -> Iterator[list[Any]]:
    """VALUES in slices small enough for one `IN (...)` query on every backend."""
    values = list(values)
    for start in range(0, len(values), size):
        yield values[start:start + size]
