"""generate edits (issue 34): instructions by the LLM (the loopback chat stub), candidates by the embedded tiny
InstructPix2Pix pipeline and by an `images.edit` endpoint on a loopback server, the edit checks on crafted images."""

from __future__ import annotations

import json
from pathlib import Path

import click
import httpx
import numpy as np
import PIL.Image
import PIL.ImageDraw
import pytest
from sqlalchemy import select

from fixtures_llm import stub_backend
from loopback import running_server
from test_annotate import ls_workspace  # noqa: F401 (fixture of team_workspace)
from test_browser import team_workspace  # noqa: F401 (fixture: a workspace whose tasks go to three people)
from cftools.generate.llm_task import LLMRun
from cftools.generate.edits import (EDIT_INSTRUCTION, EditOptions, editable_items, generate_edits,
                                    write_instructions)
from cftools.imagegen.base import ImageGenError
from cftools.imagegen.edit_checks import (EDIT_ANSWER_NOT_FLIPPED, EDIT_GLOBAL_CHANGE, EDIT_IDENTICAL,
                                          EDIT_NOT_PRESERVED, answer_flip_flag, check_edit, rank_edits)
from cftools.imagegen.edits import EditSettings, make_edit_backend
from cftools.kinds.cvqa.ingest import ingest_cvqa
from cftools.models import Generation, Image, Item

KEY = "sk-edits-secret-0123456789"
ROWS = [("a.png", "How many circles are there?", "3", "How many circles would there be if 2 more were drawn?", "5",
         "direct"),
        ("b.png", "Is there a square?", "yes", "Would there be a square if the square was erased?", "no", "boolean")]


def scene(boxes: int = 3, size: int = 64, shade: int = 0) -> PIL.Image.Image:
    """A flat background with dark boxes; SHADE shifts every pixel (a global change)."""
    image = PIL.Image.new("RGB", (size, size), (200 + shade, 180 + shade, 160 + shade))
    draw = PIL.ImageDraw.Draw(image)
    for i in range(boxes):
        draw.rectangle([4 + 20 * i, 20, 14 + 20 * i, 34], fill=(20, 40, 90))
    for x in range(0, size, 4):  # texture, so that SSIM has structure to compare
        draw.line([x, 50, x, size], fill=(120 + shade, 100 + shade, 90 + shade))
    return image


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("edit-cache")


@pytest.fixture(scope="module")
def tiny(cache_dir):
    backend = make_edit_backend({"cache_dir": str(cache_dir)})
    yield backend
    backend.close()


@pytest.fixture
def items_ws(workspace, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    scene(3).save(images / "a.png")
    scene(1).save(images / "b.png")
    csv = tmp_path / "cvqa.csv"
    csv.write_text("img_path,query,answer,new query,new answer,type\n"
                   + "".join(",".join(row) + "\n" for row in ROWS), encoding="utf-8")
    ingest_cvqa(workspace.store, csv, images)
    return workspace


# ------------------------------------------------------------------ the checks on crafted images


def test_each_edit_check_fires_on_its_crafted_failure_and_stays_silent_on_a_good_edit():
    original = scene(3)
    good = scene(2)  # one box erased: a local change, the rest untouched
    assert check_edit(original, good).codes == []
    assert check_edit(original, original.copy()).codes == [EDIT_IDENTICAL]
    # every pixel brightened: a global change (before issue 44: "region too large")
    assert check_edit(original, scene(3, shade=50)).codes == [EDIT_GLOBAL_CHANGE]
    noisy = np.asarray(scene(2), dtype=np.int16) + np.random.default_rng(0).integers(-20, 21, (64, 64, 3))
    report = check_edit(original, PIL.Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)))
    assert EDIT_NOT_PRESERVED in report.codes and report.ssim_outside < 0.9  # the rest altered below the diff level
    ranked = rank_edits([check_edit(original, original.copy(), 0), check_edit(original, good, 1)])
    assert [r.k for r in ranked] == [1, 0]


