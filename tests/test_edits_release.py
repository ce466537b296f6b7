"""Nothing unverified is released as an edit (issue 44): an edited image travels with its item only when two people
accepted it; `--include-unverified-edits` adds the best-ranked unflagged candidate, said so in the console, the card,
croissant.json and on the image in browse.html (a real Chromium); the irrelevant edit is released by the same rules;
eval's edited-image table counts only released edits."""

from __future__ import annotations

import json
from pathlib import Path

import PIL.Image
import PIL.ImageDraw
import pytest
from sqlalchemy import select

from test_browser import UI_TIMEOUT_MS, browser  # noqa: F401 (fixture: a headless Chromium)
from cftools.images import read_image_file, register_image
from cftools.kinds.cvqa.ingest import ingest_cvqa
from cftools.models import Item

ROWS = [  # image, original question and answer, counterfactual question and answer, type
    ("flagged.png", "How many circles are there?", "3", "How many circles would there be if 1 was erased?", "2",
     "direct"),
    ("unflagged.png", "How many squares are there?", "2", "How many squares would there be if 1 more was drawn?", "3",
     "direct"),
    ("accepted.png", "Is there a square?", "yes", "Would there be a square if the square was erased?", "no",
     "boolean"),
    ("rejected.png", "Is there a circle?", "yes", "Would there be a circle if the circle was erased?", "no",
     "boolean"),
]
NAMES = [row[0].removesuffix(".png") for row in ROWS]
FLAGGED, UNFLAGGED, ACCEPTED, REJECTED = NAMES
MODEL, LICENCE = "black-forest-labs/FLUX.1-Kontext-dev", "FLUX.1-dev-Non-Commercial"
FLAG = {"code": "edit_region_too_large", "reason": "90% of the pixels changed", "value": 0.9}


def picture(boxes: int, shade: int = 0) -> PIL.Image.Image:
    image = PIL.Image.new("RGB", (48, 48), (200 - shade, 190, 170))
    draw = PIL.ImageDraw.Draw(image)
    for i in range(boxes):
        draw.rectangle([3 + 14 * i, 16, 11 + 14 * i, 28], fill=(20, 40, 90))
    return image


def candidates(store, folder: Path, name: str, prefix: str) -> dict[str, dict]:
    """Two stored candidates, 0 and 1, of an item's edit of PREFIX (each image distinct)."""
    refs = {}
    with store.write() as session:
        for k in ("0", "1"):
            path = folder / f"{prefix}-{name}-{k}.png"
            shade = 10 * NAMES.index(name) + 5 * int(k) + (50 if prefix != "edit" else 0)  # every image distinct
            picture(1 + int(k), shade=20 + shade).save(path)
            found = read_image_file(path)
            register_image(store, session, found)
            refs[k] = {"image": f"sha256:{found.sha256}",
                       "provenance": {"backend": "diffusers", "model": MODEL, "licence": LICENCE, "seed": int(k)}}
    return refs


def edit_state(refs: dict, how: str, prefix: str = "edit") -> dict:
    """An item's stored edit of PREFIX in the state HOW: every candidate flagged, the best unflagged, accepted by two
    people (their answer "none") or rejected by them."""
    flagged = how == FLAGGED
    data = {f"{prefix}_candidates": refs,
            f"{prefix}_checks": [{"k": 1, "score": 0.9, "flags": [FLAG] if flagged else []},
                                 {"k": 0, "score": 0.2, "flags": [FLAG]}]}
    if how == ACCEPTED:
        data.update({f"{prefix}_selected": 1, f"{prefix}_answer": "none",
                     f"{prefix}_verification": {"1": {"decision": "accepted"}}})
    if how == REJECTED:
        data[f"{prefix}_verification"] = {"1": {"decision": "rejected"}}
    return data


