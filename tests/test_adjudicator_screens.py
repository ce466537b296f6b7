"""Issue 43: an adjudicator sees the other judges as "Person 1/2/3" only, on a real Label Studio server (fixture
`label_studio`) through the real CLI. The whole task JSON as the server hands it to the adjudicator (hidden fields
and meta included) holds no email of anyone, for every kind; who each number is stays in the store, so pull still
attributes the decision. A MuCR adjudicator's "own" cue set retyped from the model's is the model's: it goes back.
The same screens in Chromium: tests/test_browser_adjudicator.py."""

from __future__ import annotations

import json
import re
import uuid

import httpx
import pytest

from cftools.models import ACCEPTED, NEEDS_ADJUDICATION, Item
from fixtures_label_studio import verify_result
from test_annotate import ls_workspace, make_items, mark_checked  # noqa: F401 (ls_workspace: fixture)
from test_browser import add_cfmm_item, add_explain_item, add_mucr_item, assigned, item_status, push_json, pull_json
from test_judgments_own import CUE_SETS, FOURTH, OWN_WORDS, explained, four  # noqa: F401 (four: fixture)
from test_servers import people_ws  # noqa: F401 (fixture)

# Any email address (the test's own pattern, not the one under test).
EMAIL_ADDRESS = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
# What a judge may type: an address of their own in a comment must not reach the adjudicator either.
COMMENT = "ask me at ann1.private@example.org"
CFMM_VERIFY = {"yes": [{"from_name": "related", "to_name": "image", "type": "choices", "value": {"choices": ["yes"]}},
                       {"from_name": "basic_correct", "to_name": "basic_question", "type": "choices",
                        "value": {"choices": ["yes"]}},
                       {"from_name": "cf_answer", "to_name": "question", "type": "choices",
                        "value": {"choices": ["blue"]}}],
               "no": [{"from_name": "related", "to_name": "image", "type": "choices", "value": {"choices": ["yes"]}},
                      {"from_name": "basic_correct", "to_name": "basic_question", "type": "choices",
                       "value": {"choices": ["yes"]}},
                      {"from_name": "cf_answer", "to_name": "question", "type": "choices",
                       "value": {"choices": ["red"]}}]}


def with_comment(result: list[dict], to_name: str = "question") -> list[dict]:
    return [*result, {"from_name": "comment", "to_name": to_name, "type": "textarea", "value": {"text": [COMMENT]}}]


def disputed(kind: str, servers, store, run_cli) -> tuple[int, list[str]]:
    """One item of KIND on which two people disagree (one comment holds an email address), judged with each
    person's token on SERVERS (the shared `label_studio` or `people_servers`), pulled: (its id, the two judges)."""
    folder = servers.media_root / f"adj-{kind}-{uuid.uuid4().hex[:6]}"
    if kind == "cvqa":
        make_items(run_cli, folder, 1)
        mark_checked(store)
        results = [with_comment(verify_result("yes", "yes")), verify_result("yes", "no", "4", ["ungrammatical"])]
    elif kind == "cfmm":
        add_cfmm_item(run_cli, store, folder)
        results = [with_comment(CFMM_VERIFY["yes"]), CFMM_VERIFY["no"]]
    else:
        add_mucr_item(store, folder)
        results = [with_comment(verify_result("yes", "yes"), "cue"), verify_result("no", "no")]
    push_json(run_cli, "--kind", kind)
    first, second = assigned(store)
    for task, result in zip((first, second), results):
        servers.client(task.assignee).annotations.create(id=task.ls_task_id, result=result)
    report = pull_json(run_cli)
    assert report["invalid"] == [] and item_status(store, first.item_id) == NEEDS_ADJUDICATION, report
    return first.item_id, [first.assignee, second.assignee]


def served_task(label_studio, email: str, task_id: int, url: str | None = None, token: str | None = None) -> str:
    """The task's whole JSON as the server (URL: default the shared one) hands it to EMAIL (what their browser
    receives), as text."""
    response = httpx.get(f"{url or label_studio.url}/api/tasks/{task_id}",
                         headers={"Authorization": f"Token {token or label_studio.token(email)}"}, timeout=30)
    response.raise_for_status()
    return response.text


@pytest.fixture
def team(ls_workspace, label_studio):  # noqa: F811
    """Tasks assigned by cftools to the three people of the test server, each in a project of their own."""
    from test_assignment import assign_to

    assign_to(ls_workspace, [*label_studio.annotators, label_studio.adjudicator])
    return ls_workspace


