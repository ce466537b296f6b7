"""Issue 39, hardening: each row of the issue's table of faults that did not hold, as a test that failed before
its fix (MuCR links and repeated ids, number words in counting groups, .old copies verified before a restore, eval
of a consistently rewritten release, serializers for other tools' formats, batch results, --max-cost, reply caps,
control characters in terminal output)."""

from __future__ import annotations

import csv
import os
import json
from pathlib import Path

import pytest
from PIL import Image as PILImage
from sqlalchemy import func, select

from cftools.models import Image, Item, SourceQuestion
from test_hardening_input import linked_images  # noqa: F401 (a fixture)

CVQA_COLUMNS = ("img_path", "query", "answer", "new query", "new answer", "type")


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_csv(path: Path, columns: tuple[str, ...], rows: list[tuple]) -> Path:
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        writer.writerows(rows)
    return path


def count(workspace, table) -> int:  # noqa: ANN001
    with workspace.store.session() as session:
        return session.execute(select(func.count()).select_from(table)).scalar_one()


# ------------------------------------------------------------------ 1. ingest


def mucr_record(record_id: str, **extra: object) -> dict:
    return {"id": record_id, "caption_0": f"{record_id}: a boy runs in the rain", "caption_1": "he catches a cold",
            "cue": "rain", "false_cue": ["sun"], "style": "photograph", "label": "human",
            "causal_reason": ["rain makes one cold"], **extra}


@pytest.fixture
def mucr_images(linked_images) -> Path:
    """linked_images (a real image, a link to an image outside) plus a second image and a link to the folder
    outside."""
    PILImage.new("RGB", (9, 9), "green").save(linked_images / "ok2.png")
    (linked_images / "elsewhere").symlink_to(linked_images.parent / "private")
    return linked_images


@pytest.mark.parametrize("linked", ["link.png", "elsewhere/secret.png"])
def test_ingest_mucr_refuses_a_link_out_of_the_images_folder(workspace, tmp_path, run_cli, mucr_images, linked):
    source = write_jsonl(tmp_path / "m.jsonl", [mucr_record("a", image_0="ok.png", image_1="ok2.png"),
                                               mucr_record("b", image_0=linked, image_1="ok2.png")])
    out = run_cli("ingest", "mucr", source, "--images", mucr_images)
    assert out.exit_code == 1 and "line 2" in out.output and "outside the --images folder" in out.output, out.output
    assert count(workspace, Image) == 0 and count(workspace, Item) == 0
    out = run_cli("ingest", "mucr", source, "--images", mucr_images, "--skip-bad")
    assert out.exit_code == 0, out.output
    with workspace.store.session() as session:
        paths = set(session.execute(select(Image.path)).scalars())
    assert all(Path(p).resolve().is_relative_to(mucr_images.resolve()) for p in paths), paths


def test_ingest_mucr_refuses_a_repeated_id_naming_both_lines(workspace, tmp_path, run_cli):
    source = write_jsonl(tmp_path / "m.jsonl", [mucr_record("a"), mucr_record("b"), mucr_record("a", cue="snow")])
    out = run_cli("ingest", "mucr", source)
    assert out.exit_code == 1, out.output
    assert "line 3" in out.output and "'a' is given twice in this file (first on line 1)" in out.output
    assert count(workspace, Item) == 0


def test_every_reader_goes_through_the_one_checked_reader():
    """The next reader cannot forget the checks: no reader calls the unchecked `records` itself."""
    import inspect

    import cftools.ingest.readers as readers
    from cftools.kinds.cfmm import ingest as cfmm_ingest
    from cftools.kinds.cvqa import ingest as cvqa_ingest
    from cftools.kinds.mucr import ingest as mucr_ingest

    for module in (cfmm_ingest, cvqa_ingest, mucr_ingest):
        text = inspect.getsource(module)
        assert "checked_records(" in text and " records(" not in text.replace("checked_records(", ""), module
    assert "checked_records(" in inspect.getsource(readers.read_table)


def cvqa_row(answer: str, new_answer: str, kind: str = "abs_counting_1", query: str = "How many dots?",
             new_query: str = "How many dots would there be if the circles were empty?") -> tuple:
    return ("ok.png", query, answer, new_query, new_answer, kind)


@pytest.mark.parametrize("kind", ["abs_counting_3", "direct", "indirect"])
def test_counting_groups_convert_number_words_and_record_it(workspace, tmp_path, run_cli, kind):
    source = write_csv(tmp_path / "c.csv", CVQA_COLUMNS, [cvqa_row("three", "zero", kind)])
    out = run_cli("ingest", "cvqa", source)
    assert out.exit_code == 0, out.output
    with workspace.store.session() as session:
        item = session.execute(select(Item)).scalar_one()
        source = session.get(SourceQuestion, item.source_id)
        assert item.answer == "0" and source.answer == "3"
        assert item.data["converted_answers"] == {"answer": ["three", "3"], "new answer": ["zero", "0"]}


