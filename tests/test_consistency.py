"""Counterfactual consistency (issue 44): a release whose items carry a relevant and an irrelevant edit is asked a
fourth question (`irrelevant`), and scored with the consistency score by `cftools eval` (a scripted model, the
blind baseline on the loopback chat stub, the tiny LLaVA) and by `cftools eval import` of the lmms-eval and
VLMEvalKit exports, the numbers equal."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cftools.evaluate.consistency import IRRELEVANT, METRICS, consistency_section, item_consistency
from cftools.evaluate.run import EvalOptions, run_eval
from fixtures_eval import cvqa_record, png_bytes, write_release

N_ITEMS = 5
# The scripted model's replies about each item's three images (original gold 2, relevant-edit gold 5, irrelevant
# gold 2) and the verdicts they give: (consistency, changed on relevant, unchanged on irrelevant, change iff).
SCRIPT = {
    0: (("2", "5", "2"), (True, True, True, True)),
    1: (("2", "5", "5"), (False, True, False, False)),      # changed on the irrelevant edit too
    2: (("3", "5", "3"), (False, True, True, True)),        # wrong on the original, yet changes iff relevant
    3: (("2", "2", "2"), (False, False, True, False)),      # never changes
    4: (("2", "5", "I cannot tell"), (False, True, False, False)),  # unreadable about the irrelevant edit
}


def expected_total() -> dict[str, float]:
    verdicts = [v for _, v in SCRIPT.values()]
    return {metric: sum(v[n] for v in verdicts) / len(verdicts) for n, metric in enumerate(METRICS)}


def outcome(original, edited, irrelevant, gold=("2", "5", "2")) -> dict:
    """An item's outcome from its three read answers (None: unreadable)."""
    def asked(answer, right):
        return {"correct": answer == right, "unknown": answer is None, "answer": answer}

    return {"id": "x", "kind": "cvqa", "group": "g", "original": asked(original, gold[0]),
            "edited": asked(edited, gold[1]), IRRELEVANT: asked(irrelevant, gold[2])}


def test_the_consistency_score_by_hand():
    outcomes = [outcome("2", "5", "2"), outcome("2", "5", "5"), outcome("3", "5", "3"), outcome("2", "2", "2"),
                outcome("2", "5", None), outcome(None, "5", "2")]
    assert [tuple(item_consistency(o).values()) for o in outcomes] == [
        (True, True, True, True), (False, True, False, False), (False, True, True, True),
        (False, False, True, False), (False, True, False, False), (False, False, False, False)]
    # compared as read, in the VQA normal form: "Two" about the irrelevant edit is the "2" about the original
    assert item_consistency(outcome("2", "5", "Two"))["unchanged_on_irrelevant"]
    total = consistency_section(outcomes)[-1]
    assert total["group"] == "total" and total["n"] == 6
    assert total["consistency"]["value"] == pytest.approx(1 / 6)
    assert total["changed_on_relevant"]["value"] == pytest.approx(4 / 6)
    assert total["unchanged_on_irrelevant"]["value"] == pytest.approx(3 / 6)
    assert total["change_iff_relevant"]["value"] == pytest.approx(2 / 6)
    assert total["unknown_irrelevant"] == pytest.approx(1 / 6)
    without = [{k: v for k, v in o.items() if k != IRRELEVANT} for o in outcomes]
    assert consistency_section(without) is None  # no irrelevant edit asked: no section


# ------------------------------------------------------------------ a release with relevant and irrelevant edits


def add_image(release: Path, blob: bytes) -> str:
    path = f"images/{hashlib.sha256(blob).hexdigest()}.png"
    (release / path).write_bytes(blob)
    return path


def edits_release(folder: Path) -> tuple[Path, list[dict]]:
    """N_ITEMS C-VQA count items (original answer 2, counterfactual 5), each with a relevant edit (answer 5) and an
    irrelevant one (answer stays 2), and one item without edits."""
    records = [cvqa_record(i, "numerical-direct", "2", "5", "number") for i in range(N_ITEMS + 1)]
    images = {r["id"]: png_bytes(i) for i, r in enumerate(records)}
    release = write_release(folder, records, images)
    for i, record in enumerate(records[:N_ITEMS]):
        record["data"] = {"edited_image": add_image(release, png_bytes(100 + i)), "edited_image_verified": True,
                          "edited_answer": "5", "irrelevant_edited_image": add_image(release, png_bytes(200 + i)),
                          "irrelevant_edited_image_verified": True, "irrelevant_edited_answer": "2",
                          "irrelevant_change": "a cloud in the sky"}
    return write_release(folder, records, images), records


