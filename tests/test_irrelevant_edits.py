"""Irrelevant edits (issue 44): a change the question does not depend on (the answer must stay), asked of the LLM
beside the relevant edit, made and checked by `generate edits`, and verified by two people in Label Studio."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from sqlalchemy import select

from fixtures_llm import stub_backend
from test_annotate import ls_workspace  # noqa: F401 (fixture of team_workspace)
from test_browser import team_workspace  # noqa: F401 (fixture: a workspace whose tasks go to three people)
from test_edits import ScriptedAnswerer, cache_dir, items_ws, scene, tiny  # noqa: F401 (fixtures)
from cftools.generate.llm_task import LLMRun
from cftools.annotate.edit_task import decide_edit, edit_units, exact_option, free_text_answer
from cftools.generate.edits import (EDIT_INSTRUCTION, TEMPLATE, EditableItem, EditOptions, editable_items,
                                    generate_edits, instruction_prompt, write_instructions)
from cftools.imagegen.edit_checks import EDIT_ANSWER_CHANGED, EDIT_CODES, EDIT_IDENTICAL, answer_kept_flag
from cftools.kinds.base import EditSubject
from cftools.llm.prompts import load_prompt
from cftools.models import Item

IRRELEVANT_FIELDS = ("irrelevant_edit_candidates", "irrelevant_edit_checks")


def stored(store, group: str) -> dict:
    with store.session() as session:
        return session.execute(select(Item).where(Item.group == group)).scalar_one().data


# ------------------------------------------------------------------ the instruction: prompt and schema


def test_the_prompt_carries_the_items_question_and_answer_and_the_schema_asks_for_the_irrelevant_edit():
    subject = EditSubject("How many boats are in the harbour?", "4", "How many boats would be there if one sank?",
                          "3")
    prompt = instruction_prompt(load_prompt(TEMPLATE, None, None),
                                EditableItem(1, "k", "cvqa", "g", subject, None, {}))
    for text in (subject.original_question, subject.original_answer, subject.counterfactual_question):
        assert text in prompt
    assert "irrelevant_condition" in prompt and "irrelevant_instruction" in prompt
    assert prompt.count("Reply:") >= 2  # several examples, so that no single condition is copied into every item
    assert "television" not in prompt.lower()  # the example every item copied (issue 44) is gone
    properties = EDIT_INSTRUCTION.json_schema["properties"]
    assert {"condition", "instruction", "irrelevant_condition", "irrelevant_instruction"} <= set(properties)
    assert set(EDIT_INSTRUCTION.json_schema["required"]) >= {"irrelevant_condition", "irrelevant_instruction"}


def test_an_item_whose_edit_predates_the_irrelevant_one_gets_only_the_missing_part(items_ws, stub):
    store = items_ws.store
    with store.write() as session:
        item = session.execute(select(Item).where(Item.group == "numerical-direct")).scalar_one()
        item.data = {**item.data, "edit": {"condition": "five circles", "instruction": "draw two more circles",
                                           "generation_id": 99, "template": "edits/instruction.j2"}}
    report = write_instructions(store, stub_backend(stub), editable_items(store, ("cvqa",)),
                                run=LLMRun(params={"temperature": 0.0}, quiet=True))
    assert report.items_created == 2
    edit = stored(store, "numerical-direct")["edit"]
    assert (edit["condition"], edit["instruction"], edit["generation_id"]) == ("five circles",
                                                                             "draw two more circles", 99)
    assert edit["irrelevant_condition"] and edit["irrelevant_instruction"]
    fresh = stored(store, "boolean")["edit"]
    assert fresh["condition"] and fresh["irrelevant_instruction"] and fresh["generation_id"] != 99
    again = write_instructions(store, stub_backend(stub), editable_items(store, ("cvqa",)),
                               run=LLMRun(params={"temperature": 0.0}, quiet=True))
    assert again.selected == 0 and stored(store, "numerical-direct")["edit"] == edit  # nothing asked again


def test_an_item_with_only_an_imported_irrelevant_edit_gets_its_relevant_instruction(items_ws, stub):
    """`ingest edits` of an irrelevant edit alone leaves `data.edit` with the irrelevant text only: the instruction
    step still writes the relevant instruction, and keeps the imported text."""
    store = items_ws.store
    imported = {"irrelevant_condition": "A green square is in the corner.",
                "irrelevant_instruction": "Add a green square in the corner."}
    with store.write() as session:
        item = session.execute(select(Item).where(Item.group == "numerical-direct")).scalar_one()
        item.data = {**item.data, "edit": dict(imported)}
    write_instructions(store, stub_backend(stub), editable_items(store, ("cvqa",)),
                       run=LLMRun(params={"temperature": 0.0}, quiet=True))
    edit = stored(store, "numerical-direct")["edit"]
    assert edit["condition"] and edit["instruction"] and edit["generation_id"]
    assert {k: edit[k] for k in imported} == imported


# ------------------------------------------------------------------ the candidates and their checks


def test_generate_edits_makes_both_candidate_sets_checks_the_answer_stays_and_a_rerun_adds_nothing(items_ws, stub,
                                                                                                 tiny):
    store = items_ws.store
    write_instructions(store, stub_backend(stub), editable_items(store, ("cvqa",)),
                       run=LLMRun(params={"temperature": 0.0}, quiet=True))
    items = editable_items(store, ("cvqa",), ("numerical-direct",))
    answerer = ScriptedAnswerer(items[0].image_path, on_edit="5")  # every edit read as 5: the answer changed
    made = generate_edits(store, items_ws.root, tiny, items, options=EditOptions(per_item=2, seed=3), answerer=answerer)
    assert made.images_made == 4 and made.failures == [] and made.irrelevant
    data = stored(store, "numerical-direct")
    for prefix in ("edit", "irrelevant_edit"):
        candidates = data[f"{prefix}_candidates"]
        assert sorted(candidates) == ["0", "1"] and [candidates[k]["provenance"]["seed"] for k in "01"] == [3, 4]
        assert sorted(c["k"] for c in data[f"{prefix}_checks"]) == [0, 1]
    assert data["irrelevant_edit_candidates"]["0"]["provenance"]["instruction"] == data["edit"][
        "irrelevant_instruction"]
    codes = [[f["code"] for f in c["flags"]] for c in data["irrelevant_edit_checks"]]
    assert all(EDIT_ANSWER_CHANGED in c for c in codes)  # 5, not the original 3: the irrelevant edit changed it
    assert all("edit_answer_not_flipped" not in [f["code"] for f in c["flags"]] for c in data["edit_checks"])
    assert generate_edits(store, items_ws.root, tiny, items, options=EditOptions(per_item=2, seed=3)).images_made == 0
    assert stored(store, "numerical-direct")["irrelevant_edit_candidates"] == data["irrelevant_edit_candidates"]
    # --no-irrelevant: the other item gets its relevant candidates only
    other = editable_items(store, ("cvqa",), ("boolean",))
    assert generate_edits(store, items_ws.root, tiny, other,
                          options=EditOptions(per_item=1, irrelevant=False)).images_made == 1
    assert not set(IRRELEVANT_FIELDS) & set(stored(store, "boolean"))


def test_the_answer_kept_check():
    assert EDIT_ANSWER_CHANGED in EDIT_CODES
    assert answer_kept_flag("three", "3", "3", "number") is None
    assert answer_kept_flag("4", "3", "3", "number").code == EDIT_ANSWER_CHANGED
    assert "original image" in answer_kept_flag("3", "2", "3", "number").reason  # the answerer misread the original


def test_cli_no_irrelevant_and_the_irrelevant_edits(items_ws, stub, run_cli, cache_dir):  # noqa: F811
    config = items_ws.path("cftools.toml")
    text = config.read_text().replace('backend = "local"', f'backend = "openai"\nbase_url = "{stub.base_url}"')
    config.write_text(text.replace('model = "smollm2-135m-instruct"', 'model = "stub"')
                      .replace("\n[edits]\n", f'\n[edits]\ncache_dir = "{cache_dir}"\n', 1))
    result = run_cli("generate", "edits", "--kind", "cvqa", "--per-item", "1", "--no-irrelevant", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["images_made"] == 2
    result = run_cli("generate", "edits", "--kind", "cvqa", "--per-item", "1", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["images_made"] == 2  # the irrelevant edits only: the relevant ones are there
    assert all(stored(items_ws.store, g).get("irrelevant_edit_candidates") for g in ("numerical-direct", "boolean"))


# ------------------------------------------------------------------ the edit task


def judgment(answer: str, shows: bool = True, changed: bool = False, candidate: str = "irrelevant:1"):
    from cftools.judgments import Answer

    return Answer(fields={"shows_condition": shows, "other_change": changed, "other_change_what": None,
                          "edited_answer": answer, "candidate": candidate})


def test_an_irrelevant_edit_is_accepted_only_when_its_answer_stays_the_original_one():
    unit = "irrelevant:1"
    kept = decide_edit(unit, [("a", judgment("Three")), ("b", judgment("3"))], free_text_answer, "3")
    assert kept.decided and kept.data["irrelevant_edit_selected"] == 1 and kept.data["irrelevant_edit_answer"] == "3"
    assert kept.data["irrelevant_edit_verification"]["1"]["decision"] == "accepted"
    assert "edit_selected" not in kept.data and "edit_verification" not in kept.data
    changed = decide_edit(unit, [("a", judgment("4")), ("b", judgment("four"))], free_text_answer, "3")
    assert changed.decided and "irrelevant_edit_selected" not in changed.data
    assert changed.data["irrelevant_edit_verification"]["1"] == {
        "decision": "rejected", "rule": "both: the answer about the edited image is not the original answer",
        "annotators": ["a", "b"], "answer": "4"}
    split = decide_edit(unit, [("a", judgment("3")), ("b", judgment("4"))], free_text_answer, "3")
    assert split.wants == 3 and not split.decided  # an adjudicator decides
    third = decide_edit(unit, [("a", judgment("3")), ("b", judgment("4")), ("c", judgment("4"))], free_text_answer,
                        "3")
    assert third.decided and third.data["irrelevant_edit_verification"]["1"]["decision"] == "rejected"
    adjudicated = decide_edit(unit, [("a", judgment("red")), ("b", judgment("blue")), ("c", judgment("red"))],
                              exact_option, "red")
    assert adjudicated.data["irrelevant_edit_selected"] == 1 and adjudicated.data["irrelevant_edit_answer"] == "red"
    # the relevant edit's rule is as before: its answer is the people's, whatever it is
    relevant = decide_edit("1", [("a", judgment("4", candidate="1")), ("b", judgment("4", candidate="1"))],
                           free_text_answer, "3")
    assert relevant.data["edit_selected"] == 1 and relevant.data["edit_answer"] == "4"


def test_the_edit_task_serves_each_edits_best_checked_candidate_with_its_own_change():
    from cftools.kinds import get_kind

    data = {"edit": {"condition": "the bus is blue", "instruction": "paint the bus blue",
                     "irrelevant_condition": "the sky is cloudy", "irrelevant_instruction": "add clouds to the sky"},
            "edit_candidates": {"0": {"image": "sha256:a"}}, "edit_checks": [{"k": 0, "flags": []}],
            "irrelevant_edit_candidates": {"0": {"image": "sha256:b"}, "1": {"image": "sha256:c"}},
            "irrelevant_edit_checks": [{"k": 0, "flags": [{"code": EDIT_IDENTICAL}]}, {"k": 1, "flags": []}]}
    assert edit_units(data) == ["0", "irrelevant:1"]
    assert edit_units({**data, "irrelevant_edit_selected": 1}) == ["0"]
    rejected = {"irrelevant_edit_verification": {"1": {"decision": "rejected"}}}
    assert edit_units({**data, **rejected, "edit_selected": 0}) == []  # the other candidate is flagged
    item = SimpleNamespace(question="If the bus were blue?", answer="blue", data={
        **data, "basic_question": "What colour is the bus?", "options": {"original": ["red", "blue"]}})
    payload = get_kind("cfmm").hooks.annotate.task_payload("edit", "irrelevant:1", item, None, "/img/bus.png",
                                            {"sha256:a": "/img/a.png", "sha256:c": "/img/c.png"})
    assert (payload["edited_image"], payload["condition"], payload["instruction"]) == (
        "/img/c.png", "the sky is cloudy", "add clouds to the sky")
    assert payload["edit_candidate"] == "irrelevant:1" and "irrelevant" not in json.dumps(
        {k: v for k, v in payload.items() if k != "edit_candidate"})  # nothing tells people which kind of edit


def add_irrelevant_edit(store, item_id: int, folder: Path) -> None:
    """Two stored candidates of the item's irrelevant edit under FOLDER (a Label Studio media root): candidate 1
    ranked best without a flag, candidate 0 (identical to the original) flagged."""
    from cftools.images import read_image_file, register_image

    folder.mkdir(parents=True, exist_ok=True)
    refs = {}
    with store.write() as session:
        for k, shade in (("0", 0), ("1", 30)):
            scene(1, shade=shade).save(folder / f"irrelevant-{k}.png")
            image = read_image_file(folder / f"irrelevant-{k}.png")
            register_image(store, session, image)
            refs[k] = {"image": f"sha256:{image.sha256}", "provenance": {"backend": "diffusers", "seed": int(k)}}
        item = session.get(Item, item_id)
        edit = {**((item.data or {}).get("edit") or {"condition": "there are two squares",
                                                     "instruction": "add one more square"}),
                "irrelevant_condition": "the background is lighter",
                "irrelevant_instruction": "make the background lighter"}
        item.data = {**(item.data or {}), "edit": edit, "irrelevant_edit_candidates": refs,
                     "irrelevant_edit_checks": [
                         {"k": 1, "flags": [], "score": 0.97},
                         {"k": 0, "flags": [{"code": EDIT_IDENTICAL, "reason": "same bytes"}], "score": 0.1}]}
        session.add(item)


def test_people_accept_an_irrelevant_edit_whose_answer_stays_and_reject_one_whose_answer_changed(
        label_studio, team_workspace, run_cli):  # noqa: F811
    import uuid

    from test_annotate import make_items
    from test_browser import assigned, pull_json, push_json
    from test_edits import add_edit, edit_result

    store = team_workspace.store
    folder = label_studio.media_root / f"irrelevant-{uuid.uuid4().hex[:6]}"
    make_items(run_cli, folder, 2)  # "How many squares are there in picture i?": 1
    with store.write() as session:
        ids = []
        for item in session.execute(select(Item).order_by(Item.id)).scalars():
            item.status = "accepted"
            ids.append(item.id)
    stays, changes = ids
    add_edit(store, stays, folder / str(stays))  # its relevant edit goes out beside the irrelevant one
    for item_id in ids:
        add_irrelevant_edit(store, item_id, folder / str(item_id))
    pushed = push_json(run_cli, "--kind", "cvqa", "--task", "edit")
    assert pushed["pushed"] == 6  # two people for each of three edits
    tasks = assigned(store, "edit")
    assert sorted({(t.item_id, t.purpose) for t in tasks}) == [(stays, "edit:1"), (stays, "edit:irrelevant:1"),
                                                              (changes, "edit:irrelevant:1")]
    for task in tasks:
        answer = "2" if task.item_id == changes or task.purpose == "edit:1" else "one"
        label_studio.client(task.assignee).annotations.create(id=task.ls_task_id, result=edit_result(answer=answer))
    report = pull_json(run_cli)
    assert report["invalid"] == [] and report["refused"] == [] and report["tiebreaks"] == []
    with store.session() as session:
        kept, changed = session.get(Item, stays).data, session.get(Item, changes).data
    assert kept["irrelevant_edit_selected"] == 1 and kept["irrelevant_edit_answer"] == "1"  # "one": the original
    assert kept["irrelevant_edit_verification"]["1"]["decision"] == "accepted"
    assert kept["edit_selected"] == 1 and kept["edit_answer"] == "2"  # the relevant edit, decided apart
    assert "irrelevant_edit_selected" not in changed and "irrelevant_edit_answer" not in changed
    verdict = changed["irrelevant_edit_verification"]["1"]
    assert verdict["decision"] == "rejected" and verdict["answer"] == "2"
    assert len(verdict["annotators"]) == 2
    assert push_json(run_cli, "--kind", "cvqa", "--task", "edit")["pushed"] == 0  # nothing left to verify


def test_an_irrelevant_edits_flag_is_listed_and_a_waiver_lets_its_candidate_go_to_people(items_ws):
    from cftools.flags import list_flags, waive

    store = items_ws.store
    with store.write() as session:
        item = session.execute(select(Item).where(Item.group == "numerical-direct")).scalar_one()
        item.data = {**item.data, "irrelevant_edit_candidates": {"0": {"image": "sha256:a"}},
                     "irrelevant_edit_checks": [{"k": 0, "flags": [{"code": EDIT_ANSWER_CHANGED,
                                                                     "reason": "the answer is '4', not '3'"}]}]}
        key = item.key
    assert edit_units(stored(store, "numerical-direct")) == []
    listed = {f["code"]: f for f in list_flags(store, key)}
    assert "irrelevant candidate 0" in str(listed[EDIT_ANSWER_CHANGED])
    waive(store, key, EDIT_ANSWER_CHANGED, "the answerer miscounts", "tester")
    assert edit_units(stored(store, "numerical-direct")) == ["irrelevant:0"]


def test_a_reply_whose_irrelevant_edit_repeats_the_relevant_one_is_retried(items_ws, stub):
    same = {"condition": "The TV is off.", "instruction": "Turn the TV off.", "irrelevant_condition": "The TV is off.",
            "irrelevant_instruction": "Paint the wall blue."}
    other = {**same, "irrelevant_condition": "The wall is blue."}
    stub.control("/control/script", {"replies": [json.dumps(same), json.dumps(other)]})
    items = editable_items(items_ws.store, ("cvqa",), ("numerical-direct",))
    report = write_instructions(items_ws.store, stub_backend(stub), items,
                                run=LLMRun(params={"temperature": 0.0}, quiet=True))
    assert report.items_created == 1 and len(stub.received) == 2  # the repeat refused, the retry stored
    assert stored(items_ws.store, "numerical-direct")["edit"]["irrelevant_condition"] == "The wall is blue."
    # every attempt repeats: the last one's relevant edit is kept alone, and the next run asks for the irrelevant one
    boolean = editable_items(items_ws.store, ("cvqa",), ("boolean",))
    stub.control("/control/script", {"replies": [json.dumps(same), json.dumps(same)]})
    write_instructions(items_ws.store, stub_backend(stub), boolean,
                       run=LLMRun(params={"temperature": 0.0}, quiet=True, max_attempts=2))
    edit = stored(items_ws.store, "boolean")["edit"]
    assert edit["condition"] == "The TV is off." and "irrelevant_condition" not in edit
    stub.control("/control/script", {"replies": [json.dumps({**other, "condition": "No square."})]})
    write_instructions(items_ws.store, stub_backend(stub), boolean,
                       run=LLMRun(params={"temperature": 0.0}, quiet=True, refresh=True))
    edit = stored(items_ws.store, "boolean")["edit"]
    assert (edit["condition"], edit["irrelevant_condition"]) == ("The TV is off.", "The wall is blue.")
