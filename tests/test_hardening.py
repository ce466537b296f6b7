"""Fault tests of issue 18: secrets scrubbed before error text is cut, images decoded in full at ingest,
image paths kept inside --images, exact line numbers of bad records, cftools.toml written by a TOML
library, an empty ingest refused, and `check --json` reporting the current flags of every item asked for."""

from __future__ import annotations

import json
import random
import tomllib
import uuid
from pathlib import Path

import pytest
from PIL import Image as PILImage

from cftools.errors import CftoolsError
from cftools.annotate.label_studio import LabelStudioError, LabelStudioServer
from cftools.llm.openai_backend import OpenAIBackend
from cftools.kinds.cvqa.model import BOOLEAN
from cftools.models import DRAFT
from tests.test_checks import add_item, flags_of, json_lines, status_of
from tests.test_ingest import make_image, snapshot
from loopback import running_server

HERE = Path(__file__).resolve().parent


# ------------------------------------------------------------------ secrets in error text


@pytest.fixture(scope="module")
def echo_server():
    """The URL of a loopback server process that answers HTTP 400 with the request's headers."""
    with running_server("echo_headers_server.py") as url:
        yield url


def pieces_shown(secret: str, text: str, size: int = 6) -> list[str]:
    """Every SIZE-character piece of SECRET that TEXT shows: a cut-off start of a token is a leak too."""
    return [secret[i:i + size] for i in range(len(secret) - size + 1) if secret[i:i + size] in text]


# cftools cuts a server's answer at 300 characters (Label Studio) and its whole error text at 500
# (OpenAI); the token sits fewer than 120 characters after the padding in either, so these pads move
# it from wholly before the cut, one character at a time, to wholly after.
LABEL_STUDIO_PADS = range(300 - 120, 300 + 3)
OPENAI_PADS = range(500 - 160, 500 + 3)


def test_label_studio_error_shows_no_part_of_an_echoed_token_wherever_the_cut_falls(echo_server):
    token = "lsk-" + uuid.uuid4().hex
    shown_whole = 0
    for pad in LABEL_STUDIO_PADS:
        server = LabelStudioServer(f"{echo_server}/pad/{pad:04d}", token)
        with pytest.raises(LabelStudioError) as err:
            server.check()
        message = str(err.value)
        assert "HTTP 400" in message and "\n" not in message
        assert pieces_shown(token, message) == [], f"pad {pad}: {message}"
        shown_whole += "Authorization: Token ***" in message  # the echo is shown, only the token is not
    assert shown_whole > 40


def test_openai_error_shows_no_part_of_an_echoed_key_wherever_the_cut_falls(echo_server, monkeypatch):
    key = "proj" + uuid.uuid4().hex  # not shaped like an sk- key: only scrubbing the known key hides it
    monkeypatch.setenv("CFTOOLS_TEST_KEY", key)
    shown_whole = 0
    for pad in OPENAI_PADS:
        backend = OpenAIBackend("m", base_url=f"{echo_server}/pad/{pad:04d}/v1", api_key_env="CFTOOLS_TEST_KEY",
                                request_attempts=1)
        try:
            with pytest.raises(CftoolsError) as err:
                backend.complete([{"role": "user", "content": "hi"}], {})
        finally:
            backend.close()
        message = str(err.value)
        assert "HTTP 400" in message and "\n" not in message
        assert pieces_shown(key, message) == [], f"pad {pad}: {message}"
        shown_whole += "Bearer ***" in message
    assert shown_whole > 40


