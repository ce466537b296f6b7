"""Whether a store can be trusted before a command reads it, and its URL made safe to show or write.

- A SQLite store is checked with SQLite's own `PRAGMA quick_check` when it is opened (up to
  QUICK_CHECK_MAX_BYTES; a larger one is checked by `cftools doctor`, which runs the full `integrity_check`): a
  file with damaged pages is refused in one line by every command instead of read as if it were fine.
- A SQLite file of an existing workspace that is gone or empty is refused, not silently recreated empty.
- A SQLite file (or its folder) that cannot be written is named read-only, not taken for a damaged one (SQLite
  reports both from its checks).
- A URL is parsed once, with one line for a malformed one or a driver that is not installed; its password, in
  the user part or in the query string (`?password=`), is never shown nor written.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from sqlalchemy.engine import URL, make_url

from cftools.errors import StoreError, WorkspaceError

LOCK_WAIT_S = 120  # as the store's own busy timeout
QUICK_CHECK_MAX_BYTES = 512 * 1024 * 1024  # about 1.5 s of quick_check; larger stores: `cftools doctor`
DAMAGED_HINT = "restore cftools.db from a backup (`cftools doctor` names the damage)"
PASSWORD_QUERY_KEYS = ("password", "passwd", "pwd")


def parse_db_url(url: str) -> URL:
    """URL parsed, or one line saying it is not a database URL (never echoing it: it may hold a password)."""
    try:
        return make_url(url)
    except Exception:  # noqa: BLE001 (sqlalchemy raises ArgumentError, or ValueError for a bad port)
        raise WorkspaceError("the store URL is not a SQLAlchemy database URL: write it as "
                             "dialect[+driver]://user@host[:port]/database, e.g. sqlite:///cftools.db or "
                             "postgresql+psycopg://user@host/db") from None


def query_password(parsed: URL) -> str | None:
    for key in PASSWORD_QUERY_KEYS:
        value = parsed.query.get(key)
        if value:
            return value if isinstance(value, str) else value[0]
    return None


def without_query_password(parsed: URL) -> URL:
    return parsed.difference_update_query(PASSWORD_QUERY_KEYS)


def url_secrets(url: str) -> list[str]:
    """The passwords URL carries (to scrub from error text)."""
    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001
        return []
    return [str(s) for s in (parsed.password, query_password(parsed)) if s]


def safe_url(url: str) -> str:
    """URL fit to print: its password hidden wherever it is."""
    return without_query_password(make_url(url)).render_as_string(hide_password=True)


def sqlite_file(url: str) -> Path | None:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:" \
            or parsed.database.startswith("file:"):
        return None
    return Path(parsed.database)


def check_store_exists(url: str) -> None:
    """An existing workspace's SQLite file that is gone, or empty (SQLite would start it afresh), is an error."""
    path = sqlite_file(url)
    if path is None:
        return
    wal = Path(f"{path}-wal")
    if not path.exists():
        raise StoreError(f"the store {path} is gone: this workspace's items, runs and releases were in it; "
                         "restore it from a backup, or run `cftools init` on this folder to start an empty store")
    if path.stat().st_size == 0 and not (wal.exists() and wal.stat().st_size > 0):
        raise StoreError(f"the store {path} is empty (0 bytes): this workspace's items, runs and releases were in "
                         "it; restore it from a backup, or delete it and run `cftools init` on this folder to start "
                         "an empty store")


def check_store_writable(path: Path) -> None:
    """Refuse, naming it read-only, a SQLite store whose file or folder cannot be written: every command records
    what it did, and SQLite keeps its journal (or WAL) files in the folder beside the store."""
    if not path.is_file():
        return
    folder = path.parent
    if not os.access(path, os.W_OK):
        raise StoreError(read_only_message(path, f"the file {path} cannot be written"))
    if not os.access(folder, os.W_OK):
        raise StoreError(read_only_message(path, f"its folder {folder} cannot be written"))


def read_only_message(path: Path, why: str) -> str:
    return (f"the store {path} is read-only ({why}; SQLite writes its journal beside the store); make it writable, "
            "or copy the workspace to a folder you can write")


def is_read_only_error(exc: BaseException) -> bool:
    """A driver error that means the store cannot be written (a read-only file, folder or file system)."""
    text = str(getattr(exc, "orig", exc)).lower()
    return "readonly database" in text or "read-only file system" in text


def sqlite_damage(path: Path, full: bool = False) -> list[str]:
    """SQLite's own verdict on the file at PATH (`quick_check`, or with FULL `integrity_check`): [] when fine.
    A file that cannot be written raises StoreError naming it read-only (SQLite's check fails on it too)."""
    pragma = "integrity_check" if full else "quick_check"
    conn = None
    try:
        conn = sqlite3.connect(str(path), timeout=LOCK_WAIT_S)
        rows = [str(r[0]) for r in conn.execute(f"PRAGMA {pragma}(20)")]
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            return []  # another process holds the file a long while: not damage (the command itself will wait)
        if is_read_only_error(exc):
            raise StoreError(read_only_message(path, f"SQLite says: {exc}")) from None
        return [str(exc)]
    except sqlite3.DatabaseError as exc:  # not a database at all, or its first page is gone
        return [str(exc)]
    finally:
        if conn is not None:
            conn.close()
    return [] if rows == ["ok"] else rows


def check_store_health(url: str) -> None:
    """Refuse, in one line, a SQLite store whose pages are damaged (before a command reads wrong data or crashes)."""
    path = sqlite_file(url)
    if path is None or not path.is_file():
        return
    check_store_writable(path)
    if path.stat().st_size > QUICK_CHECK_MAX_BYTES:
        return
    problems = sqlite_damage(path)
    if problems:
        raise StoreError(damage_message(path, problems))


def damage_message(path: Path, problems: list[str]) -> str:
    first = " ".join(problems[0].split())
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"the store {path} is damaged: SQLite's integrity check says: {first}{more}; {DAMAGED_HINT}"


def is_full_error(exc: BaseException) -> bool:
    """A driver error that means the store's disk is full (SQLITE_FULL) or cannot be written (SQLITE_IOERR: what a
    full disk gives when SQLite maps its shared-memory file)."""
    orig = getattr(exc, "orig", exc)
    text = str(orig).lower()
    return isinstance(orig, sqlite3.DatabaseError) and ("disk is full" in text or "disk i/o error" in text)


def is_damage_error(exc: BaseException) -> bool:
    """A driver error that means the file is damaged (raised mid-command by a page the open check did not read)."""
    orig = getattr(exc, "orig", exc)
    text = str(orig).lower()
    return isinstance(orig, sqlite3.DatabaseError) and ("malformed" in text or "not a database" in text
                                                         or "corrupt" in text)
