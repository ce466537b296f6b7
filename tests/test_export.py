"""Releases: export, verify, the C-VQA format, ingest of a release, determinism and safety."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import PIL.Image
import pytest
from sqlalchemy import select, update

from cftools.release.datacard import PLOT_SIZE_PIXELS
from cftools.errors import CftoolsError
from cftools.release.export import ExportOptions, export_release
from cftools.release.splits import parse_splits
from cftools.ingest.readers import ingest_table
from cftools.kinds.cvqa.ingest import ingest_cvqa
from cftools.models import ACCEPTED, CHECKED, DRAFT, IN_REVIEW, Image, ImageName, Item, Release, SourceQuestion
from cftools.release.layout import load_records, resolve_image
from cftools.release.verify import verify_release
from cftools.workspace import init_workspace

N_IMAGED_ROWS = 60
N_DISTINCT_IMAGES = 25  # several image names share the same bytes, so items share images
LICENCE = "CC-BY-4.0"  # the workspace default [release] license: the sample is stated to be under it here


def peer_rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def write_images(folder: Path, names: list[str]) -> None:
    """Small drawn images under the peer's file names; name i gets content i % N_DISTINCT_IMAGES."""
    folder.mkdir(parents=True, exist_ok=True)
    for index, name in enumerate(names):
        shade = (index % N_DISTINCT_IMAGES) * 9
        image = PIL.Image.new("RGB", (32, 24), (shade, 255 - shade, 120))
        image.save(folder / name, format="JPEG" if shade % 2 else "PNG")


def set_status(workspace, status: str, keys: list[str]) -> None:
    """Test setup: statuses written into the store directly (annotation would do this)."""
    with workspace.store.write() as session:
        session.execute(update(Item).where(Item.key.in_(keys)).values(status=status))


def item_keys(workspace) -> list[str]:
    with workspace.store.session() as session:
        return list(session.execute(select(Item.key).order_by(Item.key)).scalars())


@pytest.fixture
def stocked(workspace, peer_cvqa_real, tmp_path):
    """The peer C-VQA sample with drawn images for its first rows; a third accepted, a third checked."""
    names = [row["img_path"] for row in peer_rows(peer_cvqa_real)[:N_IMAGED_ROWS]]
    write_images(tmp_path / "images", names)
    ingest_cvqa(workspace.store, peer_cvqa_real, tmp_path / "images", licence=LICENCE)
    keys = item_keys(workspace)
    set_status(workspace, ACCEPTED, keys[0::3])
    set_status(workspace, CHECKED, keys[1::3])
    return workspace


def all_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_export_holds_accepted_items_unless_unverified_included(stocked, tmp_path):
    result = export_release(stocked, "bench", "1.0", tmp_path / "out")
    records = load_records(result.path)
    assert result.path == (tmp_path / "out" / "bench-1.0").resolve()
    assert len(records) == 100 and all(r["verified"] and r["status"] == ACCEPTED for r in records)
    assert [r["id"] for r in records] == sorted(r["id"] for r in records)

    wide = export_release(stocked, "bench", "1.0-all", tmp_path / "out", options=ExportOptions(include_unverified=True))
    records = load_records(wide.path)
    assert len(records) == 300
    assert sum(r["verified"] for r in records) == 100
    assert {r["status"] for r in records if not r["verified"]} == {DRAFT, CHECKED}
    card = (wide.path / "README.md").read_text(encoding="utf-8")
    assert "100 verified" in card and "200 unverified" in card


def test_record_fields_and_images(stocked, tmp_path):
    result = export_release(stocked, "bench", "1.0", tmp_path / "out", options=ExportOptions(include_unverified=True))
    records = load_records(result.path)
    expected = {"id", "kind", "group", "split", "verified", "status", "image", "image_sha256", "original_question",
                "original_answer", "answer_type", "question", "answer", "options", "data", "verification"}
    assert all(set(r) == expected for r in records)
    with_image = [r for r in records if r["image"]]
    assert len(with_image) == N_IMAGED_ROWS
    for record in with_image:
        path = resolve_image(result.path, record)
        assert path.name.startswith(record["image_sha256"]) and path.is_file()
    assert len(list((result.path / "images").iterdir())) == N_DISTINCT_IMAGES
    by_group = {r["group"]: r["answer_type"] for r in records}
    assert by_group == {"numerical-direct": "number", "numerical-indirect": "number", "boolean": "yes/no"}
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert manifest["counts"]["items"] == 300 and manifest["counts"]["images"] == N_DISTINCT_IMAGES
    assert manifest["provenance"][records[0]["id"]]["source"]["dataset"] == "cvqa:C-VQA-Real_questions"
    assert manifest["store"] == "sqlite"
    with stocked.store.session() as session:
        release = session.execute(select(Release)).scalar_one()
    assert (release.name, release.version, release.n_items) == ("bench", "1.0", 300)


