"""Issue 44, "edit checks are checks" and "conditions that differ": the edit checks are listed by `check --list`,
run by `check` and `check --only CODE` over the STORED candidates (re-ranking them), shown by `flags list` and
`show`, waivable (a waived flag no longer keeps its candidate from people), and `edit_condition_repeated` flags
items whose edit condition repeats another's. Real store, candidate files made with Pillow, the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import PIL.Image
import PIL.ImageDraw
import pytest
from sqlalchemy import select

from cftools.annotate.edit_task import REJECTED_EDIT, edit_units
from cftools.checks.edits import CONDITION_REPEATED, normalise_condition, repeated_conditions
from cftools.images import read_image_file, register_image
from cftools.imagegen.edit_checks import EDIT_CODES, EDIT_IDENTICAL
from cftools.kinds.cvqa.ingest import ingest_cvqa
from cftools.models import CheckFlag, Item, ItemEvent

ROWS = [("a.png", "How many squares are there?", "3", "How many squares would there be if one was removed?", "2",
         "direct"),
        ("b.png", "Is there a square?", "yes", "Would there be a square if the squares were erased?", "no", "boolean"),
        ("c.png", "How many lines are there?", "16", "How many lines would there be if one was removed?", "15",
         "direct")]


def photo(seed: int, size: int = 96) -> PIL.Image.Image:
    """A textured picture with three dark boxes (texture gives SSIM structure to compare)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(90, 170, (size, size, 3), dtype=np.uint8)
    image = PIL.Image.fromarray(base)
    draw = PIL.ImageDraw.Draw(image)
    for i in range(3):
        draw.rectangle([8 + 28 * i, 30, 24 + 28 * i, 50], fill=(20, 40, 90))
    return image


def local_edit(image: PIL.Image.Image) -> PIL.Image.Image:
    """A plausible local edit: the last box painted over with texture from elsewhere (a clone-stamp)."""
    edited = image.copy()
    edited.paste(image.crop((60, 66, 80, 90)), (62, 28))
    return edited


def noise(size: int = 96) -> PIL.Image.Image:
    return PIL.Image.fromarray(np.random.default_rng(7).integers(0, 255, (size, size, 3), dtype=np.uint8))


