"""cftools owns assignment (`[label_studio] annotators`): each person works in projects that hold only their own
tasks, a judgment counts only from its assignee as they left it, a tiebreak or adjudication reaches a third
person, an invalid submission goes back to its author. Against the real Label Studio server (fixture
`label_studio`); the browser side is in tests/test_browser.py."""

from __future__ import annotations

import json
import uuid
from collections import Counter

import httpx
from fixtures_label_studio import verify_result as result
from sqlalchemy import select

from test_annotate import ls_workspace, make_items, mark_checked, pull_json, statuses  # noqa: F401 (fixture)

from cftools.annotate.assign import choose_people
from cftools.annotate.projects import RETURNED
from cftools.models import ACCEPTED, IN_REVIEW, NEEDS_ADJUDICATION, AnnotationTask, Item, ItemEvent


def assign_to(workspace, people: list[str]) -> None:
    config = workspace.root / "cftools.toml"
    people_list = ", ".join(f'"{p}"' for p in people)
    config.write_text(config.read_text().replace("[label_studio]\n", f"[label_studio]\nannotators = [{people_list}]\n", 1))


def tasks_of(store, purpose: str = "verify") -> list[AnnotationTask]:
    with store.session() as session:
        rows = list(session.execute(select(AnnotationTask).where(AnnotationTask.purpose == purpose)
                                    .order_by(AnnotationTask.id)).scalars())
        for row in rows:
            session.expunge(row)
        return rows


def people(label_studio) -> list[str]:
    return [*label_studio.annotators, label_studio.adjudicator]


def project_tasks(label_studio, email: str, project_id: int) -> list[dict]:
    """What EMAIL's token sees of a project's tasks: the Data Manager's listing, annotations included."""
    body = httpx.get(f"{label_studio.url}/api/tasks", params={"project": project_id, "fields": "all"},
                     headers={"Authorization": f"Token {label_studio.token(email)}"}, timeout=30)
    return body.raise_for_status().json()["tasks"]


def next_task(label_studio, email: str, project_id: int) -> httpx.Response:
    return httpx.get(f"{label_studio.url}/api/projects/{project_id}/next",
                     headers={"Authorization": f"Token {label_studio.token(email)}"}, timeout=30)


def annotate_as(label_studio, email: str, task_id: int, answer: list[dict]) -> int:
    return label_studio.client(email).annotations.create(id=task_id, result=answer, lead_time=1.0).id


def pushed_assigned(run_cli, ls_workspace, label_studio, n: int, request) -> dict:
    assign_to(ls_workspace, people(label_studio))
    make_items(run_cli, label_studio.media_root / f"{request.node.name}-{uuid.uuid4().hex[:6]}", n)
    mark_checked(ls_workspace.store)
    out = run_cli("annotate", "push", "--json")
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


# ---------------------------------------------------------------- assignment


def test_choose_people_is_balanced_and_leaves_out_who_judged():
    load = Counter()
    team = ("a@x", "b@x", "c@x")
    picks = [tuple(choose_people(team, load, 2, set(), "item")) for _ in range(3)]
    assert picks == [("a@x", "b@x"), ("c@x", "a@x"), ("b@x", "c@x")]
    assert set(load.values()) == {2}
    assert choose_people(team, load, 1, {"a@x", "b@x"}, "item") == ["c@x"]


def test_each_item_goes_to_two_people_each_in_a_project_of_their_own(run_cli, ls_workspace, label_studio, request):
    report = pushed_assigned(run_cli, ls_workspace, label_studio, 3, request)
    tasks = tasks_of(ls_workspace.store)
    assert report["pushed"] == 6 and len(tasks) == 6
    by_item: dict[int, list[str]] = {}
    for task in tasks:
        by_item.setdefault(task.item_id, []).append(task.assignee)
    assert all(len(set(p)) == 2 for p in by_item.values())  # two different people per item
    assert sorted(Counter(t.assignee for t in tasks).values()) == [2, 2, 2]  # balanced
    projects = report["project_ids"]
    assert len(set(projects.values())) == 3
    for task in tasks:  # every task sits in its assignee's project, and that project holds only theirs
        assert task.ls_project_id == projects[task.assignee]
    status = json.loads(run_cli("annotate", "status", "--json").output)
    assert {p: c["verify open"] for p, c in status["queues"].items()} == {p: 2 for p in people(label_studio)}
    # pushing again sends nothing: every item has its two people
    again = json.loads(run_cli("annotate", "push", "--json").output)
    assert again["pushed"] == 0


def test_the_second_person_never_sees_the_first_judgment_and_both_decide(run_cli, ls_workspace, label_studio,
                                                                        request):
    report = pushed_assigned(run_cli, ls_workspace, label_studio, 1, request)
    first, second = tasks_of(ls_workspace.store)
    annotate_as(label_studio, first.assignee, first.ls_task_id, result("yes", "no", "3", ["ambiguous"]))
    # the second person's documented place: their project, their task, with no annotation in it
    seen = project_tasks(label_studio, second.assignee, report["project_ids"][second.assignee])
    assert [t["id"] for t in seen] == [second.ls_task_id]
    assert all(not t.get("annotations") for t in seen), seen
    got = next_task(label_studio, second.assignee, report["project_ids"][second.assignee])
    assert got.status_code == 200 and got.json()["id"] == second.ls_task_id and not got.json().get("annotations")
    assert pull_json(run_cli)["judgments_added"] == 1
    assert statuses(ls_workspace.store)[first.item_id] == IN_REVIEW
    annotate_as(label_studio, second.assignee, second.ls_task_id, result("yes", "no", "three"))
    pulled = pull_json(run_cli)
    assert pulled["decisions"] == {"accepted (corrected)": 1}, pulled
    with ls_workspace.store.session() as session:
        assert session.get(Item, first.item_id).answer == "3"


