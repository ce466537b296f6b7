"""One process at a time per predictions file of a run folder.

Two `eval` runs of the same release and model at once would each ask every question and append each prediction
twice. A run holds an OS file lock (`filelock`) on `.locks/<predictions file>.lock` in the run folder for as long
as it asks; a second
run is refused at once with one line that names the process holding it. The shards of a split run write their own
predictions files, so they run side by side. The lock goes with the process: a killed run holds nothing. Who holds
it (process and host) is written beside it while it is held, and removed when the run lets it go.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout

from cftools.errors import CftoolsError, Hint


LOCKS_DIR = ".locks"  # hidden and apart: readers of the run folder see only its own files


def lock_path(predictions_path: Path) -> Path:
    return predictions_path.parent / LOCKS_DIR / f"{predictions_path.name}.lock"


def owner_path(predictions_path: Path) -> Path:
    # filelock truncates the lock file when it opens it, so who holds the lock is written beside it
    return predictions_path.parent / LOCKS_DIR / f"{predictions_path.name}.owner"


def describe_owner(predictions_path: Path) -> str:
    try:
        return owner_path(predictions_path).read_text(encoding="utf-8").strip() or "another process"
    except OSError:
        return "another process"


@contextlib.contextmanager
def predictions_lock(predictions_path: Path) -> Iterator[None]:
    """Hold the run's lock on PREDICTIONS_PATH, or refuse at once naming the process that holds it."""
    lock_path(predictions_path).parent.mkdir(exist_ok=True)
    lock = FileLock(str(lock_path(predictions_path)), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise CftoolsError(f"{predictions_path.parent} is in use by {describe_owner(predictions_path)}, which is "
                           f"writing {predictions_path.name}; wait for it to finish (a rerun then asks only what is "
                           "missing)", hint=Hint("{message}, or give this run another {out}", out="--out")) from None
    owner = owner_path(predictions_path)
    try:
        owner.write_text(f"process {os.getpid()} on {socket.gethostname()}\n", encoding="utf-8")
        yield
    finally:
        # while the lock is still held: a finished run folder names no process or machine (it may be shared)
        owner.unlink(missing_ok=True)
        lock.release()
