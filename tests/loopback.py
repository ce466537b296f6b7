"""Start the loopback test servers (llm_stub, images_api_server, fault_proxy, judge_server, echo_headers_server)
as processes of their own. Each prints one line, "listening on URL", once it accepts connections."""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

TESTS = Path(__file__).resolve().parent
ANNOUNCE = "listening on "


def start_server(script: str, *args: str) -> tuple[subprocess.Popen, str]:
    """tests/SCRIPT started with ARGS; returns the process and the URL it announced (the process is stopped if it
    announces nothing)."""
    proc = subprocess.Popen([sys.executable, str(TESTS / script), *args], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith(ANNOUNCE):
        proc.kill()
        proc.wait(timeout=10)
        raise RuntimeError(f"{script} did not start: {line!r}")
    return proc, line[len(ANNOUNCE):].strip()


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextmanager
def running_server(script: str, *args: str) -> Iterator[str]:
    """tests/SCRIPT running for the length of the block; yields its URL."""
    proc, url = start_server(script, *args)
    try:
        yield url
    finally:
        stop_server(proc)