@pytest.fixture
def edited_ws(workspace, tmp_path):
    """Four accepted C-VQA items whose relevant edits are: all flagged, best unflagged (unjudged), accepted by two
    people, rejected by them; the unflagged and the accepted item also have an irrelevant edit in the same state."""
    images = tmp_path / "images"
    images.mkdir()
    for n, row in enumerate(ROWS):
        picture(n + 1).save(images / row[0])
    csv = tmp_path / "cvqa.csv"
    csv.write_text("img_path,query,answer,new query,new answer,type\n"
                   + "".join(",".join(row) + "\n" for row in ROWS), encoding="utf-8")
    ingest_cvqa(workspace.store, csv, images)
    edits = tmp_path / "edits"
    edits.mkdir()
    store = workspace.store
    with store.session() as session:  # each item by its counterfactual question
        found = {item.question: (item.key, item.id) for item in session.execute(select(Item)).scalars()}
    by_name = {name: found[row[3]][0] for name, row in zip(NAMES, ROWS)}
    keys = dict(found.values())
    for name, key in by_name.items():
        data = edit_state(candidates(store, edits, name, "edit"), name)
        if name in (UNFLAGGED, ACCEPTED):
            data.update(edit_state(candidates(store, edits, name, "irrelevant_edit"), name, "irrelevant_edit"))
        with store.write() as session:
            item = session.get(Item, keys[key])
            item.data = {**(item.data or {}), **data,
                         "edit": {"condition": "one box fewer", "instruction": "erase a box",
                                  "irrelevant_condition": "the sky is pink",
                                  "irrelevant_instruction": "paint the background pink"}}
            item.status = "accepted"
            session.add(item)
    return workspace, by_name