@pytest.mark.parametrize("kind", ["cvqa", "cfmm", "mucr"])
def test_the_adjudication_task_names_no_one_and_pull_still_attributes(kind, team, label_studio, run_cli):
    store = team.store
    item_id, judges = disputed(kind, label_studio, store, run_cli)
    push_json(run_cli, "--kind", kind, "--adjudicate")
    [task] = assigned(store, "adjudicate")
    served = served_task(label_studio, task.assignee, task.ls_task_id)
    assert EMAIL_ADDRESS.findall(served) == [], served  # no judge's, not the adjudicator's own, not a typed one
    data = json.loads(served)["data"]
    assert data["judgment_1"].startswith("Person 1: related=yes") and data["judgment_2"].startswith("Person 2: ")
    assert "(an email address)" in data["judgment_1"]  # the comment is shown, the address in it is not
    decision = [{"from_name": "decision", "to_name": "cue" if kind == "mucr" else "question", "type": "choices",
                 "value": {"choices": ["reject"]}}]
    label_studio.client(task.assignee).annotations.create(id=task.ls_task_id, result=decision)
    assert pull_json(run_cli)["decisions"] == {"adjudicated rejected": 1}
    with store.session() as session:  # the store still knows who judged what
        from sqlalchemy import select

        from cftools.models import AnnotationTask, Judgment

        rows = session.execute(select(AnnotationTask.purpose, Judgment.annotator)
                               .join(Judgment, Judgment.task_id == AnnotationTask.id)
                               .where(AnnotationTask.item_id == item_id)).all()
    assert sorted(rows) == sorted([("adjudicate", task.assignee), *(("verify", judge) for judge in judges)])


def explained_pair(label_studio, store, run_cli, cue_sets=CUE_SETS, words=OWN_WORDS) -> tuple[int, list[str]]:
    """A MuCR pair three people explained with three different cue sets, pulled (it waits for an adjudicator):
    (its id, the three people in order)."""
    item_id = add_explain_item(store, label_studio.media_root / f"adj-{uuid.uuid4().hex[:6]}")
    push_json(run_cli, "--kind", "mucr", "--task", "explain")
    tasks = assigned(store, "explain")
    for task, text, (cue, false_cues) in zip(tasks, words, cue_sets):
        label_studio.client(task.assignee).annotations.create(id=task.ls_task_id,
                                                              result=explained(text, cue, false_cues))
    assert pull_json(run_cli)["invalid"] == []
    assert item_status(store, item_id) == NEEDS_ADJUDICATION
    with store.session() as session:
        order = session.get(Item, item_id).data["cue_adjudication"]["annotators"]
    return item_id, order


def accept_set(number: str) -> list[dict]:
    return [{"from_name": "decision", "to_name": "cue", "type": "choices", "value": {"choices": ["accept"]}},
            {"from_name": "cue_set", "to_name": "cue", "type": "choices", "value": {"choices": [number]}}]


def own_set(cue: str, false_cues: str) -> list[dict]:
    return [{"from_name": "decision", "to_name": "cue", "type": "choices", "value": {"choices": ["accept_corrected"]}},
            {"from_name": "corrected_answer", "to_name": "cue", "type": "textarea", "value": {"text": [cue]}},
            {"from_name": "own_false_cues", "to_name": "cue", "type": "textarea", "value": {"text": [false_cues]}}]


def test_mucr_cue_set_adjudication_numbers_people_and_the_store_maps_the_number_back(four, label_studio,  # noqa: F811
                                                                                     run_cli):
    store = four.store
    signed = OWN_WORDS[2] + " Written by " + COMMENT.split()[-1]  # an address typed into an explanation
    item_id, people = explained_pair(label_studio, store, run_cli, words=[*OWN_WORDS[:2], signed])
    push_json(run_cli, "--kind", "mucr", "--adjudicate")
    [task] = assigned(store, "adjudicate")
    served = served_task(label_studio, task.assignee, task.ls_task_id)
    assert EMAIL_ADDRESS.findall(served) == [], served
    data = json.loads(served)["data"]
    assert "cue_set_people" not in data and [c["value"] for c in data["cue_set_choices"]] == ["1", "2", "3"]
    assert "Person 2: " + OWN_WORDS[1] in data["people_judgments"]
    assert "Person 3: " + OWN_WORDS[2] + " Written by (an email address)" in data["people_judgments"]
    label_studio.client(task.assignee).annotations.create(id=task.ls_task_id, result=accept_set("2"))
    assert pull_json(run_cli)["decisions"] == {"adjudicated accepted": 1}
    with store.session() as session:
        data = session.get(Item, item_id).data
    assert data["cue_agreement"]["accepted"] == people[1]  # Person 2, as the store numbered them
    assert (data["cue"], data["false_cues"]) == ("texting", ["lamp post", "road", "night"])


