"""Issue 45, every error one line naming the cause: harness files that are not what they claim (a workbook of
random bytes or none, a VLMEvalKit `index` that is no row index, an lmms-eval sample that logged no reply)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from test_annotate import make_items, mark_checked

from cftools.evaluate.run import load_run


@pytest.fixture
def releases(workspace, run_cli, tmp_path) -> dict[str, Path]:
    make_items(run_cli, tmp_path / "imgs", 3)
    mark_checked(workspace.store)
    return {fmt: workspace.root / "releases" / f"r-1-{fmt}" for fmt in ("vlmevalkit", "lmms-eval")
            if run_cli("export", "r", "--version", "1", "--licence", "CC0-1.0", "--include-unverified",
                       "--format", fmt).exit_code == 0}


def one_line_error(out, *names: str) -> str:
    text = out.output.strip()
    assert out.exit_code == 1 and "Traceback" not in text, text
    lines = text.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), text
    for name in names:
        assert name in " ".join(lines[0].split()), lines[0]
    return lines[0]


def vlmevalkit_rows(release: Path) -> list[dict]:
    csv.field_size_limit(sys.maxsize)
    rows = []
    for table in sorted(release.glob("*.tsv")):
        with open(table, encoding="utf-8", newline="") as fh:
            rows += [{k: v for k, v in row.items() if k != "image"} for row in csv.DictReader(fh, delimiter="\t")]
    return rows


def write_tsv(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.mark.parametrize("content", [b"", b"\x8f\x01PK\x03garbage" * 50], ids=["empty", "random-bytes"])
def test_a_workbook_that_is_not_one_is_one_line(releases, run_cli, tmp_path, content):
    book = tmp_path / "model_CF_r_cvqa_OpenEnded.xlsx"
    book.write_bytes(content)
    one_line_error(run_cli("eval", "import", releases["vlmevalkit"], book, "--out", tmp_path / "run"),
                   book.name, "cannot read the prediction file", "not an xlsx workbook")


@pytest.mark.parametrize("index", ["-1", "abc", "1.5"])
def test_a_vlmevalkit_index_that_is_no_row_index_is_refused(releases, run_cli, tmp_path, index):
    rows = [{**row, "prediction": "2"} for row in vlmevalkit_rows(releases["vlmevalkit"])]
    assert rows and all(row["index"].isdigit() for row in rows)
    good = write_tsv(tmp_path / "good.tsv", rows)
    assert run_cli("eval", "import", releases["vlmevalkit"], good, "--out", tmp_path / "good-run").exit_code == 0
    rows[1]["index"] = index
    bad = write_tsv(tmp_path / "bad.tsv", rows)
    one_line_error(run_cli("eval", "import", releases["vlmevalkit"], bad, "--out", tmp_path / "run"),
                   "bad.tsv, row 3", f"index {index!r} is not a whole number")


def test_an_lmms_eval_sample_with_no_reply_is_unanswered_not_the_text_brackets(releases, run_cli, tmp_path):
    release = releases["lmms-eval"]
    docs = [json.loads(line) for task in sorted(release.glob("*/*.jsonl"))
            for line in task.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(docs) >= 2 and all("item_id" in d and "which" in d for d in docs)
    samples = tmp_path / "model_samples_cf.jsonl"
    samples.write_text("".join(json.dumps({"doc_id": n, "doc": doc, "filtered_resps": [] if n == 0 else ["2"]}) + "\n"
                               for n, doc in enumerate(docs)), encoding="utf-8")
    out = run_cli("eval", "import", release, samples, "--out", tmp_path / "run")
    assert out.exit_code == 0, out.output
    run = load_run(tmp_path / "run")
    assert len(run.predictions) == len(docs) - 1
    assert all(p.get("raw") != "[]" and p.get("output") != "[]" for p in run.predictions)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["skipped"]["not_answered"] >= 1


# ---------------------------------------------------------------- one strictness for every reader


def table_of(path: Path, answers: list[str], answer_type: str = "number") -> Path:
    path.write_text("id,image,question,answer,answer_type\n" + "".join(
        f"q{n},img{n}.jpg,How many cups are on the table {n}?,{answer},{answer_type}\n"
        for n, answer in enumerate(answers)), encoding="utf-8")
    return path


def sources_of(workspace) -> dict[str, object]:
    from sqlalchemy import select

    from cftools.models import SourceQuestion

    with workspace.store.session() as session:
        found = {s.external_id: s for s in session.execute(select(SourceQuestion)).scalars()}
        session.expunge_all()
    return found


@pytest.mark.parametrize("answer, reason", [
    ("-1", "'-1' is a negative number"), ("a few", "'a few' is not a number"),
    ("3.0", "'3.0' is not a whole number"), ("2.5", "'2.5' is not a whole number")])
def test_a_table_count_is_held_to_the_c_vqa_readers_rule(workspace, run_cli, tmp_path, answer, reason):
    """Issue 45: `ingest table` with answer_type=number stored -1, 'a few' and 3.0 unchanged (and `check` later
    passed some); it refuses them as the C-VQA reader does, naming the file, line and value."""
    table = table_of(tmp_path / "t.csv", ["2", answer])
    one_line_error(run_cli("ingest", "table", table), "t.csv, line 3", reason, "answer_type number")
    assert sources_of(workspace) == {}


def test_a_table_count_in_number_words_is_converted_and_recorded(workspace, run_cli, tmp_path):
    out = run_cli("ingest", "table", table_of(tmp_path / "t.csv", ["zero", "twenty-one", "4"]))
    assert out.exit_code == 0, out.output
    sources = sources_of(workspace)
    assert {k: s.answer for k, s in sources.items()} == {"q0": "0", "q1": "21", "q2": "4"}
    assert sources["q0"].meta["converted_answer"] == ["zero", "0"] and "converted_answer" not in sources["q2"].meta
    # other answer types are taken as given
    out = run_cli("ingest", "table", table_of(tmp_path / "o.csv", ["a few"], "other"))
    assert out.exit_code == 0, out.output


def test_the_c_vqa_reader_names_a_decimal_and_a_negative(workspace, run_cli, tmp_path):
    from test_hardening_faults import CVQA_COLUMNS, cvqa_row, write_csv

    for answer, reason in (("3.0", "'3.0' is not a whole number"), ("-1", "'-1' is a negative number")):
        source = write_csv(tmp_path / "c.csv", CVQA_COLUMNS, [cvqa_row("2", answer, "direct")])
        one_line_error(run_cli("ingest", "cvqa", source), "line 2", reason)


def test_a_repeated_mucr_id_is_refused_whichever_copy_skip_bad_skipped(workspace, run_cli, tmp_path):
    """Issue 45: with --skip-bad, when the first of a repeated id was skipped (its image leaves the --images
    folder), the second went in silently."""
    from test_mucr_ingest import draw_images, items_of, published_records, write_jsonl

    images = tmp_path / "images"
    draw_images(images)
    rows = published_records(style="Photograph", images=True)
    first = dict(rows[0], image_0="../outside.png")
    source = write_jsonl(tmp_path / "human.jsonl", [first, rows[0], *rows[1:]])
    out = run_cli("ingest", "mucr", source, "--images", images, "--skip-bad", "--report", tmp_path / "bad.jsonl",
                  "--json")
    assert out.exit_code == 0, out.output
    skipped = [json.loads(line) for line in (tmp_path / "bad.jsonl").read_text().splitlines()]
    assert [s["record"] for s in skipped] == ["line 1", "line 2"], skipped
    assert "given twice in this file (first on line 1)" in skipped[1]["reason"]
    assert len(items_of(workspace)) == 3


# ---------------------------------------------------------------- a re-ingest that changes a record's text


def test_a_vqav2_re_ingest_that_changes_a_question_is_refused_unless_update(workspace, run_cli, tmp_path):
    """Issue 45: re-ingesting a VQAv2 file whose question text changed under the same question id kept the old
    text without a word. It is refused naming the id and both texts; --update replaces it and says so."""
    from vqav2_files import sample_records, write_vqav2

    records = sample_records()
    questions, annotations = write_vqav2(tmp_path / "v1", records)
    assert run_cli("ingest", "vqav2", "--questions", questions, "--annotations", annotations).exit_code == 0
    assert run_cli("ingest", "vqav2", "--questions", questions, "--annotations", annotations).exit_code == 0
    records[0]["question"] = "How many cats?"
    questions, annotations = write_vqav2(tmp_path / "v2", records)
    one_line_error(run_cli("ingest", "vqav2", "--questions", questions, "--annotations", annotations),
                   "question_id 1", "'How many dogs?' -> 'How many cats?'", "--update")
    assert sources_of(workspace)["1"].question == "How many dogs?"
    out = run_cli("ingest", "vqav2", "--questions", questions, "--annotations", annotations, "--update")
    assert out.exit_code == 0 and "1 records already stored had another text" in " ".join(out.output.split())
    assert sources_of(workspace)["1"].question == "How many cats?" and len(sources_of(workspace)) == 3


def test_a_repeated_vqav2_question_id_is_refused(workspace, run_cli, tmp_path):
    from vqav2_files import sample_records, write_vqav2

    records = sample_records()
    records.append({**records[0], "question": "How many cats?"})
    questions, annotations = write_vqav2(tmp_path / "v", records)
    one_line_error(run_cli("ingest", "vqav2", "--questions", questions), "questions[3]",
                   "question_id 1 is given twice in this file (first at questions[0])")


def test_a_table_re_ingest_that_changes_an_answer_is_refused_unless_update(workspace, run_cli, tmp_path):
    assert run_cli("ingest", "table", table_of(tmp_path / "t.csv", ["2", "3"])).exit_code == 0
    one_line_error(run_cli("ingest", "table", table_of(tmp_path / "t.csv", ["2", "4"])), "t.csv, line 3",
                   "id 'q1'", "answer '3' -> '4'", "--update")
    assert run_cli("ingest", "table", tmp_path / "t.csv", "--update").exit_code == 0
    assert sources_of(workspace)["q1"].answer == "4"


def test_a_cfmm_re_ingest_that_changes_a_draft_item_is_refused_unless_update(workspace, run_cli, tmp_path):
    import PIL.Image

    from test_cfmm import cfmm_lines

    PIL.Image.new("RGB", (12, 9), "red").save(tmp_path / "bus.png")
    lines = cfmm_lines("bus.png")
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert run_cli("ingest", "cfmm", source, "--images", tmp_path).exit_code == 0
    lines[0]["cf_question"] = lines[0]["cf_question"] + " (reworded)"
    source.write_text("".join(json.dumps(r) + "\n" for r in lines))
    line = one_line_error(run_cli("ingest", "cfmm", source, "--images", tmp_path), "another text", "--update")
    assert "reworded" in line
    out = run_cli("ingest", "cfmm", source, "--images", tmp_path, "--update")
    assert out.exit_code == 0, out.output


@pytest.mark.parametrize("field, value, reason", [
    ("cf_answer", "-1", "'-1' is a negative number"), ("basic_options", ["1", "2.5"], "'2.5' is not a whole number"),
    ("cf_options", ["a few", "2"], "'a few' is not a number")])
def test_a_cfmm_count_pair_is_held_to_the_count_rule(workspace, run_cli, tmp_path, field, value, reason):
    import PIL.Image

    from test_cfmm import cfmm_lines

    PIL.Image.new("RGB", (12, 9), "red").save(tmp_path / "bus.png")
    lines = cfmm_lines("bus.png")
    count = next(n for n, line in enumerate(lines) if line["type"] == "count")
    lines[count][field] = value
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in lines))
    one_line_error(run_cli("ingest", "cfmm", source, "--images", tmp_path), f"line {count + 1}", reason)
    lines[count].update(cf_options=["one", "two"], cf_answer="two", basic_options=["1", "2"], basic_answer="1")
    source.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert run_cli("ingest", "cfmm", source, "--images", tmp_path).exit_code == 0
    from sqlalchemy import select

    from cftools.models import Item

    with workspace.store.session() as session:
        item = next(i for i in session.execute(select(Item)).scalars() if i.group == "count")
        assert item.answer == "2" and item.data["options"]["counterfactual"] == ["1", "2"]
        assert item.data["converted_answers"]["cf_answer"] == ["two", "2"]


@pytest.mark.parametrize("original", ["-1", "a few", "3.0"])
def test_a_count_item_built_on_an_original_answer_that_is_no_count_is_flagged(original):
    """Issue 45: items rewritten from table rows stored before the readers were strict (-1, 'a few') passed
    `check`; the answer_type check looks at the original answer of a count item too."""
    from dataclasses import replace

    from cftools.checks.rules import check_answer_type
    from cftools.item_view import ItemView

    item = ItemView(id=1, key="k", kind="cvqa", group="numerical-direct", status="draft", answer_style="count",
                    question="How many cups would there be if one more was added?", answer="2",
                    source_question="How many cups are there?", source_answer=original)
    flag = check_answer_type(item)
    assert flag is not None and f"the original answer {original!r} is not a count" in flag.reason
    assert check_answer_type(replace(item, source_answer="1")) is None


def test_a_control_count_in_number_words_is_converted_and_recorded(workspace, tmp_path):
    """Issue 45: the controls reader follows the count rule every reader does (words converted and recorded where
    people do not see it; negatives and decimals refused)."""
    from sqlalchemy import select

    from test_annotator_controls import controls_file

    from cftools.annotate.controls import load_controls
    from cftools.errors import InputError
    from cftools.models import ControlItem, Item

    bad = controls_file(tmp_path / "bad", [{"answer": "2.5"}])
    with pytest.raises(InputError, match=r"line 2: answer: the answer '2.5' is not a count written in digits"):
        load_controls(workspace.store, bad, "cvqa")
    path = controls_file(tmp_path / "ctl", [{"answer": "two", "answer_correct": "no", "corrected_answer": "zero"}])
    load_controls(workspace.store, path, "cvqa")
    with workspace.store.session() as session:
        item = session.execute(select(Item)).scalar_one()
        control = session.execute(select(ControlItem)).scalar_one()
        assert item.answer == "2" and control.settled["corrected_answer"] == "0"
        assert control.settled["converted_answers"] == {"answer": ["two", "2"], "corrected_answer": ["zero", "0"]}
        assert "converted" not in json.dumps(item.data or {})  # nothing a person sees tells a control apart
