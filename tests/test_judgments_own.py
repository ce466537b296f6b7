"""Issue 32, every judgment a person's own and nothing stuck, on a real Label Studio server (fixture
`label_studio`) through the real CLI: options stay options, a Skip or a refused annotation comes back, the
status counts each person's work, a MuCR release needs three people's explanations and a cue one of them chose."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import PIL.Image
import pytest
from sqlalchemy import select

from cftools.kinds import get_kind
from cftools.models import ACCEPTED, CHECKED, AnnotationTask, Item, SourceQuestion
from test_annotate import ls_workspace  # noqa: F401 (fixture)
from test_assignment import assign_to

BLUE = "the blue one"


@pytest.fixture
def team(ls_workspace, label_studio):  # noqa: F811
    """A workspace whose tasks cftools assigns to the three people of the test server."""
    assign_to(ls_workspace, [*label_studio.annotators, label_studio.adjudicator])
    return ls_workspace


def cli_json(run_cli, *args: str) -> dict:
    out = run_cli(*args, "--json")
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def open_tasks(store, purpose: str = "verify") -> list[AnnotationTask]:
    with store.session() as session:
        rows = list(session.execute(select(AnnotationTask).where(AnnotationTask.purpose == purpose,
                                                                 AnnotationTask.state == "open")
                                    .order_by(AnnotationTask.id)).scalars())
        for row in rows:
            session.expunge(row)
    return rows


def cfmm_item(run_cli, store, folder: Path, options: list[str], answer: str) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    PIL.Image.new("RGB", (20, 14), "red").save(folder / "bus.png")
    (folder / "basic.csv").write_text("image,question,answer\nbus.png,What colour is the bus?,red\n")
    assert run_cli("ingest", "table", folder / "basic.csv", "--images", folder, "--licence", "CC0-1.0").exit_code == 0
    with store.write() as session:
        source = session.execute(select(SourceQuestion).order_by(SourceQuestion.id.desc())).scalars().first()
        item = Item(key=f"cfmm:{uuid.uuid4().hex[:8]}", kind="cfmm", group="color", source_id=source.id,
                    question="If the bus were painted like the sky, which bus would it be?", answer=answer,
                    status=CHECKED, data={"type": "color", "basic_question": "What colour is the bus?",
                                          "basic_answer": "red",
                                          "options": {"original": ["red", "blue"], "counterfactual": options}})
        session.add(item)
        session.flush()
        return item.id


def cfmm_verify(pick: str) -> list[dict]:
    return [{"from_name": "related", "to_name": "image", "type": "choices", "value": {"choices": ["yes"]}},
            {"from_name": "basic_correct", "to_name": "basic_question", "type": "choices",
             "value": {"choices": ["yes"]}},
            {"from_name": "cf_answer", "to_name": "question", "type": "choices", "value": {"choices": [pick]}}]


def test_cfmm_an_option_picked_by_both_is_stored_and_released_as_its_exact_text(team, label_studio, run_cli,
                                                                                tmp_path):
    store = team.store
    item_id = cfmm_item(run_cli, store, label_studio.media_root / f"cfmm-{uuid.uuid4().hex[:6]}",
                        ["the red one", BLUE], "the red one")
    cli_json(run_cli, "annotate", "push", "--kind", "cfmm")
    for task in open_tasks(store):
        label_studio.client(task.assignee).annotations.create(id=task.ls_task_id, result=cfmm_verify(BLUE))
    report = cli_json(run_cli, "annotate", "pull")
    assert report["invalid"] == [] and report["refused"] == []
    with store.session() as session:
        item = session.get(Item, item_id)
        assert (item.status, item.answer) == (ACCEPTED, BLUE)  # not "blue 1"
    out = cli_json(run_cli, "export", "opts", "--version", "1", "--licence", "CC0-1.0", "--format", "cfmm")
    [row] = [json.loads(line) for line in Path(out["path"], "opts.jsonl").read_text().splitlines()]
    assert row["cf_answer"] == BLUE and row["cf_answer"] in row["cf_options"]
    assert run_cli("verify", out["path"]).exit_code == 0


def test_cfmm_a_release_compares_exact_option_text():
    kind = get_kind("cfmm").hooks.release
    record = {"kind": "cfmm", "answer": "blue 1", "options": {"counterfactual": ["the red one", BLUE]}}
    assert kind.record_problem(record) == ("the counterfactual answer 'blue 1' is not one of its options "
                                           "(the red one / the blue one)")
    assert kind.record_problem({**record, "answer": BLUE}) is None


# ---------------------------------------------------------------- nothing stuck


def test_a_skip_a_refused_annotation_and_a_deleted_task_come_back_and_status_counts_them(team, label_studio,
                                                                                        run_cli):
    from fixtures_label_studio import verify_result
    from test_annotate import make_items, mark_checked

    store = team.store
    make_items(run_cli, label_studio.media_root / f"stuck-{uuid.uuid4().hex[:6]}", 2)
    mark_checked(store)
    cli_json(run_cli, "annotate", "push")
    tasks = open_tasks(store)
    assert len(tasks) == 4
    skipped, intruded, deleted, answered = tasks  # items 1 (two tasks) and 2 (two tasks)
    everyone = [*label_studio.annotators, label_studio.adjudicator]
    intruder = next(p for p in everyone if p not in (intruded.assignee,))
    label_studio.client(skipped.assignee).annotations.create(id=skipped.ls_task_id, result=[], was_cancelled=True)
    label_studio.client(intruder).annotations.create(id=intruded.ls_task_id, result=verify_result("yes", "yes"))
    label_studio.client().tasks.delete(id=str(deleted.ls_task_id))
    label_studio.client(answered.assignee).annotations.create(id=answered.ls_task_id,
                                                              result=verify_result("yes", "yes"))
    report = cli_json(run_cli, "annotate", "pull")
    assert [s["task"] for s in report["skipped"]] == [skipped.ls_task_id]
    assert [r["task"] for r in report["refused"]] == [intruded.ls_task_id]
    assert [d.get("sent_back_to") for d in report["deleted_tasks"]] == [deleted.assignee]
    # each comes back to its assignee as a new task that says why
    again = {(t.item_id, t.assignee): t for t in open_tasks(store) if t.id not in {x.id for x in tasks}}
    assert set(again) == {(skipped.item_id, skipped.assignee), (intruded.item_id, intruded.assignee),
                          (deleted.item_id, deleted.assignee)}
    notes = {key: label_studio.client().tasks.get(id=t.ls_task_id).data["returned"] for key, t in again.items()}
    assert notes[(skipped.item_id, skipped.assignee)].startswith(f"Returned to you: you skipped task "
                                                                 f"{skipped.ls_task_id}")
    # who made it stays in the store and the pull report; the person's screen shows no one's email (issue 43)
    assert "made by someone else, assigned to you" in notes[(intruded.item_id, intruded.assignee)]
    assert "@" not in notes[(intruded.item_id, intruded.assignee)]
    assert f"your task {deleted.ls_task_id} was deleted on the server" in notes[(deleted.item_id, deleted.assignee)]

    status = cli_json(run_cli, "annotate", "status")
    assert status["in_review_without_open_task"] == 0
    people = status["people"]
    assert people[skipped.assignee]["skipped"] == 1 and people[intruded.assignee]["refused"] == 1
    assert people[deleted.assignee]["returned"] >= 1 and people[answered.assignee]["submitted"] == 1
    assert sum(p["open"] for p in people.values()) == 3  # the three new tasks, none submitted yet
    assert sum(p["submitted"] for p in people.values()) == 1
    plain = run_cli("annotate", "status")
    assert "Items in review with no open task: 0" in plain.output

    # an item left with no open task (a task returned by hand, nothing sent): status and doctor name it
    with store.write() as session:
        for task in session.execute(select(AnnotationTask).where(AnnotationTask.item_id == skipped.item_id,
                                                                 AnnotationTask.state == "open")).scalars():
            task.state = "returned"
            session.add(task)
    assert cli_json(run_cli, "annotate", "status")["in_review_without_open_task"] == 1
    out = run_cli("doctor", "--offline", "--json")
    assert out.exit_code == 1
    assert [f["item"] for f in json.loads(out.output)["problems"] if f["code"] == "item_stuck"] == [skipped.item_id]


# ---------------------------------------------------------------- adjudication that can decide

FOURTH = ("ann4@example.com", "Annot4-pass-123")


@pytest.fixture
def four(ls_workspace, label_studio):  # noqa: F811
    """Four people: three can explain a pair and a fourth, who did not, can adjudicate it."""
    from fixtures_label_studio import signup

    if FOURTH[0] not in label_studio.users:
        user_id, token = signup(label_studio.url, label_studio.admin_token, *FOURTH)
        label_studio.users[FOURTH[0]] = {"id": user_id, "token": token}
    assign_to(ls_workspace, [*label_studio.annotators, label_studio.adjudicator, FOURTH[0]])
    return ls_workspace


def explained(text: str, cue: str, false_cues: str) -> list[dict]:
    area = lambda name, value: {"from_name": name, "to_name": "cause_image", "type": "textarea",  # noqa: E731
                                "value": {"text": [value]}}
    return [area("explanation", text), area("cue", cue), area("false_cues", false_cues)]


OWN_WORDS = ["In the first image a man stares at his phone at the wheel. In the second image his car is bent "
             "around a lamp post. The causal link is that he looked away from the road.",
             "In the first image the driver is texting. In the second image there is a crash on the pavement. The "
             "causal link is distraction by the message.",
             "In the first image a screen glows in a moving car. In the second image the front of the car is "
             "smashed. The causal link is that reading it made him miss the bend."]
# Each person's own cue set: none is the model's ("phone"; lamp post, steering wheel, street), which would go back.
CUE_SETS = [("phone", "lamp post\nseat belt\nrain"), ("texting", "lamp post\nroad\nnight"),
            ("screen", "car\npavement\nbend")]


def test_a_cue_set_disagreement_goes_to_someone_who_did_not_explain_and_sees_all_three(four, label_studio,
                                                                                       run_cli):
    from test_browser import add_explain_item

    store = four.store
    item_id = add_explain_item(store, label_studio.media_root / f"adj-{uuid.uuid4().hex[:6]}")
    cli_json(run_cli, "annotate", "push", "--kind", "mucr", "--task", "explain")
    tasks = open_tasks(store, "explain")
    explainers = [t.assignee for t in tasks]
    for task, text, (cue, false_cues) in zip(tasks, OWN_WORDS, CUE_SETS):
        label_studio.client(task.assignee).annotations.create(id=task.ls_task_id,
                                                              result=explained(text, cue, false_cues))
    assert cli_json(run_cli, "annotate", "pull")["invalid"] == []
    with store.session() as session:
        assert session.get(Item, item_id).status == "needs_adjudication"
    pushed = cli_json(run_cli, "annotate", "push", "--kind", "mucr", "--adjudicate")
    [task] = open_tasks(store, "adjudicate")
    assert task.assignee == FOURTH[0] and task.assignee not in explainers and pushed["pushed"] == 1
    shown = label_studio.client().tasks.get(id=task.ls_task_id).data
    assert all(text in shown["people_judgments"] for text in OWN_WORDS)  # all three explanations and cue sets
    assert "cue: texting; false cues: lamp post; road; night" in shown["people_judgments"]
    assert [c["value"] for c in shown["cue_set_choices"]] == ["1", "2", "3"]
    # accepting without saying whose cue set: back to the adjudicator with the reason
    accept = [{"from_name": "decision", "to_name": "cue", "type": "choices", "value": {"choices": ["accept"]}}]
    label_studio.client(task.assignee).annotations.create(id=task.ls_task_id, result=accept)
    report = cli_json(run_cli, "annotate", "pull")
    assert report["returned"][FOURTH[0]][0]["reason"].startswith("pick the person whose cue set you accept")
    [again] = open_tasks(store, "adjudicate")
    label_studio.client(task.assignee).annotations.create(id=again.ls_task_id, result=accept + [
        {"from_name": "cue_set", "to_name": "cue", "type": "choices", "value": {"choices": ["2"]}}])
    report = cli_json(run_cli, "annotate", "pull")
    assert report["invalid"] == [] and report["decisions"] == {"adjudicated accepted": 1}, report
    with store.session() as session:
        data = session.get(Item, item_id).data
        assert session.get(Item, item_id).status == ACCEPTED
    assert (data["cue"], data["false_cues"]) == ("texting", ["lamp post", "road", "night"])  # a person's, not "phone"
    assert data["explanations"] == OWN_WORDS and len(data["cue_sets_by_annotator"]) == 3
    assert get_kind("mucr").hooks.release.record_problem({"verified": True, "data": data}) is None


def test_a_three_way_select_disagreement_reaches_an_adjudicator(four, label_studio, run_cli):
    from test_mucr_annotate import caption_pairs, pick

    store = four.store
    [pair_id] = caption_pairs(four, label_studio.media_root / f"sel-{uuid.uuid4().hex[:6]}", 1, per_style=3)
    cli_json(run_cli, "annotate", "push", "--kind", "mucr", "--task", "select")
    picks = iter([pick(0, 0), pick(1, 1), pick(2, 2), pick(1, 2)])
    judged: list[str] = []
    for _ in range(3):  # two disagree, a third differs again, then an adjudicator who judged nothing yet
        for task in open_tasks(store, "select:photograph"):
            if task.assignee not in judged:
                label_studio.client(task.assignee).annotations.create(id=task.ls_task_id, result=next(picks))
                judged.append(task.assignee)
        report = cli_json(run_cli, "annotate", "pull")
        if len(judged) == 3:  # the tiebreak went out at pull: push --adjudicate has nothing, and says so plainly
            said = run_cli("annotate", "push", "--kind", "mucr", "--adjudicate")
            assert said.exit_code == 0 and "Nothing to push" in said.output, said.output
            assert "None" not in said.output and "not blind" not in said.output + said.stderr
    assert len(judged) == 4 and judged[3] == FOURTH[0]
    assert report["items_made"] == 1, report
    with store.session() as session:
        selection = session.get(Item, pair_id).data["selection"]["photograph"]
    # the adjudicator's pick (shown as 2 and 3: candidates 1 and 2) decides
    assert (selection["cause"], selection["effect"], selection["annotators"]) == (1, 2, [FOURTH[0]])
