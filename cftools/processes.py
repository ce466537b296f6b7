"""Whether a process of this host still runs: for the workers' claims, a killed export's temporaries and the
Label Studio servers `annotate serve` started."""

from __future__ import annotations

import os


def is_running(pid: int) -> bool:
    """PID names a live process (one of another user's counts; a zombie, exited but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().split(") ", 1)[1][:1] != "Z"
    except OSError:  # no /proc (macOS): kill(0) said enough
        return True