def test_degenerate_images_are_refused_with_their_reason_and_the_checks_still_judge_old_ones(recwarn):
    from cftools.imagegen.edit_base import degenerate_reason

    assert "1x1 px" in degenerate_reason(PIL.Image.new("RGB", (1, 1)), (64, 64))
    assert "blank" in degenerate_reason(PIL.Image.new("RGB", (64, 64), (128, 128, 128)), (64, 64))
    assert "293x37 px image for 1024x1024 px" in degenerate_reason(scene(3).resize((293, 37)), (1024, 1024))
    assert degenerate_reason(scene(3).resize((128, 128)), (64, 64)) is None  # the asked aspect, another size: kept
    # a candidate stored before the refusal is still checked, without a crash or a warning
    for stored in (PIL.Image.new("RGB", (1, 1)), PIL.Image.new("RGB", (64, 64), (128, 128, 128))):
        assert check_edit(scene(3), stored).codes
    assert not [w for w in recwarn if "edit_checks" in str(w.filename)]


def test_answer_check_flags_an_edit_that_does_not_flip_the_answer():
    assert answer_flip_flag("5", "3", "5", "3", "number") is None
    assert answer_flip_flag("3", "3", "5", "3", "number").code == EDIT_ANSWER_NOT_FLIPPED  # not flipped
    assert answer_flip_flag("5", "4", "5", "3", "number").code == EDIT_ANSWER_NOT_FLIPPED  # original wrong
    assert answer_flip_flag("maybe 5 or 6", "3", "5", "3", "number").code == EDIT_ANSWER_NOT_FLIPPED  # unknown


# ------------------------------------------------------------------ backends


def test_tiny_pipeline_makes_n_candidates_with_shared_recorded_seeds_and_licence(tiny):
    results = tiny.edit(scene(3), "erase one box", EditSettings(n=3, seed=7))
    assert [r.k for r in results] == [0, 1, 2] and all(r.ok for r in results)
    assert [r.provenance["seed"] for r in results] == [7, 8, 9]
    prov = results[0].provenance
    assert prov["licence"] == "Apache-2.0" and prov["pipeline"] == "StableDiffusionInstructPix2PixPipeline"
    assert prov["instruction"] == "erase one box" and prov["size"] == "64x64" and results[0].image.size == (64, 64)
    again = tiny.edit(scene(3), "erase one box", EditSettings(n=3, seed=7, candidates=[1]))
    assert again[0].k == 1 and again[0].provenance["seed"] == 8


def test_a_non_commercial_model_is_used_only_when_asked(cache_dir, tmp_path):
    from cftools.imagegen.tiny_edit import embedded_edit_pipeline_folder

    folder = tmp_path / "kontext"
    import shutil

    shutil.copytree(embedded_edit_pipeline_folder(cache_dir), folder)
    (folder / "README.md").write_text("---\nlicense: flux-1-dev-non-commercial-license\n---\n# a model\n")
    with pytest.raises(ImageGenError, match="not for commercial use.*--allow-non-commercial"):
        make_edit_backend({}, model=str(folder))
    backend = make_edit_backend({"allow_non_commercial": True}, model=str(folder))
    assert backend.licence == "flux-1-dev-non-commercial-license"
    backend.close()
    # as the FLUX.1 [dev] cards write it: `license: other` and the licence's name beside it
    (folder / "README.md").write_text("---\nlicense: other\nlicense_name: flux-1-dev-non-commercial-license\n---\n")
    with pytest.raises(ImageGenError, match="not for commercial use"):
        make_edit_backend({}, model=str(folder))
    (folder / "README.md").unlink()  # no card: a folder named as a known model takes the table's licence
    named = folder.rename(tmp_path / "FLUX.1-Kontext-dev")
    with pytest.raises(ImageGenError, match=r"FLUX.1 \[dev\] Non-Commercial License"):
        make_edit_backend({}, model=str(named))


@pytest.fixture(scope="module")
def images_api():
    with running_server("images_api_server.py", "--port", "0") as url:
        yield url


def test_images_api_edit_posts_the_original_and_returns_n_candidates(images_api, monkeypatch):
    monkeypatch.setenv("MY_EDIT_KEY", KEY)
    httpx.post(f"{images_api}/control/script", json={"replies": ["ok", "500"]}).raise_for_status()
    backend = make_edit_backend({"backend": "openai", "model": "edit-model-1", "base_url": f"{images_api}/v1",
                                 "api_key_env": "MY_EDIT_KEY", "request_attempts": 1, "licence": "proprietary"})
    try:
        results = backend.edit(scene(3), "erase one box", EditSettings(n=2, size="64x64"))
        assert [r.ok for r in results] == [True, True] and results[0].image.size == (64, 64)
        assert results[0].provenance["licence"] == "proprietary" and results[0].provenance["seed"] is None
        failed = backend.edit(scene(1), "erase one box", EditSettings(n=2, size="64x64"))
        assert [r.ok for r in failed] == [False, False] and KEY not in failed[0].reason
    finally:
        backend.close()
    edits = [r for r in httpx.get(f"{images_api}/control/requests").json()["requests"] if r.get("edit")]
    assert edits[0]["body"]["prompt"] == "erase one box" and edits[0]["body"]["n"] == "2"
    assert edits[0]["image_bytes"] > 0 and edits[0]["authorized"]


