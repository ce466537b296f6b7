"""Exit codes a script can trust: all requests failed, some failed, none failed; a failed init leaves nothing."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest

from cftools.commands.exit_codes import ALL_FAILED, PARTIAL_FAILURE
from cftools.ingest.readers import ingest_table
from llm_stub import StubServer, structured_reply
from test_generate import NUMBER_QUESTIONS, configure_stub, write_table


def fast_retries(workspace) -> None:
    config = workspace.path("cftools.toml")
    text = config.read_text().replace("[llm]\n", "[llm]\nrequest_attempts = 1\nbackoff_initial = 0.01\n"
                                                 "backoff_max = 0.02\ntimeout = 5\n", 1)
    config.write_text(text)


def dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens there once the socket is closed


def set_base_url(workspace, url: str) -> None:
    config = workspace.path("cftools.toml")
    config.write_text(re.sub(r'(?m)^base_url = "[^"]*"', f'base_url = "{url}"', config.read_text(), count=1))


@pytest.fixture
def numbers(workspace, tmp_path):
    ingest_table(workspace.store, write_table(tmp_path / "mine.csv", NUMBER_QUESTIONS))
    fast_retries(workspace)
    return workspace


def test_every_request_failing_exits_4_and_some_failing_exits_3(numbers, run_cli):
    configure_stub(numbers, dead_url())
    dead = run_cli("generate", "rewrite", "--group", "numerical-direct", "--quiet")
    assert dead.exit_code == ALL_FAILED, dead.output
    assert "cannot reach" in dead.output  # an endpoint that never answered stops the run (tests/test_startup.py)

    # one source question in four answers 500: the other three are stored
    server = StubServer(delay=0.0, reply=lambda request, text: 500 if "cars" in text else structured_reply(
        request["response_format"]["json_schema"]["schema"], text))
    server.start_in_thread()
    try:
        set_base_url(numbers, server.base_url)
        partial = run_cli("generate", "rewrite", "--group", "numerical-direct", "--quiet", "--json")
        assert partial.exit_code == PARTIAL_FAILURE, partial.output
        assert '"items_created": 3' in partial.output
        server.reply = None  # the endpoint recovers: the rerun does the one left and exits 0
        again = run_cli("generate", "rewrite", "--group", "numerical-direct", "--quiet")
        assert again.exit_code == 0 and "1 written" in again.output, again.output
    finally:
        server.shutdown()
        server.server_close()


def test_help_documents_the_exit_codes(run_cli):
    for command in (("--help",), ("generate", "rewrite", "--help"), ("generate", "context", "--help"),
                    ("generate", "images", "--help")):
        out = run_cli(*command)
        assert out.exit_code == 0
        text = " ".join(out.output.split())
        assert "3 partial failure" in text and "4 every request failed" in text, command


def test_a_failed_init_leaves_no_half_made_workspace(tmp_path):
    target = tmp_path / "new" / "ws"
    url = f"postgresql+psycopg://nobody@127.0.0.1:{dead_url().split(':')[2].split('/')[0]}/nothing"
    out = subprocess.run([sys.executable, "-m", "cftools.cli", "init", str(target), "--db", url],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PGCONNECT_TIMEOUT": "3"})
    assert out.returncode == 1, out.stderr
    assert "cannot open the store" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not target.exists() and not (tmp_path / "new").exists()

    existing = tmp_path / "mine"  # a folder the user made keeps what it held, and gets nothing new
    existing.mkdir()
    (existing / "notes.txt").write_text("keep me")
    out = subprocess.run([sys.executable, "-m", "cftools.cli", "init", str(existing), "--db", url],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert sorted(p.name for p in existing.iterdir()) == ["notes.txt"]