class ScriptedModel:
    """A model that answers by the image it is shown (SCRIPT); the counterfactual (text) question gets "0"."""

    needs_image = True

    def __init__(self, records: list[dict]) -> None:
        self.replies = {}
        for i, (replies, _) in SCRIPT.items():
            data = records[i]["data"]
            for path, reply in zip((records[i]["image"], data["edited_image"], data["irrelevant_edited_image"]),
                                   replies):
                self.replies[Path(path).name] = reply

    def generate(self, prompts):  # noqa: ANN001, ANN201
        return [self.replies.get(p.images[0].name, "0") if "if" not in p.text else "0" for p in prompts]

    def close(self) -> None:
        pass


def test_the_irrelevant_question_is_the_original_question_about_the_irrelevant_edit(tmp_path):
    from cftools.evaluate.questions import PromptTemplates, build_questions

    release, records = edits_release(tmp_path / "rel")
    questions, _ = build_questions(release, records, PromptTemplates(), "generate", needs_image=True)
    by_key = {q.key: q for q in questions}
    asked = [q for q in questions if q.which == IRRELEVANT]
    assert len(asked) == N_ITEMS  # the item without edits has none
    for q in asked:
        original = by_key[(q.item_id, "original")]
        data = next(r for r in records if r["id"] == q.item_id)["data"]
        assert q.gold == "2" and q.prompt.text == original.prompt.text and q.answer_type == original.answer_type
        assert [p.name for p in q.prompt.images] == [Path(data["irrelevant_edited_image"]).name]
    blind, _ = build_questions(release, records, PromptTemplates(), "generate", needs_image=False)
    assert all(not q.prompt.images for q in blind if q.which == IRRELEVANT)
    assert len([q for q in blind if q.which == IRRELEVANT]) == N_ITEMS
    # the gold answer stays the original's where the release names none
    del records[0]["data"]["irrelevant_edited_answer"]
    again, _ = build_questions(release, records, PromptTemplates(), "generate", needs_image=True)
    assert next(q for q in again if q.key == ("cvqa-0", IRRELEVANT)).gold == "2"


def test_eval_reports_the_consistency_section_of_a_scripted_model(tmp_path):
    release, records = edits_release(tmp_path / "rel")
    result = run_eval(release, "openai:scripted", options=EvalOptions(out_dir=tmp_path / "run"),
                      answerer=ScriptedModel(records))
    rows = result.summary["cvqa"]["consistency"]
    total = rows[-1]
    assert total["group"] == "total" and total["n"] == N_ITEMS
    assert {m: total[m]["value"] for m in METRICS} == pytest.approx(expected_total())
    assert result.summary["cvqa"]["edited"][-1]["paired"]["value"] == pytest.approx(3 / 5)  # beside the paired
    report = (tmp_path / "run" / "report.md").read_text()
    assert "counterfactual consistency" in report and "change iff relevant" in report
    assert "so it is never consistent" in report and "CounterBench" in report  # the definition used, stated
    with open(tmp_path / "run" / "report.csv", encoding="utf-8") as fh:
        metrics = {(r["group"], r["metric"]) for r in csv.DictReader(fh)}
    assert {("total", m) for m in (*METRICS, "edited_irrelevant", "unknown_irrelevant")} <= metrics