def test_degenerate_and_wrong_size_images_are_refused_at_the_backend_never_stored(items_ws, stub, images_api,
                                                                                      monkeypatch):
    # before: a 1x1 px and a 293x37 px reply (for 64x64) were stored as candidates, flagged only as too large
    monkeypatch.setenv("MY_EDIT_KEY", KEY)
    store = items_ws.store
    items = editable_items(store, ("cvqa",), ("numerical-direct",))
    write_instructions(store, stub_backend(stub), items, run=LLMRun(params={"temperature": 0.0}, quiet=True))
    httpx.post(f"{images_api}/control/script", json={"replies": ["degenerate"]}).raise_for_status()
    backend = make_edit_backend({"backend": "openai", "model": "edit-model-1", "base_url": f"{images_api}/v1",
                                 "api_key_env": "MY_EDIT_KEY", "request_attempts": 1, "licence": "proprietary"})
    try:
        made = generate_edits(store, items_ws.root, backend, editable_items(store, ("cvqa",), ("numerical-direct",)),
                              options=EditOptions(per_item=4, size="64x64", irrelevant=False))
    finally:
        backend.close()
    assert made.images_made == 1
    with store.session() as session:
        item = session.execute(select(Item).where(Item.group == "numerical-direct")).scalar_one()
        assert sorted(item.data["edit_candidates"]) == ["3"]
        reasons = {f["k"]: f["reason"] for f in item.data["edit_failures"]}
    assert sorted(reasons) == [0, 1, 2]
    assert "1x1 px" in reasons[0] and "under 32 px a side" in reasons[0]
    assert "293x37 px image for 64x64 px" in reasons[1] and "blank" in reasons[2]


# ------------------------------------------------------------------ the store: instructions, candidates, resume


class ScriptedAnswerer:
    """Answers the original question: 5 about an image that is not the original, 3 about the original."""

    def __init__(self, original: Path, on_edit: str = "5") -> None:
        self.original, self.on_edit = Path(original), on_edit

    def generate(self, prompts):
        return ["3" if Path(p.images[0]).read_bytes() == self.original.read_bytes() else self.on_edit
                for p in prompts]


def test_generate_edits_stores_instructions_then_seeded_candidates_ranked_and_resumes(items_ws, stub, tiny,
                                                                                      tmp_path):
    store = items_ws.store
    items = editable_items(store, ("cvqa",))
    assert len(items) == 2 and items[0].subject.original_answer == "3" and items[0].subject.counterfactual_answer == "5"
    report = write_instructions(store, stub_backend(stub), items, run=LLMRun(params={"temperature": 0.0}, quiet=True))
    assert report.items_created == 2
    with store.session() as session:
        item = session.execute(select(Item).where(Item.group == "numerical-direct")).scalar_one()
        gen = session.get(Generation, item.data["edit"]["generation_id"])
        assert gen.params["output_schema"]["name"] == EDIT_INSTRUCTION.name
        assert item.data["edit"]["instruction"] and item.data["edit"]["template"] == "edits/instruction.j2"
    items = editable_items(store, ("cvqa",), ("numerical-direct",))
    answerer = ScriptedAnswerer(items[0].image_path, on_edit="3")  # never flips
    made = generate_edits(store, items_ws.root, tiny, items, options=EditOptions(per_item=2, seed=3, irrelevant=False),
                          answerer=answerer)  # the irrelevant edits: tests/test_irrelevant_edits.py
    assert made.images_made == 2 and made.failures == [] and made.licence == "Apache-2.0"
    with store.session() as session:
        item = session.execute(select(Item).where(Item.group == "numerical-direct")).scalar_one()
        candidates = item.data["edit_candidates"]
        assert sorted(candidates) == ["0", "1"] and [candidates[k]["provenance"]["seed"] for k in "01"] == [3, 4]
        for c in candidates.values():
            sha = c["image"].removeprefix("sha256:")
            assert Path(session.execute(select(Image.path).where(Image.sha256 == sha)).scalar_one()).is_file()
        checks = item.data["edit_checks"]
        assert sorted(c["k"] for c in checks) == [0, 1] and checks[0]["score"] >= checks[1]["score"]
        assert all(EDIT_ANSWER_NOT_FLIPPED in [f["code"] for f in c["flags"]] for c in checks)
    # a rerun makes nothing; one more candidate is made alone, with its own seed
    assert generate_edits(store, items_ws.root, tiny, items,
                          options=EditOptions(per_item=2, seed=3, irrelevant=False)).images_made == 0
    more = generate_edits(store, items_ws.root, tiny, editable_items(store, ("cvqa",), ("numerical-direct",)),
                          options=EditOptions(per_item=3, seed=3, irrelevant=False))
    assert more.images_made == 1 and more.candidates_kept == 2
    with store.session() as session:
        item = session.execute(select(Item).where(Item.group == "numerical-direct")).scalar_one()
        assert item.data["edit_candidates"]["2"]["provenance"]["seed"] == 5


