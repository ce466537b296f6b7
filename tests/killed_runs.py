"""A cftools command run as a real process and killed with SIGKILL mid-way, for the resume tests."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path


def kill_after_progress(command: list[str], db_path: Path, progress_sql: str, at_least: int,
                        poll_s: float = 0.02, timeout_s: float = 120) -> int:
    """Start COMMAND and SIGKILL it once PROGRESS_SQL (a count) reaches AT_LEAST in the store.

    Returns the count left at the kill, after checking that the SQLite file is intact."""
    run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    db = sqlite3.connect(db_path, timeout=60)
    try:
        deadline = time.time() + timeout_s
        done = 0
        while done < at_least and time.time() < deadline and run.poll() is None:
            time.sleep(poll_s)
            done = db.execute(progress_sql).fetchone()[0]
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
        assert db.execute("pragma integrity_check").fetchone()[0] == "ok"
        return db.execute(progress_sql).fetchone()[0]
    finally:
        db.close()