def test_blind_eval_asks_the_irrelevant_question_without_the_image(tmp_path, monkeypatch, llm_server):
    """The blind baseline (loopback chat stub, "two birds" to every count question) answers all three images
    alike: never changed on the relevant edit, always unchanged on the irrelevant one: its consistency is 0."""
    from cftools.evaluate.run import ChatAnswerer
    from cftools.llm import make_backend

    monkeypatch.delenv("CFTOOLS_WORKSPACE", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-blind-000000")
    llm_server.use_reply("llm_replies:eval_answers")
    release, _ = edits_release(tmp_path / "rel")
    backend = make_backend({"base_url": llm_server.base_url}, backend="openai", model="small")
    result = run_eval(release, "blind:openai:small", options=EvalOptions(out_dir=tmp_path / "blind"),
                      answerer=ChatAnswerer(backend, with_images=False))
    asked = llm_server.requests()
    assert len(asked) == (N_ITEMS + 1) * 2 + N_ITEMS * 2  # original, counterfactual; edited and irrelevant
    assert not any("image_url" in json.dumps(r["body"]) for r in asked)  # no image, not even the edits
    total = result.summary["cvqa"]["consistency"][-1]
    assert total["n"] == N_ITEMS and total["consistency"]["value"] == 0.0
    assert total["changed_on_relevant"]["value"] == 0.0 and total["unchanged_on_irrelevant"]["value"] == 1.0
    assert total["change_iff_relevant"]["value"] == 0.0


def test_tiny_llava_eval_gives_the_consistency_section(tiny_llava_dir, tmp_path):
    release, _ = edits_release(tmp_path / "rel")
    result = run_eval(release, f"hf:{tiny_llava_dir}",
                      options=EvalOptions(device="cpu", batch_size=4, out_dir=tmp_path / "run"))
    assert sum(1 for p in result.predictions if p["which"] == IRRELEVANT) == N_ITEMS
    total = result.summary["cvqa"]["consistency"][-1]
    assert total["n"] == N_ITEMS
    for metric in METRICS:
        value = total[metric]["value"]
        assert 0.0 <= value <= 1.0 and total[metric]["n"] == N_ITEMS
    assert "counterfactual consistency" in (tmp_path / "run" / "report.md").read_text()


# ------------------------------------------------------------------ the harness exports, read back by eval import


def harness_folder(release: Path, records: list[dict], folder: Path, write) -> Path:  # noqa: ANN001
    """The release written in a harness's format by its exporter (WRITE), its manifest made anew."""
    shutil.copytree(release, folder)
    entries = [SimpleNamespace(record=r) for r in records]
    write(SimpleNamespace(items=entries, folder=folder, name="cons", splits={"test": 1.0}, version="1.0",
                          workspace=SimpleNamespace(root=str(folder)), options={}))
    images = {r["id"]: (release / r["image"]).read_bytes() for r in records}
    return write_release(folder, records, images)


def test_eval_import_of_lmms_eval_and_vlmevalkit_files_gives_evals_consistency(tmp_path):
    from cftools.evaluate.harness_import import import_predictions
    from cftools.release.lmms_eval import TaskFunctions, metric_name, write_lmms_eval
    from cftools.release.vlmevalkit import write_vlmevalkit

    release, records = edits_release(tmp_path / "rel")
    own = run_eval(release, "openai:scripted", options=EvalOptions(out_dir=tmp_path / "own"),
                   answerer=ScriptedModel(records))
    raw = {(p["id"], p["which"]): p["raw"] for p in own.predictions}
    expected = own.summary["cvqa"]["consistency"]

    lmms = harness_folder(release, records, tmp_path / "lmms", write_lmms_eval)
    docs = [json.loads(line) for line in (lmms / "cons_cvqa" / "test.jsonl").read_text().splitlines()]
    assert sum(1 for d in docs if d["which"] == IRRELEVANT) == N_ITEMS  # its own doc
    assert metric_name("total", "consistency") in (lmms / "cons_cvqa" / "cons_cvqa.yaml").read_text()
    samples = tmp_path / "model_samples_cons_cvqa.jsonl"  # as lmms-eval --log_samples writes them
    samples.write_text("".join(json.dumps({"doc_id": n, "doc": d, "filtered_resps": [raw[(d["item_id"], d["which"])]]})
                               + "\n" for n, d in enumerate(docs)), encoding="utf-8")
    from_lmms = import_predictions(lmms, [samples], tmp_path / "from-lmms")
    # lmms-eval's own aggregation of the task's metrics (utils.py) gives the same numbers
    task = TaskFunctions(lmms, "cvqa", [("total", m) for m in METRICS])
    lines = [task.process_results(d, [raw[(d["item_id"], d["which"])]])[metric_name("total", "consistency")]
             for d in docs]
    for metric in METRICS:
        assert task.aggregation("total", metric)(lines) == pytest.approx(expected[-1][metric]["value"])

    vlm = harness_folder(release, records, tmp_path / "vlm", write_vlmevalkit)
    csv.field_size_limit(sys.maxsize)
    files, asked_rows = [], []
    for tsv in sorted(vlm.glob("*.tsv")):
        with open(tsv, encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        predictions = tmp_path / f"model_{tsv.name}"
        with open(predictions, "w", encoding="utf-8", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=[*rows[0], "prediction"], delimiter="\t")
            writer.writeheader()
            writer.writerows({**r, "prediction": raw[(r["item_id"], r["l2-category"])]} for r in rows)
        files.append(predictions)
        asked_rows += [r["l2-category"] for r in rows]
    assert asked_rows.count(IRRELEVANT) == N_ITEMS  # its own row
    from_vlm = import_predictions(vlm, files, tmp_path / "from-vlm")

    for imported in (from_lmms, from_vlm):
        assert imported.summary["cvqa"]["consistency"] == expected
    assert {m: expected[-1][m]["value"] for m in METRICS} == pytest.approx(expected_total())


def test_a_multiple_choice_item_keeps_its_options_about_the_irrelevant_edit_and_vlmevalkit_agrees(tmp_path):
    """CFMM: the irrelevant question offers the original question's options (the relevant edit the
    counterfactual's); a model that reads the images is consistent, in eval and from VLMEvalKit's MCQ rows."""
    from cftools.evaluate.harness_import import import_predictions
    from cftools.release.vlmevalkit import write_vlmevalkit
    from fixtures_eval import cfmm_record

    records = [cfmm_record(i, "color") for i in range(2)]
    images = {r["id"]: png_bytes(300 + i) for i, r in enumerate(records)}
    release = write_release(tmp_path / "rel", records, images)
    replies = {}
    for i, record in enumerate(records):
        record["data"] = {"edited_image": add_image(release, png_bytes(400 + i)), "edited_answer": "blue",
                          "irrelevant_edited_image": add_image(release, png_bytes(500 + i)),
                          "irrelevant_edited_answer": "red"}
        replies.update({Path(record["image"]).name: "red", Path(record["data"]["edited_image"]).name: "blue",
                        Path(record["data"]["irrelevant_edited_image"]).name: "red" if i == 0 else "green"})
    release = write_release(tmp_path / "rel", records, images)

    class ColourModel(ScriptedModel):
        def __init__(self) -> None:
            self.replies = replies

    own = run_eval(release, "openai:scripted", options=EvalOptions(mode="generate", out_dir=tmp_path / "own"),
                   answerer=ColourModel())
    asked = {(p["id"], p["which"]): p for p in own.predictions}
    assert asked[("cfmm-0", IRRELEVANT)]["correct"] and not asked[("cfmm-1", IRRELEVANT)]["correct"]
    total = own.summary["cfmm"]["consistency"][-1]
    assert total["n"] == 2 and total["consistency"]["value"] == 0.5 and total["change_iff_relevant"]["value"] == 0.5

    vlm = harness_folder(release, records, tmp_path / "vlm", write_vlmevalkit)
    csv.field_size_limit(sys.maxsize)
    files = []
    for tsv in sorted(vlm.glob("*.tsv")):
        with open(tsv, encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        for row in rows:
            if row["l2-category"] == IRRELEVANT:  # the original question's own text; its options as columns
                assert row["question"] == records[0]["original_question"] and [row["A"], row["B"]] == ["red", "green"]
        predictions = tmp_path / f"model_{tsv.name}"
        with open(predictions, "w", encoding="utf-8", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=[*rows[0], "prediction"], delimiter="\t")
            writer.writeheader()
            writer.writerows({**r, "prediction": asked[(r["item_id"], r["l2-category"])]["raw"]} for r in rows)
        files.append(predictions)
    imported = import_predictions(vlm, files, tmp_path / "from-vlm")
    assert imported.summary["cfmm"]["consistency"] == own.summary["cfmm"]["consistency"]


def test_eval_prints_the_paired_and_the_consistency_score_on_the_console(tmp_path, run_cli):
    """Issue 46: the paired score for edits and the consistency score were only in report.md; `eval` (here `eval
    import` of lmms-eval's samples, which prints as `eval` does) shows them on the console too."""
    from cftools.release.lmms_eval import write_lmms_eval

    release, records = edits_release(tmp_path / "rel")
    own = run_eval(release, "openai:scripted", options=EvalOptions(out_dir=tmp_path / "own"),
                   answerer=ScriptedModel(records))
    raw = {(p["id"], p["which"]): p["raw"] for p in own.predictions}
    lmms = harness_folder(release, records, tmp_path / "lmms", write_lmms_eval)
    docs = [json.loads(line) for line in (lmms / "cons_cvqa" / "test.jsonl").read_text().splitlines()]
    samples = tmp_path / "model_samples_cons_cvqa.jsonl"
    samples.write_text("".join(json.dumps({"doc_id": n, "doc": d, "filtered_resps": [raw[(d["item_id"], d["which"])]]})
                               + "\n" for n, d in enumerate(docs)), encoding="utf-8")
    result = run_cli("eval", "import", lmms, samples, "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert all(len(line) <= 80 for line in text.splitlines())  # a pipe's width, nothing cut
    assert "paired = the original question right about both the original and the edited image" in " ".join(
        text.split())
    row = next(line for line in text.splitlines() if line.startswith("│ cvqa "))
    cells = [c.strip() for c in row.strip("│").split("│")]
    total = expected_total()
    assert cells[:2] == ["cvqa", str(N_ITEMS)] and cells[2].startswith("60.0 (")  # paired: 3 of 5 right on both
    assert cells[3] == str(N_ITEMS) and cells[4].startswith(f"{100 * total['consistency']:.1f} (")
    assert cells[5].startswith(f"{100 * total['change_iff_relevant']:.1f} (")
