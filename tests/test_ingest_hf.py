"""`cftools ingest hf`: Hugging Face datasets written with `datasets` (Image feature and image paths; Parquet,
save_to_disk and an offline Hub cache) ingested as source questions, images stored like every ingest's."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import datasets
import pytest
from PIL import Image as PILImage
from sqlalchemy import select

from cftools.ingest.hf import READ_STEP, SOURCE_IMAGES_FOLDER, HfSource, ingest_hf
from cftools.models import Image, IngestRun, SourceQuestion
from tests.test_ingest import snapshot

ANSWERS = datasets.List({"answer": datasets.Value("string"), "answer_confidence": datasets.Value("string"),
                         "answer_id": datasets.Value("int64")})
VQAV2_FEATURES = datasets.Features({
    "question_id": datasets.Value("int64"), "image_id": datasets.Value("int64"),
    "question": datasets.Value("string"), "answers": ANSWERS,
    "multiple_choice_answer": datasets.Value("string"), "answer_type": datasets.Value("string"),
    "image": datasets.Image()})


def png(color, size=(16, 12), fmt="PNG") -> bytes:
    buffer = io.BytesIO()
    PILImage.new("RGB", size, color).save(buffer, format=fmt)
    return buffer.getvalue()


def answers(*texts):
    return [{"answer": t, "answer_confidence": "yes", "answer_id": i + 1} for i, t in enumerate(texts)]


def vqav2_rows():
    """Three VQAv2-shaped rows as the Hub has them; two share an image (one image stored, two names)."""
    red, blue = png((200, 10, 10)), png((10, 10, 200), fmt="JPEG")
    return {
        "question_id": [101, 102, 103], "image_id": [7, 7, 8],
        "question": ["What colour is the square?", "Is it red?", "How many squares?"],
        "answers": [answers("red", "red", "maroon"), answers("yes", "no", "yes"), answers("1", "one", "1")],
        "multiple_choice_answer": ["red", "yes", "1"], "answer_type": ["other", "yes/no", "number"],
        "image": [{"bytes": red, "path": "COCO_val2014_000000000007.jpg"},
                  {"bytes": red, "path": "COCO_val2014_000000000007.jpg"},
                  {"bytes": blue, "path": "COCO_val2014_000000000008.jpg"}],
    }


def write_parquet(path, rows, features=VQAV2_FEATURES):
    datasets.Dataset.from_dict(rows, features=features).to_parquet(str(path))
    return path


def sources(store):
    with store.session() as s:
        return {q.external_id: q for q in s.execute(select(SourceQuestion)).scalars()}


def test_parquet_with_image_feature_is_stored_like_every_ingest(workspace, run_cli, tmp_path):
    data = write_parquet(tmp_path / "validation-00000-of-00001.parquet", vqav2_rows())
    result = run_cli("ingest", "hf", data, "--licence", "CC-BY-4.0", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert (report["dataset"], report["n_records"], report["sources_added"]) == (
        "hf:validation-00000-of-00001", 3, 3)
    assert (report["images_added"], report["images_attached"], report["missing_images"]) == (2, 3, 0)
    assert report["licence"] == "CC-BY-4.0"
    stored = sources(workspace.store)
    assert stored["101"].question == "What colour is the square?"
    assert stored["101"].answer == "red"  # the most frequent of its answers, as `ingest vqav2` takes it
    assert stored["101"].answers == ["red", "red", "maroon"]
    assert stored["103"].answer_type == "number" and stored["101"].meta["image_id"] == 7
    assert stored["101"].image_ref == "COCO_val2014_000000000007.jpg"
    assert stored["101"].image_id == stored["102"].image_id != stored["103"].image_id
    with workspace.store.session() as s:
        images = s.execute(select(Image)).scalars().all()
    for image in images:  # content-addressed files under the workspace, hashed as stored
        path = workspace.root / SOURCE_IMAGES_FOLDER / image.sha256[:2] / f"{image.sha256}.{image.format}"
        assert path.is_file() and image.path == str(path.resolve())
    assert {(i.width, i.height, i.format) for i in images} == {(16, 12, "png"), (16, 12, "jpeg")}


def test_rerun_adds_nothing(workspace, run_cli, tmp_path):
    data = write_parquet(tmp_path / "v.parquet", vqav2_rows())
    assert run_cli("ingest", "hf", data).exit_code == 0
    before = snapshot(workspace.store)
    report = json.loads(run_cli("ingest", "hf", data, "--json").output)
    assert (report["sources_added"], report["images_added"], report["images_attached"]) == (0, 0, 0)
    after = snapshot(workspace.store)
    assert after.pop("ingest_runs") == before.pop("ingest_runs") + 1 and after == before


def test_image_paths_and_column_options(workspace, run_cli, tmp_path):
    folder = tmp_path / "mine"
    (folder / "pics").mkdir(parents=True)
    (folder / "pics" / "a.png").write_bytes(png((1, 2, 3)))
    (folder / "pics" / "b.png").write_bytes(png((4, 5, 6)))
    rows = {"key": ["x1", "x2"], "prompt": ["Is it dark?", "Is it light?"], "label": ["yes", "no"],
            "file": ["pics/a.png", "pics/b.png"]}
    datasets.Dataset.from_dict(rows).to_parquet(str(folder / "train.parquet"))
    result = run_cli("ingest", "hf", folder, "--question-column", "prompt", "--answer-column", "label",
                     "--image-column", "file", "--id-column", "key", "--name", "mine", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["images_added"] == 2
    stored = sources(workspace.store)
    assert (stored["x1"].question, stored["x1"].answer, stored["x1"].image_ref) == ("Is it dark?", "yes",
                                                                                  "pics/a.png")
    with workspace.store.session() as s:
        path = s.execute(select(Image.path).where(Image.id == stored["x2"].image_id)).scalar_one()
    assert path == str((folder / "pics" / "b.png").resolve())  # a path image is the file itself, as `ingest table`


def test_a_named_column_the_dataset_lacks_names_its_columns(workspace, run_cli, tmp_path):
    data = write_parquet(tmp_path / "v.parquet", vqav2_rows())
    result = run_cli("ingest", "hf", data, "--question-column", "prompt")
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"Error: {data}: no column 'prompt' (--question-column); it has question_id, image_id, question, answers, "
        "multiple_choice_answer, answer_type, image"]


@pytest.mark.parametrize("spoil, reason", [
    (lambda rows: rows["question"].__setitem__(1, " "), "empty or missing question (column 'question')"),
    (lambda rows: rows["image"].__setitem__(1, {"bytes": b"\x89PNG not an image", "path": "x.png"}),
     "not a readable image"),
    (lambda rows: rows["image"].__setitem__(1, None), "no image"),
    (lambda rows: rows["question_id"].__setitem__(1, 101), "question_id '101' is given twice (first at row 0)"),
])
def test_a_bad_row_stops_the_ingest_in_one_line_naming_source_and_row(workspace, run_cli, tmp_path, spoil, reason):
    rows = vqav2_rows()
    spoil(rows)
    data = write_parquet(tmp_path / "v.parquet", rows)
    before = snapshot(workspace.store)
    result = run_cli("ingest", "hf", data)
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert line.startswith(f"Error: {data}, row 1: {reason}")
    assert snapshot(workspace.store) == before
    assert not (workspace.root / SOURCE_IMAGES_FOLDER).exists() or not any(
        (workspace.root / SOURCE_IMAGES_FOLDER).rglob("*.*"))


def test_missing_or_escaping_image_files_are_bad_rows_skipped_and_listed(workspace, run_cli, tmp_path):
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "a.png").write_bytes(png((1, 2, 3)))
    (tmp_path / "outside.png").write_bytes(png((3, 2, 1)))
    rows = {"question": ["Q0?", "Q1?", "Q2?"], "answer": ["a", "b", "c"],
            "image": ["a.png", "gone.png", "../outside.png"]}
    datasets.Dataset.from_dict(rows).to_parquet(str(folder / "data.parquet"))
    result = run_cli("ingest", "hf", folder / "data.parquet")
    assert result.exit_code == 1 and "row 1: image file 'gone.png' not found under" in result.output
    report_file = tmp_path / "skipped.jsonl"
    result = run_cli("ingest", "hf", folder / "data.parquet", "--skip-bad", "--report", report_file, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["sources_added"] == 1
    listed = [json.loads(line) for line in report_file.read_text().splitlines()]
    assert [b["record"] for b in listed] == ["row 1", "row 2"]
    assert "leaves the --images folder" in listed[1]["reason"]


def test_save_to_disk_folder_with_splits(workspace, run_cli, tmp_path):
    rows = vqav2_rows()
    half = {k: v[:1] for k, v in rows.items()}
    rest = {k: v[1:] for k, v in rows.items()}
    folder = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(half, features=VQAV2_FEATURES),
                          "validation": datasets.Dataset.from_dict(rest, features=VQAV2_FEATURES)}
                         ).save_to_disk(str(folder))
    result = run_cli("ingest", "hf", folder)
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: {folder}: it has the splits train, validation: name one with --split"
    report = json.loads(run_cli("ingest", "hf", folder, "--split", "validation", "--json").output)
    assert (report["dataset"], report["sources_added"]) == ("hf:saved:validation", 2)
    assert set(sources(workspace.store)) == {"102", "103"}


def test_progress_counts_rows_against_a_known_total(workspace, tmp_path):
    data = write_parquet(tmp_path / "v.parquet", vqav2_rows())
    seen = []
    ingest_hf(workspace.store, workspace.root, HfSource(str(data)), progress=lambda *a: seen.append(a))
    assert seen[0] == (READ_STEP, 0, 3) and seen[-1] == (READ_STEP, 3, 3)


def test_without_the_export_extra_it_says_which_to_install(workspace, run_cli, tmp_path, monkeypatch):
    data = write_parquet(tmp_path / "v.parquet", vqav2_rows())
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as on a core install: the import fails
    result = run_cli("ingest", "hf", data)
    assert result.exit_code == 1
    assert result.output.strip() == ("Error: ingest hf needs the export extra: pip install 'cftools[export]' "
                                     "(pyarrow is not installed)")


HUB_CACHE = """
import shutil, sys
from pathlib import Path
from datasets.data_files import DataFilesDict
from datasets.packaged_modules.parquet.parquet import Parquet
cache, data = Path(sys.argv[1]), sys.argv[2]
builder = Parquet(cache_dir=str(cache / "build"), dataset_name="tiny-vqa", hash="0123abcd",
                  data_files=DataFilesDict.from_patterns({"validation": [data]}))