def test_two_exports_are_byte_identical(stocked, tmp_path):
    splits = parse_splits("test=0.7,dev=0.3")
    first = export_release(stocked, "bench", "1.0", tmp_path / "a",
                           options=ExportOptions(include_unverified=True, splits=splits))
    second = export_release(stocked, "bench", "1.0", tmp_path / "b",
                            options=ExportOptions(include_unverified=True, splits=splits))
    files_a, files_b = all_files(first.path), all_files(second.path)
    assert sorted(files_a) == sorted(files_b)
    assert {"records.jsonl", "manifest.json", "README.md", "data/test-00000-of-00001.parquet",
            "data/dev-00000-of-00001.parquet", "plots/answer_distribution.png"} <= set(files_a)
    for name in files_a:
        assert files_a[name] == files_b[name], name


def test_existing_release_needs_force(stocked, tmp_path):
    first = export_release(stocked, "bench", "1.0", tmp_path / "out")
    marker = first.path / "records.jsonl"
    marker.write_text("changed\n")
    with pytest.raises(CftoolsError, match="--force"):
        export_release(stocked, "bench", "1.0", tmp_path / "out")
    assert marker.read_text() == "changed\n"
    export_release(stocked, "bench", "1.0", tmp_path / "out", options=ExportOptions(force=True))
    assert marker.read_text() != "changed\n"
    assert verify_release(first.path).ok
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["bench-1.0"]  # no temporary folder left


def test_failed_export_leaves_no_partial_release(stocked, tmp_path):
    with stocked.store.session() as session:
        image_path = Path(session.execute(select(Image.path).limit(1)).scalar_one())
    image_path.write_bytes(b"not the bytes that were ingested")
    with pytest.raises(CftoolsError, match="changed since it was ingested"):
        export_release(stocked, "bench", "1.0", tmp_path / "out")
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []  # found before any write


def test_verify_names_changed_missing_and_extra_files(stocked, tmp_path, run_cli):
    result = export_release(stocked, "bench", "1.0", tmp_path / "out", options=ExportOptions(include_unverified=True))
    ok = run_cli("verify", result.path)
    assert ok.exit_code == 0 and "match the manifest" in ok.output

    records = result.path / "records.jsonl"
    data = bytearray(records.read_bytes())
    data[10] = data[10] ^ 1  # one changed byte, same size
    records.write_bytes(bytes(data))
    image = next((result.path / "images").iterdir())
    image.unlink()
    (result.path / "notes.txt").write_text("added\n")

    report = verify_release(result.path)
    assert not report.ok
    assert report.mismatched == ["records.jsonl: SHA-256 differs from the manifest"]
    assert report.missing == [f"images/{image.name}"]
    assert report.extra == ["notes.txt"]
    failed = run_cli("verify", result.path)
    assert failed.exit_code == 1
    assert "records.jsonl" in failed.output and image.name in failed.output and "notes.txt" in failed.output


