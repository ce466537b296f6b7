"""The loopback OpenAI-compatible chat server (tests/llm_stub.py) as a real process, scripted per test.

One process serves the whole session; each test that takes `llm_server` starts from an empty script, an
empty request log and the default reply, and scripts what the server answers (statuses, headers, bodies,
delays) or names a reply function from tests/llm_replies.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

STUB = Path(__file__).resolve().parent / "llm_stub.py"


class ScriptedLLM:
    """A client for the stub's /control endpoints."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.base_url = root + "/v1"

    def _post(self, path: str, body: dict[str, Any]) -> dict:
        response = httpx.post(self.root + path, json=body, timeout=10)
        response.raise_for_status()
        return response.json()

    def script(self, *replies: Any) -> None:
        """Queue REPLIES for the next chat requests, one each (texts, statuses or exchange dicts)."""
        self._post("/control/script", {"replies": list(replies)})

    def use_reply(self, function: str | None) -> None:
        self._post("/control/reply", {"function": function})

    def reset(self) -> None:
        self._post("/control/reset", {})

    def requests(self) -> list[dict]:
        """The chat requests received since the last reset: {"path", "headers", "body"}."""
        return httpx.get(self.root + "/control/requests", timeout=10).json()


def stub_process(script: Path, *args: str):
    """A loopback stub server SCRIPT (llm_stub.py, batch_stub.py) as a process: yields its root URL (no /v1)."""
    proc = subprocess.Popen([sys.executable, str(script), "--port", "0", *args], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        pytest.fail(f"{script.name} did not start: {line!r}")
    try:
        yield line.split()[-1].removesuffix("/v1")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def llm_stub_process():
    yield from stub_process(STUB, "--delay", "0")


@pytest.fixture
def llm_server(llm_stub_process) -> ScriptedLLM:
    server = ScriptedLLM(llm_stub_process)
    server.reset()
    return server