@pytest.mark.parametrize("row, reason", [
    (cvqa_row("2", "a few"), "'a few' is not a number"),
    (cvqa_row("2", "-1"), "'-1' is a negative number"),
    (cvqa_row("A", "E", query="How many? Select the correct answer:A:8  B:6",
              new_query="How many if? Select the correct answer:A:8  B:6"), "'E' is not one of the options A, B"),
])
def test_counting_groups_refuse_what_is_not_a_count(workspace, tmp_path, run_cli, row, reason):
    out = run_cli("ingest", "cvqa", write_csv(tmp_path / "c.csv", CVQA_COLUMNS, [row]))
    assert out.exit_code == 1 and "line 2" in out.output and reason in out.output, out.output
    assert count(workspace, Item) == 0


def test_a_check_flags_a_word_answer_that_ingest_did_not_see(workspace):
    """An answer written in words after ingest (an edit, a generation) is flagged by answer_type."""
    from cftools.checks.rules import check_answer_type
    from cftools.item_view import ItemView
    from cftools.kinds import get_kind

    kind = get_kind("cvqa")
    item = ItemView(id=1, key="k", kind="cvqa", group="abs_counting_1", status="draft",
                    question="How many dots would there be if the circles were empty?", answer="zero")
    from dataclasses import replace

    item = replace(item, answer_style=kind.hooks.check.answer_style(item))
    flag = check_answer_type(item)
    assert flag is not None and "not a count written in digits" in flag.reason


# ------------------------------------------------------------------ 2. release copies verified before a restore


def killed_copy(release: Path, pid: int, tag: str, mtime: float) -> Path:
    """A copy of RELEASE as a replacing export killed between its renames leaves it: .NAME.pidN.TAG.old/release."""
    import shutil

    old = release.parent / f".{release.name}.pid{pid}.{tag}.old"
    old.mkdir()
    shutil.copytree(release, old / "release")
    os.utime(old / "release", (mtime, mtime))
    return old


def test_doctor_repair_restores_the_intact_copy_of_two_and_deletes_neither(workspace, tmp_path, run_cli):
    from test_doctor import dead_pid
    from test_hardening_releases import cfmm_release, doctor_codes

    release = cfmm_release(workspace, tmp_path, run_cli)
    pid = dead_pid()
    intact = killed_copy(release, pid, "a1", 1_000_000)
    tampered = killed_copy(release, pid, "b2", 2_000_000)  # the newer one
    listed = json.loads((tampered / "release" / "manifest.json").read_text())["files"][0]["path"]
    with open(tampered / "release" / listed, "ab") as fh:
        fh.write(b" ")
    os.utime(tampered / "release", (2_000_000, 2_000_000))
    import shutil

    shutil.rmtree(release)
    code, found, report = doctor_codes(run_cli, "--repair")
    assert found == ["release_temporary", "release_temporary"], report
    changes = sorted(report["changes"])
    assert changes[0] == f"{intact}: restored as {release} (its manifest is the one the store recorded)"
    aside = release.parent / f"{release.name}.broken-pid{pid}"
    assert changes[1].startswith(f"{tampered}: moved aside to {aside}") and "does not verify" in changes[1]
    assert run_cli("verify", release).exit_code == 0 and aside.is_dir() and not intact.exists()


def test_a_verifying_copy_beside_a_release_is_moved_aside_never_deleted(workspace, tmp_path, run_cli):
    from test_doctor import dead_pid
    from test_hardening_releases import cfmm_release, doctor_codes

    release = cfmm_release(workspace, tmp_path, run_cli)
    pid = dead_pid()
    old = killed_copy(release, pid, "c3", 1_000_000)
    code, found, report = doctor_codes(run_cli)
    assert found == ["release_temporary"] and "an earlier copy" in report["problems"][0]["message"]
    # the export's own clean-up does as doctor --repair does, and says where
    out = run_cli("export", "pairs", "--version", "1", "--licence", "CC0-1.0", "--format", "cfmm",
                  "--include-unverified", "--force")
    assert out.exit_code == 0, out.output
    kept = release.parent / f"{release.name}.kept-pid{pid}"
    assert f"moved aside to {kept}" in out.output.replace("\n", ""), out.output
    assert not old.exists() and run_cli("verify", kept).exit_code == 0


