"""The loopback OpenAI-compatible chat server (tests/llm_stub.py) as a real process, scripted per test.

One process serves the whole session; each test that takes `llm_server` starts from an empty script, an
empty request log and the default reply, and scripts what the server answers (statuses, headers, bodies,
delays) or names a reply function from tests/llm_replies.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from llm_stub import StubServer
from loopback import running_server

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

    def hold(self, after: int) -> None:
        """Answer the next AFTER chat requests, then hold the later ones in flight until `release`."""
        self._post("/control/hold", {"after": after})

    def held(self) -> int:
        return httpx.get(self.root + "/control/held", timeout=10).json()["held"]

    def release(self) -> None:
        self._post("/control/release", {})

    def requests(self) -> list[dict]:
        """The chat requests received since the last reset: {"path", "headers", "body"}."""
        return httpx.get(self.root + "/control/requests", timeout=10).json()


@pytest.fixture(scope="session")
def llm_stub_process():
    with running_server(STUB.name, "--port", "0", "--delay", "0") as url:
        yield url.removesuffix("/v1")


@pytest.fixture
def llm_server(llm_stub_process) -> ScriptedLLM:
    server = ScriptedLLM(llm_stub_process)
    server.reset()
    return server


@pytest.fixture
def stub() -> StubServer:
    """The chat stub in a thread of this process, answering at once (for tests that read its state directly)."""
    server = StubServer(delay=0.0).start_in_thread()
    yield server
    server.shutdown()
    server.server_close()


def stub_backend(server: StubServer, **options: Any) -> Any:
    """An openai backend on SERVER with short back-offs (tests of retries need not wait)."""
    from cftools.llm import make_backend

    return make_backend({"backend": "openai", "model": "stub", "base_url": server.base_url,
                         "backoff_initial": 0.01, "backoff_max": 0.05, **options})
