"""Several processes that open one store at the same moment (workers started together on a store that is new or
from an older cftools): each must find the schema current, none may fail on what another's upgrade made."""

import subprocess
import sys

OPEN_WHEN_TOLD = """
import sys
from cftools.errors import CftoolsError
from cftools.store import Store
print("ready", flush=True)
sys.stdin.readline()
try:
    print("opened", Store(sys.argv[1]).schema_version, flush=True)
except CftoolsError as exc:
    print("error", exc, flush=True)
"""


def open_at_once(url: str, processes: int = 4) -> list[str]:
    """What each of PROCESSES says after they all open URL at once (every one started and waiting first)."""
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_WHEN_TOLD, url], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready"
        for proc in procs:  # let them all go
            proc.stdin.write("\n")
            proc.stdin.flush()
        return [proc.communicate(timeout=300)[0].strip() for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