def export(run_cli, version: str, *flags: str) -> tuple[dict, Path, dict[str, dict]]:
    result = run_cli("export", "edits", "--version", version, "--licence", "CC-BY-4.0", *flags, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    folder = Path(out["path"])
    records = {r["id"]: r for r in map(json.loads, (folder / "records.jsonl").read_text().splitlines())}
    assert run_cli("verify", str(folder)).exit_code == 0
    return out, folder, records


EDIT_FIELDS = {"edited_image", "edited_image_verified", "edited_answer", "edited_image_model",
               "edited_image_licence"}
IRRELEVANT_FIELDS = {"irrelevant_edited_image", "irrelevant_edited_image_verified", "irrelevant_edited_answer",
                     "irrelevant_change", "irrelevant_edited_image_model", "irrelevant_edited_image_licence"}


def test_by_default_only_edits_two_people_accepted_are_released_and_the_rest_keep_their_answers(edited_ws, run_cli):
    workspace, by_name = edited_ws
    out, folder, records = export(run_cli, "1.0")
    accepted = records[by_name[ACCEPTED]]
    assert accepted["data"]["edited_image_verified"] is True and accepted["data"]["edited_answer"] == "none"
    assert (folder / accepted["data"]["edited_image"]).is_file()
    assert accepted["data"]["irrelevant_edited_image_verified"] is True
    assert accepted["data"]["irrelevant_edited_answer"] == "none"  # the people's answer about it
    assert accepted["data"]["irrelevant_change"] == "the sky is pink"
    assert accepted["data"]["irrelevant_edited_image_model"] == MODEL
    assert accepted["data"]["irrelevant_edited_image_licence"] == LICENCE
    for name in (FLAGGED, UNFLAGGED, REJECTED):
        record = records[by_name[name]]
        assert not (EDIT_FIELDS | IRRELEVANT_FIELDS) & set(record["data"]), name
        assert "edit_candidates" not in record["data"] and "irrelevant_edit_candidates" not in record["data"]
        row = next(r for r in ROWS if r[0].startswith(name))
        assert (record["original_question"], record["original_answer"], record["question"], record["answer"]) == (
            row[1], row[2], row[3], row[4])  # its ordinary questions and answers
    assert len(list((folder / "images").iterdir())) == 4 + 2  # the originals and the accepted item's two edits
    assert out["edits"] == {"items": 4, "with_candidates": 4, "released": 1, "irrelevant_released": 1,
                            "unverified": 0}
    card = (folder / "README.md").read_text()
    assert "NOT verified by people" not in card and "1 items carry an edited image" in card
    console = run_cli("export", "edits", "--version", "1.1", "--licence", "CC-BY-4.0").output
    assert ("1 of 4 items carry an edited image (1 an irrelevant edit): the edits of 3 more were not accepted by "
            "two people (cftools annotate push --task edit; or --include-unverified-edits).") in " ".join(
                console.split())


def test_with_the_flag_only_the_best_unflagged_candidates_are_released_and_everything_says_so(edited_ws, run_cli):
    workspace, by_name = edited_ws
    out, folder, records = export(run_cli, "2.0", "--include-unverified-edits")
    unflagged = records[by_name[UNFLAGGED]]["data"]
    edits = workspace.store.session()
    with edits as session:
        stored = session.execute(select(Item).where(Item.key == by_name[UNFLAGGED])).scalar_one().data
    best = stored["edit_candidates"]["1"]["image"].removeprefix("sha256:")
    assert unflagged["edited_image"] == f"images/{best}.png" and unflagged["edited_image_verified"] is False
    assert unflagged["edited_answer"] == "3"  # the counterfactual answer: nobody answered about it
    assert unflagged["irrelevant_edited_image_verified"] is False
    assert unflagged["irrelevant_edited_answer"] == "2"  # the original answer stays
    for name in (FLAGGED, REJECTED):  # a flagged candidate never; people's rejection wins
        assert not (EDIT_FIELDS | IRRELEVANT_FIELDS) & set(records[by_name[name]]["data"]), name
    assert records[by_name[ACCEPTED]]["data"]["edited_image_verified"] is True  # verified either way
    assert out["edits"]["unverified"] == 2 and out["edits"]["released"] == 2
    card = (folder / "README.md").read_text()
    warning = card.index("**Edited images NOT verified by people.**")
    assert warning < card.index("## Files")  # at the top, not at the end
    assert "2 of the 4\n> edited images" in card
    croissant = json.loads((folder / "croissant.json").read_text())
    assert "2 edited images are NOT verified by people" in croissant["rai:dataLimitations"]
    fields = {f["name"]: f for rs in croissant["recordSet"] for f in rs.get("field", [])}
    assert (EDIT_FIELDS | IRRELEVANT_FIELDS) <= set(fields)
    assert "--include-unverified-edits" in fields["edited_image_verified"]["description"]
    console = " ".join(run_cli("export", "edits", "--version", "2.1", "--licence", "CC-BY-4.0",
                               "--include-unverified-edits").output.split())
    assert "2 released edits are NOT verified by people (--include-unverified-edits" in console


def test_a_waived_flag_no_longer_keeps_a_candidate_from_the_flagged_release(edited_ws, run_cli):
    workspace, by_name = edited_ws
    with workspace.store.write() as session:
        item = session.execute(select(Item).where(Item.key == by_name[FLAGGED])).scalar_one()
        item.data = {**item.data, "waived_flags": {FLAG["code"]: {"by": "someone", "reason": "checked by eye"}}}
    _, _, records = export(run_cli, "3.0", "--include-unverified-edits")
    assert records[by_name[FLAGGED]]["data"]["edited_image_verified"] is False
    _, _, records = export(run_cli, "3.1")
    assert "edited_image" not in records[by_name[FLAGGED]]["data"]  # without the flag: still not released


def test_eval_edited_table_counts_only_released_edits(edited_ws, run_cli, tmp_path):
    from cftools.evaluate.run import load_run

    _, folder, _ = export(run_cli, "4.0")
    out = run_cli("eval", str(folder), "--model", "blind", "--quiet", "--out", str(tmp_path / "run"))
    assert out.exit_code == 0, out.output
    run = load_run(tmp_path / "run")
    assert sum(p["which"] == "edited" for p in run.predictions) == 1  # the accepted edit only
    total = run.summary["cvqa"]["edited"][-1]
    assert total["group"] == "total" and total["n"] == 1


def test_browse_labels_an_unverified_edit_on_the_image_itself_in_chromium(edited_ws, run_cli, browser):  # noqa: F811
    from playwright.sync_api import expect

    workspace, by_name = edited_ws
    _, folder, records = export(run_cli, "5.0", "--include-unverified-edits")
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = context.new_page()
    page.goto((folder / "browse.html").as_uri())
    page.locator("article").first.wait_for()
    page.locator("#search").fill(by_name[UNFLAGGED])
    expect(page.locator("#shown")).to_have_text("1 of 4 shown")  # drawn again: only then are its figures final
    card = page.locator("article", has=page.locator("h2", has_text=by_name[UNFLAGGED]))
    figures = card.locator("figure")
    captions = [figures.nth(n).locator("figcaption").inner_text() for n in range(figures.count())]
    assert captions == ["image", "relevant edit — the answer becomes 3", "irrelevant edit — the answer stays 2"]
    for n in (1, 2):  # each edit's label is inside its own figure, beside its image, and visible
        label = figures.nth(n).locator(".edit-warning")
        assert label.inner_text() == "edited — NOT verified by people" and label.is_visible()
        image_box, label_box = figures.nth(n).locator("img").bounding_box(), label.bounding_box()
        assert abs(label_box["y"] + label_box["height"] - image_box["y"]) < 5  # right on top of the image
        colour = label.evaluate("node => getComputedStyle(node).backgroundColor")
        assert colour == "rgb(204, 0, 0)"  # styled to be seen
    assert figures.nth(0).locator(".edit-warning").count() == 0  # the original is not an edit
    page.locator("#search").fill(by_name[ACCEPTED])
    expect(page.locator("#shown")).to_have_text("1 of 4 shown")
    accepted = page.locator("article", has=page.locator("h2", has_text=by_name[ACCEPTED]))
    accepted.wait_for()
    assert accepted.locator(".edit-warning").count() == 0  # people accepted it: no warning
    assert "relevant edit — the answer becomes none" in accepted.locator("figcaption").all_inner_texts()
    context.close()


def test_the_console_line_says_why_edits_are_not_released():
    from cftools.release.edited import edits_line

    none = {"items": 6, "with_candidates": 6, "released": 0, "irrelevant_released": 0, "unverified": 0}
    assert edits_line(none, False) == ("0 of 6 items carry an edited image: no edit was accepted by two people "
                                       "(cftools annotate push --task edit; or --include-unverified-edits).")
    assert edits_line(none, True).startswith("0 of 6 items carry an edited image: the candidates of all 6 are "
                                             "flagged by the edit checks or were rejected by people")
    assert edits_line({**none, "with_candidates": 0}, False) is None  # no edits at all: nothing to say


def test_a_cfmm_pairs_irrelevant_edit_keeps_the_basic_answer_and_its_relevant_edit_gets_the_counterfactual_one():
    from cftools.kinds import get_kind
    from cftools.release.edited import with_released_edits

    refs = {"1": {"image": "sha256:" + "a" * 64, "provenance": {"model": MODEL, "licence": LICENCE}}}
    data = {"basic_question": "What colour is the car?", "basic_answer": "red",
            **edit_state(refs, UNFLAGGED), **edit_state(refs, UNFLAGGED, "irrelevant_edit"),
            "edit": {"irrelevant_condition": "a cloud in the sky"}}
    record = {"id": "cfmm-1", "kind": "cfmm", "question": "What colour would the car be if painted blue?",
              "answer": "blue", "original_question": "What colour is the car now?", "original_answer": "dark red",
              "data": data}
    released = with_released_edits(get_kind("cfmm").hooks.release.export_record(record),
                                   include_unverified=True)["data"]
    assert (released["edited_answer"], released["irrelevant_edited_answer"]) == ("blue", "red")
    assert released["irrelevant_change"] == "a cloud in the sky"
    assert not with_released_edits({**record, "data": data})["data"].keys() & {"edited_image",
                                                                              "irrelevant_edited_image"}