def test_mucr_an_adjudicators_own_cue_set_retyped_from_the_models_is_the_models(four, label_studio,  # noqa: F811
                                                                                run_cli):
    store = four.store
    # the three people's sets all differ from the model's ("phone"; lamp post, steering wheel, street)
    item_id, _ = explained_pair(label_studio, store, run_cli)
    push_json(run_cli, "--kind", "mucr", "--adjudicate")
    [task] = assigned(store, "adjudicate")
    # the model's set retyped, the false cues reordered and one misspelt: a near copy, not the adjudicator's own
    label_studio.client(task.assignee).annotations.create(
        id=task.ls_task_id, result=own_set("Phone.", "street\nlamp-post\nsteering wheels"))
    report = pull_json(run_cli)
    assert report["decisions"] == {}, report
    [back] = report["returned"][task.assignee]
    assert back["reason"].startswith("your own cue set is the model's")
    assert item_status(store, item_id) == NEEDS_ADJUDICATION  # not decided by the model's set
    [again] = assigned(store, "adjudicate")
    shown = json.loads(served_task(label_studio, task.assignee, again.ls_task_id))["data"]["returned"]
    assert "your own cue set is the model's" in shown
    # a set of their own counts, as theirs
    label_studio.client(task.assignee).annotations.create(
        id=again.ls_task_id, result=own_set("phone", "seat belt\nwindscreen\nheadlights"))
    assert pull_json(run_cli)["decisions"] == {"adjudicated accepted": 1}
    with store.session() as session:
        item = session.get(Item, item_id)
        assert item.status == ACCEPTED
        data = item.data
    assert data["cue_agreement"]["accepted"] == task.assignee
    assert data["false_cues"] == ["seat belt", "windscreen", "headlights"]


def test_mucr_an_explainers_cue_set_retyped_from_the_models_goes_back_and_is_not_counted(four, label_studio,  # noqa: F811
                                                                                        run_cli):
    store = four.store
    item_id = add_explain_item(store, label_studio.media_root / f"adj-{uuid.uuid4().hex[:6]}")
    push_json(run_cli, "--kind", "mucr", "--task", "explain")
    first, *others = assigned(store, "explain")
    # the model's set ("phone"; lamp post, steering wheel, street) typed again, in another order
    label_studio.client(first.assignee).annotations.create(
        id=first.ls_task_id, result=explained(OWN_WORDS[0], "phone", "street\nsteering wheel\nlamp post"))
    for task, text, (cue, false_cues) in zip(others, OWN_WORDS[1:], CUE_SETS[1:]):
        label_studio.client(task.assignee).annotations.create(id=task.ls_task_id,
                                                              result=explained(text, cue, false_cues))
    report = pull_json(run_cli)
    [back] = report["returned"][first.assignee]
    assert back["reason"] == "the cue set is the model's: write your own cue and three false cues"
    assert item_status(store, item_id) != NEEDS_ADJUDICATION  # two people's sets so far: nothing to settle yet
    with store.session() as session:
        assert "cue_sets_by_annotator" not in session.get(Item, item_id).data


@pytest.mark.parametrize("kind", ["cvqa", "mucr"])
def test_on_per_person_servers_the_adjudicators_server_serves_no_email(kind, people_ws, people_servers, run_cli):
    """The blind set-up (one server per person, `people_servers`): the adjudicator's own server holds their task
    with the two judges as Person 1 and 2 and no address anywhere in its JSON."""
    store = people_ws.store
    item_id, judges = disputed(kind, people_servers, store, run_cli)
    push_json(run_cli, "--kind", kind, "--adjudicate")
    [task] = assigned(store, "adjudicate")
    mine = people_servers.people[task.assignee]
    assert task.assignee not in judges and task.server.rstrip("/") == mine.url.rstrip("/")
    served = served_task(None, task.assignee, task.ls_task_id, mine.url, mine.token)
    assert EMAIL_ADDRESS.findall(served) == [], served
    data = json.loads(served)["data"]
    assert data["judgment_1"].startswith("Person 1: ") and data["judgment_2"].startswith("Person 2: ")