def test_an_export_that_finds_only_a_killed_copy_restores_it_and_asks_for_force(workspace, tmp_path, run_cli):
    import shutil

    from test_doctor import dead_pid
    from test_hardening_releases import cfmm_release

    release = cfmm_release(workspace, tmp_path, run_cli)
    old = killed_copy(release, dead_pid(), "d4", 1_000_000)
    shutil.rmtree(release)
    args = ("export", "pairs", "--version", "1", "--licence", "CC0-1.0", "--format", "cfmm", "--include-unverified")
    out = run_cli(*args)
    assert out.exit_code == 1 and "was restored from the copy a killed export left" in out.output, out.output
    assert run_cli("verify", release).exit_code == 0 and not old.exists()
    assert run_cli(*args, "--force").exit_code == 0


# ------------------------------------------------------------------ 3. eval of a release rewritten with its manifest


from test_hardening_releases import api_model  # noqa: E402,F401 (a fixture)


def runs_left(workspace) -> list[Path]:  # noqa: ANN001
    runs = workspace.root / "runs"
    return sorted(runs.iterdir()) if runs.exists() else []


def test_eval_refuses_a_release_rewritten_with_its_manifest_unless_no_verify(workspace, api_model, tmp_path, run_cli):
    from fault_trials import restamp, write_cvqa

    assert run_cli("ingest", "cvqa", write_cvqa(tmp_path / "in", 3), "--images", tmp_path / "in").exit_code == 0
    assert run_cli("export", "r", "--version", "1", "--licence", "CC0-1.0", "--include-unverified").exit_code == 0
    release = workspace.root / "releases" / "r-1"
    records = release / "records.jsonl"
    records.write_text(records.read_text().replace('"answer": "2"', '"answer": "20"', 1))
    restamp(release, ["records.jsonl"])
    assert run_cli("verify", release).exit_code == 0  # self-consistent: only the store knows
    refused = run_cli("eval", release, "--model", "openai:stub", "--quiet")
    text = " ".join(refused.output.split())
    assert refused.exit_code == 1 and "release_manifest_changed" in text and "--no-verify" in text, refused.output
    assert runs_left(workspace) == []
    forced = run_cli("eval", release, "--model", "openai:stub", "--quiet", "--no-verify")
    assert forced.exit_code == 0, forced.output
    (run_dir,) = runs_left(workspace)
    assert "**not verified** (--no-verify)" in (run_dir / "report.md").read_text()


def test_an_eval_that_stores_nothing_leaves_no_run_folder(workspace, api_model, tmp_path, run_cli):
    from test_hardening_releases import colour_release

    release = colour_release(tmp_path / "colours-1")
    api_model.reply = lambda request, text: 500
    assert run_cli("eval", release, "--model", "openai:stub", "--quiet").exit_code != 0
    assert runs_left(workspace) == []


# ------------------------------------------------------------------ 4. other tools' formats written by their serializers


HOSTILE = 'He said: "no", then\n- item # not a comment, a,b; \'q\' {x} [y] &z *w ---'
HOSTILE_ID = 'p: "1", #2 - [x]'
HOSTILE_LICENCE = "a: b"
CREATOR = 'Eve "E" Smith: PhD'


def test_hostile_strings_round_trip_through_datasets_mlcroissant_and_pandas(workspace, tmp_path, run_cli):
    import datasets
    import mlcroissant
    import pandas
    import yaml

    from fault_trials import write_cvqa
    from test_cfmm import cfmm_lines

    images = tmp_path / "in"
    table = write_cvqa(images, 2)
    rows = list(csv.reader(table.open()))
    rows[1][1], rows[1][3] = HOSTILE + "?", HOSTILE + " if one more came?"
    write_csv(table, CVQA_COLUMNS, [tuple(r) for r in rows[1:]])
    pairs = cfmm_lines("images/img0.png")
    pairs[0].update(id=HOSTILE_ID, cf_question=HOSTILE + " (counterfactual)?")
    source = write_jsonl(tmp_path / "pairs.jsonl", pairs)
    for args in (("cvqa", table), ("cfmm", source)):
        out = run_cli("ingest", *args, "--images", images, "--licence", HOSTILE_LICENCE)
        assert out.exit_code == 0, out.output
    config = workspace.root / "cftools.toml"
    config.write_text(config.read_text().replace('# creators = ["Your Name"]', f"creators = {json.dumps(CREATOR)}"))
    for fmt in ("native", "cvqa"):
        out = run_cli("export", "h", "--version", "1", "--licence", HOSTILE_LICENCE, "--include-unverified",
                      "--format", fmt)
        assert out.exit_code == 0, out.output
    release = workspace.root / "releases" / "h-1"

    header = (release / "README.md").read_text().split("---\n")[1]
    assert yaml.safe_load(header)["license"] == HOSTILE_LICENCE
    loaded = datasets.load_dataset(str(release))
    questions = {q for split in loaded.values() for q in split["question"]}
    ids = {i for split in loaded.values() for i in split["id"]}
    assert {HOSTILE + " if one more came?", HOSTILE + " (counterfactual)?"} <= questions
    assert any(i.endswith(HOSTILE_ID) for i in ids), ids

    metadata = mlcroissant.Dataset(jsonld=release / "croissant.json").metadata
    assert [c.name for c in metadata.creators] == [CREATOR]

    (csv_file,) = (workspace.root / "releases" / "h-1-cvqa").glob("*.csv")
    frame = pandas.read_csv(csv_file, keep_default_na=False)
    assert HOSTILE + "?" in set(frame["query"]) and HOSTILE + " if one more came?" in set(frame["new query"])


