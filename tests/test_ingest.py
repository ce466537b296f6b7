import csv
import json
import subprocess
import sys

import pytest
from PIL import Image as PILImage
from sqlalchemy import func, select

from cftools.errors import InputError
from cftools.ingest.readers import ingest_table, ingest_vqav2, most_frequent_answer
from cftools.kinds.cvqa.ingest import ingest_cvqa
from cftools.models import Image, ImageName, IngestRun, Item, ItemEvent, SourceQuestion
from cftools.overview import store_counts
from tests.conftest import CVQA_REAL, CVQA_SYNTHETIC
from tests.vqav2_files import sample_records, write_vqav2


def snapshot(store):
    """Row counts of every table an ingest writes: 'unchanged' means all equal."""
    with store.session() as s:
        return {m.__tablename__: s.execute(select(func.count()).select_from(m)).scalar_one()
                for m in (Image, ImageName, SourceQuestion, Item, ItemEvent, IngestRun)}


def make_image(path, color=(200, 10, 10), size=(40, 30)):
    path.parent.mkdir(parents=True, exist_ok=True)
    PILImage.new("RGB", size, color).save(path)
    return path


# ------------------------------------------------------------------ C-VQA


def test_peer_cvqa_real_loads_all_rows_with_groups(workspace, peer_cvqa_real):
    report = ingest_cvqa(workspace.store, peer_cvqa_real)
    assert report.n_records == 300
    assert report.items_added == 300
    counts = store_counts(workspace.store)
    assert counts["by_group"] == {"boolean": 100, "numerical-direct": 100, "numerical-indirect": 100}
    assert counts["by_status"] == {"draft": 300}
    assert counts["sources_missing_image"] == counts["sources"]


def test_peer_cvqa_synthetic_loads_all_rows(workspace):
    report = ingest_cvqa(workspace.store, CVQA_SYNTHETIC)
    assert report.items_added == 300
    groups = store_counts(workspace.store)["by_group"]
    assert groups == {f"abs_counting_{i}": 50 for i in range(1, 7)}


def test_cvqa_row_keeps_original_and_counterfactual(workspace, peer_cvqa_real):
    ingest_cvqa(workspace.store, peer_cvqa_real)
    with workspace.store.session() as s:
        item, source = s.execute(select(Item, SourceQuestion).join(SourceQuestion)
                                 .where(SourceQuestion.image_ref == "COCO_val2014_000000482062.jpg")).one()
    # known-bad row: kept as given, judging it is the checks' job
    assert source.question == "How many clouds are above the animals?"
    assert source.answer == "0" and item.answer == "0"
    assert item.question == "How many clouds would be above the animals if 5 clouds were added above the animals?"
    assert item.group == "numerical-direct" and item.status == "draft"


def test_reingest_adds_nothing(workspace, peer_cvqa_real, run_cli):
    first = run_cli("ingest", "cvqa", peer_cvqa_real, "--json")
    before = snapshot(workspace.store)
    second = run_cli("ingest", "cvqa", peer_cvqa_real, "--json")
    assert first.exit_code == second.exit_code == 0
    assert json.loads(second.output)["items_added"] == 0
    after = snapshot(workspace.store)
    assert {k: v for k, v in after.items() if k != "ingest_runs"} == \
        {k: v for k, v in before.items() if k != "ingest_runs"}


