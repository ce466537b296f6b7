"""Issue 24, input: a link inside --images that leaves it, a repeated id inside one file, and `ingest cvqa` checked
as `ingest table` is (image paths, its types, numbers where the group counts)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from PIL import Image as PILImage
from sqlalchemy import func, select

from cftools.models import Image, Item, SourceQuestion

CVQA_COLUMNS = ("img_path", "query", "answer", "new query", "new answer", "type")


def write_csv(path: Path, columns: tuple[str, ...], rows: list[tuple]) -> Path:
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        writer.writerows(rows)
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def count(workspace, table) -> int:  # noqa: ANN001
    with workspace.store.session() as session:
        return session.execute(select(func.count()).select_from(table)).scalar_one()


@pytest.fixture
def linked_images(tmp_path) -> Path:
    """An --images folder with one real image and one link to an image outside it."""
    outside = tmp_path / "private"
    outside.mkdir()
    PILImage.new("RGB", (9, 9), "blue").save(outside / "secret.png")
    images = tmp_path / "images"
    images.mkdir()
    PILImage.new("RGB", (9, 9), "red").save(images / "ok.png")
    (images / "link.png").symlink_to(outside / "secret.png")
    return images


def cfmm_row(image: str, **extra: object) -> dict:
    return {"image": image, "type": "color", "basic_question": "What colour is the bus?",
            "basic_options": ["red", "green"], "basic_answer": "red",
            "cf_question": "What colour would the bus be if it were painted green?", "cf_options": ["red", "green"],
            "cf_answer": "green", **extra}


@pytest.mark.parametrize("kind", ["table", "cfmm", "cvqa"])
def test_a_link_leaving_the_images_folder_is_refused_naming_the_record(workspace, tmp_path, run_cli, linked_images,
                                                                       kind):
    if kind == "table":
        source = write_csv(tmp_path / "t.csv", ("image", "question", "answer"),
                           [("ok.png", "How many buses?", "1"), ("link.png", "How many cars?", "2")])
    elif kind == "cfmm":
        source = write_jsonl(tmp_path / "p.jsonl", [cfmm_row("ok.png", id="a"), cfmm_row("link.png", id="b")])
    else:
        source = write_csv(tmp_path / "c.csv", CVQA_COLUMNS, [
            ("ok.png", "How many buses?", "1", "How many buses if one more came?", "2", "direct"),
            ("link.png", "How many cars?", "2", "How many cars if one more came?", "3", "direct")])
    out = run_cli("ingest", kind, source, "--images", linked_images)
    line = "line 2" if kind == "cfmm" else "line 3"  # JSONL lines count from the first record, CSV from the header
    assert out.exit_code == 1 and line in out.output and "outside the --images folder" in out.output, out.output
    assert count(workspace, Image) == 0
    out = run_cli("ingest", kind, source, "--images", linked_images, "--skip-bad")
    assert out.exit_code == 0, out.output
    with workspace.store.session() as session:
        paths = session.execute(select(Image.path)).scalars().all()
    assert paths == [str((linked_images / "ok.png").resolve())]


def test_a_repeated_id_in_one_cfmm_file_is_refused_naming_both_lines(workspace, tmp_path, run_cli):
    images = tmp_path / "images"
    images.mkdir()
    PILImage.new("RGB", (9, 9), "red").save(images / "bus.png")
    source = write_jsonl(tmp_path / "p.jsonl", [cfmm_row("bus.png", id="p1"),
                                               cfmm_row("bus.png", id="p1", cf_answer="red")])
    out = run_cli("ingest", "cfmm", source, "--images", images)
    assert out.exit_code == 1 and "line 2" in out.output and "'p1' is given twice" in out.output, out.output
    assert count(workspace, Item) == 0


def test_a_repeated_id_in_one_captions_file_is_refused(workspace, tmp_path, run_cli):
    rows = [{"id": "c1", "cause": "a boy runs in the rain", "effect": "the boy has a cold", "category": "human",
             "group": "rain"},
            {"id": "c1", "cause": "a dog runs in the rain", "effect": "the dog is wet", "category": "animal",
             "group": "rain"}]
    out = run_cli("ingest", "captions", write_jsonl(tmp_path / "c.jsonl", rows))
    assert out.exit_code == 1 and "line 2" in out.output and "'c1' is given twice in this file (first on line 1)" in out.output
    assert count(workspace, Item) == 0


@pytest.mark.parametrize("row, reason", [
    (("../../etc/passwd", "How many?", "1", "How many if one more?", "2", "direct"), "leaves the --images folder"),
    (("/etc/passwd", "How many?", "1", "How many if one more?", "2", "direct"), "outside the --images folder"),
    (("ok.png", "How many?", "1", "How many if one more?", "2", "sideways"), "unknown type 'sideways'"),
    (("ok.png", "How many?", "1", "How many if one more?", "several", "direct"), "'several' is not a number"),
])
def test_ingest_cvqa_checks_its_rows_as_ingest_table_does(workspace, tmp_path, run_cli, linked_images, row, reason):
    source = write_csv(tmp_path / "c.csv", CVQA_COLUMNS, [row])
    out = run_cli("ingest", "cvqa", source, "--images", linked_images)
    assert out.exit_code == 1 and "line 2" in out.output and reason in out.output, out.output
    assert count(workspace, SourceQuestion) == 0 and count(workspace, Item) == 0
