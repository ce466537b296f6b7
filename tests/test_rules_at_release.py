"""The kinds' decision rules hold at release (issue 23): `export` refuses a record its kind calls invalid, and
`verify` reports one that got into a release all the same. Real stores, real releases, the real CLI."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import PIL.Image
from sqlalchemy import select

from cftools.kinds import get_kind
from cftools.models import ACCEPTED, Item, SourceQuestion


def accepted_cfmm_item(run_cli, store, folder: Path, answer: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    PIL.Image.new("RGB", (16, 12), "red").save(folder / "bus.png")
    (folder / "basic.csv").write_text("image,question,answer\nbus.png,What colour is the bus?,red\n")
    assert run_cli("ingest", "table", folder / "basic.csv", "--images", folder, "--licence", "CC0-1.0").exit_code == 0
    with store.write() as session:
        source = session.execute(select(SourceQuestion).order_by(SourceQuestion.id.desc())).scalars().first()
        session.add(Item(key=f"cfmm:{uuid.uuid4().hex[:8]}", kind="cfmm", group="color", source_id=source.id,
                         question="If the bus were painted like the sky, what colour would it be?", answer=answer,
                         status=ACCEPTED, data={"type": "color", "basic_question": "What colour is the bus?",
                                                "basic_answer": "red",
                                                "options": {"original": ["red", "blue"],
                                                            "counterfactual": ["red", "blue"]}}))


def test_export_refuses_a_cfmm_answer_outside_its_options(workspace, run_cli, tmp_path):
    accepted_cfmm_item(run_cli, workspace.store, tmp_path / "images", "green")
    out = run_cli("export", "rules", "--version", "1", "--licence", "CC0-1.0", "--format", "cfmm")
    assert out.exit_code != 0
    assert "export refused: item cfmm:" in out.output
    assert "the counterfactual answer 'green' is not one of its options (red / blue)" in out.output


def test_verify_reports_a_record_that_breaks_its_kinds_rules(workspace, run_cli, tmp_path):
    accepted_cfmm_item(run_cli, workspace.store, tmp_path / "images", "blue")
    out = run_cli("export", "rules", "--version", "1", "--licence", "CC0-1.0", "--json")
    assert out.exit_code == 0, out.output
    release = Path(json.loads(out.output)["path"])
    assert run_cli("verify", release).exit_code == 0
    # a tool rewrites the record (and the manifest to match): the hashes hold, the rule does not
    records = release / "records.jsonl"
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    rows[0]["answer"] = "green"
    records.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    manifest = json.loads((release / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["path"] == "records.jsonl":
            entry.update(size=records.stat().st_size, sha256=hashlib.sha256(records.read_bytes()).hexdigest())
    (release / "manifest.json").write_text(json.dumps(manifest))
    failed = run_cli("verify", release)
    assert failed.exit_code != 0
    assert "the counterfactual answer 'green' is not one of its options" in failed.output


def test_mucr_records_need_three_independent_explanations_and_existing_candidates():
    kind = get_kind("mucr").hooks.release
    pair = {"cause_image": "images/a.png", "effect_image": "images/b.png", "explanation_draft": "The draft text."}
    good = {"verified": True, "data": {**pair, "explanations": ["One way.", "Another way.", "A third way."]}}
    assert kind.record_problem(good) is None
    copies = {"verified": True, "data": {**pair, "explanations": ["One way.", "one   WAY", "A third way."]}}
    assert kind.record_problem(copies) == "2 independent explanations, not 3 (some are copies of each other)"
    drafted = {"verified": True, "data": {**pair, "explanations": ["One way.", "the draft text", "A third way."]}}
    assert kind.record_problem(drafted) == "an explanation is the model's draft, not a person's"
    selected = {"data": {"candidates": {"photo": {"0": {}, "1": {}}}, "selection": {"photo": {"cause": 5, "effect": 1}}}}
    assert kind.record_problem(selected) == "its photo selection names cause candidate 5, which does not exist"


def test_mucr_records_need_three_peoples_explanations_and_a_cue_one_of_them_chose():
    kind = get_kind("mucr").hooks.release
    pair = {"cause_image": "images/a.png", "effect_image": "images/b.png", "cue": "rain",
            "explanation_draft": "In the first image a man runs in the rain. In the second image he is ill. The "
                                 "causal link is the rain."}
    by = {"ann1": "One way.", "ann2": "Another way.", "ann3": "A third way."}
    cues = {name: {"cue": "rain", "false_cues": ["a", "b", "c"]} for name in by}
    good = {"verified": True, "data": {**pair, "explanations": list(by.values()), "explanations_by_annotator": by,
                                       "cue_sets_by_annotator": cues}}
    assert kind.record_problem(good) is None
    # an adjudication that kept the model's cue and no explanation (issue 32)
    assert kind.record_problem({"verified": True, "data": {**pair, "cue": "rain"}}) == (
        "0 independent explanations, not 3")
    model_cue = {"verified": True, "data": {**good["data"], "cue": "umbrella"}}
    assert kind.record_problem(model_cue) == "the cue 'umbrella' is no person's choice"
    two = {"verified": True, "data": {**good["data"], "explanations_by_annotator": {"ann1": "One way.",
                                                                                   "ann2": "Another way."}}}
    assert kind.record_problem(two) == "explanations of 2 people, not 3"
    indeed = {"verified": True, "data": {**good["data"], "explanations": [
        "One way.", "Another way.", pair["explanation_draft"] + " Indeed."]}}
    assert kind.record_problem(indeed) == "an explanation is the model's draft, not a person's"