def test_a_judgment_by_someone_else_or_changed_by_someone_else_is_refused_by_name(run_cli, ls_workspace,
                                                                                 label_studio, request):
    pushed_assigned(run_cli, ls_workspace, label_studio, 1, request)
    first, second = tasks_of(ls_workspace.store)
    intruder = next(p for p in people(label_studio) if p not in (first.assignee, second.assignee))
    # the intruder answers in the first person's project
    annotate_as(label_studio, intruder, first.ls_task_id, result("yes", "yes"))
    pulled = pull_json(run_cli)
    assert pulled["judgments_added"] == 0
    assert [r["reason"] for r in pulled["refused"]] == [
        f"task {first.ls_task_id}: made by {intruder}, assigned to {first.assignee}: not counted"]
    # the second person answers; then the intruder changes it (Update in the UI = PATCH)
    annotation = annotate_as(label_studio, second.assignee, second.ls_task_id, result("yes", "yes"))
    assert pull_json(run_cli)["judgments_added"] == 1
    label_studio.client(intruder).annotations.update(id=annotation, result=result("no", "no"))
    pulled = pull_json(run_cli)
    assert f"task {second.ls_task_id}: changed by {intruder} after {second.assignee} submitted it: not counted" in [
        r["reason"] for r in pulled["refused"]]
    assert pulled["judgments_removed"] == 1  # what was counted before is no longer the person's judgment
    assert statuses(ls_workspace.store)[first.item_id] == IN_REVIEW


def test_adjudication_goes_to_a_third_person(run_cli, ls_workspace, label_studio, request):
    pushed_assigned(run_cli, ls_workspace, label_studio, 1, request)
    first, second = tasks_of(ls_workspace.store)
    annotate_as(label_studio, first.assignee, first.ls_task_id, result("yes", "yes"))
    annotate_as(label_studio, second.assignee, second.ls_task_id, result("no", "no"))
    pull_json(run_cli)
    assert statuses(ls_workspace.store)[first.item_id] == NEEDS_ADJUDICATION
    out = run_cli("annotate", "push", "--adjudicate", "--json")
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    [task] = tasks_of(ls_workspace.store, "adjudicate")
    third = next(p for p in people(label_studio) if p not in (first.assignee, second.assignee))
    assert task.assignee == third and report["assigned"] == {third: 1}
    got = next_task(label_studio, third, task.ls_project_id)
    assert got.status_code == 200 and got.json()["id"] == task.ls_task_id


def test_an_invalid_submission_goes_back_to_its_author_with_the_reason(run_cli, ls_workspace, label_studio,
                                                                      request):
    pushed_assigned(run_cli, ls_workspace, label_studio, 1, request)
    first, _ = tasks_of(ls_workspace.store)
    # the API takes what the UI would refuse: a required answer missing
    annotate_as(label_studio, first.assignee, first.ls_task_id, result("yes", "no")[:1])
    pulled = pull_json(run_cli)
    [returned] = pulled["returned"][first.assignee]
    assert "answer_correct" in returned["reason"] or "required" in returned["reason"]
    tasks = tasks_of(ls_workspace.store)
    assert [t.state for t in tasks if t.id == first.id] == [RETURNED]
    [again] = [t for t in tasks if t.assignee == first.assignee and t.id != first.id]
    assert again.ls_project_id == first.ls_project_id and again.state == "open"
    data = label_studio.client().tasks.get(id=again.ls_task_id).data
    assert data["returned"].startswith("Returned to you") and returned["reason"] in data["returned"]
    got = next_task(label_studio, first.assignee, first.ls_project_id)
    assert got.status_code == 200 and got.json()["id"] == again.ls_task_id
    with ls_workspace.store.session() as session:
        assert session.execute(select(ItemEvent).where(ItemEvent.item_id == first.item_id)
                               .order_by(ItemEvent.id.desc())).scalars().first().detail["returned_to"] == first.assignee
    # the item stays in the flow: answering the new task counts
    annotate_as(label_studio, first.assignee, again.ls_task_id, result("yes", "yes"))
    assert pull_json(run_cli)["judgments_added"] == 1
    assert statuses(ls_workspace.store)[first.item_id] in (IN_REVIEW, ACCEPTED)


def test_an_explanation_equal_to_another_persons_is_not_independent_and_one_more_person_is_asked():
    from cftools.judgments import Answer
    from cftools.kinds.mucr.annotate import decide_explain

    def wrote(text: str) -> Answer:
        return Answer(fields={"explanation": text, "cue": "rain", "false_cues": ["a", "b", "c"]})

    copied = [("a@x", wrote("In the first image rain.")), ("b@x", wrote("in the FIRST image, rain")),
              ("c@x", wrote("Something else entirely."))]
    outcome = decide_explain(None, copied)
    assert outcome.status == IN_REVIEW and outcome.wants == 4 and "b@x" in outcome.rule
    outcome = decide_explain(None, [*copied, ("d@x", wrote("A fourth, own explanation."))])
    assert outcome.status == ACCEPTED and outcome.data["explanations_by_annotator"].keys() == {"a@x", "c@x", "d@x"}