builder.download_and_prepare()
shutil.copytree(builder.cache_dir, cache / "tester___tiny-vqa" / "default" / "0.0.0" / "0123abcd")
"""


def test_a_hub_id_loads_offline_from_the_local_cache(workspace, tmp_path):
    """HF_HUB_OFFLINE=1: a Hub id is read from the cache a former `load_dataset` of it left (made here from a
    Parquet file, laid out as datasets lays it out: HF_HOME/datasets/OWNER___NAME/CONFIG/VERSION/HASH)."""
    data = write_parquet(tmp_path / "v.parquet", vqav2_rows())
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1",
           "CFTOOLS_WORKSPACE": str(workspace.root)}
    subprocess.run([sys.executable, "-c", HUB_CACHE, str(tmp_path / "hf" / "datasets"), str(data)], env=env,
                   check=True, capture_output=True)
    done = subprocess.run([sys.executable, "-m", "cftools", "ingest", "hf", "tester/tiny-vqa", "--split",
                           "validation", "--json"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["dataset"], report["sources_added"], report["images_added"]) == (
        "hf:tester/tiny-vqa:validation", 3, 2)
    with workspace.store.session() as s:
        run = s.execute(select(IngestRun)).scalar_one()
    assert (run.path, run.file_sha256) == ("tester/tiny-vqa", None)
    missing = subprocess.run([sys.executable, "-m", "cftools", "ingest", "hf", "tester/elsewhere"], env=env,
                             capture_output=True, text=True)
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [
        "Error: tester/elsewhere: cannot load this Hugging Face dataset (HF_HUB_OFFLINE is set: only the local "
        "cache is read): ConnectionError: Couldn't reach 'tester/elsewhere' on the Hub (OfflineModeIsEnabled)"]


def test_a_folder_as_the_hub_lays_it_out_reads_the_split_asked_for(workspace, run_cli, tmp_path):
    """data/SPLIT-00000-of-00001.parquet: --split takes that split's files; a bad row names its file and row."""
    rows = vqav2_rows()
    (tmp_path / "repo" / "data").mkdir(parents=True)
    write_parquet(tmp_path / "repo" / "data" / "train-00000-of-00001.parquet", {k: v[:1] for k, v in rows.items()})
    rest = {k: v[1:] for k, v in rows.items()}
    rest["answers"][1] = []  # no answer at all: a bad row
    rest["multiple_choice_answer"][1] = None
    validation = write_parquet(tmp_path / "repo" / "data" / "validation-00000-of-00001.parquet", rest)
    result = run_cli("ingest", "hf", tmp_path / "repo", "--split", "validation")
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: {validation}, row 1: empty or missing answer (column 'answers')"
    report = json.loads(run_cli("ingest", "hf", tmp_path / "repo", "--split", "validation", "--skip-bad",
                                "--json").output)
    assert (report["dataset"], report["n_records"], report["sources_added"], report["skipped"]) == (
        "hf:repo:validation", 1, 1, 1)
    [source] = sources(workspace.store).values()
    assert source.external_id == "102" and source.meta["line"] == "validation-00000-of-00001.parquet, row 0"