def test_round_trip_through_ingest_release(stocked, tmp_path, run_cli):
    from cftools.models import Generation

    with stocked.store.write() as session:
        generation = Generation(generator="rewrite", group="boolean", backend="local", model="tiny-model",
                                template_name="rewrite_boolean.j2", template_hash="ab" * 32)
        session.add(generation)
        session.flush()
        session.execute(update(Item).where(Item.group == "boolean").values(generation_id=generation.id))
    splits = parse_splits("test=0.8,dev=0.2")
    first = export_release(stocked, "bench", "1.0", tmp_path / "out",
                           options=ExportOptions(include_unverified=True, splits=splits))
    other = init_workspace(tmp_path / "other")
    try:
        result = run_cli("--workspace", other.root, "ingest", "release", first.path, "--json")
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert report["items_added"] == 300 and report["images_added"] == N_DISTINCT_IMAGES
        again = json.loads(run_cli("--workspace", other.root, "ingest", "release", first.path, "--json").output)
        assert again["items_added"] == 0 and again["sources_added"] == 0 and again["images_added"] == 0

        with other.store.session() as session:
            statuses = dict(session.execute(select(Item.key, Item.status)).all())
        with stocked.store.session() as session:
            assert statuses == dict(session.execute(select(Item.key, Item.status)).all())

        second = export_release(other, "bench", "1.0", tmp_path / "again",
                                options=ExportOptions(include_unverified=True, splits=splits))
        assert (second.path / "records.jsonl").read_bytes() == (first.path / "records.jsonl").read_bytes()
        assert all_files(second.path / "images") == all_files(first.path / "images")
        row = "| rewrite | local | tiny-model | rewrite_boolean.j2 | `abababababab` | 100 |"
        assert row in (first.path / "README.md").read_text() and row in (second.path / "README.md").read_text()
    finally:
        other.close()


def test_ingest_release_refuses_a_changed_release(stocked, tmp_path):
    from cftools.release.ingest import ingest_release

    result = export_release(stocked, "bench", "1.0", tmp_path / "out")
    (result.path / "records.jsonl").write_text("{}\n")
    other = init_workspace(tmp_path / "other")
    try:
        with pytest.raises(CftoolsError, match="does not match its manifest"):
            ingest_release(other.store, result.path)
        with other.store.session() as session:
            assert session.execute(select(Item)).first() is None
    finally:
        other.close()


