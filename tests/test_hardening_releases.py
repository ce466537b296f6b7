"""Issue 24, releases and scores: eval verifies what it reads and keys its run on the content, one eval per run
folder at a time, eval's exit codes, doctor on peer formats and on the store's manifest SHA-256, `export --force`
onto a folder that is not a release, and `doctor --repair` restoring the only copy of a release."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cftools.commands.exit_codes import ALL_FAILED, PARTIAL_FAILURE
from fixtures_eval import cvqa_record, png_bytes, write_release
from llm_stub import StubServer
from test_exit_codes import fast_retries, set_base_url
from test_generate import configure_stub

from cftools.workspace import load_workspace

ROOT = Path(__file__).resolve().parent.parent


def colour_release(folder: Path, answer: str = "red") -> Path:
    records = [cvqa_record(i, "boolean", "yes", "no", "yes/no") for i in range(3)]
    records[0].update(question="What colour would the car be if it were painted?", answer=answer,
                      answer_type="other")
    return write_release(folder, records, {r["id"]: png_bytes(n) for n, r in enumerate(records)})


def edit_in_place(release: Path, old: str, new: str) -> None:
    """Change records.jsonl and leave the manifest as it was (a hand edit)."""
    path = release / "records.jsonl"
    path.write_text(path.read_text().replace(old, new))


@pytest.fixture
def api_model(workspace):
    """The workspace's [llm] pointed at a loopback OpenAI-compatible server that answers at once."""
    server = StubServer(delay=0.0).start_in_thread()
    configure_stub(workspace, server.base_url)
    fast_retries(workspace)
    workspace.config = load_workspace(workspace.root).config  # what the CLI reads, for in-process runs too
    yield server
    server.shutdown()
    server.server_close()


# ------------------------------------------------------------------ eval verifies what it reads


def test_eval_refuses_a_release_that_fails_verify_and_no_verify_is_in_the_report(workspace, api_model, tmp_path,
                                                                                  run_cli):
    release = colour_release(tmp_path / "colours-1")
    edit_in_place(release, '"answer": "red"', '"answer": "green"')
    verify = run_cli("verify", release)
    refused = run_cli("eval", release, "--model", "openai:stub", "--quiet")
    assert refused.exit_code == 1 and verify.exit_code == 1
    assert "1 files do not match the manifest (changed: records.jsonl" in refused.output
    assert "--no-verify" in refused.output
    assert not (workspace.root / "runs").exists() or not any((workspace.root / "runs").iterdir())

    forced = run_cli("eval", release, "--model", "openai:stub", "--quiet", "--no-verify")
    assert forced.exit_code == 0, forced.output
    assert "not verified (--no-verify)" in " ".join(forced.output.split())
    run_dir = next((workspace.root / "runs").iterdir())
    assert "**not verified** (--no-verify)" in (run_dir / "report.md").read_text()
    assert json.loads((run_dir / "config.json").read_text())["verified"] is False


def test_an_in_place_edit_starts_a_new_run_with_the_new_gold(workspace, api_model, tmp_path):
    from cftools.evaluate.run import run_eval

    release = colour_release(tmp_path / "colours-1")
    first = run_eval(release, "openai:stub", workspace=workspace, verify=False)
    edit_in_place(release, '"answer": "red"', '"answer": "green"')  # the manifest is unchanged
    second = run_eval(release, "openai:stub", workspace=workspace, verify=False)
    assert second.out_dir != first.out_dir and second.asked == first.asked
    gold = {p["gold"] for p in second.predictions if p["id"] == "cvqa-0" and p["which"] == "counterfactual"}
    assert gold == {"green"}
    assert "the release's files changed (content SHA-256)" in second.notes[0]


# ------------------------------------------------------------------ exit codes


def test_eval_with_every_call_failing_exits_4_and_with_some_failing_exits_3(workspace, api_model, tmp_path,
                                                                            run_cli):
    release = colour_release(tmp_path / "colours-1")
    api_model.reply = lambda request, text: 500
    dead = run_cli("eval", release, "--model", "openai:stub", "--quiet")
    assert dead.exit_code == ALL_FAILED, dead.output
    assert "model calls failed" in dead.output
    # the first batch is answered, then the endpoint fails: what was answered is stored
    answered = []

    def fail_after_two(request, text):  # noqa: ANN001, ANN202
        answered.append(text)
        return "yes" if len(answered) <= 2 else 500

    api_model.reply = fail_after_two
    partial = run_cli("eval", release, "--model", "openai:stub", "--quiet", "--batch-size", "2",
                      "--concurrency", "1")
    assert partial.exit_code == PARTIAL_FAILURE, partial.output
    api_model.reply = None
    again = run_cli("eval", release, "--model", "openai:stub", "--quiet", "--batch-size", "2")
    assert again.exit_code == 0 and "4 questions asked now" in " ".join(again.output.split()), again.output


def test_eval_help_documents_exit_4(run_cli):
    text = " ".join(run_cli("eval", "run", "--help").output.split())
    assert "4 every model call failed" in text and "--no-verify" in text


# ------------------------------------------------------------------ one eval per run folder


def test_a_second_eval_of_the_same_run_is_refused_naming_the_first(workspace, tmp_path, run_cli):
    release = colour_release(tmp_path / "colours-1")
    slow = StubServer(delay=30.0).start_in_thread()  # the first run sits in its first call
    configure_stub(workspace, slow.base_url)
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CFTOOLS_WORKSPACE": str(workspace.root)}
    first = subprocess.Popen([sys.executable, "-m", "cftools", "eval", str(release), "--model", "openai:stub",
                              "--out", str(out), "--quiet"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while slow.requests == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert slow.requests, "the first eval never asked"
        second = run_cli("eval", release, "--model", "openai:stub", "--out", out, "--quiet")
        assert second.exit_code == 1
        assert f"process {first.pid}" in second.output and "is in use by" in second.output
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
        slow.shutdown()
        slow.server_close()
    assert not (out / "predictions.jsonl").exists() or (out / "predictions.jsonl").read_text() == ""
    # the killed run holds nothing: the next run goes ahead
    api = StubServer(delay=0.0).start_in_thread()
    try:
        set_base_url(workspace, api.base_url)
        again = run_cli("eval", release, "--model", "openai:stub", "--out", out, "--quiet")
        assert again.exit_code == 0, again.output
        lines = (out / "predictions.jsonl").read_text().splitlines()
        assert len(lines) == len({(json.loads(x)["id"], json.loads(x)["which"]) for x in lines}) == 6
    finally:
        api.shutdown()
        api.server_close()
