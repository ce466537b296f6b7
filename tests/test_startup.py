"""Issue 46: API work starts at once (no model library imported before the first request), and an endpoint that
cannot be reached fails within seconds naming the URL and the setting to change (exit 4, nothing stored)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from cftools.commands.exit_codes import ALL_FAILED, PARTIAL_FAILURE
from cftools.ingest.readers import ingest_table
from cftools.models import Generation
from fixtures_eval import cvqa_record, png_bytes, write_release
from test_exit_codes import dead_url
from test_generate import NUMBER_QUESTIONS, configure_stub, write_table

ROOT = Path(__file__).resolve().parent.parent
# What an API-only command must not load before its first request.
MODEL_LIBRARIES = ("torch", "transformers", "diffusers", "sklearn", "datasets", "llama_cpp", "sentence_transformers",
                   "PIL", "numpy", "matplotlib", "pandas", "ray")
# The command under a wrapper that writes the loaded top-level modules to SPY_OUT when the backend sends its
# first request.
SPY = """
import json, os, sys
import cftools.llm.openai_backend as backend
send = backend.OpenAIBackend._call_once
def spy(self, *args, **kwargs):
    if not os.path.exists(os.environ["SPY_OUT"]):
        with open(os.environ["SPY_OUT"], "w") as fh:
            json.dump(sorted({name.split(".")[0] for name in sys.modules}), fh)
    return send(self, *args, **kwargs)
backend.OpenAIBackend._call_once = spy
from cftools.cli import main
main(sys.argv[1:], prog_name="cftools")
"""


@pytest.fixture
def numbers(workspace, tmp_path):
    ingest_table(workspace.store, write_table(tmp_path / "mine.csv", NUMBER_QUESTIONS))
    config = workspace.path("cftools.toml")
    # a short per-request time-out: the connect time-out is the shorter of it and 5 s
    config.write_text(config.read_text().replace("[llm]\n", "[llm]\ntimeout = 1\n", 1))
    return workspace


def run_cftools(workspace, *args: str, spy_out: Path | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", SPY] if spy_out else [sys.executable, "-m", "cftools"]
    env = {k: v for k, v in os.environ.items() if k != "CFTOOLS_WORKSPACE"}
    if spy_out:
        env["SPY_OUT"] = str(spy_out)
    return subprocess.run([*command, "-w", str(workspace.root), *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)


def loaded_at_first_request(spy_out: Path) -> set[str]:
    assert spy_out.exists(), "no request was sent"
    return set(json.loads(spy_out.read_text()))


def test_generate_rewrite_sends_its_first_request_without_a_model_library(numbers, stub, tmp_path):
    configure_stub(numbers, stub.base_url)
    result = run_cftools(numbers, "generate", "rewrite", "--group", "numerical-direct", "--quiet",
                         spy_out=tmp_path / "modules.json")
    assert result.returncode == 0, result.stderr
    assert not loaded_at_first_request(tmp_path / "modules.json") & set(MODEL_LIBRARIES)


def test_eval_with_an_api_model_sends_its_first_request_without_a_model_library(numbers, stub, tmp_path):
    configure_stub(numbers, stub.base_url)
    records = [cvqa_record(1, "numerical-direct", "2", "3", "number")]
    release = write_release(tmp_path / "release", records, {"cvqa-1": png_bytes(1, size=16)})
    result = run_cftools(numbers, "eval", str(release), "--model", "openai:stub", "--quiet", "--out",
                         str(tmp_path / "run"), spy_out=tmp_path / "modules.json")
    assert result.returncode == 0, result.stderr
    assert not loaded_at_first_request(tmp_path / "modules.json") & set(MODEL_LIBRARIES)


def stored_generations(workspace) -> int:
    with workspace.store.session() as session:
        return session.execute(select(func.count()).select_from(Generation)).scalar_one()


def test_a_closed_port_stops_the_run_naming_the_url_and_the_setting(numbers):
    url = dead_url()
    configure_stub(numbers, url.replace("http://", "http://someone:sk-hidden-secret-1234@") + "?api-key=k-1234")
    result = run_cftools(numbers, "generate", "rewrite", "--group", "numerical-direct", "--quiet")
    assert result.returncode == ALL_FAILED, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1] == (f"Error: cannot reach {url} (connection refused): start the server, or set [llm] base_url "
                         f"in cftools.toml")
    assert "someone" not in result.stderr and "secret" not in result.stderr and "k-1234" not in result.stderr
    assert stored_generations(numbers) == 0  # no request recorded as failed: a rerun sends them all


def test_an_unknown_host_is_named(numbers):
    configure_stub(numbers, "http://no-such-host.invalid/v1")
    result = run_cftools(numbers, "generate", "rewrite", "--group", "numerical-direct", "--quiet")
    assert result.returncode == ALL_FAILED, result.stderr
    assert "Error: cannot reach http://no-such-host.invalid/v1 (host name not found): start the server, or set " \
           "[llm] base_url in cftools.toml" in result.stderr


@pytest.fixture
def blackhole():
    """A listening socket whose accept queue is full and never served: a connection to it never opens."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(3):  # the queue takes one (or two); later handshakes get no answer at all
        filler = socket.socket()
        filler.setblocking(False)
        try:
            filler.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(filler)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        for sock in (*fillers, server):
            sock.close()