def test_cvqa_format_reproduces_the_peer_csv_and_reingests(workspace, peer_cvqa_real, tmp_path, run_cli):
    ingest_cvqa(workspace.store, peer_cvqa_real, licence=LICENCE)
    result = run_cli("export", "C-VQA-Real", "--version", "1", "--format", "cvqa", "--include-unverified",
                     "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    folder = tmp_path / "out" / "C-VQA-Real-1-cvqa"
    written = (folder / "C-VQA-Real_questions.csv").read_bytes().decode("utf-8").split("\n")
    peer = peer_cvqa_real.read_bytes().decode("utf-8").split("\n")
    assert written[0] == peer[0] == "img_path,query,answer,new query,new answer,type"
    # The published file byte for byte: its order, its quoting, its line ends.
    assert (folder / "C-VQA-Real_questions.csv").read_bytes() == peer_cvqa_real.read_bytes()
    assert sum('"' in line for line in written) == sum('"' in line for line in peer) > 0
    assert verify_release(folder).ok

    other = init_workspace(tmp_path / "other")
    try:
        back = ingest_cvqa(other.store, folder / "C-VQA-Real_questions.csv")
        assert back.items_added == 300 and not back.bad
        with other.store.session() as session:
            groups = sorted(session.execute(select(Item.group, Item.question)).all())
        with workspace.store.session() as session:
            assert groups == sorted(session.execute(select(Item.group, Item.question)).all())
    finally:
        other.close()


def test_both_published_cvqa_files_round_trip_byte_identical(workspace, peer_cvqa_real, tmp_path):
    synthetic = peer_cvqa_real.parent.parent / "C-VQA-Synthetic" / "C-VQA-Synthetic_questions.csv"
    for path in (synthetic, peer_cvqa_real):  # the ingest order is not the file order
        ingest_cvqa(workspace.store, path, licence=LICENCE)
    result = export_release(workspace, "both", "1", tmp_path / "out",
                            options=ExportOptions(fmt="cvqa", include_unverified=True))
    written = (result.path / "both_questions.csv").read_bytes()
    header = b"img_path,query,answer,new query,new answer,type\n"
    real, synth = peer_cvqa_real.read_bytes(), synthetic.read_bytes()
    assert written == header + real[len(header):] + synth[len(header):]  # by dataset name, then line


def test_repeated_rows_and_image_names_come_back_as_given(workspace, tmp_path):
    rows = ["img_path,query,answer,new query,new answer,type",
            "val/b.png,How many dogs?,2,\"If one dog left, how many dogs?\",1,direct",
            "val/a.png,How many cats?,1,If one more cat came how many cats?,2,direct",
            "val/b.png,How many dogs?,2,\"If one dog left, how many dogs?\",1,direct"]
    table = tmp_path / "mine.csv"
    table.write_bytes(("\n".join(rows) + "\n").encode())
    write_images(tmp_path / "pics" / "val", ["a.png", "b.png"])
    report = ingest_cvqa(workspace.store, table, tmp_path / "pics", licence=LICENCE)
    assert report.items_added == 3  # the repeated row is a row of the file, not merged away
    assert ingest_cvqa(workspace.store, table, tmp_path / "pics", licence=LICENCE).items_added == 0
    result = export_release(workspace, "mine", "1", tmp_path / "out",
                            options=ExportOptions(fmt="cvqa", include_unverified=True))
    assert (result.path / "mine_questions.csv").read_bytes() == table.read_bytes()
    assert sorted(p.relative_to(result.path / "images").as_posix()
                  for p in (result.path / "images").rglob("*") if p.is_file()) == ["val/a.png", "val/b.png"]
    assert (result.path / "images" / "val" / "a.png").read_bytes() == (tmp_path / "pics" / "val" / "a.png").read_bytes()
    assert verify_release(result.path).ok


def test_cvqa_format_with_images_reingests_them(stocked, tmp_path):
    result = export_release(stocked, "mine", "1", tmp_path / "out",
                            options=ExportOptions(fmt="cvqa", include_unverified=True))
    csv_path = result.path / "mine_questions.csv"
    rows = peer_rows(csv_path)
    named = [r["img_path"] for r in rows if (result.path / "images" / r["img_path"]).is_file()]
    assert len(named) == N_IMAGED_ROWS
    other = init_workspace(tmp_path / "other")
    try:
        back = ingest_cvqa(other.store, csv_path, result.path / "images")
        assert back.items_added == 300 and back.images_added == N_DISTINCT_IMAGES
        assert back.images_attached == N_IMAGED_ROWS
    finally:
        other.close()


def test_path_traversal_in_image_names_is_neutralised(workspace, tmp_path):
    images = tmp_path / "inputs" / "images"
    images.mkdir(parents=True)
    PIL.Image.new("RGB", (8, 8), (200, 10, 10)).save(images / "evil.png")
    table = tmp_path / "inputs" / "mine.csv"
    # ingest refuses image paths that leave --images, so the hostile names are written into the store below
    table.write_text("image,question,answer\nevil.png,How many dots?,1\nevil.png,Is it red?,yes\n")
    ingest_table(workspace.store, table, images, licence=LICENCE)
    with workspace.store.write() as session:  # a store whose names point outside, as a hostile input would
        session.execute(update(SourceQuestion).values(image_ref="../../../evil.png"))
        # (one image, registered under each reference that found it: make the first one hostile)
        session.execute(update(ImageName).where(ImageName.name == "../../evil.png").values(name="../../../evil.png"))
        sources = session.execute(select(SourceQuestion)).scalars().all()
        for index, source in enumerate(sources):
            session.add(Item(key=f"test:{index}", kind="cvqa", group="numerical-direct", source_id=source.id,
                             question=f"How many dots would there be if {index} were added?", answer="2",
                             status=ACCEPTED, data={"images": ["../../evil.png"], "path": "../../x"}))
    before = {p for p in tmp_path.rglob("*")}
    result = export_release(workspace, "safe", "1", tmp_path / "deep" / "out")
    written = {p for p in tmp_path.rglob("*")} - before
    assert all(result.path in p.parents or p == result.path or p in result.path.parents for p in written)
    assert not any(p.name == "evil.png" for p in written)
    image_files = list((result.path / "images").iterdir())
    assert len(image_files) == 1 and len(image_files[0].stem) == 64
    for name in ("../x", "a/b", "..", ""):
        with pytest.raises(CftoolsError, match="plain name"):
            export_release(workspace, name, "1", tmp_path / "out")
    with pytest.raises(CftoolsError, match="plain name"):
        export_release(workspace, "safe", "../../1", tmp_path / "out")
    with pytest.raises(CftoolsError, match="plain name"):
        parse_splits("../test=1")


def test_plots_are_pngs_of_the_expected_size(stocked, tmp_path):
    result = export_release(stocked, "bench", "1.0", tmp_path / "out", options=ExportOptions(include_unverified=True))
    for name in ("answer_distribution.png", "question_lengths.png"):
        with PIL.Image.open(result.path / "plots" / name) as image:
            image.verify()
        with PIL.Image.open(result.path / "plots" / name) as image:
            assert image.format == "PNG" and image.size == PLOT_SIZE_PIXELS


def test_parquet_loads_with_datasets(stocked, tmp_path):
    from datasets import load_dataset

    result = export_release(stocked, "bench", "1.0", tmp_path / "out",
                            options=ExportOptions(include_unverified=True, splits=parse_splits("test=0.8,dev=0.2")))
    loaded = load_dataset("parquet", data_dir=str(result.path / "data"), cache_dir=str(tmp_path / "hf-cache"))
    records = {r["id"]: r for r in load_records(result.path)}
    # `datasets` reads the file name "dev-…" as its validation split; records keep the name given.
    assert sorted(loaded) == ["test", "validation"]
    assert sum(len(loaded[s]) for s in loaded) == 300
    for split in loaded:
        for row in loaded[split]:
            record = records[row["id"]]
            assert row["split"] == {"validation": "dev"}.get(split, split) == record["split"]
            assert row["verified"] is record["verified"] and row["question"] == record["question"]
            assert json.loads(row["data"]) == record["data"]
            if record["image"]:
                assert isinstance(row["image"], PIL.Image.Image) and row["image"].size == (32, 24)
            else:
                assert row["image"] is None


def test_splits_are_stable_and_keep_each_image_in_one_split(stocked, tmp_path, peer_cvqa_real):
    splits = parse_splits("test=0.5,dev=0.5")
    first = {r["id"]: r for r in load_records(
        export_release(stocked, "bench", "1", tmp_path / "out",
                       options=ExportOptions(include_unverified=True, splits=splits)).path)}
    assert set(r["split"] for r in first.values()) == {"test", "dev"}
    image_splits: dict[str, set] = {}
    for record in first.values():
        if record["image_sha256"]:
            image_splits.setdefault(record["image_sha256"], set()).add(record["split"])
    assert len(image_splits) == N_DISTINCT_IMAGES
    assert all(len(s) == 1 for s in image_splits.values())

    # More items later (the synthetic sample), some accepted: items already released keep their split.
    ingest_cvqa(stocked.store, peer_cvqa_real.parent.parent / "C-VQA-Synthetic" / "C-VQA-Synthetic_questions.csv",
                licence=LICENCE)
    set_status(stocked, ACCEPTED, item_keys(stocked)[::2])
    second = {r["id"]: r for r in load_records(
        export_release(stocked, "bench", "2", tmp_path / "out",
                       options=ExportOptions(include_unverified=True, splits=splits)).path)}
    assert len(second) == 600
    assert all(second[key]["split"] == record["split"] for key, record in first.items())


def test_quickstart_flow_on_drafts_without_images(workspace, peer_cvqa_real, run_cli, tmp_path):
    # as examples/quickstart.sh: the C-VQA sample states no licence, so the release's is given explicitly
    assert run_cli("ingest", "cvqa", peer_cvqa_real).exit_code == 0
    empty = run_cli("export", "example", "--version", "0.1.0", "--out", tmp_path / "empty")
    assert empty.exit_code == 0 and "--include-unverified" in empty.output
    refused = run_cli("export", "example", "--version", "0.1.0", "--include-unverified")
    assert refused.exit_code == 1 and "cvqa:C-VQA-Real_questions (unknown)" in refused.output
    release = workspace.root / "releases" / "example-0.1.0"
    assert not release.exists()
    result = run_cli("export", "example", "--version", "0.1.0", "--include-unverified", "--licence", "unknown")
    assert result.exit_code == 0, result.output
    assert len(load_records(release)) == 300
    assert run_cli("verify", release).exit_code == 0
    again = run_cli("export", "example", "--version", "0.1.0", "--include-unverified", "--licence", "unknown")
    assert again.exit_code == 1 and "--force" in again.output
    card = (release / "README.md").read_text(encoding="utf-8")
    assert "license: unknown" in card and "300 items have no image" in card
    assert "| `cvqa:C-VQA-Real_questions` | unknown | 300 |" in card


def test_parse_splits():
    assert parse_splits(None) == {"test": 1.0}
    assert parse_splits("test=0.8,dev=0.2") == {"test": 0.8, "dev": 0.2}
    for bad in ("test=0.8", "test=0.5,test=0.5", "test", "test=abc,dev=1", "test=0,dev=1"):
        with pytest.raises(CftoolsError):
            parse_splits(bad)


def test_data_images_options_annotation_and_agreement(workspace, tmp_path, run_cli):
    """A MuCR-like item naming its images in data, a CFMM-like item with options, annotation rows."""
    from cftools.images import read_image_file, register_image
    from cftools.models import AgreementStat, AnnotationTask, Judgment

    folder = tmp_path / "pics"
    write_images(folder, [f"p{i}.png" for i in range(3)])
    with workspace.store.write() as session:
        shas = []
        for i in range(3):
            image = read_image_file(folder / f"p{i}.png")
            register_image(workspace.store, session, image)
            shas.append(image.sha256)
        mucr = Item(key="mucr:1", kind="mucr", group="human", question="Which image shows the effect?", answer="B",
                    status=ACCEPTED, data={"cause_image": f"sha256:{shas[0]}", "cue": "catch cold",
                                           "e2c_choices": [f"sha256:{shas[1]}", f"sha256:{shas[2]}"]})
        cfmm = Item(key="cfmm:1", kind="cfmm", group="count", question="How many would there be if one left?",
                    answer="2", status=ACCEPTED, proposed_answer="3",
                    data={"options": {"original": ["3", "4"], "counterfactual": ["2", "5"]}})
        session.add_all([mucr, cfmm])
        session.flush()
        task = AnnotationTask(item_id=cfmm.id, ls_project_id=1, ls_task_id=7, state="decided", decision=ACCEPTED)
        session.add(task)
        session.flush()
        session.add_all([Judgment(task_id=task.id, annotator=name, related=True, answer_correct=False,
                                  corrected_answer="2") for name in ("ann1", "ann2")])
        # An item that is not released: its disagreement must not reach the card's agreement.
        left_out = Item(key="cfmm:2", kind="cfmm", group="count", question="How many if two left?", answer="1",
                        status="rejected")
        session.add(left_out)
        session.flush()
        other_task = AnnotationTask(item_id=left_out.id, ls_project_id=1, ls_task_id=8, state="decided",
                                    decision="rejected")
        session.add(other_task)
        session.flush()
        session.add_all([Judgment(task_id=other_task.id, annotator=name, related=True, answer_correct=correct)
                         for name, correct in (("ann1", True), ("ann2", False))])
        session.add(AgreementStat(project="cfmm verification", question="answer_correct", n_pairs=2,
                                  percent_agreement=50.0, cohen_kappa=0.0))  # the whole store's figure

    result = export_release(workspace, "mixed", "1", tmp_path / "out")
    records = {r["id"]: r for r in load_records(result.path)}
    data = records["mucr:1"]["data"]
    for path in [data["cause_image"], *data["e2c_choices"]]:
        assert resolve_image(result.path, {"id": "mucr:1", "image": path}).is_file()
    assert records["cfmm:1"]["options"] == {"original": ["3", "4"], "counterfactual": ["2", "5"]}
    assert records["cfmm:1"]["data"] == {}
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert manifest["provenance"]["cfmm:1"]["annotation"] == {"adjudicated": False, "agreed": True,
                                                              "decision": ACCEPTED, "judgments": 2}
    assert manifest["provenance"]["cfmm:1"]["corrected_from"] == "3"
    card = (result.path / "README.md").read_text(encoding="utf-8")
    assert "| cfmm verification | answer_correct | 1 | 100.0 | – | – |" in card
    assert "50.0" not in card.split("## What this release can show")[0]  # no agreement of 50% (chance may be 50)

    other = init_workspace(tmp_path / "other")
    try:
        assert run_cli("--workspace", other.root, "ingest", "release", result.path).exit_code == 0
        with other.store.session() as session:
            back = {i.key: i.data for i in session.execute(select(Item)).scalars()}
        assert back["mucr:1"]["cause_image"] == f"sha256:{shas[0]}"
        assert back["cfmm:1"]["options"]["counterfactual"] == ["2", "5"]
        again = export_release(other, "mixed", "1", tmp_path / "again")
        # the same records, but for how each was verified: the judgments stay in the store they were made in
        def unverified(path: Path) -> list[dict]:
            return [{k: v for k, v in r.items() if k != "verification"} for r in load_records(path)]

        assert unverified(again.path) == unverified(result.path)
    finally:
        other.close()


def test_killed_export_leaves_no_release_and_its_leftovers_are_removed(stocked, tmp_path):
    """A real export process killed midway: no release appears; the next export clears its temporary folder."""
    import os
    import signal
    import subprocess
    import sys

    out = tmp_path / "out"
    code = ("import sys, time, cftools.release.export as e\n"
            "from cftools.workspace import load_workspace\n"
            "def stuck(*a, **k):\n    print('writing', flush=True); time.sleep(60)\n"
            "e.write_manifest = stuck\n"
            f"e.export_release(load_workspace({str(stocked.root)!r}), 'bench', '1', {str(out)!r})\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    leftovers = [p.name for p in out.iterdir()]
    assert len(leftovers) == 1 and leftovers[0].startswith(f".bench-1.pid{child.pid}.")
    assert not (out / "bench-1").exists()
    result = export_release(stocked, "bench", "1", out)
    assert [p.name for p in out.iterdir()] == ["bench-1"] and verify_release(result.path).ok


def test_in_review_items_stay_out_unless_asked_for(stocked, tmp_path):
    drafts = item_keys(stocked)[2::3]
    set_status(stocked, IN_REVIEW, drafts[:10])
    wide = load_records(export_release(stocked, "bench", "1.0", tmp_path / "out",
                                       options=ExportOptions(include_unverified=True)).path)
    assert {r["status"] for r in wide} == {ACCEPTED, DRAFT, CHECKED} and len(wide) == 290
    with_review = export_release(stocked, "bench", "1.1", tmp_path / "out",
                                 options=ExportOptions(include_unverified=True, include_in_review=True))
    records = load_records(with_review.path)
    assert len(records) == 300 and sum(r["status"] == IN_REVIEW and not r["verified"] for r in records) == 10


def test_release_names_no_path_user_or_host(stocked, tmp_path):
    import getpass
    import socket
    from types import SimpleNamespace

    from cftools.release.manifest import store_label

    result = export_release(stocked, "bench", "1.0", tmp_path / "out", options=ExportOptions(include_unverified=True))
    text = (result.path / "manifest.json").read_text() + (result.path / "README.md").read_text()
    assert str(stocked.root) not in text and str(tmp_path) not in text and "/tmp/" not in text
    host = socket.gethostname()
    assert len(host) < 4 or host not in text
    assert f"{getpass.getuser()}@" not in text
    assert store_label(SimpleNamespace(url="postgresql+psycopg://alice:pw@db.example.org:5432/bench")) == "postgresql"


def test_provenance_lists_the_checks_passed_with_their_version(stocked, tmp_path):
    from cftools import __version__
    from cftools.checks.runner import CheckOptions, run_checks
    from cftools.models import ItemEvent

    drafts = set(item_keys(stocked)[2::3])
    run_checks(stocked.store, options=CheckOptions(use_embeddings=False))
    with stocked.store.session() as session:
        ran = {key: set(detail["checks"]) for key, detail in session.execute(
            select(Item.key, ItemEvent.detail).join(ItemEvent, ItemEvent.item_id == Item.id)
            .where(ItemEvent.stage == "check"))}
    result = export_release(stocked, "bench", "1.0", tmp_path / "out", options=ExportOptions(include_unverified=True))
    provenance = json.loads((result.path / "manifest.json").read_text())["provenance"]
    assert set(ran) == drafts
    for key in drafts:
        passed, flags = provenance[key]["checks_passed"], set(provenance[key]["check_flags"])
        assert set(passed) == ran[key] - flags and not set(passed) & flags
        assert set(passed.values()) <= {__version__}
    assert any(provenance[key]["checks_passed"] for key in drafts)
    never_checked = item_keys(stocked)[0]  # accepted by hand in this fixture
    assert provenance[never_checked]["checks_passed"] == {}
