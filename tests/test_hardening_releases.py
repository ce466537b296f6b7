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
from PIL import Image as PILImage

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
    from cftools.evaluate.run import EvalOptions, run_eval

    release = colour_release(tmp_path / "colours-1")
    first = run_eval(release, "openai:stub", options=EvalOptions(verify=False), workspace=workspace)
    edit_in_place(release, '"answer": "red"', '"answer": "green"')  # the manifest is unchanged
    second = run_eval(release, "openai:stub", options=EvalOptions(verify=False), workspace=workspace)
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
    slow = StubServer(delay=0.0).start_in_thread()
    slow.control("/control/hold", {"after": 0})  # the first run sits in its first call until it is killed
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
        slow.control("/control/release", {})
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


# ------------------------------------------------------------------ doctor on every format, against the store


def doctor_codes(run_cli, *args: str) -> tuple[int, list[str], dict]:
    out = run_cli("doctor", "--json", "--offline", *args)
    report = json.loads(out.output)
    return out.exit_code, sorted(p["code"] for p in report["problems"]), report


def cfmm_release(workspace, tmp_path, run_cli) -> Path:
    from test_cfmm import cfmm_lines

    folder = tmp_path / "imgs"
    folder.mkdir()
    PILImage.new("RGB", (12, 9), "red").save(folder / "bus.png")
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in cfmm_lines("bus.png")))
    assert run_cli("ingest", "cfmm", source, "--images", folder).exit_code == 0
    out = run_cli("export", "pairs", "--version", "1", "--licence", "CC0-1.0", "--format", "cfmm",
                  "--include-unverified")
    assert out.exit_code == 0, out.output
    return workspace.root / "releases" / "pairs-1-cfmm"


def test_doctor_verifies_a_cfmm_release(workspace, tmp_path, run_cli):
    release = cfmm_release(workspace, tmp_path, run_cli)
    assert doctor_codes(run_cli)[:2] == (0, [])
    records = release / "pairs.jsonl"
    records.write_text(records.read_text().replace('"count"', '"color"', 1))
    code, found, _ = doctor_codes(run_cli)
    assert code == 1 and found == ["release_invalid"]


def test_doctor_verifies_a_mucr_release(workspace, tmp_path, run_cli):
    from test_mucr_release import export_mucr, selected_pairs

    selected_pairs(workspace, tmp_path / "img", {"rain": 4, "sun": 4})
    assert export_mucr(run_cli).exit_code == 0
    release = workspace.root / "releases" / "mc-1-mucr"
    assert doctor_codes(run_cli)[:2] == (0, [])
    next(release.rglob("*.png")).unlink()
    code, found, report = doctor_codes(run_cli)
    assert code == 1 and found == ["release_invalid"] and "missing: " in report["problems"][0]["message"]


def test_doctor_finds_records_and_manifest_rewritten_together(workspace, tmp_path, run_cli):
    from fault_trials import restamp

    release = cfmm_release(workspace, tmp_path, run_cli)
    records = release / "pairs.jsonl"
    records.write_text(records.read_text().replace('"count"', '"color"', 1))
    restamp(release, ["pairs.jsonl"])  # croissant.json and the manifest rewritten to match
    assert run_cli("verify", release).exit_code == 0  # it is self-consistent
    code, found, report = doctor_codes(run_cli)
    assert code == 1 and found == ["release_manifest_changed"]
    assert "not the one exported" in report["problems"][0]["message"]


# ------------------------------------------------------------------ export --force never deletes a user's files


def test_export_force_refuses_a_folder_that_is_not_a_release_of_this_workspace(workspace, tmp_path, run_cli):
    from test_annotate import make_items, mark_checked

    make_items(run_cli, tmp_path / "imgs", 2)
    mark_checked(workspace.store)
    thesis = workspace.root / "releases" / "foo-1" / "thesis.tex"
    thesis.parent.mkdir(parents=True)
    thesis.write_text("\\chapter{Results}")
    args = ("export", "foo", "--version", "1", "--licence", "CC0-1.0", "--include-unverified", "--force")
    refused = run_cli(*args)
    assert refused.exit_code == 1 and "not a release this workspace wrote" in refused.output
    assert thesis.read_text() == "\\chapter{Results}"
    # a release with a manifest that another workspace wrote is not this one's either
    other = tmp_path / "other-out" / "foo-1"
    other.mkdir(parents=True)
    (other / "manifest.json").write_text("{}")
    assert run_cli(*args, "--out", tmp_path / "other-out").exit_code == 1 and (other / "manifest.json").exists()
    # its own release is replaced, as before
    thesis.unlink()
    assert run_cli(*args).exit_code == 0
    assert run_cli(*args).exit_code == 0 and (workspace.root / "releases" / "foo-1" / "manifest.json").is_file()


