"""A cftools command run as a real process and killed with SIGKILL mid-way, for the resume tests; `wait_for`, the
condition a test waits on before it signals a run (never a sleep that hopes the run is still going)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable


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
        # a run that ended first was not killed mid-way: say so, not a count a later assertion misreads
        assert run.poll() is None, f"the run ended (code {run.returncode}) before {progress_sql} reached {at_least}"
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
        assert db.execute("pragma integrity_check").fetchone()[0] == "ok"
        return db.execute(progress_sql).fetchone()[0]
    finally:
        db.close()


def wait_for(condition: Callable[[], bool], what: str = "the condition", timeout_s: float = 120,
             poll_s: float = 0.02) -> None:
    """Return once CONDITION() holds; fail after TIMEOUT_S (a bound on a hang, not a guess at the run's pace)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout_s:.0f}s for {what}"
        time.sleep(poll_s)


HELD_RUN = """
import importlib, runpy, sys, threading
module = importlib.import_module({module!r})
real, calls = getattr(module, {function!r}), [0]
def held(*args, **kwargs):
    if calls[0] >= {calls}:
        threading.Event().wait()  # held here for good: the test kills the process
    calls[0] += 1
    return real(*args, **kwargs)
setattr(module, {function!r}, held)
sys.argv = ["cftools", *sys.argv[1:]]
runpy.run_module("cftools", run_name="__main__", alter_sys=True)
"""


def held_after(target: str, calls: int, *args: object) -> list[str]:
    """`cftools ARGS` as a process that stops for good when it calls TARGET ("module:function", looked up by that
    module at call time) once more after CALLS calls: the test kills it there, a known point, instead of racing the
    run to it."""
    module, _, function = target.partition(":")
    return [sys.executable, "-c", HELD_RUN.format(module=module, function=function, calls=calls), *map(str, args)]


def eval_held_after(lines: int, *args: object) -> list[str]:
    """An eval (`--batch-size 1`: a line per write) held for good once it has written LINES prediction lines."""
    return held_after("cftools.evaluate.run:append_predictions", lines, *args)


def kill_when_held(process: subprocess.Popen, predictions: Path, lines: int) -> int:
    """SIGKILL PROCESS (an `eval_held_after(LINES, ...)` run) once PREDICTIONS holds its LINES lines, checking it was
    still held there; returns the lines left at the kill."""
    try:
        wait_for(lambda: process.poll() is not None or (
            predictions.exists() and predictions.read_bytes().count(b"\n") == lines), f"{lines} prediction lines")
        assert process.poll() is None, "the held run ended"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    return predictions.read_bytes().count(b"\n")