# ------------------------------------------------------------------ images at ingest


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def noisy_jpeg(path: Path) -> Path:
    """A JPEG of a few kB (noise does not compress), so cutting it leaves a valid header and half the pixels."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    PILImage.frombytes("RGB", (64, 64), bytes(rng.randrange(256) for _ in range(64 * 64 * 3))).save(path, quality=95)
    return path


def test_truncated_jpeg_is_refused_naming_file_and_record(workspace, tmp_path, run_cli):
    images = tmp_path / "imgs"
    good = noisy_jpeg(images / "good.jpg")
    cut = noisy_jpeg(images / "cut.jpg")
    cut.write_bytes(good.read_bytes()[:int(good.stat().st_size * 0.7)])
    with PILImage.open(cut) as img:
        img.verify()  # the header and structure still pass: only decoding the pixels finds the cut
    table = write_jsonl(tmp_path / "mine.jsonl", [
        {"image": "good.jpg", "question": "How many dots?", "answer": "3"},
        {"image": "cut.jpg", "question": "How many cats?", "answer": "2"}])
    before = snapshot(workspace.store)
    result = run_cli("ingest", "table", table, "--images", images)
    assert result.exit_code == 1
    message = result.output.strip()
    assert "\n" not in message and "Traceback" not in message
    assert f"{table}, line 2" in message and "cut.jpg" in message and "truncated" in message
    assert snapshot(workspace.store) == before


@pytest.mark.parametrize("image", ["../../etc/passwd", "sub/../../outside.png", "a-folder", "/etc/hostname"])
def test_image_path_leaving_images_or_not_a_file_is_refused_naming_the_record(workspace, tmp_path, run_cli, image):
    images = tmp_path / "imgs"
    make_image(images / "ok.png")
    (images / "a-folder").mkdir()
    make_image(tmp_path / "outside.png")
    table = write_jsonl(tmp_path / "mine.jsonl", [
        {"image": "ok.png", "question": "How many dots?", "answer": "3"},
        {"image": image, "question": "How many cats?", "answer": "2"}])
    before = snapshot(workspace.store)
    result = run_cli("ingest", "table", table, "--images", images)
    assert result.exit_code == 1
    assert f"{table}, line 2: image path {image!r}" in result.output
    assert snapshot(workspace.store) == before


def test_refused_image_path_is_skipped_with_skip_bad_and_the_rest_get_their_images(workspace, tmp_path, run_cli):
    images = tmp_path / "imgs"
    make_image(images / "sub" / "ok.png")
    (images / "a-folder").mkdir()
    table = write_jsonl(tmp_path / "mine.jsonl", [
        {"image": "sub/ok.png", "question": "How many dots?", "answer": "3"},
        {"image": "a-folder", "question": "How many cats?", "answer": "2"}])
    result = run_cli("ingest", "table", table, "--images", images, "--skip-bad", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert (out["sources_added"], out["images_attached"], out["skipped"]) == (1, 1, 1)


# ------------------------------------------------------------------ line numbers of bad records

HEADER = "image,question,answer\n"


def test_unclosed_quote_names_the_line_where_it_opens(workspace, tmp_path, run_cli):
    table = tmp_path / "mine.csv"
    table.write_text(HEADER + 'a.png,How many?,1\nb.png,"How many cats?,2\nc.png,How many dogs?,3\nd.png,Red?,yes\n')
    before = snapshot(workspace.store)
    result = run_cli("ingest", "table", table)
    assert result.exit_code == 1
    assert f"{table}, line 3: malformed CSV: a quote opened in this record is never closed" in result.output
    assert snapshot(workspace.store) == before


@pytest.mark.parametrize("name, text, line", [
    ("mine.csv", HEADER + "a.png,How many?,1\nb.png,How many?,2\nc.png,Caf\xe9?,3\n", "line 4"),
    ("mine.jsonl", '{"image": "a.png", "question": "How many?", "answer": "1"}\n\n'
                   '{"image": "b.png", "question": "Caf\xe9?", "answer": "1"}\n', "line 3"),
    # a record over two lines, the bad byte on its second: the record's first line is named
    ("multi.csv", HEADER + 'a.png,How many?,1\nb.png,"How\nmany caf\xe9s?",2\n', "line 3"),
], ids=["csv", "jsonl", "csv-record-over-two-lines"])
def test_non_utf8_byte_names_the_line_where_its_record_starts(workspace, tmp_path, run_cli, name, text, line):
    table = tmp_path / name
    table.write_bytes(text.encode("latin-1"))
    before = snapshot(workspace.store)
    result = run_cli("ingest", "table", table)
    assert result.exit_code == 1
    assert f"{table}, {line}: not UTF-8 text" in result.output and "0xe9" in result.output
    assert snapshot(workspace.store) == before


def test_skip_bad_reads_on_after_a_malformed_row(workspace, tmp_path, run_cli):
    table = tmp_path / "mine.csv"
    table.write_bytes((HEADER + "a.png,How many?,1\nb.png,too,many,fields\nc.png,Caf\xe9?,3\n"
                       "d.png,How many dogs?,4\n").encode("latin-1"))
    result = run_cli("ingest", "table", table, "--skip-bad", "--report", tmp_path / "skipped.jsonl", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["sources_added"] == 2
    skipped = [json.loads(line)["record"] for line in (tmp_path / "skipped.jsonl").read_text().splitlines()]
    assert skipped == ["line 3", "line 4"]


# ------------------------------------------------------------------ cftools.toml


@pytest.mark.parametrize("name", ['we"ird.db', "back\\slash.db", "new\nline.db", "quote'and\"both.db"])
def test_a_db_url_with_toml_special_characters_gives_a_config_the_next_command_reads(tmp_path, run_cli, name):
    url = f"sqlite:///{tmp_path / name}"
    result = run_cli("init", tmp_path / "ws", "--db", url)
    assert result.exit_code == 0, result.output
    config = tomllib.loads((tmp_path / "ws" / "cftools.toml").read_text(encoding="utf-8"))
    assert config["store"]["url"] == url
    assert "[label_studio]" in (tmp_path / "ws" / "cftools.toml").read_text()  # the commented template is kept
    status = run_cli("--workspace", tmp_path / "ws", "status", "--json")
    assert status.exit_code == 0, status.output
    assert (tmp_path / name).exists()


# ------------------------------------------------------------------ empty inputs


@pytest.mark.parametrize("name, text", [("empty.jsonl", ""), ("blank.jsonl", "\n  \n"), ("empty.csv", ""),
                                        ("header-only.csv", HEADER)])
def test_an_input_without_records_is_a_warning_with_a_non_zero_exit_and_records_no_run(
        workspace, tmp_path, run_cli, name, text):
    table = tmp_path / name
    table.write_text(text)
    before = snapshot(workspace.store)
    result = run_cli("ingest", "table", table)
    assert result.exit_code == 1
    assert result.output.strip() == f"Warning: {table}: 0 records; nothing was ingested"
    assert snapshot(workspace.store) == before  # no ingest run either


# ------------------------------------------------------------------ check --json


def test_check_json_reports_the_current_flags_of_drafts_not_rechecked(workspace, run_cli):
    store = workspace.store
    bad = add_item(store, "How many dogs would there be if 2 more dogs came?", "5", image="x.jpg")
    boolean = add_item(store, "Would there be a dog if the dog left?", "maybe", group=BOOLEAN,
                       source_answer="yes", image="b.jpg")
    first = run_cli("check", "--no-embeddings")
    assert first.exit_code == 0 and status_of(store, bad) == status_of(store, boolean) == DRAFT
    stored = flags_of(store, bad)
    assert "arithmetic" in stored

    again = run_cli("check", "--json", "--no-embeddings")
    assert again.exit_code == 0
    lines = {line["id"]: line for line in json_lines(again.stdout)}
    assert set(lines) == {bad, boolean}
    assert {f["code"]: f["reason"] for f in lines[bad]["flags"]} == stored
    assert lines[bad]["status"] == DRAFT and lines[bad]["rechecked"] is False and lines[bad]["checks"] == []
    assert flags_of(store, bad) == stored  # reported, not re-checked

    only_boolean = json_lines(run_cli("check", "--json", "--no-embeddings", "--group", BOOLEAN).stdout)
    assert [line["id"] for line in only_boolean] == [boolean]  # only the items asked for
    rechecked = json_lines(run_cli("check", "--json", "--no-embeddings", "--recheck").stdout)
    assert {line["id"]: line["rechecked"] for line in rechecked} == {bad: True, boolean: True}