# ------------------------------------------------------------------ doctor --repair keeps the only copy


def test_doctor_repair_restores_the_old_folder_when_the_release_is_missing(workspace, tmp_path, run_cli):
    from test_doctor import dead_pid

    release = cfmm_release(workspace, tmp_path, run_cli)
    # a replacing export killed between its two renames: the release is only in .NAME.pidN.old/release
    old = release.parent / f".{release.name}.pid{dead_pid()}.x1.old"
    old.mkdir()
    release.rename(old / "release")
    code, found, report = doctor_codes(run_cli)
    assert code == 1 and found == ["release_temporary"] and "only copy" in report["problems"][0]["message"]
    code, found, report = doctor_codes(run_cli, "--repair")
    assert code == 0 and report["changes"] == [
        f"{old}: restored as {release} (its manifest is the one the store recorded)"]
    assert not old.exists() and run_cli("verify", release).exit_code == 0
    assert doctor_codes(run_cli)[:2] == (0, [])


def test_doctor_repair_restores_only_the_copy_whose_manifest_the_store_recorded(workspace, tmp_path, run_cli):
    """Issue 45: three `.old` copies of a missing release (genuine; forged consistently, records, croissant and
    manifest rewritten; broken). The genuine one comes back even though the forged one is newer; the others are
    kept aside under names that say what they are, and the log says why."""
    import shutil

    from fault_trials import restamp
    from test_doctor import dead_pid

    release = cfmm_release(workspace, tmp_path, run_cli)
    pid = dead_pid()
    genuine, forged, broken = (release.parent / f".{release.name}.pid{pid}.{n}.old" for n in ("a1", "b2", "c3"))
    for copy in (forged, broken):
        copy.mkdir()
        shutil.copytree(release, copy / "release")
    genuine.mkdir()
    release.rename(genuine / "release")
    records = forged / "release" / "pairs.jsonl"
    records.write_text(records.read_text().replace('"count"', '"color"', 1))
    restamp(forged / "release", ["pairs.jsonl"])
    (broken / "release" / "pairs.jsonl").write_text("{}\n")
    os.utime(genuine / "release", (1, 1))  # the oldest: newest-first would pick the forged copy
    code, found, report = doctor_codes(run_cli)
    messages = {p["path"]: p["message"] for p in report["problems"]}
    assert code == 1 and found == ["release_temporary"] * 3
    assert "the one the store recorded" in messages[str(genuine)] and "half-written" not in " ".join(messages.values())
    assert "not the one the store recorded" in messages[str(forged)]
    assert "does not verify" in messages[str(broken)]
    code, found, report = doctor_codes(run_cli, "--repair")
    assert code == 0, report
    changes = "\n".join(report["changes"])
    assert f"{genuine}: restored as {release} (its manifest is the one the store recorded)" in changes
    assert f"{forged}: moved aside to {release.parent / f'{release.name}.unrecorded-pid{pid}'}" in changes
    assert f"{broken}: moved aside to {release.parent / f'{release.name}.broken-pid{pid}'}" in changes
    assert '"count"' in (release / "pairs.jsonl").read_text() and run_cli("verify", release).exit_code == 0
    assert doctor_codes(run_cli)[:2] == (0, [])


# ------------------------------------------------------------------ what a newcomer sees


def test_limit_takes_the_first_items_that_have_a_question(workspace, api_model, tmp_path):
    from cftools.evaluate.run import EvalOptions, run_eval

    drafts = [{"id": f"a-mucr-{i}", "kind": "mucr", "group": "rain", "split": "test", "verified": False,
               "status": "draft", "original_question": None, "original_answer": None, "answer_type": "other",
               "question": f"a boy runs in the rain {i} -> a cold", "answer": None, "options": None,
               "data": {"cause_caption": "a boy runs", "effect_caption": "a cold"}} for i in range(4)]
    records = drafts + [cvqa_record(i, "boolean", "yes", "no", "yes/no") for i in range(3)]
    release = write_release(tmp_path / "mixed-1", records, {r["id"]: png_bytes(n) for n, r in enumerate(records)})
    result = run_eval(release, "openai:stub", options=EvalOptions(limit=2), workspace=workspace)
    assert result.config["items"] == 2 and result.asked == 4
    assert {p["id"] for p in result.predictions} == {"cvqa-0", "cvqa-1"}