# ------------------------------------------------------------------ 7. replies bounded, stored once, shown inert


@pytest.fixture
def chat_stub(workspace):
    """The workspace's [llm] pointed at an in-thread chat stub (tests set its reply)."""
    from llm_stub import StubServer
    from test_exit_codes import fast_retries
    from test_generate import configure_stub

    server = StubServer(delay=0.0).start_in_thread()
    configure_stub(workspace, server.base_url)
    fast_retries(workspace)
    yield server
    server.shutdown()
    server.server_close()


def number_questions(workspace, tmp_path, n: int = 2) -> None:  # noqa: ANN001
    from cftools.ingest.readers import ingest_table

    table = tmp_path / "q.csv"
    table.write_text("image,question,answer\n" + "".join(f"img{i}.jpg,How many cats are in room {i}?,{i + 1}\n"
                                                         for i in range(n)))
    ingest_table(workspace.store, table)


REWRITE = ("generate", "rewrite", "--group", "numerical-direct", "--no-rederive", "--quiet")


def stored(workspace, sql: str) -> list[tuple]:  # noqa: ANN001
    from sqlalchemy import text

    with workspace.store.session() as session:
        return [tuple(row) for row in session.execute(text(sql)).all()]


def test_a_reply_past_max_reply_bytes_is_a_recorded_failure_never_stored(workspace, chat_stub, tmp_path, run_cli):
    number_questions(workspace, tmp_path)
    chat_stub.reply = lambda request, text: "x" * (10 * 1024 * 1024)  # 10 MB, past the 8 MiB default
    out = run_cli(*REWRITE)
    assert out.exit_code != 0, out.output
    errors = stored(workspace, "select error, raw_output from generations")
    assert len(errors) == 2 and all("max_reply_bytes" in e and raw is None for e, raw in errors), errors
    assert stored(workspace, "select count(*) from llm_cache") == [(0,)]
    # a smaller cap set in [llm] holds too, and a reply under it goes through
    config = workspace.root / "cftools.toml"
    config.write_text(config.read_text().replace("[llm]\n", "[llm]\nmax_reply_bytes = 100\n", 1))
    chat_stub.reply = lambda request, text: "y" * 200
    run_cli(*REWRITE)
    assert stored(workspace, "select count(*) from generations where error like '%max_reply_bytes = 100%'") == [(2,)]


def test_an_unparseable_reply_is_stored_once(workspace, chat_stub, tmp_path, run_cli):
    number_questions(workspace, tmp_path, 1)
    chat_stub.reply = lambda request, text: "not the reply the schema asks for " * 100
    run_cli(*REWRITE)
    rows = stored(workspace, "select raw_output, parse_error from generations")
    assert rows and all(raw and reason for raw, reason in rows)
    assert stored(workspace, "select count(*) from llm_cache") == [(0,)]


HOSTILE_TEXT = "How many cats\x1b[2J\x1b]0;pwned\x07 are there\x00?\u202e [red]x[/red]"


def test_show_and_status_print_control_characters_from_the_data_escaped(workspace, tmp_path, run_cli):
    from cftools.kinds.mucr.ingest import ingest_captions

    rows = [{"id": "c1", "cause": HOSTILE_TEXT, "effect": "the boy has a cold", "category": "human",
             "group": "rain\x1b[31m"}]
    ingest_captions(workspace.store, write_jsonl(tmp_path / "c.jsonl", rows))
    with workspace.store.session() as session:
        item_id = session.execute(select(Item.id)).scalar_one()
    for args in (("show", item_id), ("status",)):
        out = run_cli(*args)
        assert out.exit_code == 0, out.output
        assert not any(c in out.output for c in "\x1b\x00\x07\u202e"), repr(out.output)
    shown = run_cli("show", item_id).output
    assert "\\x1b[2J" in shown and "\\x00" in shown and "\\u202e" in shown and "[red]x[/red]" in shown