def test_an_endpoint_that_never_connects_stops_the_eval_naming_the_url(numbers, blackhole, tmp_path):
    configure_stub(numbers, blackhole)
    records = [cvqa_record(1, "numerical-direct", "2", "3", "number")]
    release = write_release(tmp_path / "release", records, {"cvqa-1": png_bytes(1, size=16)})
    result = run_cftools(numbers, "eval", str(release), "--model", "openai:stub", "--quiet", "--out",
                         str(tmp_path / "run"))
    assert result.returncode == ALL_FAILED, result.stderr
    assert (f"Error: cannot reach {blackhole} (no connection within 1 s): start the server, or set [llm] base_url "
            f"in cftools.toml") in result.stderr


def test_once_the_server_has_answered_a_lost_connection_is_a_failed_request(numbers, stub):
    """The run goes on after the endpoint answered once: its failures are recorded, the rest are stored."""
    from llm_stub import structured_reply

    calls = []

    def reply(request, text):
        calls.append(text)
        if "cars" in text:
            return {"raw": ""}  # an empty, unreadable body: a failed request, not an unreachable endpoint
        return structured_reply(request["response_format"]["json_schema"]["schema"], text)

    stub.reply = reply
    configure_stub(numbers, stub.base_url)
    config = numbers.path("cftools.toml")
    config.write_text(config.read_text().replace("[llm]\n", "[llm]\nrequest_attempts = 1\nrederive = false\n", 1))
    result = run_cftools(numbers, "generate", "rewrite", "--group", "numerical-direct", "--quiet", "--concurrency",
                         "1")
    assert result.returncode == PARTIAL_FAILURE, result.stderr  # not "cannot reach"
    assert "cannot reach" not in result.stderr


def test_a_refused_connection_is_tried_twice_then_named_whatever_the_attempts(monkeypatch):
    from cftools.llm.base import EndpointUnreachable
    from cftools.llm.openai_backend import OpenAIBackend

    sleeps: list[float] = []
    url = dead_url()
    backend = OpenAIBackend("m", base_url=url, request_attempts=6, backoff_initial=1.0, sleep=sleeps.append)
    with pytest.raises(EndpointUnreachable, match=re.escape(f"cannot reach {url} (connection refused)")):
        backend.complete([{"role": "user", "content": "hi"}], {})
    assert len(sleeps) == 1 and sleeps[0] <= 0.5  # two tries, a short wait between them (not six with backoff)
    with pytest.raises(EndpointUnreachable):  # the verdict holds: later requests of the run send nothing
        backend.complete([{"role": "user", "content": "hi"}], {})
    assert len(sleeps) == 1
    backend.close()


def test_after_the_first_answer_a_refused_connection_keeps_the_configured_retries(stub):
    from cftools.llm.base import LLMError
    from cftools.llm.openai_backend import OpenAIBackend

    sleeps: list[float] = []
    backend = OpenAIBackend("m", base_url=stub.base_url, request_attempts=3, backoff_initial=0.01,
                            sleep=sleeps.append)
    # it answers (HTTP 503, and closes each connection: none is left open to a server that goes away) ...
    stub.script.extend([{"status": 503, "headers": {"connection": "close"}, "body": {"error": {"message": "busy"}}}]
                       * 3)
    with pytest.raises(LLMError, match="HTTP 503"):
        backend.complete([{"role": "user", "content": "hi"}], {})
    stub.shutdown()
    stub.server_close()  # ... then goes away mid-run: a passing failure, recorded per request
    with pytest.raises(LLMError) as failure:
        backend.complete([{"role": "user", "content": "hi"}], {})
    assert "cannot reach" not in str(failure.value) and len(sleeps) == 4  # three tries each
    backend.close()


def test_the_images_api_names_its_own_setting():
    from cftools.imagegen.openai_backend import ImagesEndpoint, OpenAIImageBackend
    from cftools.llm.base import EndpointUnreachable

    url = dead_url()
    backend = OpenAIImageBackend(model="m", endpoint=ImagesEndpoint(base_url=url), sleep=lambda s: None)
    with pytest.raises(EndpointUnreachable, match=re.escape(f"cannot reach {url} (connection refused): start the "
                                                            f"server, or set [images] base_url in cftools.toml")):
        backend.generate_images("a cat", 1, "64x64")
    backend.close()


def test_the_plain_reading_of_the_newest_migration_is_alembics(workspace):
    """A store that is up to date opens without importing alembic: that reading must agree with alembic's."""
    from cftools.store import head_revision, plain_head, stored_revision

    assert plain_head() == head_revision(workspace.store.engine) == stored_revision(workspace.store.engine)


def test_an_up_to_date_store_opens_without_alembic(workspace):
    probe = ("import sys; from pathlib import Path; from cftools.workspace import load_workspace; "
             f"load_workspace(Path({str(workspace.root)!r})).store; print('alembic' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.stdout.strip() == "False", result.stderr