@pytest.mark.parametrize("width", [80, 60])
def test_the_cfmm_table_keeps_its_type_column_at_80_columns(width):
    import io

    from rich.console import Console

    from cftools.evaluate.metrics import summarize
    from cftools.evaluate.report import rich_tables
    from cftools.kinds.cfmm.model import TYPES

    outcomes = [{"id": f"{t}-{i}", "kind": "cfmm", "group": kind,
                 "original": {"correct": i % 3 != 0, "unknown": i % 7 == 0},
                 "counterfactual": {"correct": i % 4 == 0, "unknown": i % 5 == 0}}
                for t, kind in enumerate(TYPES) for i in range(120)]
    config = {"model": "blind", "mode": "rank", "score": "mean-loss", "score_rule": "lowest mean loss wins",
              "release_name": "r", "items": 720, "questions": 1440, "template": "short_answer"}
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None)  # a file or a pipe
    for part in rich_tables(config, summarize(outcomes), width=width):
        console.print(part)
    text = buffer.getvalue()
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert all(len(line) <= width for line in text.splitlines())
    for name in (*TYPES, "sum of types (of 600)"):
        assert any(line.split("│")[1].strip() == name for line in rows), (name, text)
    assert "per-type percentages added, of 600" in " ".join(text.split())


def test_doctor_repair_clears_every_temporary_of_one_release(workspace, tmp_path, run_cli):
    from test_doctor import dead_pid

    release = cfmm_release(workspace, tmp_path, run_cli)
    pid = dead_pid()
    leftovers = [release.parent / f".{release.name}.pid{pid}.{end}" for end in ("a1.tmp", "b2.old")]
    for folder in leftovers:
        folder.mkdir()
    code, found, report = doctor_codes(run_cli, "--repair")
    assert code == 0 and found == ["release_temporary", "release_temporary"] and len(report["changes"]) == 2
    assert not any(folder.exists() for folder in leftovers) and run_cli("verify", release).exit_code == 0


def test_release_diff_preflight_and_eval_import_refuse_a_release_the_store_did_not_record(workspace, tmp_path,
                                                                                          run_cli):
    """Issue 45: B rewritten consistently (records, croissant and manifest) verifies, but its manifest is not the
    store's record: `release diff`, `preflight` and `eval import` refuse it as `eval` does; --no-verify names it."""
    from fault_trials import restamp
    from test_annotate import make_items, mark_checked

    make_items(run_cli, tmp_path / "imgs", 3)
    mark_checked(workspace.store)
    for version in ("1", "2"):
        out = run_cli("export", "r", "--version", version, "--licence", "CC0-1.0", "--include-unverified")
        assert out.exit_code == 0, out.output
    a, b = workspace.root / "releases" / "r-1", workspace.root / "releases" / "r-2"
    records = b / "records.jsonl"
    records.write_text(records.read_text().replace('"answer": "2"', '"answer": "7"', 1))
    restamp(b, ["records.jsonl"])
    assert run_cli("verify", b).exit_code == 0  # self-consistent

    def refused(out) -> bool:
        text = " ".join(out.output.split())
        return out.exit_code == 1 and "release_manifest_changed" in text and "not the one exported" in text

    assert refused(run_cli("release", "diff", a, b))
    named = run_cli("release", "diff", a, b, "--no-verify")
    assert named.exit_code == 0 and "release_manifest_changed" in named.output
    assert refused(run_cli("preflight", b))
    assert "release_manifest_changed" in run_cli("preflight", b, "--no-verify").output
    predictions = tmp_path / "p.tsv"
    predictions.write_text("item_id\tl2-category\tprediction\n")
    assert refused(run_cli("eval", "import", b, predictions, "--out", tmp_path / "run"))
    assert not (tmp_path / "run").exists()
    assert run_cli("release", "diff", a, a).exit_code == 0  # the store's own release is read as before