def test_a_split_without_answers_gives_questions_without_answers(workspace, run_cli, tmp_path):
    rows = {k: v for k, v in vqav2_rows().items() if k not in ("answers", "multiple_choice_answer", "answer_type")}
    features = datasets.Features({k: v for k, v in VQAV2_FEATURES.items() if k in rows})
    data = write_parquet(tmp_path / "test.parquet", rows, features)
    assert run_cli("ingest", "hf", data).exit_code == 0
    assert {(s.answer, s.answers) for s in sources(workspace.store).values()} == {(None, None)}


def test_split_and_config_that_would_pick_nothing_are_refused(workspace, run_cli, tmp_path):
    data = write_parquet(tmp_path / "v.parquet", vqav2_rows())
    result = run_cli("ingest", "hf", data, "--split", "validation")
    assert result.exit_code == 1 and result.output.strip() == (
        f"Error: {data}: one file holds one split: 'validation' picks among a folder's files or a dataset's splits")
    result = run_cli("ingest", "hf", tmp_path, "--config", "en")
    assert result.exit_code == 1 and result.output.strip() == (
        f"Error: {tmp_path}: a configuration ('en') is a Hub dataset's; this is a local folder")


def test_a_file_that_is_not_parquet_is_one_line(workspace, run_cli, tmp_path):
    data = tmp_path / "v.parquet"
    data.write_text("question,answer\n")
    result = run_cli("ingest", "hf", data)
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert line.startswith(f"Error: {data}: not a readable Parquet file (")