@pytest.fixture
def items_ws(workspace, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    for seed, (name, *_rest) in enumerate(ROWS):
        photo(seed).save(images / name)
    csv = tmp_path / "cvqa.csv"
    csv.write_text("img_path,query,answer,new query,new answer,type\n"
                   + "".join(",".join(row) + "\n" for row in ROWS), encoding="utf-8")
    ingest_cvqa(workspace.store, csv, images)
    return workspace


def item_ids(store) -> list[int]:  # noqa: ANN001
    with store.session() as session:
        return list(session.execute(select(Item.id).order_by(Item.id)).scalars())


def add_candidates(store, item_id: int, folder: Path, original: PIL.Image.Image) -> None:  # noqa: ANN001
    """Three stored candidates (0: identical copy, 1: noise, 2: a local edit), ranked as a stale run left them:
    the identical copy first and no flags at all."""
    folder.mkdir(parents=True, exist_ok=True)
    refs = {}
    with store.write() as session:
        for k, image in enumerate((original.copy(), noise(), local_edit(original))):
            path = folder / f"candidate-{item_id}-{k}.png"
            image.save(path)
            stored = read_image_file(path)
            register_image(store, session, stored)
            refs[str(k)] = {"image": f"sha256:{stored.sha256}", "provenance": {"tool": "pillow", "seed": k}}
        item = session.get(Item, item_id)
        item.data = {**(item.data or {}), "edit": {"condition": f"condition {item_id}", "instruction": "edit"},
                     "edit_candidates": refs,
                     "edit_checks": [{"k": k, "score": 1.0, "changed_share": 0.0, "ssim_outside": None, "flags": []}
                                     for k in (0, 1, 2)]}
        session.add(item)


def ranking(store, item_id: int) -> list[dict]:  # noqa: ANN001
    with store.session() as session:
        return session.get(Item, item_id).data["edit_checks"]


def test_check_list_lists_every_edit_code_with_its_scope(items_ws, run_cli):
    out = run_cli("check", "--list")
    assert out.exit_code == 0, out.output
    for code in (*EDIT_CODES, CONDITION_REPEATED):
        assert code in out.output
    assert "items with edit candidates" in out.output and "cvqa" in out.output


def test_check_only_edit_identical_reranks_the_stored_candidates_and_plain_check_runs_them_all(items_ws, run_cli,
                                                                                                tmp_path):
    store = items_ws.store
    first = item_ids(store)[0]
    add_candidates(store, first, tmp_path / "candidates", photo(0))

    out = run_cli("check", "--only", EDIT_IDENTICAL)
    assert out.exit_code == 0, out.output
    checks = ranking(store, first)
    assert checks[-1]["k"] == 0 and [f["code"] for f in checks[-1]["flags"]] == [EDIT_IDENTICAL]
    assert all(not c["flags"] for c in checks[:-1])  # only edit_identical ran: no other flag appeared
    assert "re-ranked" in out.output

    out = run_cli("check", "--no-embeddings")
    assert out.exit_code == 0, out.output
    checks = ranking(store, first)
    assert checks[0]["k"] == 2 and not checks[0]["flags"]  # the local edit ranks first, unflagged
    assert {c["k"] for c in checks if c["flags"]} == {0, 1}  # the copy and the noise are flagged
    assert [f["code"] for f in checks[-1]["flags"] + checks[-2]["flags"]].count(EDIT_IDENTICAL) == 1
    # the edit flags do not keep the item's text draft (they rank candidates)
    with store.session() as session:
        assert session.get(Item, first).status == "checked"

    # a rerun writes the same results: nothing duplicated, no new event in the item's history
    with store.session() as session:
        events = session.execute(select(ItemEvent.detail).where(ItemEvent.item_id == first,
                                                                ItemEvent.stage == "check")).scalars().all()
    assert [e["ranking"]["edit_checks"][0] for e in events if "edit_checks" in e] == [1, 2]
    assert run_cli("check", "--only", EDIT_IDENTICAL).exit_code == 0
    assert ranking(store, first) == checks
    with store.session() as session:
        again = session.execute(select(ItemEvent.detail).where(ItemEvent.item_id == first,
                                                               ItemEvent.stage == "check")).scalars().all()
    assert len(again) == len(events)


def test_the_answer_check_cannot_run_without_an_answerer_and_says_so(items_ws, run_cli):
    out = run_cli("check", "--only", "edit_answer_not_flipped")
    assert out.exit_code != 0
    assert "edit_answer_not_flipped needs an answerer" in out.output


def test_flags_list_and_show_show_edit_flags_and_a_waiver_lets_the_candidate_reach_people(items_ws, run_cli,
                                                                                          tmp_path):
    store = items_ws.store
    first = item_ids(store)[0]
    add_candidates(store, first, tmp_path / "candidates", photo(0))
    assert run_cli("check", "--no-embeddings").exit_code == 0
    with store.session() as session:
        key = session.get(Item, first).key

    rows = json.loads(run_cli("flags", "list", key, "--json").output)
    assert EDIT_IDENTICAL in {r["code"] for r in rows}
    [identical] = [r for r in rows if r["code"] == EDIT_IDENTICAL]
    assert identical["reason"].startswith("candidate 0: the edited image is identical")
    text = run_cli("flags", "list", key).output
    assert EDIT_IDENTICAL in text

    shown = run_cli("show", str(first)).output
    assert "candidates ranked best first" in shown
    assert "1. candidate 2" in shown  # the ranking, best first
    assert f"flag {EDIT_IDENTICAL}" in shown and "identical to the original" in shown

    # people rejected the local edit; the noise and the copy are flagged, so nothing is left for people until a
    # person waives the noise's flags
    data = ranking(store, first)
    noise_codes = {f["code"] for c in data if c["k"] == 1 for f in c["flags"]}
    with store.write() as session:  # people rejected the local edit: the next candidate is up
        item = session.get(Item, first)
        item.data = {**item.data, "edit_verification": {"2": {"decision": REJECTED_EDIT}}}
    with store.session() as session:
        before = edit_units(session.get(Item, first).data)
    for code in sorted(noise_codes):
        out = run_cli("flags", "waive", key, code, "--reason", "looked at it")
        assert out.exit_code == 0, out.output
    with store.session() as session:
        after = edit_units(session.get(Item, first).data)
    assert "1" in after and "1" not in before  # the waived flags no longer keep the noise from people
    assert "(waived)" in run_cli("show", str(first)).output


def test_edit_condition_repeated_flags_items_whose_conditions_repeat(items_ws, run_cli):
    store = items_ws.store
    ids = item_ids(store)
    with store.write() as session:
        for item_id, condition in zip(ids, ("The television is switched off.", "the television is  switched OFF",
                                            "The television is switched off!")):
            item = session.get(Item, item_id)
            item.data = {**(item.data or {}), "edit": {"condition": condition, "instruction": "turn it off"}}
            session.add(item)
        keys = {i: session.get(Item, i).key for i in ids}
    out = run_cli("check", "--only", CONDITION_REPEATED)
    assert out.exit_code == 0, out.output
    with store.session() as session:
        flags = dict(session.execute(select(CheckFlag.item_id, CheckFlag.reason)
                                     .where(CheckFlag.code == CONDITION_REPEATED)).all())
    assert set(flags) == set(ids)
    for item_id in ids:
        others = [keys[o] for o in ids if o != item_id]
        assert all(other in flags[item_id] for other in others) and keys[item_id] not in flags[item_id]

    # a different condition for one item: it is no longer flagged, and a rerun replaces the flags
    with store.write() as session:
        item = session.get(Item, ids[2])
        item.data = {**item.data, "edit": {"condition": "The lamp is on.", "instruction": "turn on the lamp"}}
    assert run_cli("check", "--only", CONDITION_REPEATED).exit_code == 0
    with store.session() as session:
        flagged = set(session.execute(select(CheckFlag.item_id).where(CheckFlag.code == CONDITION_REPEATED)).scalars())
    assert flagged == set(ids[:2])
    assert CONDITION_REPEATED in {r["code"] for r in json.loads(run_cli("flags", "list", "--json").output)}


def test_near_duplicate_conditions_are_repeats_and_different_ones_are_not():
    assert normalise_condition("  The TV is off!! ") == "the tv is off"
    found = repeated_conditions({1: ("a", "The television is switched off."),
                                 2: ("b", "The television set is switched off"),
                                 3: ("c", "The lamp is on."), 4: ("d", "The lamp is off.")})
    assert found == {1: ["b"], 2: ["a"]}


def test_the_irrelevant_edit_candidates_are_checked_ranked_and_listed_too(items_ws, run_cli, tmp_path):
    store = items_ws.store
    first = item_ids(store)[0]
    add_candidates(store, first, tmp_path / "candidates", photo(0))
    with store.write() as session:  # the same three files as the irrelevant edit's candidates, ranked stale
        item = session.get(Item, first)
        item.data = {**item.data, "irrelevant_edit_candidates": item.data["edit_candidates"],
                     "irrelevant_edit_checks": [{"k": k, "score": 1.0, "flags": []} for k in (0, 1, 2)]}
    assert run_cli("check", "--only", EDIT_IDENTICAL).exit_code == 0
    with store.session() as session:
        item = session.get(Item, first)
        irrelevant, key = item.data["irrelevant_edit_checks"], item.key
    assert irrelevant[-1]["k"] == 0 and [f["code"] for f in irrelevant[-1]["flags"]] == [EDIT_IDENTICAL]
    [row] = [r for r in json.loads(run_cli("flags", "list", key, "--json").output) if r["code"] == EDIT_IDENTICAL]
    assert "irrelevant candidate 0:" in row["reason"] and row["reason"].startswith("candidate 0:")
    assert "irrelevant candidates ranked best first" in run_cli("show", str(first)).output


def test_a_code_added_to_the_edit_checks_is_listed_without_touching_the_registry(items_ws, run_cli, monkeypatch):
    from cftools.imagegen import edit_checks

    monkeypatch.setattr(edit_checks, "EDIT_CODES", (*edit_checks.EDIT_CODES, "edit_new_kind_of_failure"))
    monkeypatch.setattr(edit_checks, "EDIT_ANSWER_SOMETHING", "edit_answer_something", raising=False)
    monkeypatch.setattr(edit_checks, "EDIT_CODES", (*edit_checks.EDIT_CODES, "edit_answer_something"))
    listing = run_cli("check", "--list").output
    assert "edit_new_kind_of_failure" in listing
    out = run_cli("check", "--only", "edit_answer_something")  # an answer check: check has no answerer
    assert out.exit_code != 0 and "edit_answer_something needs an answerer" in out.output


def test_an_edit_check_alone_says_nothing_about_drafts(items_ws, run_cli, tmp_path):
    add_candidates(items_ws.store, item_ids(items_ws.store)[0], tmp_path / "candidates", photo(0))
    out = run_cli("check", "--only", EDIT_IDENTICAL)
    assert out.exit_code == 0, out.output
    assert "draft items checked" not in out.output
    assert "1 items' stored edit candidates checked again and re-ranked" in out.output