def test_cli_generate_edits(items_ws, stub, run_cli, cache_dir):
    config = items_ws.path("cftools.toml")
    text = config.read_text().replace('backend = "local"', f'backend = "openai"\nbase_url = "{stub.base_url}"')
    config.write_text(text.replace('model = "smollm2-135m-instruct"', 'model = "stub"')
                      .replace("\n[edits]\n", f'\n[edits]\ncache_dir = "{cache_dir}"\n', 1))
    result = run_cli("generate", "edits", "--kind", "cvqa", "--per-item", "1", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["images_made"] == 4 and summary["instructions"]["items_created"] == 2  # relevant and irrelevant
    assert summary["licence"] == "Apache-2.0"
    again = run_cli("generate", "edits", "--kind", "cvqa", "--per-item", "1")
    assert again.exit_code == 0 and "0 edits made" in again.output and "1 kept" not in again.output


# ------------------------------------------------------------------ scored: the paired score on a scripted model


def test_eval_asks_the_original_question_about_the_edited_image_and_computes_the_paired_score(tmp_path):
    from fixtures_eval import cvqa_record, png_bytes, write_release

    from cftools.evaluate.predictions import outcomes_from_predictions, prediction_line, read_generated
    from cftools.evaluate.questions import PromptTemplates, build_questions
    from cftools.evaluate.report import csv_rows
    from cftools.kinds import get_kind

    records = [cvqa_record(i, "numerical-direct", "2", "5", "number") for i in range(4)]
    records.append(cvqa_record(4, "numerical-direct", "2", "5", "number"))  # no edited image: not in the table
    edits = {}
    for i, record in enumerate(records[:4]):
        blob = png_bytes(100 + i)
        edits[record["id"]] = blob
    release = write_release(tmp_path / "rel", records, {r["id"]: png_bytes(i) for i, r in enumerate(records)})
    import hashlib

    for record in records[:4]:
        sha = hashlib.sha256(edits[record["id"]]).hexdigest()
        (release / "images" / f"{sha}.png").write_bytes(edits[record["id"]])
        record["data"] = {"edited_image": f"images/{sha}.png"}
    (release / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    questions, _ = build_questions(release, records, PromptTemplates(), "generate", needs_image=True)
    edited = [q for q in questions if q.which == "edited"]
    assert len(edited) == 4 and all(q.gold == "5" and q.prompt.images[0].name != Path(records[0]["image"]).name
                                    for q in edited)
    assert edited[0].prompt.text.startswith(records[0]["original_question"])
    blind, _ = build_questions(release, records, PromptTemplates(), "generate", needs_image=False)
    blind_edited = [q for q in blind if q.which == "edited"]
    assert len(blind_edited) == 4 and all(not q.prompt.images for q in blind_edited)  # the same text, no image
    # the scripted model: items 0 and 1 right on both images; item 2 right on the original only; item 3 right on
    # the edited only; every counterfactual (text-only) question right on items 0-2
    script = {("cvqa-0", "original"): "2", ("cvqa-0", "edited"): "5", ("cvqa-1", "original"): "2",
              ("cvqa-1", "edited"): "5", ("cvqa-2", "original"): "2", ("cvqa-2", "edited"): "2",
              ("cvqa-3", "original"): "7", ("cvqa-3", "edited"): "5"}
    lines = []
    for q in questions:
        raw = script.get((q.item_id, q.which), "5" if q.which == "counterfactual" and q.item_id != "cvqa-3" else "0")
        parsed, correct = read_generated(q, raw)
        lines.append(prediction_line(q, raw, parsed, correct))
    section = get_kind("cvqa").hooks.evaluate.summarize(outcomes_from_predictions(lines))
    total = section["edited"][-1]
    assert total["group"] == "total" and total["n"] == 4
    assert total["original"]["value"] == 0.75 and total["edited"]["value"] == 0.75
    assert total["paired"]["value"] == 0.5 and total["counterfactual"]["value"] == 0.75
    rows = csv_rows({"cvqa": section})
    assert {"edited_paired", "edited_edited", "edited_counterfactual"} <= {r["metric"] for r in rows}


# ------------------------------------------------------------------ released: the edit travels with its item


def test_the_release_carries_the_chosen_edit_beside_the_original_and_verifies(items_ws, tiny, run_cli, tmp_path):
    store = items_ws.store
    with store.write() as session:
        for item in session.execute(select(Item)).scalars():
            item.data = {**(item.data or {}), "edit": {"instruction": "erase one box", "condition": "one box fewer"}}
            item.status = "accepted"
            session.add(item)
    generate_edits(store, items_ws.root, tiny, editable_items(store, ("cvqa",)), options=EditOptions(per_item=2))
    unjudged = run_cli("export", "edits", "--version", "0.9", "--licence", "CC-BY-4.0", "--json")
    assert unjudged.exit_code == 0, unjudged.output  # nobody accepted an edit yet: none is released (issue 44)
    assert json.loads(unjudged.output)["edits"]["released"] == 0
    with store.write() as session:  # two people accepted each item's best-ranked candidate
        passed_over = []
        for item in session.execute(select(Item)).scalars():
            best = item.data["edit_checks"][0]["k"]
            item.data = {**item.data, "edit_selected": best}
            passed_over += [c["image"].removeprefix("sha256:") for k, c in item.data["edit_candidates"].items()
                            if k != str(best)]
    result = run_cli("export", "edits", "--version", "1.0", "--licence", "CC-BY-4.0", "--json")
    assert result.exit_code == 0, result.output
    folder = Path(json.loads(result.output)["path"])
    records = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2
    for record in records:
        edited = record["data"]["edited_image"]
        assert "edit_candidates" not in record["data"] and (folder / edited).is_file()  # only the released edit
        assert edited != record["image"] and record["data"]["edited_image_licence"] == "Apache-2.0"
        assert record["data"]["edited_image_verified"] is True
    assert passed_over and not any((folder / "images" / f"{sha}.png").exists() for sha in passed_over)
    croissant = json.loads((folder / "croissant.json").read_text())
    fields = [f["name"] for rs in croissant["recordSet"] for f in rs.get("field", [])]
    assert {"edited_image", "edited_answer", "edited_image_model", "edited_image_licence"} <= set(fields)
    assert run_cli("verify", str(folder)).exit_code == 0
    from cftools.release.browse import item_view

    captions = [caption for caption, _, _ in item_view(records[0], {}, {})["images"][:2]]
    assert captions == ["image", f"relevant edit — the answer becomes {records[0]['answer']}"]  # side by side
    card = (folder / "README.md").read_text()
    assert "## Edited images" in card and "| Apache-2.0 | 2 | 2 |" in card and "commercial" not in card
    harness_formats_ask_about_the_edited_image(items_ws, run_cli, tmp_path)


def harness_formats_ask_about_the_edited_image(items_ws, run_cli, tmp_path) -> None:
    """lmms-eval docs and VLMEvalKit rows hold the original question about the edited image (its gold: the edited
    image's answer), paired with the original image's; predictions read back by `cftools eval import` give the
    paired score."""
    import base64
    import csv
    import sys

    from cftools.evaluate.run import load_run
    from cftools.release.lmms_eval import metric_name

    with items_ws.store.write() as session:  # people verified the count edit's best candidate and counted 4
        item = session.execute(select(Item).where(Item.group == "numerical-direct")).scalar_one()
        item.data = {**item.data, "edit_selected": item.data["edit_checks"][0]["k"], "edit_answer": "4"}
    folders = {}
    for fmt in ("lmms-eval", "vlmevalkit"):
        result = run_cli("export", "edits", "--version", "1.0", "--licence", "CC-BY-4.0", "--format", fmt, "--json")
        assert result.exit_code == 0, result.output
        folders[fmt] = Path(json.loads(result.output)["path"])
    records = {r["id"]: r for r in map(json.loads, (folders["lmms-eval"] / "records.jsonl").read_text().splitlines())}
    docs = [json.loads(line) for line in (folders["lmms-eval"] / "edits_cvqa" / "test.jsonl").read_text().splitlines()]
    edited = {d["item_id"]: d for d in docs if d["which"] == "edited"}
    assert len(edited) == 2
    for item_id, doc in edited.items():
        data = records[item_id]["data"]
        assert doc["images"] == [data["edited_image"]] and doc["gold"] == data["edited_answer"]
        assert doc["prompt"].startswith(records[item_id]["original_question"])
    assert sorted(d["gold"] for d in edited.values()) == ["4", "no"]  # the verified answer; else the counterfactual
    task = (folders["lmms-eval"] / "edits_cvqa" / "edits_cvqa.yaml").read_text()
    assert metric_name("total", "edited_paired") in task
    csv.field_size_limit(sys.maxsize)
    files = []
    for tsv in sorted(folders["vlmevalkit"].glob("*.tsv")):
        with open(tsv, encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        by_role = {r["l2-category"]: r for r in rows}
        assert by_role["original"]["pair_index"] == by_role["edited"]["index"]
        assert by_role["edited"]["pair_index"] == by_role["original"]["index"]
        assert by_role["counterfactual"]["pair_index"] == ""
        data = records[by_role["edited"]["item_id"]]["data"]
        edited_file = folders["vlmevalkit"] / data["edited_image"]
        assert base64.b64decode(by_role["edited"]["image"]) == edited_file.read_bytes()  # base64 like the others
        predictions = tmp_path / f"model_{tsv.name}"
        with open(predictions, "w", encoding="utf-8", newline="") as fh:  # a model that answers every row right
            writer = csv.DictWriter(fh, fieldnames=[*rows[0], "prediction"], delimiter="\t")
            writer.writeheader()
            writer.writerows({**r, "prediction": r["answer"]} for r in rows)
        files.append(str(predictions))
    out = run_cli("eval", "import", str(folders["vlmevalkit"]), *files, "--out", str(tmp_path / "run"))
    assert out.exit_code == 0, out.output
    total = load_run(tmp_path / "run").summary["cvqa"]["edited"][-1]
    assert total["group"] == "total" and total["n"] == 2 and total["paired"]["value"] == 1.0
    assert "paired" in (tmp_path / "run" / "report.md").read_text()


# ------------------------------------------------------------------ verified by two people (the edit task)


def edit_judgment(shows: bool = True, changed: bool = False, answer: str = "2", what=None, candidate: str = "1"):
    from cftools.judgments import Answer

    return Answer(fields={"shows_condition": shows, "other_change": changed, "other_change_what": what,
                          "edited_answer": answer, "candidate": candidate})


def test_edit_task_decides_by_two_people_and_an_adjudicator_and_shows_only_checked_candidates():
    from cftools.judgments import InvalidResult
    from cftools.annotate.edit_task import (decide_edit, edit_units, exact_option, fit_edit, free_text_answer,
                                         read_edit)

    data = {"edit_candidates": {"0": {"image": "sha256:a"}, "1": {"image": "sha256:b"}, "2": {"image": "sha256:c"}},
            "edit_checks": [{"k": 2, "flags": []}, {"k": 1, "flags": []},
                            {"k": 0, "flags": [{"code": EDIT_IDENTICAL}]}]}
    assert edit_units(data) == ["2"]  # the best-ranked candidate without a flag
    agreed = decide_edit("2", [("a", edit_judgment(answer="Two", candidate="2")),
                               ("b", edit_judgment(answer="2", candidate="2"))], free_text_answer)
    assert agreed.decided and agreed.data["edit_selected"] == 2 and agreed.data["edit_answer"] == "2"
    assert edit_units({**data, **agreed.data}) == []
    # CFMM compares the exact option: "Two" and "2" are different answers, so the adjudicator (a third) decides
    split = decide_edit("2", [("a", edit_judgment(answer="Two", candidate="2")),
                              ("b", edit_judgment(answer="2", candidate="2"))], exact_option)
    assert not split.decided and split.wants == 3
    third = decide_edit("2", [("a", edit_judgment(candidate="2")), ("b", edit_judgment(changed=True, what="sky",
                                                                                       candidate="2")),
                              ("c", edit_judgment(answer="three", candidate="2"))], free_text_answer)
    assert third.decided and third.data["edit_answer"] == "3"
    assert third.data["edit_verification"]["2"]["annotators"] == ["c"]
    rejected = decide_edit("2", [("a", edit_judgment(shows=False, candidate="2")),
                                 ("b", edit_judgment(changed=True, what="the sky", candidate="2"))], free_text_answer)
    assert rejected.decided and "edit_selected" not in rejected.data
    assert edit_units({**data, **rejected.data}) == ["1"]  # the next checked candidate becomes a task of its own
    with pytest.raises(InvalidResult, match="write what changed"):
        read_edit({"shows_condition": ["yes"], "other_change": ["yes"], "edited_answer": "2"})
    judged = read_edit({"shows_condition": ["yes"], "other_change": ["no"], "edited_answer": ["blue"]})
    with pytest.raises(InvalidResult, match="not one of the options"):
        fit_edit(judged, {"edit_candidate": "1", "answer_choices": [{"value": "red"}, {"value": "green"}]})
    fit_edit(judged, {"edit_candidate": "1", "answer_choices": [{"value": "red"}, {"value": "blue"}]})
    assert judged.fields["candidate"] == "1"
    # CFMM's task: the basic question about the edited image, answered by picking one of the pair's options
    from types import SimpleNamespace

    from cftools.kinds import get_kind

    item = SimpleNamespace(question="If the bus were blue?", answer="blue", data={
        **data, "basic_question": "What colour is the bus?", "edit": {"condition": "the bus is blue"},
        "options": {"original": ["red", "blue"], "counterfactual": ["blue", "green"]}})
    payload = get_kind("cfmm").hooks.annotate.task_payload("edit", "2", item, None, "/img/bus.png",
                                                           {"sha256:c": "/img/c.png"})
    assert (payload["image"], payload["edited_image"], payload["question"]) == ("/img/bus.png", "/img/c.png",
                                                                              "What colour is the bus?")
    assert [c["value"] for c in payload["answer_choices"]] == ["red", "blue", "green"]
    assert "proposed_answer" not in payload and "If the bus" not in str(payload)  # nor the counterfactual answer


KONTEXT = "black-forest-labs/FLUX.1-Kontext-dev"


def add_edit(store, item_id: int, folder: Path, model: str = KONTEXT) -> None:
    """Two stored candidates of the item's edit under FOLDER (a Label Studio media root): candidate 1 ranked best
    without a flag, candidate 0 (identical to the original) flagged."""
    from cftools.images import read_image_file, register_image
    from cftools.imagegen.edit_base import KNOWN_LICENCES

    folder.mkdir(parents=True, exist_ok=True)
    refs = {}
    with store.write() as session:
        for k, boxes in (("0", 3), ("1", 2)):
            scene(boxes).save(folder / f"edit-{k}.png")
            image = read_image_file(folder / f"edit-{k}.png")
            register_image(store, session, image)
            refs[k] = {"image": f"sha256:{image.sha256}", "provenance": {
                "backend": "diffusers", "model": model, "licence": KNOWN_LICENCES[model], "seed": int(k)}}
        item = session.get(Item, item_id)
        item.data = {**(item.data or {}), "edit": {"condition": "there are two squares", "instruction":
                                                   "add one more square"},
                     "edit_candidates": refs, "edit_checks": [
                         {"k": 1, "flags": [], "score": 0.97},
                         {"k": 0, "flags": [{"code": EDIT_IDENTICAL, "reason": "same bytes"}], "score": 0.1}]}
        session.add(item)


def edit_result(shows: str = "yes", changed: str = "no", answer: str = "2") -> list[dict]:
    return [{"from_name": "shows_condition", "to_name": "edited_image", "type": "choices",
             "value": {"choices": [shows]}},
            {"from_name": "other_change", "to_name": "edited_image", "type": "choices",
             "value": {"choices": [changed]}},
            *([{"from_name": "other_change_what", "to_name": "edited_image", "type": "textarea",
                "value": {"text": ["the colours"]}}] if changed == "yes" else []),
            {"from_name": "edited_answer", "to_name": "question", "type": "textarea", "value": {"text": [answer]}}]


def test_two_people_verify_an_edit_through_label_studio_and_it_is_released_with_both_images(
        label_studio, team_workspace, run_cli):
    import uuid

    from test_annotate import make_items
    from test_browser import assigned, pull_json, push_json

    store = team_workspace.store
    folder = label_studio.media_root / f"edits-{uuid.uuid4().hex[:6]}"
    make_items(run_cli, folder, 2)
    with store.write() as session:
        ids = []
        for item in session.execute(select(Item).order_by(Item.id)).scalars():
            item.status = "accepted"  # the text verified already: the edit is judged apart from it
            ids.append(item.id)
    for item_id in ids:
        add_edit(store, item_id, folder / str(item_id))
    pushed = push_json(run_cli, "--kind", "cvqa", "--task", "edit")
    assert pushed["pushed"] == 4 and sum(pushed["assigned"].values()) == 4  # two people per item
    tasks = assigned(store, "edit")
    assert {t.purpose for t in tasks} == {"edit:1"}  # the checked candidate only, not the flagged one
    people = {item_id: [t for t in tasks if t.item_id == item_id] for item_id in ids}
    agree, split = ids
    for task in people[agree]:
        label_studio.client(task.assignee).annotations.create(id=task.ls_task_id, result=edit_result(answer="two"))
    first, second = people[split]
    label_studio.client(first.assignee).annotations.create(id=first.ls_task_id, result=edit_result(answer="2"))
    label_studio.client(second.assignee).annotations.create(id=second.ls_task_id, result=edit_result(answer="3"))
    report = pull_json(run_cli)
    assert report["invalid"] == [] and report["refused"] == []
    [tiebreak] = report["tiebreaks"]
    [third] = tiebreak["sent_to"]
    assert third not in (first.assignee, second.assignee)  # the adjudicator has not judged the edit
    [adjudication] = [t for t in assigned(store, "edit") if t.assignee == third]
    label_studio.client(third).annotations.create(id=adjudication.ls_task_id,
                                                  result=edit_result(changed="yes", answer="2"))
    pull_json(run_cli)
    with store.session() as session:
        accepted, rejected = session.get(Item, agree).data, session.get(Item, split).data
    assert accepted["edit_selected"] == 1 and accepted["edit_answer"] == "2"  # "two" in the normal form
    assert "edit_selected" not in rejected and rejected["edit_verification"]["1"]["decision"] == "rejected"
    result = run_cli("export", "edits", "--version", "1.0", "--licence", "CC-BY-4.0", "--json")
    assert result.exit_code == 0, result.output
    release = Path(json.loads(result.output)["path"])
    records = {r["id"]: r for r in map(json.loads, (release / "records.jsonl").read_text().splitlines())}
    verified = [r for r in records.values() if r["data"].get("edited_image")]
    assert len(verified) == 1  # people rejected the other item's edit: it has none (not its flagged candidate 0)
    record = verified[0]
    assert record["data"]["edited_image_verified"] is True and record["data"]["edited_answer"] == "2"
    assert (release / record["image"]).is_file() and (release / record["data"]["edited_image"]).is_file()
    assert record["data"]["edited_image"] != record["image"]
    card = (release / "README.md").read_text()
    assert "Not for commercial use: edited images" in card and f"`{KONTEXT}`" in card
    croissant = json.loads((release / "croissant.json").read_text())
    assert "NOT FOR COMMERCIAL USE" in croissant["rai:dataLimitations"]
    assert run_cli("verify", str(release)).exit_code == 0


@pytest.mark.parametrize("args, backend", [(["--llm-backend", "openai"], "openai"), (["--backend", "openai"], "openai"),
                                           (["--backend", "local", "--llm-backend", "local"], "local"), ([], None)])
def test_generate_edits_names_its_llm_backend_apart_from_the_edit_backend(args, backend):
    """Issue 46: `--backend` was the LLM beside `--edit-backend`, the image editor. Now `--llm-backend`; the old
    spelling is still read, and not shown in --help."""
    from cftools.commands.edits import edits_cmd

    assert edits_cmd.make_context("edits", list(args)).params["backend"] == backend
    shown = edits_cmd.get_help(click.Context(edits_cmd))
    assert "--llm-backend" in shown and "--edit-backend" in shown and "--backend " not in shown


def test_the_llm_backend_given_twice_differently_is_a_usage_error():
    from cftools.commands.edits import edits_cmd

    for args in (["--backend", "local", "--llm-backend", "openai"], ["--llm-backend", "openai", "--backend", "local"]):
        with pytest.raises(click.UsageError, match="say different things"):
            edits_cmd.make_context("edits", args)