@pytest.mark.parametrize("quiet", [False, True])
def test_the_command_shows_rows_read_of_the_total_on_a_terminal_unless_quiet(workspace, run_cli, tmp_path,
                                                                             monkeypatch, quiet):
    from rich.console import Console

    import cftools.commands.ingest as ingest_commands

    data = write_parquet(tmp_path / "v.parquet", vqav2_rows())
    drawn = io.StringIO()
    monkeypatch.setattr(ingest_commands, "err_console",
                        Console(file=drawn, force_terminal=True, width=120, color_system=None))
    assert run_cli("ingest", "hf", data, *(["--quiet"] if quiet else [])).exit_code == 0
    if quiet:
        assert drawn.getvalue() == ""
    else:
        assert READ_STEP in drawn.getvalue() and "3/3" in drawn.getvalue() and "eta" in drawn.getvalue()


def test_an_empty_answer_column_option_reads_a_test_split_with_empty_answers(workspace, run_cli, tmp_path):
    rows = vqav2_rows()
    rows["answers"] = [None] * 3
    rows["multiple_choice_answer"] = [None] * 3
    data = write_parquet(tmp_path / "test.parquet", rows)
    assert "row 0: empty or missing answer (column 'answers')" in run_cli("ingest", "hf", data).output
    assert run_cli("ingest", "hf", data, "--answer-column", "").exit_code == 0
    assert {s.answer for s in sources(workspace.store).values()} == {None}


def test_a_skipped_row_still_holds_its_id(workspace, run_cli, tmp_path):
    """As every reader: of two rows giving one id, neither is taken when the first is bad for another reason."""
    rows = vqav2_rows()
    rows["question"][0] = ""
    rows["question_id"][1] = 101
    data = write_parquet(tmp_path / "v.parquet", rows)
    report = json.loads(run_cli("ingest", "hf", data, "--skip-bad", "--report", tmp_path / "r.jsonl",
                                "--json").output)
    assert (report["sources_added"], report["skipped"]) == (1, 2)
    assert set(sources(workspace.store)) == {"103"}
    assert "question_id '101' is given twice (first at row 0)" in (tmp_path / "r.jsonl").read_text()