def test_missing_column_names_file_and_header(workspace, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("img_path,query,answer,new_query,new answer,type\na.jpg,q,1,q2,2,direct\n")
    before = snapshot(workspace.store)
    with pytest.raises(InputError) as err:
        ingest_cvqa(workspace.store, bad)
    assert "bad.csv" in str(err.value) and "'new query'" in str(err.value)
    assert snapshot(workspace.store) == before


def test_bad_row_names_line_and_store_unchanged(workspace, tmp_path, run_cli):
    rows = CVQA_REAL.read_text().splitlines()
    broken = rows[:6] + ["COCO_val2014_000000000001.jpg,How many cats?,2"] + rows[6:12]
    path = tmp_path / "broken.csv"
    path.write_text("\n".join(broken) + "\n")
    before = snapshot(workspace.store)
    result = run_cli("ingest", "cvqa", path)
    assert result.exit_code == 1
    assert "broken.csv, line 7" in result.output
    assert "Traceback" not in result.output
    assert snapshot(workspace.store) == before


def test_skip_bad_lists_bad_records_in_report(workspace, tmp_path, run_cli):
    rows = CVQA_REAL.read_text().splitlines()
    path = tmp_path / "broken.csv"
    path.write_text("\n".join(rows[:4] + ["x.jpg,How many?,,q,1,direct"] + rows[4:8]) + "\n")
    report_path = tmp_path / "skipped.jsonl"
    result = run_cli("ingest", "cvqa", path, "--skip-bad", "--report", report_path, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["items_added"] == 7 and out["skipped"] == 1
    skipped = [json.loads(line) for line in report_path.read_text().splitlines()]
    assert skipped == [{"path": str(path), "record": "line 5", "reason": "empty or missing field(s) answer"}]


def test_not_utf8_is_a_clear_error(workspace, tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes("img_path,query,answer,new query,new answer,type\nä.jpg,q\xe9,1,q,2,direct\n".encode("latin-1"))
    with pytest.raises(InputError, match="latin.csv.*UTF-8"):
        ingest_cvqa(workspace.store, path)


# ------------------------------------------------------------------ VQAv2


def test_most_frequent_answer_breaks_ties_independent_of_order():
    assert most_frequent_answer(["2"] * 7 + ["3"] * 3) == "2"
    assert most_frequent_answer(["yes"] * 5 + ["no"] * 5) == "no"
    assert most_frequent_answer(["no"] * 5 + ["yes"] * 5) == "no"
    assert most_frequent_answer([]) is None


def test_vqav2_keeps_ten_answers_type_and_majority(workspace, tmp_path):
    q, a = write_vqav2(tmp_path / "v", sample_records())
    report = ingest_vqav2(workspace.store, q, a)
    assert report.sources_added == 3 and report.missing_images == 3
    with workspace.store.session() as s:
        rows = {r.external_id: r for r in s.execute(select(SourceQuestion)).scalars()}
    assert rows["1"].answer == "2" and rows["1"].answer_type == "number" and len(rows["1"].answers) == 10
    assert rows["2"].answer == "no"  # 5-5 tie, alphabetical
    assert rows["3"].answer == "blue"  # 5-5 tie in the other order
    assert rows["1"].image_ref == "COCO_val2014_000000000011.jpg"
    assert rows["1"].dataset == "vqav2:val2014"


def test_vqav2_images_by_coco_name_and_filled_in_later(workspace, tmp_path):
    q, a = write_vqav2(tmp_path / "v", sample_records())
    ingest_vqav2(workspace.store, q, a)  # no images yet
    images = tmp_path / "imgs"
    make_image(images / "COCO_val2014_000000000011.jpg")
    make_image(images / "sub" / "COCO_train2014_000000000012.jpg", color=(0, 0, 255))
    report = ingest_vqav2(workspace.store, q, a, images_dir=images)
    assert report.sources_added == 0
    assert report.images_added == 2 and report.images_attached == 3 and report.missing_images == 0
    with workspace.store.session() as s:
        img = s.execute(select(Image).where(Image.width == 40)).scalars().first()
    assert img.height == 30 and img.format == "jpeg" and len(img.sha256) == 64


def test_one_image_under_two_paths_is_one_image(workspace, tmp_path):
    images = tmp_path / "imgs"
    make_image(images / "a.png")
    (images / "b.png").write_bytes((images / "a.png").read_bytes())
    table = tmp_path / "mine.jsonl"
    table.write_text('{"image": "a.png", "question": "Is it red?", "answer": "yes"}\n'
                     '{"image": "b.png", "question": "How many squares?", "answer": "1"}\n')
    ingest_table(workspace.store, table, images_dir=images)
    with workspace.store.session() as s:
        assert s.execute(select(func.count()).select_from(Image)).scalar_one() == 1
        names = set(s.execute(select(ImageName.name)).scalars())
        types = dict(s.execute(select(SourceQuestion.question, SourceQuestion.answer_type)).all())
    assert names == {"a.png", "b.png"}
    assert types == {"Is it red?": "yes/no", "How many squares?": "number"}


def test_vqav2_malformed_json_names_file(workspace, tmp_path):
    q, a = write_vqav2(tmp_path / "v", sample_records())
    a.write_text(a.read_text()[:-40])
    before = snapshot(workspace.store)
    with pytest.raises(InputError, match="annotations.json: malformed JSON"):
        ingest_vqav2(workspace.store, q, a)
    assert snapshot(workspace.store) == before


def test_vqav2_missing_field_names_record(workspace, tmp_path):
    records = sample_records()
    q, a = write_vqav2(tmp_path / "v", records)
    data = json.loads(q.read_text())
    del data["questions"][1]["question"]
    q.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"questions.json, questions\[1\]: missing field 'question'"):
        ingest_vqav2(workspace.store, q, a)
    report = ingest_vqav2(workspace.store, q, a, skip_bad=True, report_path=tmp_path / "r.jsonl")
    assert report.sources_added == 2
    assert len(report.bad) == 2  # the question, then its now-orphan annotation
    assert (tmp_path / "r.jsonl").exists()


def test_file_that_is_not_an_image_is_named(workspace, tmp_path):
    q, a = write_vqav2(tmp_path / "v", sample_records())
    images = tmp_path / "imgs"
    images.mkdir()
    (images / "COCO_val2014_000000000011.jpg").write_text("this is not a jpeg")
    before = snapshot(workspace.store)
    with pytest.raises(InputError, match="COCO_val2014_000000000011.jpg.*not a readable image"):
        ingest_vqav2(workspace.store, q, a, images_dir=images)
    assert snapshot(workspace.store) == before


def test_missing_file_is_a_clear_cli_error(workspace, tmp_path, run_cli):
    result = run_cli("ingest", "table", tmp_path / "nope.csv")
    assert result.exit_code != 0
    assert "nope.csv" in result.output


def test_table_csv_with_ids(workspace, tmp_path):
    path = tmp_path / "mine.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "image", "question", "answer"])
        writer.writerow(["q1", "x.png", "How many apples?", "3"])
        writer.writerow(["q2", "x.png", "What fruit?", "apple"])
    report = ingest_table(workspace.store, path)
    assert report.sources_added == 2
    assert ingest_table(workspace.store, path).sources_added == 0


# ------------------------------------------------------------------ concurrency


def test_two_concurrent_ingests_both_finish(workspace, tmp_path):
    paths = []
    for n in range(2):
        path = tmp_path / f"t{n}.jsonl"
        path.write_text("".join(json.dumps({"image": f"{n}-{i}.png", "question": f"How many {i}?", "answer": str(i)})
                                + "\n" for i in range(3000)))
        paths.append(path)
    env_cmd = [sys.executable, "-m", "cftools.cli", "--workspace", str(workspace.root), "ingest", "table"]
    procs = [subprocess.Popen(env_cmd + [str(p)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for p in paths]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert not any("locked" in out for out in outputs)
    assert store_counts(workspace.store)["sources"] == 6000


def test_images_are_registered_by_path_relative_to_the_images_folder(workspace, tmp_path):
    """Two different files named x.png in two folders are two images; a bare x.png is ambiguous."""
    import PIL.Image
    from sqlalchemy import select

    from cftools.errors import InputError
    from cftools.ingest.readers import ingest_table
    from cftools.models import Image, SourceQuestion

    images = tmp_path / "images"
    for folder, shade in (("cats", 10), ("dogs", 200)):
        (images / folder).mkdir(parents=True)
        PIL.Image.new("RGB", (8, 8), (shade, 0, 0)).save(images / folder / "x.png")
    table = tmp_path / "t.csv"
    table.write_text("image,question,answer\ncats/x.png,How many cats?,2\ndogs\\x.png,How many dogs?,3\n")
    report = ingest_table(workspace.store, table, images)
    assert report.images_added == 2 and report.images_attached == 2
    with workspace.store.session() as session:
        refs = dict(session.execute(select(SourceQuestion.image_ref, SourceQuestion.image_id)).all())
        assert set(refs) == {"cats/x.png", "dogs/x.png"} and len(set(refs.values())) == 2
        assert session.execute(select(Image.id)).all().__len__() == 2

    ambiguous = tmp_path / "a.csv"
    ambiguous.write_text("image,question,answer\nx.png,How many?,1\n")
    with workspace.store.session() as session:
        before = session.execute(select(SourceQuestion.id)).all()
    try:
        ingest_table(workspace.store, ambiguous, images)
    except InputError as exc:
        assert "cats/x.png" in str(exc) and "dogs/x.png" in str(exc) and "ambiguous" in str(exc)
    else:
        raise AssertionError("an ambiguous image reference was accepted")
    with workspace.store.session() as session:
        assert session.execute(select(SourceQuestion.id)).all() == before  # the store is unchanged


@pytest.mark.parametrize("kind", ["table", "cvqa"])
def test_a_record_skipped_for_its_broken_image_is_not_stored(workspace, tmp_path, run_cli, kind):
    # A record whose image proved unreadable was listed as skipped and yet stored (source and item, without an image).
    images = tmp_path / "images"
    make_image(images / "ok.png")
    (images / "broken.png").write_bytes((images / "ok.png").read_bytes()[:60])  # truncated
    if kind == "table":
        rows = [("image", "question", "answer"), ("ok.png", "How many cups?", "2"),
                ("broken.png", "How many dogs?", "1"), ("broken.png", "How many cats?", "3")]
    else:
        rows = [("img_path", "query", "answer", "new query", "new answer", "type"),
                ("ok.png", "How many cups?", "2", "How many cups if one more?", "3", "direct"),
                ("broken.png", "How many dogs?", "1", "How many dogs if one more?", "2", "direct"),
                ("broken.png", "How many cats?", "3", "How many cats if one more?", "4", "direct")]
    path = tmp_path / "records.csv"
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    report_path = tmp_path / "skipped.jsonl"
    out = run_cli("ingest", kind, path, "--images", images, "--skip-bad", "--report", report_path, "--json")
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert (report["n_records"], report["sources_added"], report["skipped"]) == (3, 1, 2)
    assert report["missing_images"] == 0
    skipped = [json.loads(line) for line in report_path.read_text().splitlines()]
    assert [s["record"] for s in skipped] == ["line 3", "line 4"]
    assert "not a readable image" in skipped[0]["reason"] and "line 3" in skipped[1]["reason"]
    with workspace.store.session() as session:
        assert session.execute(select(SourceQuestion.question)).scalars().all() == ["How many cups?"]
        assert session.execute(select(func.count()).select_from(Item)).scalar_one() == (1 if kind == "cvqa" else 0)


def test_a_broken_image_of_a_record_stored_earlier_names_that_record(workspace, tmp_path, run_cli):
    # A later ingest with --images fills in the images of the dataset's earlier records; a broken one stopped it
    # naming only the image ("imgs/x.png, image x.png: ..."), not the record nor the file being ingested.
    images = tmp_path / "images"
    make_image(images / "ok.png")
    (images / "broken.png").write_bytes((images / "ok.png").read_bytes()[:60])
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    first.write_text("image,question,answer,id\nbroken.png,How many dogs?,1,d1\n")
    second.write_text("image,question,answer,id\nok.png,How many cups?,2,c1\n")
    assert run_cli("ingest", "table", first, "--name", "mine").exit_code == 0  # kept without an image
    before = snapshot(workspace.store)
    out = run_cli("ingest", "table", second, "--name", "mine", "--images", images)
    assert out.exit_code == 1
    assert f"{second}, id 'd1' of mine (stored earlier without an image): image" in out.output
    assert "not a readable image" in out.output
    assert snapshot(workspace.store) == before
