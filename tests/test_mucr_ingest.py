"""`cftools ingest mucr`: MuCR records in the published field list (the README's "Dataset Form"), with or without
their images, become items that check, release and come back with their ids, link_id, captions and explanations."""

from __future__ import annotations

import json
from pathlib import Path

import PIL.Image
import pytest
from sqlalchemy import select

from cftools.item_view import ItemView
from cftools.kinds.mucr.checks import check_explanation_form
from cftools.kinds.mucr.release import SCHEMAS
from cftools.models import Item
from conftest import PEER

TRANSCRIPTIONS = PEER / "MuCR" / "figure_transcriptions.jsonl"
IDS = ["h1", "h2", "h3", "h4"]


def published_records(style: str | None = None, images: bool = False) -> list[dict]:
    """The four example records of MuCR's figure in the README's field list (the figure does not show id, the
    captions, link_id or label: they are filled in here as the README describes them)."""
    if not TRANSCRIPTIONS.is_file():
        pytest.fail(f"peer MuCR records not found at {TRANSCRIPTIONS} (set CFTOOLS_SHARED)")
    rows = [json.loads(line) for line in TRANSCRIPTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    out = []
    for record_id, row in zip(IDS, rows):
        record = {"id": record_id, "caption_0": f"panel {row['panel']}: running in the rain",
                  "caption_1": f"panel {row['panel']}: ill with a cold",
                  "link_id": "[" + ",".join(i for i in IDS if i != record_id) + "]", "cue": row["cue"],
                  "false_cue": row["false_cue"], "style": style or row["style"], "label": row["category"],
                  "causal_reason": row["causal_reason"]}
        if images:
            record.update(image_0=f"cause/{record_id}.png", image_1=f"effect/{record_id}.png")
        out.append(record)
    return out


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def items_of(workspace) -> dict[str, Item]:
    with workspace.store.session() as session:
        return {i.key: i for i in session.execute(select(Item)).scalars()}


def test_published_records_without_images_become_one_group_of_drafts(workspace, run_cli, tmp_path):
    source = write_jsonl(tmp_path / "human.jsonl", published_records())
    out = run_cli("ingest", "mucr", source, "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["items_added"] == 4
    assert (json.loads(out.output)["images_attached"], json.loads(out.output)["missing_images"]) == (0, 4)
    assert json.loads(run_cli("ingest", "mucr", source, "--json").output)["items_added"] == 0  # rerun adds nothing
    items = items_of(workspace)
    assert sorted(items) == [f"mucr:human:{i}" for i in IDS]
    assert {i.group for i in items.values()} == {"mucr:h1"} and {i.status for i in items.values()} == {"draft"}
    first = items["mucr:human:h1"].data
    record = published_records()[0]
    assert first["explanations"] == record["causal_reason"] and first["false_cues"] == ["wet", "rain", "run"]
    assert (first["cue"], first["category"], first["label"], first["style"]) == ("catch cold", "human", "Human",
                                                                                 "comic")
    # explanation_form flags none of the published records
    for item in items.values():
        view = ItemView(id=item.id, key=item.key, kind="mucr", group=item.group, status=item.status,
                        question=item.question, answer=None, data=item.data)
        assert check_explanation_form(view) is None


def draw_images(folder: Path) -> None:
    for n, record_id in enumerate(IDS):
        for side, shade in (("cause", 40 * n), ("effect", 255 - 40 * n)):
            (folder / side).mkdir(parents=True, exist_ok=True)
            PIL.Image.new("RGB", (20 + n, 16), (shade, 90, 255 - shade)).save(folder / side / f"{record_id}.png")


def test_published_records_with_images_release_as_they_came(workspace, run_cli, tmp_path):
    rows = published_records(style="Photograph", images=True)
    source = write_jsonl(tmp_path / "human.jsonl", rows)
    draw_images(tmp_path / "pics")
    out = run_cli("ingest", "mucr", source, "--images", tmp_path / "pics", "--licence", "MIT", "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["images_added"] == 8
    # the records' images ride in their items: the report counts them (it said "0 records got an image")
    assert json.loads(out.output)["images_attached"] == 4 and json.loads(out.output)["missing_images"] == 0
    again = run_cli("ingest", "mucr", source, "--images", tmp_path / "pics", "--licence", "MIT")
    assert "4 records got an image, 0 still without an image" in " ".join(again.output.split())
    out = run_cli("export", "human", "--version", "1", "--format", "mucr", "--include-unverified", "--licence", "MIT",
                  "--json")
    assert out.exit_code == 0, out.output
    release = Path(json.loads(out.output)["path"])
    written = {r["id"]: r for r in map(json.loads, (release / "human.jsonl").read_text().splitlines())}
    assert sorted(written) == IDS
    for row in rows:
        back = written[row["id"]]
        assert list(back) == list(SCHEMAS["readme-2024-08-31"])
        for field in ("caption_0", "caption_1", "link_id", "cue", "false_cue", "label", "causal_reason"):
            assert back[field] == row[field], field
        assert back["style"] == "photograph"
        assert (release / back["image_0"]).read_bytes() == (tmp_path / "pics" / row["image_0"]).read_bytes()
        assert (release / back["image_1"]).read_bytes() == (tmp_path / "pics" / row["image_1"]).read_bytes()


def test_a_bad_record_names_file_and_line_and_changes_nothing(workspace, run_cli, tmp_path):
    rows = published_records()
    rows[2]["style"] = "painting"
    source = write_jsonl(tmp_path / "human.jsonl", rows)
    out = run_cli("ingest", "mucr", source)
    assert out.exit_code != 0 and f"{source}, line 3" in out.output and "painting" in out.output
    rows[2]["style"] = "comic"
    del rows[1]["causal_reason"]
    out = run_cli("ingest", "mucr", write_jsonl(source, rows))
    assert out.exit_code != 0 and "line 2" in out.output and "causal_reason" in out.output
    rows[1]["causal_reason"] = ["x"]
    out = run_cli("ingest", "mucr", write_jsonl(source, rows), "--images", tmp_path)  # names no image: fine
    assert out.exit_code == 0, out.output
    assert len(items_of(workspace)) == 4
    rows[0]["image_0"] = "../outside.png"
    out = run_cli("ingest", "mucr", write_jsonl(source, rows), "--images", tmp_path)
    assert out.exit_code != 0 and "line 1" in out.output and "leaves the --images folder" in out.output
